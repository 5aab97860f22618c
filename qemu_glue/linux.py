"""`p4pmu linux`: run a shell command in a Linux guest on the emulated Pentium 4.

    p4pmu linux [--kernel 5.10|6.1] [--arch amd64|i386] [--smp N] [--threads 2]
                [--model 0F_MM] [--add HOST_PATH[:GUEST_PATH]]...
                [--fetch GUEST_PATH[:HOST_PATH]]... [-n] [-t] [--module FILE.ko]...
                [--kernel-image PATH [--kernel-config PATH]] [--kernel-log PATH]
                [--show-kernel] [--timeout S] [-- COMMAND...]

The guest is Debian 11's 5.10 kernel (or Debian 12's 6.1, whose P4 driver miscounts: see
docs/linux-guest.md) with busybox, perf and `p4event` (`p4pmu.qemu_glue.linux_image` builds
and caches it).  COMMAND's words are joined with spaces and run with ``/bin/sh -c`` in
``/root`` as root; its standard output and standard error come out on the host's, and p4pmu
exits with its exit status.  A piped standard input reaches it and --fetch brings files back
(linux_ports.py); without COMMAND on a terminal, or with -t, it runs on a terminal in the
guest (linux_terminal.py); --add programs bring the host libraries they need
(guest_libraries.py); --module and --kernel-image bring a user's module and kernel
(linux_image/user_kernel.py).  Other tools and the tests build on this interface.

How the output gets out (docs/linux-guest.md): three 16550 UARTs, each on its own host pipe
(QEMU's ``file`` character device on ``/dev/fd/N``):

- ttyS0 (COM1, IRQ 4): the console: kernel messages and /init's own, ending with
  ``P4PMU-EXIT <nonce> <status>``; copied to the kernel log (and to stderr with
  ``--show-kernel``);
- ttyS1 (COM2, IRQ 3): COMMAND's stdout, raw;
- ttyS2 (COM3 at 3E8h, moved to IRQ 5 so that it does not share COM1's edge-triggered line).

The guest switches ttyS1/ttyS2 to raw mode and feeds them from pipes, so the bytes arrive
unchanged (no CR/LF translation, any byte value) and COMMAND sees pipes, not a terminal
(except in a terminal session, where ttyS1 is the terminal).
/init waits until both are drained before it reports the status and powers off.

Exit status: COMMAND's; 124 when the timeout expired; 125 when the guest or QEMU failed
(a kernel panic, no status reported, QEMU could not start, an image could not be built);
2 for a usage error.  Each failure prints what happened and the last kernel messages.

Nothing of a run stays behind: the initramfs (the cached image's archive, then this run's:
the command, its nonce, the --add files) is an in-memory file that QEMU reads as /dev/fd/N,
the kernel log stays in memory unless --kernel-log names a file (or the run fails), and QEMU
dies with p4pmu (qemu_glue/machine.py), also when p4pmu is SIGKILLed.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import secrets
import shlex
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from p4pmu.emulator.models import DEFAULT_MODEL, MODELS, CpuModel
from p4pmu.plugin import bookkeeping_errors
from p4pmu.qemu_glue import gdb_launch, guest_libraries, linux_terminal
from p4pmu.qemu_glue.errors import UsageError
from p4pmu.qemu_glue.events_cmd import MEMORY_TIMING_ARG
from p4pmu.qemu_glue.gdb_launch import GdbSetup
from p4pmu.qemu_glue.guest_libraries import LibraryPlan
from p4pmu.qemu_glue.linux_image import guest_init, pins
from p4pmu.qemu_glue.linux_image.cache import LinuxImage, ensure_image
from p4pmu.qemu_glue.linux_image.cpio import CpioWriter
from p4pmu.qemu_glue.linux_image.user_kernel import (
    UserKernel,
    check_kernel_image,
    check_module,
    module_prelude,
)
from p4pmu.qemu_glue.linux_io import Console, HostOutput, LineSink, read_qemu_stderr, relay
from p4pmu.qemu_glue.linux_ports import FetchSpec, Ports, parse_fetch, stdin_wanted
from p4pmu.qemu_glue.linux_terminal import Terminal
from p4pmu.qemu_glue.machine import P4Machine
from p4pmu.qemu_glue.plugin_lib import plugin_file
from p4pmu.qemu_glue.provision import ProvisionError, ensure_qemu
from p4pmu.qemu_glue.qemu_argv import NoQemu, compose_qemu_argv
from p4pmu.qemu_glue.run_options import (
    add_timing_argument,
    apply_timing,
    parse_plugin_opts,
    resolve_model,
)

EXIT_TIMEOUT = 124
EXIT_FAILURE = 125
DEFAULT_TIMEOUT = 600.0
DEFAULT_MEMORY_MB = 512
# console=ttyS0: the log; panic=-1 oops=panic: any oops ends the run at once (QEMU exits
# through -no-reboot); nokaslr: addresses match the kernel's symbols.  The rest shortens the
# boot under TCG without changing what the PMU driver does: no audit, no LSM, no CPU
# vulnerability mitigations (page-table isolation would flush the TLB on every system call),
# no crypto self-tests (1.5 s on i386), no RAID6 benchmark, no ISA PnP scan (0.4 s, i386).
# rcupdate.rcu_cpu_stall_timeout=300 (its maximum): guest time runs at host speed while TCG
# with counting executes far slower than a Pentium 4, so a kernel section that is short on
# hardware can outlast RCU's default 21 s stall timeout (seen: perf reading /proc/kallsyms
# on --smp 2 on a loaded host); 300 s still reports a real hang.
# The kernel log stays complete (no `quiet`: it costs ~0.05 s).  --append adds arguments;
# for options given twice the last one wins (e.g. --append mitigations=auto).
KERNEL_CMDLINE = ("console=ttyS0 panic=-1 oops=panic nokaslr mitigations=off audit=0 "
                  "security=none cryptomgr.notests=1 raid6.skip_bench=1 tsc=reliable "
                  "rcupdate.rcu_cpu_stall_timeout=300")
KERNEL_CMDLINE_ARCH = {"amd64": "", "i386": "noisapnp"}
COM3_IRQ = 5
TAIL_LINES = 25
# The guest's time (QEMU's virtual clock: timers, the TSC, `sleep`).  "virtual": from the
# instructions executed, one per nanosecond (QEMU's -icount shift=0; the TSC runs at 1 GHz),
# idle time skipped (sleep=off): the guest's time per unit of its work is the same whatever
# the host's speed and whatever the plugin's PMU accesses cost the host, as on hardware --
# so perf's frequency mode, the kernel's NMI-duration checks and its watchdogs see a machine
# of a fixed speed.  "host": the guest's time is the host's (QEMU's default).
# With several vCPUs, QEMU's icount runs them all on one thread, which the plugin does not
# support (its per-vCPU state is per thread): "auto" is virtual on one vCPU, host otherwise.
CLOCKS = {"virtual": ("-icount", "shift=0,sleep=off"), "host": ()}
# Kernel arguments per clock.  On the virtual clock a busy wait costs its guest time in
# instructions: the local APIC timer's calibration and its verification spin 2 x 100 ms of
# guest time on the TSC (Linux's calibrate_APIC_clock, arch/x86/kernel/apic/apic.c), about
# 4 s of the host's time per boot.  `noapictimer` skips both; with one vCPU (the virtual
# clock's only case) the HPET then drives the tick.  docs/linux-guest.md "The guest's clock".
CLOCK_KERNEL_ARGS = {"virtual": "noapictimer", "host": ""}
DEFAULT_CLOCK = "auto"



class LinuxError(ProvisionError):
    """The run could not happen or the guest failed: p4pmu's exit status 125."""


# --------------------------------------------------------------------------------------------
# Arguments


def add_arguments(p: argparse.ArgumentParser) -> None:
    models = ", ".join(MODELS)
    p.add_argument("--arch", choices=pins.ARCHES, default="amd64",
                   help="guest architecture: amd64 (64-bit kernel, booted as an ELF through "
                        "PVH) or i386 (the 686 kernel); default amd64")
    p.add_argument("--kernel", choices=pins.KERNELS, default=pins.DEFAULT_KERNEL,
                   help=f"guest kernel: 5.10 (Debian 11's LTS kernel, whose P4 driver counts "
                        f"right) or 6.1 (Debian 12's, whose p4_pmu_set_period installs a "
                        f"counter's previous period: perf's counts are nonsense unless the "
                        f"recipe in docs/linux-guest.md is followed); default "
                        f"{pins.DEFAULT_KERNEL}")
    p.add_argument("--clock", choices=("auto", *CLOCKS), default=DEFAULT_CLOCK,
                   help="the guest's time: virtual (from the instructions it executes, 1 ns "
                        "each, idle time skipped: perf's frequency mode and the kernel's "
                        "timing checks see a machine of a fixed speed; one vCPU only) or host "
                        "(the host's time: boots about 3 s faster, but each PMU interrupt's "
                        "host cost shows as guest time); default auto: virtual with one vCPU, "
                        "host with several")
    p.add_argument("--smp", type=int, default=1, metavar="N",
                   help="number of logical CPUs (default 1)")
    p.add_argument("--threads", type=int, choices=(1, 2), default=1,
                   help="hardware threads per core: 2 makes sibling pairs (Hyper-Threading), "
                        "which share one PMU; --smp must then be even")
    p.add_argument("--model", metavar="0F_MM", default=None,
                   help=f"Pentium 4 model (default {DEFAULT_MODEL}; amd64 needs one with "
                        f"EM64T); known: {models}")
    add_timing_argument(p)
    p.add_argument("--plugin-opt", metavar="K=V", action="append",
                   help="plugin option, as for `p4pmu qemu` (e.g. log=FILE, strict=on)")
    p.add_argument("--plugin", metavar="PATH",
                   help="use this plugin library instead of the built one")
    p.add_argument("--no-plugin", action="store_true",
                   help="boot without the PMU plugin (Linux then finds no PMU)")
    p.add_argument("--add", metavar="HOST_PATH[:GUEST_PATH]", action="append", default=[],
                   help="copy a file or folder into the guest (mode bits kept); GUEST_PATH "
                        "defaults to /root/<name>, a relative one is under /root, one ending "
                        "in / is a folder to put it in. Repeatable")
    p.add_argument("--fetch", metavar="GUEST_PATH[:HOST_PATH]", action="append", default=[],
                   help="after COMMAND (also when it fails), copy a file or folder of the guest "
                        "to the host; HOST_PATH defaults to ./<name>, an existing folder or one "
                        "ending in / receives <name>; a relative GUEST_PATH is under /root. "
                        "Repeatable")
    p.add_argument("--kernel-image", metavar="PATH",
                   help="boot this kernel (a bzImage, or a vmlinux with the PVH note) with the "
                        "image's userland; its configuration is checked before boot "
                        "(docs/linux-guest.md, \"Your own kernel\")")
    p.add_argument("--kernel-config", metavar="PATH",
                   help="with --kernel-image: its .config (default: embedded by "
                        "CONFIG_IKCONFIG, or a `config` file beside it)")
    p.add_argument("--module", metavar="FILE.ko", action="append", default=[],
                   help="load this kernel module (insmod) before COMMAND; its vermagic must be "
                        "the guest kernel's (build it with `p4pmu module build`). Repeatable")
    p.add_argument("-t", "--tty", action="store_true",
                   help="run COMMAND on a terminal in the guest, connected to this one (the "
                        "default without COMMAND: an interactive shell); Ctrl-] stops the "
                        "guest")
    p.add_argument("-n", "--no-stdin", action="store_true",
                   help="COMMAND reads /dev/null, not this standard input (which goes to "
                        "COMMAND when it is a pipe or a file)")
    p.add_argument("--kernel-log", metavar="PATH",
                   help="write the kernel's console messages here (default: kept in memory, "
                        "written to a file named in the message only when the run fails)")
    p.add_argument("--show-kernel", action="store_true",
                   help="also print the kernel's console messages on stderr")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                   help=f"stop the guest after this long, exit status {EXIT_TIMEOUT} "
                        f"(default {DEFAULT_TIMEOUT:.0f}; 0: no limit)")
    p.add_argument("--memory", type=int, default=DEFAULT_MEMORY_MB, metavar="MB",
                   help=f"guest memory (default {DEFAULT_MEMORY_MB})")
    p.add_argument("--append", metavar="ARGS", action="append", default=[],
                   help="extra kernel command-line arguments")
    gdb_launch.add_argument(p, "; --timeout then does not apply")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="print the QEMU command line on stderr")


def usage_epilog() -> str:
    return ("COMMAND runs with /bin/sh -c in /root (its words joined with spaces, as ssh does); "
            "its stdout and stderr come out here and its exit status is p4pmu's; a piped "
            "stdin reaches it. Without COMMAND on a terminal: an interactive shell (Ctrl-] "
            "stops the guest). p4pmu's own failures: "
            f"{EXIT_TIMEOUT} timeout, {EXIT_FAILURE} guest or QEMU failure, 2 usage.\n\n"
            "examples:\n"
            "  p4pmu linux\n"
            "  p4pmu linux -- perf stat -e instructions,branches ls /\n"
            "  p4pmu linux -- 'perf stat -e $(p4event branch_retired:MMTP:MMTM:u) ls /'\n"
            "  p4pmu linux --add ./bench:/root/bench -- ./bench\n"
            "  p4pmu linux --fetch perf.data -- perf record -o perf.data ls /\n"
            "  printf 'echo hi\\nexit 3\\n' | p4pmu linux -- sh\n"
            "  p4pmu linux --arch i386 --smp 2 --threads 2 -- 'perf list hw'\n"
            "  p4pmu linux -- 'dmesg | grep -i -e pmu -e netburst'")


@dataclass
class AddSpec:
    host: Path
    guest: str  # absolute guest path


def parse_add(spec: str) -> AddSpec:
    """HOST_PATH[:GUEST_PATH]; a HOST_PATH that exists as given (colons and all) wins."""
    if os.path.lexists(spec):
        host, guest = spec, ""
    elif ":" in spec:
        host, guest = spec.rsplit(":", 1)
    else:
        host, guest = spec, ""
    hp = Path(host).expanduser()
    if not hp.exists():
        raise UsageError(f"--add {spec}: {host} does not exist")
    name = hp.resolve().name if hp.name in ("", ".", "..") else hp.name
    if not guest:
        guest = f"{guest_init.GUEST_WORKDIR}/{name}"
    elif guest.endswith("/"):
        guest = guest + name
    if not guest.startswith("/"):
        guest = f"{guest_init.GUEST_WORKDIR}/{guest}"
    parts = []
    for part in guest.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if parts:
                parts.pop()
            continue
        parts.append(part)
    guest = "/" + "/".join(parts)
    if guest == "/" or guest == "/init" or guest == guest_init.GUEST_RUN_DIR or \
            guest.startswith(guest_init.GUEST_RUN_DIR + "/"):
        raise UsageError(f"--add {spec}: {guest} is reserved for p4pmu's /init")
    return AddSpec(hp, guest)


def resolve_clock(clock: str, smp: int) -> str:
    if clock == "auto":
        return "virtual" if smp == 1 else "host"
    if clock == "virtual" and smp > 1:
        raise UsageError(f"--clock virtual --smp {smp}: the virtual clock needs one vCPU (QEMU "
                         "then runs every vCPU on one thread, which the plugin does not "
                         "support yet); use --clock host")
    return clock


def check_machine(arch: str, smp: int, threads: int, model: CpuModel) -> None:
    """UsageError for what cannot boot."""
    if arch == "amd64" and not model.long_mode:
        raise UsageError(f"--model {model.key} ({model.codename}) has no EM64T, so it cannot "
                         "run the 64-bit kernel: use --arch i386, or a model with long mode ("
                         + ", ".join(m.key for m in MODELS.values() if m.long_mode) + ")")
    if smp < 1 or smp > 64:
        raise UsageError(f"--smp {smp}: expected 1 to 64")
    if threads == 2 and smp % 2:
        raise UsageError(f"--smp {smp} --threads 2: the number of logical CPUs must be even "
                         "(two threads per core)")


# --------------------------------------------------------------------------------------------
# The per-run initramfs


def _add_tree(w: CpioWriter, spec: AddSpec) -> int:
    """Add a host file or folder at its guest path; returns the bytes added."""
    total = 0
    src = spec.host
    if src.is_dir():
        base = src.resolve()
        w.dir(spec.guest.lstrip("/"), stat.S_IMODE(base.stat().st_mode))
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames.sort()
            rel_dir = os.path.relpath(dirpath, base)
            for name in sorted(dirnames) + sorted(filenames):
                hp = os.path.join(dirpath, name)
                gp = os.path.normpath(os.path.join(spec.guest, rel_dir, name)).lstrip("/")
                st = os.lstat(hp)
                if stat.S_ISLNK(st.st_mode):
                    w.symlink(gp, os.readlink(hp))
                elif stat.S_ISDIR(st.st_mode):
                    w.dir(gp, stat.S_IMODE(st.st_mode))
                elif stat.S_ISREG(st.st_mode):
                    data = Path(hp).read_bytes()
                    w.file(gp, data, stat.S_IMODE(st.st_mode), mtime=int(st.st_mtime))
                    total += len(data)
                # sockets, devices, fifos: skipped
    else:
        st = src.stat()  # follows a symlink given on the command line
        if not stat.S_ISREG(st.st_mode):
            raise UsageError(f"--add {src}: not a regular file or folder")
        data = src.read_bytes()
        w.file(spec.guest.lstrip("/"), data, stat.S_IMODE(st.st_mode), mtime=int(st.st_mtime))
        total += len(data)
    return total


def _add_size(path: Path) -> int:
    if path.is_dir():
        return sum(os.lstat(os.path.join(d, f)).st_size for d, _, fs in os.walk(path)
                   for f in fs)
    return path.stat().st_size


def run_archive(command: str, nonce: str, adds: list[AddSpec],
                libraries: LibraryPlan | None = None,
                run_files: dict[str, bytes] | None = None) -> bytes:
    """The second cpio archive, appended to the image's: /p4pmu/{cmd,nonce} and `run_files`
    (linux_ports.Ports.run_files), the host libraries the --add programs need (guest_libraries)
    and the --add files."""
    buf = io.BytesIO()
    w = CpioWriter(buf, mtime=int(time.time()))
    w.dir(guest_init.GUEST_RUN_DIR.lstrip("/"), 0o700)
    w.file(f"{guest_init.GUEST_RUN_DIR.lstrip('/')}/cmd", command.encode(), 0o600)
    w.file(f"{guest_init.GUEST_RUN_DIR.lstrip('/')}/nonce", nonce.encode(), 0o600)
    for name, data in (run_files or {}).items():
        w.file(f"{guest_init.GUEST_RUN_DIR.lstrip('/')}/{name}", data, 0o600)
    w.dirs.update({"root", "tmp", "bin", "usr", "usr/bin", "usr/local", "usr/local/bin",
                   "etc", "lib", "usr/lib"})  # in the base archive already
    if libraries is not None:
        for guest, host in sorted(libraries.files.items()):
            w.file(guest.lstrip("/"), host.read_bytes(), 0o755)
        for guest, target in sorted(libraries.links.items()):
            if guest not in libraries.files:
                w.symlink(guest.lstrip("/"), target)
    for spec in adds:
        _add_tree(w, spec)
    w.finish()
    return buf.getvalue()


# --------------------------------------------------------------------------------------------
# Running


class _Stop(Exception):
    def __init__(self, signum: int):
        self.signum = signum


def guest_qemu_args(image: LinuxImage, smp: int, threads: int, memory: int, initrd: str,
                    append: list[str], uarts: tuple[str, str, str],
                    clock: str = DEFAULT_CLOCK, kernel: Path | None = None) -> list[str]:
    """QEMU's arguments for the guest (P4Machine adds the CPU and the plugin); ``uarts``:
    the character-device backends of the console, stdout and stderr UARTs
    ("file,path=/dev/fd/N", or the terminal's "socket,fd=N")."""
    con, out, err = uarts
    smp_opt = str(smp) + (f",threads=2,cores={smp // 2},sockets=1" if threads == 2 else "")
    cmdline = " ".join(x for x in (KERNEL_CMDLINE, KERNEL_CMDLINE_ARCH.get(image.arch, ""),
                                   CLOCK_KERNEL_ARGS[clock], *append) if x)
    return [
        *CLOCKS[clock],
        "-machine", "pc", "-m", str(memory), "-nodefaults", "-no-reboot", "-display", "none",
        "-smp", smp_opt,
        "-kernel", str(kernel or image.kernel), "-initrd", initrd, "-append", cmdline,
        "-chardev", f"{con},id=p4pmu_con", "-serial", "chardev:p4pmu_con",
        "-chardev", f"{out},id=p4pmu_out", "-serial", "chardev:p4pmu_out",
        "-chardev", f"{err},id=p4pmu_err",
        "-device", f"isa-serial,chardev=p4pmu_err,index=2,irq={COM3_IRQ}",
    ]


@dataclass
class GuestEnd:
    """How a guest run ended: QEMU's exit status (None: never started), ``how`` ("exit",
    "timeout" or "stdout closed") and QEMU's standard error."""
    qemu_status: int | None
    how: str
    qemu_stderr: str


def _start_copies(machine: P4Machine, rfds, sinks, qerr: bytearray,
                  output: HostOutput) -> list[threading.Thread]:
    """Threads copying the three UART pipes and QEMU's stderr."""
    threads = [threading.Thread(target=relay, args=(rfd, sink), daemon=True)
               for rfd, sink in zip(rfds, sinks)]
    threads.append(threading.Thread(target=read_qemu_stderr, daemon=True,
                                    args=(machine.process.stderr, qerr, output)))
    for t in threads:
        t.start()
    return threads


def run_guest(machine: P4Machine, sinks, rfds: tuple[int, ...], timeout: float | None,
              output: HostOutput, started=None, ports: Ports | None = None,
              terminal: Terminal | None = None) -> GuestEnd:
    """Launch QEMU, copy the UART pipes into ``sinks`` (console, stdout, stderr; with a
    `terminal`, console and stderr), serve the virtio-serial `ports` and the terminal until
    QEMU is gone, the timeout expires, the host's stdout closes, Ctrl-] is typed on the
    terminal or p4pmu gets a stop signal (then _Stop)."""
    qerr = bytearray()
    threads: list[threading.Thread] = []
    ended = "exit"
    noted: list[int] = []
    with machine.note_signals(noted):
        try:
            try:
                machine.launch()
            except BaseException:
                for fd in rfds:
                    os.close(fd)
                for part in (ports, terminal):
                    if part is not None:
                        part.close_unstarted()
                raise
            threads = _start_copies(machine, rfds, sinks, qerr, output)
            if ports is not None:
                ports.start()
            if terminal is not None:
                terminal.start(output.stdout)
            if started is not None:
                started(machine.pid)  # (--gdb: the session is recorded for p4pmu gdb)
            ended = _watch(machine, timeout, noted, output,
                           terminal.escaped if terminal is not None else None)
        finally:
            machine.shutdown()
            for t in threads:
                t.join(timeout=10)
            if ports is not None:
                ports.join()
            if terminal is not None:
                terminal.join()
    if noted:
        raise _Stop(noted[0])
    text = qerr.decode("utf-8", "replace")
    if ended != "exit":  # QEMU's note that p4pmu stopped it
        text = "".join(ln for ln in text.splitlines(True) if "terminating on signal" not in ln)
    return GuestEnd(machine.exitcode, ended, text)


def _watch(machine: P4Machine, timeout: float | None, noted: list[int],
           output: HostOutput, escaped: threading.Event | None = None) -> str:
    """Wait for QEMU's end; how it ended (a noted signal: "signal"; Ctrl-]: "escape")."""
    deadline = time.monotonic() + timeout if timeout else None
    while True:
        try:
            machine.wait(timeout=0.2)
            return "exit"
        except subprocess.TimeoutExpired:
            pass
        if noted:
            return "signal"
        if output.stdout_closed.is_set():
            return "stdout closed"
        if escaped is not None and escaped.is_set():
            return "escape"
        if deadline is not None and time.monotonic() > deadline:
            return "timeout"


_MARKER_RE = re.compile(rf"{guest_init.EXIT_MARKER} (\S+) (\d+)")
_START_RE = re.compile(rf"{guest_init.START_MARKER} (\S+)")
# a kernel failure: the message right after the timestamp (not "traps: prog[pid] ...", which
# is a user program's fault)
_PANIC_RE = re.compile(r"^\[[ \d.]+\] (Kernel panic - not syncing.*|BUG: .*|Oops: .*|"
                       r"general protection fault.*|invalid opcode: .*|Unable to handle.*)")


def find_status(lines: list[str], nonce: str) -> int | None:
    for ln in reversed(lines):
        m = _MARKER_RE.search(ln)
        if m and m.group(1) == nonce:
            return int(m.group(2))
    return None


def _tail(lines: list[str], n: int = TAIL_LINES) -> str:
    """The last n lines; after an oops or panic, from its first line (up to 2n lines)."""
    lines = [ln for ln in lines if ln.strip()]
    first = next((i for i, ln in enumerate(lines) if _PANIC_RE.search(ln)), None)
    if first is not None and len(lines) - first > n:
        head = lines[first:first + n]
        rest = lines[first + n:]
        shown = head + ([f"... ({len(rest) - n} lines)"] if len(rest) > n else []) + rest[-n:]
    else:
        shown = lines[-n:]
    return "\n".join("  | " + ln for ln in shown) or "  | (no kernel messages)"


# --------------------------------------------------------------------------------------------
# The command


@dataclass
class LinuxRun:
    """A checked `p4pmu linux` command line."""
    command: str
    model: CpuModel
    plugin_opts: dict[str, str]
    plugin_arg: Path | None  # --plugin
    adds: list[AddSpec]
    log_path: Path | None  # --kernel-log
    clock: str
    fetches: list[FetchSpec]
    stdin: bool  # standard input goes to COMMAND
    tty: bool  # an interactive terminal (linux_terminal)
    modules: list[Path]  # --module files
    user_kernel: UserKernel | None  # --kernel-image


def check_request(a: argparse.Namespace, command_words: list[str]) -> LinuxRun:
    """Every check that needs nothing downloaded or built; UsageError."""
    tty_mode = linux_terminal.wanted(command_words, a.tty)
    if a.tty and not tty_mode:
        raise UsageError("-t: standard input and output must be a terminal")
    if not command_words and not tty_mode:
        raise UsageError("no COMMAND: give it after `--`, e.g. p4pmu linux -- perf stat true "
                         "(without COMMAND on a terminal: an interactive shell)")
    if not command_words:
        command_words = ["exec", "/bin/sh", "-i"]
    popts = parse_plugin_opts(a.plugin_opt or [])
    apply_timing(a.timing, popts)
    model = resolve_model(a.model, None, popts)  # --model, or --plugin-opt model=
    check_machine(a.arch, a.smp, a.threads, model)
    clock = resolve_clock(a.clock, a.smp)
    if a.no_plugin and (a.plugin_opt or a.plugin):
        raise UsageError("--no-plugin cannot go with --plugin or --plugin-opt")
    gdb_launch.check_request(getattr(a, "gdb", None), a.no_plugin, popts)
    plugin_arg = Path(a.plugin).expanduser().absolute() if a.plugin else None
    if plugin_arg is not None and not plugin_arg.is_file():
        raise UsageError(f"--plugin {a.plugin}: no such file")
    if "threads" in popts and int(popts["threads"]) != a.threads:
        raise UsageError(f"--plugin-opt threads={popts['threads']} contradicts --threads "
                         f"{a.threads}")
    popts.pop("threads", None)  # follows -smp ...,threads=2
    adds = [parse_add(s) for s in a.add]
    if a.memory < 128:
        raise UsageError(f"--memory {a.memory}: at least 128 MB")
    if a.timeout < 0:
        raise UsageError("--timeout: expected a number of seconds >= 0")
    log_path = Path(a.kernel_log).expanduser().absolute() if a.kernel_log else None
    if log_path is not None and (log_path.is_dir() or not log_path.parent.is_dir()):
        raise UsageError(f"--kernel-log {a.kernel_log}: not a file in an existing folder")
    compose_qemu_argv(NoQemu(), model, ["-smp", f"{a.smp},threads={a.threads}"], popts, None)
    added = sum(_add_size(spec.host) for spec in adds)
    if added > a.memory * 1024 * 1024 // 3:
        raise UsageError(f"--add: {added / 1e6:.1f} MB of files do not fit in a {a.memory} MB "
                         "guest (they live in its RAM, twice while the initramfs is unpacked); "
                         "raise --memory")
    fetches = [parse_fetch(s) for s in a.fetch]
    stdin = not a.no_stdin and not tty_mode and stdin_wanted()
    if tty_mode and getattr(a, "gdb", None) is not None:
        raise UsageError("--gdb cannot go with an interactive terminal (gdb needs this one)")
    if a.kernel_config and not a.kernel_image:
        raise UsageError("--kernel-config goes with --kernel-image")
    uses = ((("stdin or --fetch",) if stdin or fetches else ()) +
            (("--module",) if a.module else ()))
    user_kernel = check_kernel_image(a.kernel_image, a.arch, a.kernel_config, uses) \
        if a.kernel_image else None
    release = user_kernel.release if user_kernel else pins.pin_for(a.arch, a.kernel).release
    modules = [check_module(m, release, a.kernel, a.arch) for m in a.module]
    names = [m.name for m in modules]
    if len(set(names)) != len(names):
        raise UsageError(f"--module: two modules named {max(names, key=names.count)}")
    return LinuxRun(" ".join(command_words), model, popts, plugin_arg, adds, log_path, clock,
                    fetches, stdin, tty_mode, modules, user_kernel)


def plan_libraries(a: argparse.Namespace, run: LinuxRun, image: LinuxImage) -> LibraryPlan:
    """The host libraries the --add programs need (UsageError before boot when the guest
    cannot run one); -v says which."""
    plan = guest_libraries.plan_libraries(run.adds, image.initrd, image.arch)
    added = sum(_add_size(spec.host) for spec in run.adds) + plan.total_bytes()
    if plan.files and added > a.memory * 1024 * 1024 // 3:
        raise UsageError(f"--add: {added / 1e6:.1f} MB of files and the libraries they need do "
                         f"not fit in a {a.memory} MB guest; raise --memory")
    if a.verbose:
        for note in plan.notes:
            print(f"p4pmu linux: {note}", file=sys.stderr, flush=True)
    return plan


def _boot(a: argparse.Namespace, run: LinuxRun, machine: P4Machine, image: LinuxImage,
          nonce: str, log, output: HostOutput, libraries: LibraryPlan, ports: Ports,
          gdb: GdbSetup | None = None) -> tuple[GuestEnd, Console]:
    """Give the machine its guest (initramfs in memory, three UART pipes, the virtio-serial
    ports) and run it (with --gdb: stopped, waiting for gdb)."""
    terminal = Terminal() if run.tty else None
    run_files = ports.run_files()
    if terminal is not None:
        run_files["tty"] = terminal.run_file()
    release = run.user_kernel.release if run.user_kernel else image.release
    adds = run.adds + [AddSpec(m, f"/lib/modules/{release}/extra/{m.name}")
                       for m in run.modules]
    command = module_prelude(run.modules, release, EXIT_FAILURE) + run.command
    initrd = machine.add_memfd_from("initrd", [image.initrd],
                                    run_archive(command, nonce, adds, libraries, run_files))
    pipes = [os.pipe() for _ in range(2 if terminal is not None else 3)]
    rfds = tuple(r for r, _ in pipes)
    files = [f"file,path={machine.pass_fd(w)}" for _, w in pipes]
    uarts = (files[0], terminal.backend(machine), files[1]) if terminal is not None else \
        tuple(files)
    append = ([MEMORY_TIMING_ARG] if not a.no_plugin and run.plugin_opts.get("timing") ==
              "memory" else []) + a.append  # (the guest's p4event reads it)
    machine.qemu_args = guest_qemu_args(image, a.smp, a.threads, a.memory, initrd, append,
                                        uarts, run.clock,  # type: ignore[arg-type]
                                        run.user_kernel.path if run.user_kernel else None)
    machine.qemu_args += ports.qemu_args(machine)
    if gdb is not None:
        machine.qemu_args += gdb.qemu_args
    try:
        if a.verbose:
            print(f"p4pmu: {shlex.join(machine.command)}", file=sys.stderr, flush=True)
    except BaseException:
        for fd in rfds:
            os.close(fd)
        raise
    console = Console(log, a.show_kernel, output)
    sinks = (console.feed, LineSink(output.stderr)) if terminal is not None else \
        (console.feed, LineSink(output.stdout), LineSink(output.stderr))
    timeout = None if gdb is not None else a.timeout or None
    end = run_guest(machine, sinks, rfds, timeout, output,  # type: ignore[arg-type]
                    started=gdb.started if gdb is not None else None, ports=ports,
                    terminal=terminal)
    if end.qemu_stderr.strip():
        log.write(b"\n--- QEMU's standard error ---\n" + end.qemu_stderr.encode())
    return end, console


def command_start(lines: list[str], nonce: str) -> int | None:
    """The index of /init's line saying COMMAND starts (None: it never started)."""
    for i, ln in enumerate(lines):
        m = _START_RE.search(ln)
        if m and m.group(1) == nonce:
            return i
    return None


def _timeout_report(a: argparse.Namespace, lines: list[str], nonce: str,
                    seconds: float, where: str) -> list[str]:
    """What a timeout says: how far the guest got, and only the kernel messages of that part
    (the boot's lines say nothing about a command that hangs)."""
    start = command_start(lines, nonce)
    if start is None:
        return [f"p4pmu linux: error: the guest did not finish within {a.timeout:g} s "
                f"(--timeout): the kernel was still booting, COMMAND had not started; stopped "
                f"it after {seconds:.1f} s {where}", "kernel messages:", _tail(lines)]
    after = [ln for ln in lines[start + 1:] if ln.strip()]
    head = (f"p4pmu linux: error: COMMAND did not finish within the {a.timeout:g} s of "
            f"--timeout (its output so far is above); stopped the guest after {seconds:.1f} s "
            f"{where}")
    if not after:
        return [head, "no kernel messages while COMMAND ran"]
    return [head, "kernel messages while COMMAND ran:", _tail(after)]


def _failure(a: argparse.Namespace, end: GuestEnd, lines: list[str], seconds: float,
             where: str, nonce: str) -> int:
    """Say why the run failed; its exit status."""
    if end.how == "timeout":
        print("\n".join(_timeout_report(a, lines, nonce, seconds, where)), file=sys.stderr,
              flush=True)
        return EXIT_TIMEOUT
    panic = next((ln for ln in lines if _PANIC_RE.search(ln)), None)
    if end.qemu_status not in (0, None):
        what = f"QEMU failed (exit status {end.qemu_status})"
    elif panic:
        what = f"the guest kernel failed: {_PANIC_RE.search(panic).group(1).strip()}"
    else:
        what = ("the guest stopped without reporting the command's exit status "
                "(it powered off or rebooted before /init finished)")
    msg = [f"p4pmu linux: error: {what} after {seconds:.1f} s {where}",
           "kernel messages:", _tail(lines)]
    qerr = end.qemu_stderr
    if qerr.strip():
        msg += ["QEMU's standard error:",
                "\n".join("  | " + ln for ln in qerr.strip().splitlines()[-TAIL_LINES:])]
    print("\n".join(msg), file=sys.stderr, flush=True)
    return EXIT_FAILURE


def cmd_linux(a: argparse.Namespace, command_words: list[str],
              output: HostOutput | None = None) -> int:
    """The `p4pmu linux` command; returns the exit status (see the module doc).  ``output``:
    where the command's stdout and stderr go (default: this process's)."""
    run = check_request(a, command_words)
    output = output or HostOutput()
    qemu = ensure_qemu(progress=True)
    plugin = None if a.no_plugin else (run.plugin_arg or plugin_file(build=True))
    image = ensure_image(a.arch, progress=True, kernel=a.kernel)
    libraries = plan_libraries(a, run, image)
    t0 = time.monotonic()
    nonce = secrets.token_hex(8)
    log = open(run.log_path, "wb") if run.log_path else io.BytesIO()
    gdb = GdbSetup(a.gdb, "linux") if getattr(a, "gdb", None) is not None else None
    popts = {**run.plugin_opts, **(gdb.plugin_opts if gdb is not None else {})}
    with log, contextlib.ExitStack() as stack, \
            P4Machine(qemu, run.model, plugin=plugin, plugin_opts=popts,
                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                      own_session=True) as machine:
        if gdb is not None:
            stack.enter_context(gdb)
        ports = Ports(run.stdin, run.fetches)
        end, console = _boot(a, run, machine, image, nonce, log, output, libraries, ports, gdb)
        for line in bookkeeping_errors(end.qemu_stderr):  # a plugin bug: not only in the log
            print(line, file=sys.stderr, flush=True)
        lines = console.lines()
        status = find_status(lines, nonce)
        fetch_errors = ports.unpack()
        if end.how == "stdout closed":
            return 128 + signal.SIGPIPE  # what the shell reports for a writer cut off
        if end.how == "escape":
            linux_terminal.note_escape()
            return 128 + signal.SIGINT
        if status is not None and end.how == "exit":
            for err in fetch_errors:
                print(f"p4pmu linux: error: {err}", file=sys.stderr, flush=True)
            return EXIT_FAILURE if fetch_errors and status == 0 else status
        kept = run.log_path or _keep(log.getvalue())  # type: ignore[union-attr]
        return _failure(a, end, lines, time.monotonic() - t0, f"(full kernel log: {kept})",
                        nonce)


def _keep(log: bytes) -> Path:
    """Write the in-memory kernel log of a failed run to a file that outlives the run."""
    fd, name = tempfile.mkstemp(prefix="p4pmu-linux-", suffix=".log")
    with os.fdopen(fd, "wb") as f:
        f.write(log)
    return Path(name)


def main(a: argparse.Namespace, command_words: list[str],
         output: HostOutput | None = None) -> int:
    """Entry point from the CLI: UsageError -> exit 2 (by the caller), others -> 125."""
    try:
        return cmd_linux(a, command_words, output)
    except _Stop as s:
        print(f"p4pmu linux: stopped by signal {s.signum}", file=sys.stderr)
        return 128 + s.signum
    except ProvisionError as e:
        print(f"p4pmu linux: error: {e}", file=sys.stderr)
        return EXIT_FAILURE
