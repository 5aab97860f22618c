"""What the image carries to run one command: /init, the helper scripts, the per-run protocol.

The host side (`p4pmu.qemu_glue.linux`) puts the per-run files in ``GUEST_RUN_DIR``
(``cmd``: the shell command; ``nonce``); /init runs the command in ``GUEST_WORKDIR`` with its
stdout on ttyS1 and its stderr on ttyS2, then prints ``EXIT_MARKER <nonce> <status>`` on
ttyS0 (the console) once both streams are drained, and powers off (docs/linux-guest.md).
"""
from __future__ import annotations

# The per-run protocol between the host (linux.py) and /init.
GUEST_RUN_DIR = "/p4pmu"
GUEST_WORKDIR = "/root"
EXIT_MARKER = "P4PMU-EXIT"

INIT_SCRIPT = r"""#!/bin/busybox sh
# /init of p4pmu's Linux guest (p4pmu.qemu_glue.linux_image).  Runs /p4pmu/cmd with
# /bin/sh -c in /root: its stdout goes to ttyS1, its stderr to ttyS2 (both raw), and once both
# are drained "P4PMU-EXIT <nonce> <status>" goes to the console (ttyS0); then power off.
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
stty -F /dev/ttyS1 raw -echo || say "stty ttyS1 failed"
stty -F /dev/ttyS2 raw -echo || say "stty ttyS2 failed"
mkfifo $run/.out $run/.err
cat $run/.out > /dev/ttyS1 &
opid=$!
cat $run/.err > /dev/ttyS2 &
epid=$!
cd /root
/bin/sh -c "$(cat $run/cmd)" < /dev/null > $run/.out 2> $run/.err
status=$?
wait $opid
wait $epid
echo 1 > /proc/sys/kernel/printk
printf '\n%s %s %d\n' P4PMU-EXIT "$nonce" "$status" > /dev/ttyS0
poweroff -f
"""


def guest_helpers() -> dict[str, str]:
    """Scripts the image carries besides busybox and perf: guest path -> text.  `p4event`
    prints perf's raw encoding of a NetBurst event by name (docs/events.md)."""
    from p4pmu.qemu_glue.events_cmd import guest_script
    return {"/usr/local/bin/p4event": guest_script()}
