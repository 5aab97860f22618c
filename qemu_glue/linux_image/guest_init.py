"""What the image carries to run one command: /init, the helper scripts, the per-run protocol.

The host side (`p4pmu.qemu_glue.linux`) puts the per-run files in ``GUEST_RUN_DIR``
(``cmd``: the shell command; ``nonce``; ``tty``: "ROWS COLS TERM" for an interactive terminal
on ttyS1, qemu_glue/linux_terminal.py; ``stdin``: present when standard input comes through
the virtio-serial port ``STDIN_PORT``; ``fetch``: the guest paths to send back through the
port ``FETCH_PORT``, one per line); /init loads the msr module, runs the command in
``GUEST_WORKDIR`` (``START_MARKER <nonce>`` on ttyS0 first) with its stdout on ttyS1 and its
stderr on ttyS2, sends the fetched paths,
then prints ``EXIT_MARKER <nonce> <status>`` on ttyS0 (the console) once everything is
drained, and powers off (docs/linux-guest.md).

A fetched path goes out as one record: ``FETCH_MARKER <index> <bytes>\n`` and a tar archive
of that many bytes (the path's last component and everything below it); <bytes> is -1 when
the path does not exist, -2 when tar failed (its message follows on the console).
"""
from __future__ import annotations

# The per-run protocol between the host (linux.py) and /init.
GUEST_RUN_DIR = "/p4pmu"
GUEST_WORKDIR = "/root"
EXIT_MARKER = "P4PMU-EXIT"
START_MARKER = "P4PMU-START"  # "<marker> <nonce>": COMMAND starts now (a timeout's report)
FETCH_MARKER = "P4PMU-FETCH"
STDIN_PORT = "p4pmu.stdin"
FETCH_PORT = "p4pmu.fetch"

INIT_SCRIPT = r"""#!/bin/busybox sh
# /init of p4pmu's Linux guest (p4pmu.qemu_glue.linux_image).  Runs /p4pmu/cmd with
# /bin/sh -c in /root: on the terminal ttyS1 when /p4pmu/tty exists; else its stdin from the
# virtio-serial port p4pmu.stdin when /p4pmu/stdin
# exists (else /dev/null), its stdout to ttyS1, its stderr to ttyS2 (both raw); then sends
# the paths listed in /p4pmu/fetch to the port p4pmu.fetch ("P4PMU-FETCH <i> <bytes>" and a
# tar archive each), and once all is drained "P4PMU-EXIT <nonce> <status>" goes to the console
# (ttyS0); then power off.
[ -e /bin/sh ] || /bin/busybox --install -s
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root TERM=dumb PAGER=cat PERF_PAGER=cat LANG=C.UTF-8 TMPDIR=/tmp
say() { echo "p4pmu-init: $*" > /dev/console; }
mount -t proc -o nosuid,nodev,noexec proc /proc
mount -t sysfs -o nosuid,nodev,noexec sysfs /sys
mount -t devtmpfs -o nosuid devtmpfs /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts -o nosuid,noexec devpts /dev/pts
mount -t tmpfs -o nosuid,nodev tmpfs /dev/shm
ln -sf /proc/self/fd /dev/fd
ln -sf /proc/self/fd/0 /dev/stdin
ln -sf /proc/self/fd/1 /dev/stdout
ln -sf /proc/self/fd/2 /dev/stderr
mount -t debugfs -o nosuid,nodev,noexec debugfs /sys/kernel/debug 2>/dev/null
mount -t tracefs -o nosuid,nodev,noexec tracefs /sys/kernel/tracing 2>/dev/null
chmod 1777 /tmp
hostname p4pmu
ip link set lo up 2>/dev/null
run=/p4pmu
if [ ! -f $run/cmd ]; then
    say "no $run/cmd in the initramfs: nothing to run"
    poweroff -f
fi
nonce=$(cat $run/nonce 2>/dev/null)
modprobe -q msr || say "modprobe msr failed"
# port NAME: the device of the virtio-serial port NAME (the modules loaded on first use)
port() {
    [ -e /sys/class/virtio-ports ] || { modprobe -q virtio_pci && modprobe -q virtio_console; }
    for i in $(seq 200); do
        for p in /sys/class/virtio-ports/*; do
            [ "$(cat $p/name 2>/dev/null)" = "$1" ] && [ -e /dev/${p##*/} ] && {
                echo /dev/${p##*/}; return 0; }
        done
        sleep 0.05
    done
    say "no virtio-serial port $1"
    return 1
}
# connected DEV: wait until the host end of the port is connected (debugfs), up to 10 s: a
# host that sent everything and closed already shows as not connected, and the data is there
connected() {
    f=/sys/kernel/debug/virtio-ports/${1##*/}
    for i in $(seq 200); do
        grep -q "host_connected: 1" $f 2>/dev/null && return 0
        sleep 0.05
    done
    return 0
}
cd /root
printf '\n%s %s\n' P4PMU-START "$nonce" > /dev/ttyS0
if [ -e $run/tty ]; then
    # an interactive terminal on ttyS1 (qemu_glue/linux_terminal.py): the host's size, its
    # TERM when the image has its description, COMMAND as the leader of a new session
    read rows cols term < $run/tty
    [ -e /lib/terminfo/$(echo "$term" | cut -c1)/$term ] || term=vt100
    exec 3<> /dev/ttyS1  # (a tty's window size lives only while the tty is open)
    stty -F /dev/ttyS1 rows $rows cols $cols || say "stty rows/cols of ttyS1 failed"
    TERM=$term PS1='p4pmu:\w# ' setsid -c /bin/sh -c "$(cat $run/cmd)" \
        < /dev/ttyS1 > /dev/ttyS1 2>&1 3<&-
    status=$?
    exec 3<&-
else
    input=/dev/null
    if [ -e $run/stdin ]; then
        input=$(port p4pmu.stdin) && connected $input || input=/dev/null
    fi
    stty -F /dev/ttyS1 raw -echo || say "stty ttyS1 failed"
    stty -F /dev/ttyS2 raw -echo || say "stty ttyS2 failed"
    mkfifo $run/.out $run/.err
    cat $run/.out > /dev/ttyS1 &
    opid=$!
    cat $run/.err > /dev/ttyS2 &
    epid=$!
    /bin/sh -c "$(cat $run/cmd)" < $input > $run/.out 2> $run/.err
    status=$?
    wait $opid
    wait $epid
fi
if [ -s $run/fetch ] && out=$(port p4pmu.fetch); then
    i=0
    while IFS= read -r path; do
        if [ -e "$path" ] || [ -L "$path" ]; then
            if (cd "$(dirname "$path")" && tar -c -f /tmp/.p4pmu-fetch "$(basename "$path")") \
                    2> /dev/console; then
                printf '%s %d %d\n' P4PMU-FETCH $i $(wc -c < /tmp/.p4pmu-fetch)
                cat /tmp/.p4pmu-fetch
            else
                printf '%s %d -2\n' P4PMU-FETCH $i
            fi
            rm -f /tmp/.p4pmu-fetch
        else
            printf '%s %d -1\n' P4PMU-FETCH $i
        fi
        i=$((i + 1))
    done < $run/fetch > $out
fi
echo 1 > /proc/sys/kernel/printk
printf '\n%s %s %d\n' P4PMU-EXIT "$nonce" "$status" > /dev/ttyS0
poweroff -f
"""


assert all(x in INIT_SCRIPT for x in (EXIT_MARKER, START_MARKER, FETCH_MARKER, STDIN_PORT,
                                      FETCH_PORT))


def guest_helpers() -> dict[str, str]:
    """Scripts the image carries besides busybox and perf: guest path -> text.  `p4event`
    prints perf's raw encoding of a NetBurst event by name (docs/events.md)."""
    from p4pmu.qemu_glue.events_cmd import guest_script
    return {"/usr/local/bin/p4event": guest_script()}
