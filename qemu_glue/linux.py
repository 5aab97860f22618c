"""`p4pmu linux`: run a shell command in a Linux guest on the emulated Pentium 4.

    p4pmu linux [--kernel 5.10|6.1] [--arch amd64|i386] [--smp N] [--threads 2]
                [--model 0F_MM] [--add HOST_PATH[:GUEST_PATH]]... [--kernel-log PATH]
                [--show-kernel] [--timeout S] -- COMMAND...

The guest is Debian 11's 5.10 kernel (or Debian 12's 6.1, whose P4 driver miscounts: see
docs/linux-guest.md) with busybox, perf and `p4event` (`p4pmu.qemu_glue.linux_image` builds
and caches it).  COMMAND's words are joined with spaces and run with ``/bin/sh -c`` in
``/root`` as root; its standard output and standard error come out on the host's, and p4pmu
exits with its exit status.  Other tools and the tests build on this interface.

How the output gets out (docs/linux-guest.md): three 16550 UARTs, each on its own host pipe
(QEMU's ``file`` character device on ``/dev/fd/N``):

- ttyS0 (COM1, IRQ 4): the console: kernel messages and /init's own, ending with
  ``P4PMU-EXIT <nonce> <status>``; copied to the kernel log file (and to stderr with
  ``--show-kernel``);
- ttyS1 (COM2, IRQ 3): COMMAND's stdout, raw;
- ttyS2 (COM3 at 3E8h, moved to IRQ 5 so that it does not share COM1's edge-triggered line).

The guest switches ttyS1/ttyS2 to raw mode and feeds them from pipes, so the bytes arrive
unchanged (no CR/LF translation, any byte value) and COMMAND sees pipes, not a terminal.
/init waits until both are drained before it reports the status and powers off.

Exit status: COMMAND's; 124 when the timeout expired; 125 when the guest or QEMU failed
(a kernel panic, no status reported, QEMU could not start, an image could not be built);
2 for a usage error.  Each failure prints what happened and the last kernel messages.
"""
from __future__ import annotations

import argparse
import collections
import os
import re
import secrets
import select
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from p4pmu.emulator.models import DEFAULT_MODEL, MODELS, get_model
from p4pmu.plugin import bookkeeping_errors
from p4pmu.qemu_glue.linux_image import guest_init, pins
from p4pmu.qemu_glue.linux_image.cache import LinuxImage, ensure_image
from p4pmu.qemu_glue.linux_image.cpio import CpioWriter
from p4pmu.qemu_glue.provision import ProvisionError

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
    p.add_argument("--kernel-log", metavar="PATH",
                   help="write the kernel's console messages here (default: a temporary file, "
                        "kept and named only when the run fails)")
    p.add_argument("--show-kernel", action="store_true",
                   help="also print the kernel's console messages on stderr")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                   help=f"stop the guest after this long, exit status {EXIT_TIMEOUT} "
                        f"(default {DEFAULT_TIMEOUT:.0f}; 0: no limit)")
    p.add_argument("--memory", type=int, default=DEFAULT_MEMORY_MB, metavar="MB",
                   help=f"guest memory (default {DEFAULT_MEMORY_MB})")
    p.add_argument("--append", metavar="ARGS", action="append", default=[],
                   help="extra kernel command-line arguments")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="print the QEMU command line on stderr")


def usage_epilog() -> str:
    return ("COMMAND runs with /bin/sh -c in /root (its words joined with spaces, as ssh does); "
            "its stdout and stderr come out here and its exit status is p4pmu's. p4pmu's own "
            f"failures: {EXIT_TIMEOUT} timeout, {EXIT_FAILURE} guest or QEMU failure, 2 usage.\n\n"
            "examples:\n"
            "  p4pmu linux -- perf stat -e instructions,branches ls /\n"
            "  p4pmu linux -- 'perf stat -e $(p4event branch_retired:MMTP:MMTM:u) ls /'\n"
            "  p4pmu linux --add ./bench:/root/bench -- ./bench\n"
            "  p4pmu linux --arch i386 --smp 2 --threads 2 -- 'perf list hw'\n"
            "  p4pmu linux -- 'dmesg | grep -i -e pmu -e netburst'")


class UsageError(Exception):
    """Reported like argparse's errors (exit status 2)."""


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


def check_machine(arch: str, smp: int, threads: int, model_key: str | None):
    """The CpuModel; UsageError for what cannot boot."""
    try:
        model = get_model(model_key)
    except KeyError as e:
        raise UsageError(f"--model: {e.args[0]}") from None
    if arch == "amd64" and not model.long_mode:
        raise UsageError(f"--model {model.key} ({model.codename}) has no EM64T, so it cannot "
                         "run the 64-bit kernel: use --arch i386, or a model with long mode ("
                         + ", ".join(m.key for m in MODELS.values() if m.long_mode) + ")")
    if smp < 1 or smp > 64:
        raise UsageError(f"--smp {smp}: expected 1 to 64")
    if threads == 2 and smp % 2:
        raise UsageError(f"--smp {smp} --threads 2: the number of logical CPUs must be even "
                         "(two threads per core)")
    return model


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


def write_run_archive(path: Path, command: str, nonce: str, adds: list[AddSpec]) -> int:
    """The second cpio archive, appended to the image's: /p4pmu/{cmd,nonce} and the --add
    files.  Returns the bytes of added files."""
    total = 0
    with open(path, "wb") as f:
        w = CpioWriter(f, mtime=int(time.time()))
        w.dir(guest_init.GUEST_RUN_DIR.lstrip("/"), 0o700)
        w.file(f"{guest_init.GUEST_RUN_DIR.lstrip('/')}/cmd", command.encode(), 0o600)
        w.file(f"{guest_init.GUEST_RUN_DIR.lstrip('/')}/nonce", nonce.encode(), 0o600)
        w.dirs.update({"root", "tmp", "bin", "usr", "usr/bin", "usr/local", "usr/local/bin",
                       "etc", "lib", "usr/lib"})  # in the base archive already
        for spec in adds:
            total += _add_tree(w, spec)
        w.finish()
    return total


# --------------------------------------------------------------------------------------------
# Running


@dataclass
class _Console:
    """Copies the console pipe to the log (and stderr) and keeps the last lines."""

    log: object  # binary file
    echo: bool
    tail: collections.deque = field(default_factory=lambda: collections.deque(maxlen=400))
    partial: bytes = b""

    def feed(self, chunk: bytes) -> None:
        self.log.write(chunk)  # type: ignore[attr-defined]
        self.log.flush()  # type: ignore[attr-defined]
        if self.echo:
            _write_out(sys.stderr, chunk)
        data = self.partial + chunk
        lines = data.split(b"\n")
        self.partial = lines.pop()
        if len(self.partial) > 65536:
            lines.append(self.partial)
            self.partial = b""
        for ln in lines:
            self.tail.append(ln.rstrip(b"\r").decode("utf-8", "replace"))

    def lines(self) -> list[str]:
        out = list(self.tail)
        if self.partial:
            out.append(self.partial.rstrip(b"\r").decode("utf-8", "replace"))
        return out


_broken: set[int] = set()
stdout_closed = threading.Event()  # the host's stdout reader went away (`... | head`)
_write_lock = threading.Lock()  # stdout and stderr share a terminal: one line at a time


def _write_out(stream, chunk: bytes) -> None:
    """Write to the host's stdout/stderr.  When the reader has gone (`| head`), the stream
    is pointed at /dev/null (so that Python's exit does not complain) and, for stdout, the
    run is stopped as a shell pipeline would stop its writer."""
    key = id(stream)
    if key in _broken:
        return
    try:
        with _write_lock:
            buf = getattr(stream, "buffer", None)
            if buf is not None:
                buf.write(chunk)
                buf.flush()
            else:
                stream.write(chunk.decode("utf-8", "replace"))
                stream.flush()
    except (BrokenPipeError, ValueError, OSError):
        _broken.add(key)
        try:
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, stream.fileno())
            os.close(null)
        except (OSError, ValueError, AttributeError):
            pass
        if stream is sys.stdout:
            stdout_closed.set()


class LineSink:
    """Passes a stream on in whole lines: the command's stdout and stderr arrive through two
    UARTs a byte at a time, and on one terminal their bytes would interleave mid-line.  A
    partial line (a prompt, a progress bar, binary data) goes out once nothing more came for
    `PARTIAL_AFTER` seconds, once it reaches `MAX_PARTIAL` bytes, and at the end."""

    PARTIAL_AFTER = 0.1
    MAX_PARTIAL = 1 << 16

    def __init__(self, write):
        self.write = write
        self.partial = b""

    def feed(self, chunk: bytes) -> None:
        data = self.partial + chunk
        cut = data.rfind(b"\n") + 1
        if len(data) - cut >= self.MAX_PARTIAL:
            cut = len(data)
        if cut:
            self.write(data[:cut])
        self.partial = data[cut:]

    def flush(self) -> None:
        if self.partial:
            self.write(self.partial)
            self.partial = b""


def _relay(rfd: int, sink) -> None:
    """Copy a pipe to ``sink`` (a callable, or a LineSink) until EOF.  A UART delivers one
    byte per write(), so after a short read the copy waits a moment and lets bytes collect in
    the pipe (64 KiB, far more than a UART's 0.5 MB/s fills in the pause): fewer wake-ups,
    less CPU taken from QEMU."""
    feed = sink.feed if isinstance(sink, LineSink) else sink
    try:
        while True:
            if isinstance(sink, LineSink) and sink.partial:
                ready, _, _ = select.select([rfd], [], [], LineSink.PARTIAL_AFTER)
                if not ready:
                    sink.flush()
                    continue
            try:
                chunk = os.read(rfd, 1 << 16)
            except InterruptedError:
                continue
            if not chunk:
                break
            feed(chunk)
            if len(chunk) < 4096:
                time.sleep(0.01)
    finally:
        if isinstance(sink, LineSink):
            sink.flush()
        os.close(rfd)


WARNING_PREFIX = b"p4pmu: warning:"


def _read_qemu_stderr(stream, keep: bytearray) -> None:
    """Keep QEMU's stderr for the kernel log and the failure report; pass the plugin's
    warnings (emulator/notices.py) on to the user's stderr as they come."""
    for line in iter(stream.readline, b""):
        keep.extend(line)
        if line.startswith(WARNING_PREFIX):
            _write_out(sys.stderr, line)


class _Stop(Exception):
    def __init__(self, signum: int):
        self.signum = signum


def compose_command(image: LinuxImage, model, popts: dict[str, str], plugin: Path | None,
                    qemu, smp: int, threads: int, memory: int, initrd: Path,
                    append: list[str], fds: tuple[int, int, int],
                    clock: str = DEFAULT_CLOCK) -> list[str]:
    """The QEMU command line (`p4pmu qemu`'s composition with the guest's arguments)."""
    from p4pmu.qemu_glue.cli import compose_qemu_command
    con, out, err = fds
    smp_opt = str(smp) + (f",threads=2,cores={smp // 2},sockets=1" if threads == 2 else "")
    cmdline = " ".join(x for x in (KERNEL_CMDLINE, KERNEL_CMDLINE_ARCH.get(image.arch, ""),
                                   *append) if x)
    qargs = [
        *CLOCKS[clock],
        "-machine", "pc", "-m", str(memory), "-nodefaults", "-no-reboot", "-display", "none",
        "-smp", smp_opt,
        "-kernel", str(image.kernel), "-initrd", str(initrd), "-append", cmdline,
        "-chardev", f"file,id=p4pmu_con,path=/dev/fd/{con}", "-serial", "chardev:p4pmu_con",
        "-chardev", f"file,id=p4pmu_out,path=/dev/fd/{out}", "-serial", "chardev:p4pmu_out",
        "-chardev", f"file,id=p4pmu_err,path=/dev/fd/{err}",
        "-device", f"isa-serial,chardev=p4pmu_err,index=2,irq={COM3_IRQ}",
    ]
    return compose_qemu_command(qemu, model, qargs, popts, plugin)


def run_guest(cmd: list[str], console: _Console, out_sink, err_sink, fds: tuple[int, int, int],
              rfds: tuple[int, int, int], timeout: float | None) -> tuple[int | None, str, str]:
    """Start QEMU, copy the three pipes until QEMU is gone; (QEMU status, how it ended:
    "exit", "timeout" or "stdout closed", QEMU's stderr)."""
    qerr = bytearray()
    stop: list[int] = []
    old = {}

    def on_signal(signum, _frame):  # noted here, acted on by the loop below
        stop.append(signum)

    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        try:
            old[s] = signal.signal(s, on_signal)
        except (ValueError, OSError):
            pass
    threads: list[threading.Thread] = []
    p: subprocess.Popen | None = None
    ended = "exit"
    try:
        try:
            p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE, pass_fds=fds, start_new_session=True)
        except OSError as e:
            for fd in rfds:
                os.close(fd)
            raise LinuxError(f"cannot start QEMU ({cmd[0]}): {e}") from e
        finally:
            for fd in fds:
                os.close(fd)
        sinks = (console.feed, out_sink, err_sink)
        for rfd, sink in zip(rfds, sinks):
            t = threading.Thread(target=_relay, args=(rfd, sink), daemon=True)
            t.start()
            threads.append(t)
        assert p.stderr is not None
        t = threading.Thread(target=_read_qemu_stderr, args=(p.stderr, qerr), daemon=True)
        t.start()
        threads.append(t)
        deadline = time.monotonic() + timeout if timeout else None
        while True:
            try:
                p.wait(timeout=0.2)
                break
            except subprocess.TimeoutExpired:
                pass
            if stop:
                break
            if stdout_closed.is_set():
                ended = "stdout closed"
                break
            if deadline is not None and time.monotonic() > deadline:
                ended = "timeout"
                break
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        if p is not None and p.poll() is None:
            _terminate(p)
        for t in threads:
            t.join(timeout=10)
    if stop:
        raise _Stop(stop[0])
    text = qerr.decode("utf-8", "replace")
    if ended != "exit":  # QEMU's note that p4pmu stopped it
        text = "".join(ln for ln in text.splitlines(True) if "terminating on signal" not in ln)
    return (p.returncode if p else None), ended, text


def _terminate(p: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            return
        try:
            p.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


_MARKER_RE = re.compile(rf"{guest_init.EXIT_MARKER} (\S+) (\d+)")
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


def cmd_linux(a: argparse.Namespace, command_words: list[str]) -> int:
    """The `p4pmu linux` command; returns the exit status (see the module doc)."""
    from p4pmu.qemu_glue.cli import (CliError, _NoQemu, compose_qemu_command, parse_plugin_opts,
                                     plugin_file, resolve_model)
    from p4pmu.qemu_glue.provision import ensure_qemu

    if not command_words:
        raise UsageError("no COMMAND: give it after `--`, e.g. p4pmu linux -- perf stat true")
    command = " ".join(command_words)
    try:
        popts = parse_plugin_opts(a.plugin_opt or [])
        model = resolve_model(a.model, None, popts)  # --model, or --plugin-opt model=
    except CliError as e:
        raise UsageError(str(e)) from None
    check_machine(a.arch, a.smp, a.threads, model.key)
    clock = resolve_clock(a.clock, a.smp)
    if a.no_plugin and (a.plugin_opt or a.plugin):
        raise UsageError("--no-plugin cannot go with --plugin or --plugin-opt")
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
    # check the QEMU arguments p4pmu composes before anything is downloaded
    compose_qemu_command(_NoQemu(), model, ["-smp", f"{a.smp},threads={a.threads}"], popts, None)

    added = sum(_add_size(spec.host) for spec in adds)
    if added > a.memory * 1024 * 1024 // 3:
        raise UsageError(f"--add: {added / 1e6:.1f} MB of files do not fit in a {a.memory} MB "
                         "guest (they live in its RAM, twice while the initramfs is unpacked); "
                         "raise --memory")

    qemu = ensure_qemu(progress=True)
    plugin = None if a.no_plugin else (plugin_arg or plugin_file(build=True))
    image = ensure_image(a.arch, progress=True, kernel=a.kernel)

    tmp = Path(tempfile.mkdtemp(prefix="p4pmu-linux-"))
    keep_log: Path | None = None
    t0 = time.monotonic()
    try:
        nonce = secrets.token_hex(8)
        run_cpio = tmp / "run.cpio"
        write_run_archive(run_cpio, command, nonce, adds)
        initrd = tmp / "initrd.cpio"
        with open(initrd, "wb") as dst:
            with open(image.initrd, "rb") as src:
                shutil.copyfileobj(src, dst, 1 << 20)
            with open(run_cpio, "rb") as src:
                shutil.copyfileobj(src, dst)
        log_file = log_path or (tmp / "kernel.log")
        pipes = [os.pipe() for _ in range(3)]
        rfds = tuple(r for r, _ in pipes)
        wfds = tuple(w for _, w in pipes)
        try:
            cmd = compose_command(image, model, popts, plugin, qemu, a.smp, a.threads,
                                  a.memory, initrd, a.append, wfds,  # type: ignore[arg-type]
                                  clock)
        except BaseException:
            for fd in (*rfds, *wfds):
                os.close(fd)
            raise
        if a.verbose:
            print(f"p4pmu: {shlex.join(cmd)}", file=sys.stderr, flush=True)
        with open(log_file, "wb") as logf:
            console = _Console(logf, a.show_kernel)
            qstatus, ended, qerr = run_guest(
                cmd, console, LineSink(lambda c: _write_out(sys.stdout, c)),
                LineSink(lambda c: _write_out(sys.stderr, c)), wfds, rfds,  # type: ignore
                a.timeout or None)
            if qerr.strip():
                logf.write(b"\n--- QEMU's standard error ---\n" + qerr.encode())
        for line in bookkeeping_errors(qerr):  # a plugin bug: not only in the kernel log
            print(line, file=sys.stderr, flush=True)
        lines = console.lines()
        status = find_status(lines, nonce)
        seconds = time.monotonic() - t0
        if ended == "stdout closed":
            return 128 + signal.SIGPIPE  # what the shell reports for a writer cut off
        if status is not None and ended == "exit":
            return status
        keep_log = log_file if log_path else _keep(log_file)
        where = f"(full kernel log: {keep_log})"
        if ended == "timeout":
            what = (f"the guest did not finish within {a.timeout:g} s (--timeout); stopped it")
            code = EXIT_TIMEOUT
        else:
            code = EXIT_FAILURE
            panic = next((ln for ln in lines if _PANIC_RE.search(ln)), None)
            if qstatus not in (0, None):
                what = f"QEMU failed (exit status {qstatus})"
            elif panic:
                what = f"the guest kernel failed: {_PANIC_RE.search(panic).group(1).strip()}"
            else:
                what = ("the guest stopped without reporting the command's exit status "
                        "(it powered off or rebooted before /init finished)")
        msg = [f"p4pmu linux: error: {what} after {seconds:.1f} s {where}",
               "kernel messages:", _tail(lines)]
        if qerr.strip():
            msg += ["QEMU's standard error:",
                    "\n".join("  | " + ln for ln in qerr.strip().splitlines()[-TAIL_LINES:])]
        print("\n".join(msg), file=sys.stderr, flush=True)
        return code
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _keep(log: Path) -> Path:
    """Move a temporary kernel log out of the run's folder so it survives it."""
    fd, name = tempfile.mkstemp(prefix="p4pmu-linux-", suffix=".log")
    os.close(fd)
    shutil.move(str(log), name)
    return Path(name)


def main(a: argparse.Namespace, command_words: list[str]) -> int:
    """Entry point from the CLI: UsageError -> exit 2 (by the caller), others -> 125."""
    try:
        return cmd_linux(a, command_words)
    except _Stop as s:
        print(f"p4pmu linux: stopped by signal {s.signum}", file=sys.stderr)
        return 128 + s.signum
    except ProvisionError as e:
        print(f"p4pmu linux: error: {e}", file=sys.stderr)
        return EXIT_FAILURE
