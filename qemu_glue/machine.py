"""One QEMU with the emulated Pentium 4 PMU, from its command line to its cleanup.

In the spirit of QEMU's own ``python/qemu/machine`` (QEMUMachine: one object owns one
QEMU's life), a `P4Machine` owns everything about one QEMU that p4pmu starts -- for
`p4pmu qemu`, `p4pmu linux`, both demos and `p4pmu bench`:

- the command line: qemu_argv.compose_qemu_argv (binary, ``-accel tcg``, the model's
  ``-cpu``, ``-plugin`` with its options) around the caller's QEMU arguments;
- the environment and standard streams QEMU gets, and the file descriptors handed to it;
- in-memory files (`add_memfd`): data QEMU reads (an initrd, a guest script) or files it
  writes (a serial port, the plugin's log) live in memfds that QEMU opens as /dev/fd/N, so
  no run leaves a file behind, even when p4pmu is killed;
- QEMU's life: QEMU dies with the p4pmu process that started it (PR_SET_PDEATHSIG, so a
  SIGKILLed p4pmu leaves no QEMU running); `shutdown` sends SIGTERM, then SIGKILL; signals
  sent to p4pmu are forwarded (`run_forwarding`) or noted for the caller (`note_signals`);
  the exit status as a shell reports it.

Use it as a context manager: leaving the block stops QEMU if it still runs and releases
every file descriptor.
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import signal
import subprocess
import sys
from pathlib import Path

from p4pmu.emulator.models import CpuModel
from p4pmu.qemu_glue.provision import ProvisionError
from p4pmu.qemu_glue.qemu_argv import compose_qemu_argv

PR_SET_PDEATHSIG = 1  # prctl(2): the signal a child gets when its parent thread dies
FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT,
                     signal.SIGUSR1, signal.SIGUSR2)
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

_libc = ctypes.CDLL(None, use_errno=True)  # resolved here: the forked child only calls it


def _die_with_parent(parent_pid: int) -> None:
    """Runs in the forked child before exec: SIGKILL when the thread that started QEMU dies
    (every P4Machine is launched from the main thread), and exit at once if p4pmu already
    died between fork and here."""
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:
        os._exit(1)


class P4Machine:
    """One QEMU run: see the module doc.  ``plugin`` None runs the model's CPU without the
    PMU plugin; ``own_session`` puts QEMU in its own session (a terminal's Ctrl-C then
    reaches p4pmu only, which decides); file descriptors in ``pass_fds`` belong to the
    machine from here on (closed here once QEMU has them)."""

    def __init__(self, qemu, model: CpuModel, qemu_args: list[str] | tuple[str, ...] = (), *,
                 plugin: Path | None = None, plugin_opts: dict[str, str] | None = None,
                 env: dict[str, str] | None = None, stdin=subprocess.DEVNULL, stdout=None,
                 stderr=None, pass_fds: tuple[int, ...] = (), own_session: bool = False):
        self.qemu = qemu
        self.model = model
        self.qemu_args = list(qemu_args)
        self.plugin = plugin
        self.plugin_opts = dict(plugin_opts or {})
        self.env = env
        self.streams = {"stdin": stdin, "stdout": stdout, "stderr": stderr}
        self.own_session = own_session
        self._pass_fds = list(pass_fds)
        self._memfds: dict[str, int] = {}  # path QEMU sees -> our descriptor
        self.process: subprocess.Popen | None = None

    # -- the command line and its files --------------------------------------------------

    @property
    def command(self) -> list[str]:
        """QEMU's full argv (composing it checks the arguments: UsageError)."""
        return compose_qemu_argv(self.qemu, self.model, self.qemu_args, self.plugin_opts,
                                    self.plugin)

    def pass_fd(self, fd: int) -> str:
        """Hand a file descriptor to QEMU (the machine owns it from here on: closed here once
        QEMU has it); the path QEMU opens it by."""
        self._pass_fds.append(fd)
        return f"/dev/fd/{fd}"

    def add_memfd(self, name: str, data: bytes | None = None) -> str:
        """An in-memory file holding ``data`` (empty when None) that QEMU opens as the
        returned path (/dev/fd/N, N the same number in QEMU); `memfd_bytes` reads it back."""
        fd = os.memfd_create(f"p4pmu-{name}", os.MFD_CLOEXEC)
        if data:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        path = self.pass_fd(fd)
        self._memfds[path] = fd
        return path

    def add_memfd_from(self, name: str, sources: list, tail: bytes = b"") -> str:
        """An in-memory file made of the given files' contents (paths), then ``tail``."""
        path = self.add_memfd(name)
        fd = self._memfds[path]
        for src in sources:
            with open(src, "rb") as f:
                while chunk := f.read(1 << 20):
                    os.write(fd, chunk)
        if tail:
            os.write(fd, tail)
        return path

    def memfd_bytes(self, path: str) -> bytes:
        """What an in-memory file holds now (QEMU may have written it)."""
        fd = self._memfds[path]
        size = os.fstat(fd).st_size
        return os.pread(fd, size, 0) if size else b""

    # -- QEMU's life ------------------------------------------------------------------------

    def launch(self) -> subprocess.Popen:
        cmd = self.command
        try:
            self.process = subprocess.Popen(
                cmd, env=None if self.env is None else {**os.environ, **self.env},
                pass_fds=tuple(self._pass_fds), start_new_session=self.own_session,
                preexec_fn=functools.partial(_die_with_parent, os.getpid()), **self.streams)
        except OSError as e:
            raise ProvisionError(f"cannot start QEMU ({cmd[0]}): {e}") from e
        finally:
            self._close_passed_fds()
        return self.process

    def _close_passed_fds(self) -> None:
        """QEMU has its copies: close ours, except the memfds (read back later)."""
        keep = set(self._memfds.values())
        for fd in self._pass_fds:
            if fd not in keep:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._pass_fds = [fd for fd in self._pass_fds if fd in keep]

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    @property
    def exitcode(self) -> int | None:
        """QEMU's exit status (negative: killed by that signal); None while it runs."""
        return self.process.poll() if self.process else None

    def wait(self, timeout: float | None = None) -> int:
        assert self.process is not None, "not launched"
        return self.process.wait(timeout)

    def send_signal(self, signum: int) -> None:
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signum)

    def shutdown(self, grace: float = 5.0) -> None:
        """Stop QEMU if it still runs: SIGTERM, then SIGKILL after ``grace`` seconds (to its
        whole session when it has its own)."""
        p = self.process
        if p is None or p.poll() is not None:
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                if self.own_session:
                    os.killpg(p.pid, sig)
                else:
                    p.send_signal(sig)
            except ProcessLookupError:
                break
            try:
                p.wait(timeout=grace)
                return
            except subprocess.TimeoutExpired:
                continue
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=grace)

    def close(self) -> None:
        """Stop QEMU and release every file descriptor (idempotent)."""
        self.shutdown()
        self._close_passed_fds()
        for fd in self._memfds.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self._memfds.clear()
        for name in ("stdout", "stderr", "stdin"):
            stream = getattr(self.process, name, None) if self.process else None
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()

    def __enter__(self) -> P4Machine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- signals ----------------------------------------------------------------------------

    def run_forwarding(self, started=None) -> int:
        """Launch QEMU, forward FORWARDED_SIGNALS to it, wait, return its exit status.  A
        QEMU killed by a signal makes this process die of the same signal (as a shell would
        report it); a QEMU that ended cleanly (status 0) after a STOP_SIGNALS signal was
        forwarded gives 128 + that signal, as a shell reports a process stopped by it (QEMU
        itself says 0 after "terminating on signal").  ``started(pid)`` is called once QEMU
        runs."""
        pending: list[int] = []
        stops: list[int] = []

        def forward(signum, _frame):
            if signum in STOP_SIGNALS:
                stops.append(signum)
            if self.process is None:  # arrived while starting: delivered right after
                pending.append(signum)
            else:
                self.send_signal(signum)

        # handlers first, so that no signal can kill p4pmu between starting QEMU and
        # watching it
        with _handlers(FORWARDED_SIGNALS, forward):
            self.launch()
            for s in pending:
                self.send_signal(s)
            if started is not None:
                started(self.pid)
            rc = self.wait()
        if rc < 0:
            _die_of(-rc)
            return 128 - rc
        if rc == 0 and stops:
            print(f"p4pmu: QEMU stopped by signal {stops[0]} "
                  f"({signal.Signals(stops[0]).name})", file=sys.stderr, flush=True)
            return 128 + stops[0]
        return rc

    @staticmethod
    @contextlib.contextmanager
    def note_signals(noted: list[int]):
        """While in the block, STOP_SIGNALS are appended to ``noted`` instead of acting: the
        caller's loop sees them and stops QEMU its own way."""
        with _handlers(STOP_SIGNALS, lambda signum, _frame: noted.append(signum)):
            yield noted


@contextlib.contextmanager
def _handlers(signals, handler):
    """Install ``handler`` for ``signals`` (where this thread may), restore on leaving."""
    old = {}
    for s in signals:
        try:
            old[s] = signal.signal(s, handler)
        except (ValueError, OSError):  # not the main thread
            pass
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _die_of(signum: int) -> None:
    """End this process with QEMU's fatal signal, as a shell would see it."""
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
    except (OSError, ValueError):
        pass
