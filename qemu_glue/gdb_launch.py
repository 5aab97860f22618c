"""`--gdb[=PORT]` of `p4pmu qemu` and `p4pmu linux`: QEMU waits stopped for gdb, with the
plugin's control channel (docs/gdb.md).

`GdbSetup` makes a private directory (mode 0700) for the control socket and the QMP socket
the channel stops the guest through, gives the QEMU arguments (``-gdb`` on localhost, ``-S``,
``-qmp``) and plugin options (``control=``, ``qmp=``) that go with them, records the
running session for `p4pmu gdb` (qemu_glue/sessions.py) once QEMU runs, says on stderr how
to attach, and removes all of it when the session ends.
"""
from __future__ import annotations

import contextlib
import shutil
import socket
import sys
import tempfile
import time
from pathlib import Path

from p4pmu.qemu_glue.errors import UsageError

DEFAULT_PORT = 1234  # QEMU's -s


def add_argument(p, note: str = "") -> None:
    """--gdb[=PORT] on a command's parser (p4pmu qemu, p4pmu linux)."""
    p.add_argument("--gdb", metavar="PORT", nargs="?", type=int, const=DEFAULT_PORT,
                   help=f"start the guest stopped, waiting for gdb on localhost:PORT (default "
                        f"{DEFAULT_PORT}; 0: any free port), with the PMU control channel: "
                        f"attach with `p4pmu gdb` (docs/gdb.md){note}")


def check_request(port: int | None, no_plugin: bool, plugin_opts: dict,
                  qemu_args: list[str] = ()) -> None:
    """What --gdb cannot go with (UsageError), before anything is made."""
    if port is None:
        return
    if no_plugin:
        raise UsageError("--gdb needs the plugin (its control channel): drop --no-plugin")
    if {"control", "qmp"} & set(plugin_opts):
        raise UsageError("--gdb sets the plugin options control= and qmp= itself")
    for own in ("-gdb", "-s", "-S", "-qmp"):
        if own in qemu_args:
            raise UsageError(f"--gdb gives QEMU {own} itself: drop it from QEMU's arguments")
    if port:
        check_port(port)  # (again when the session is made: GdbSetup)


def free_port() -> int:
    """A TCP port on localhost that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check_port(port: int) -> int:
    """`port` (0: a free one) if it can be listened on, else a UsageError."""
    if port == 0:
        return free_port()
    if not 0 < port < 65536:
        raise UsageError(f"--gdb={port}: a TCP port is 1-65535 (0: any free port)")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError as e:
            raise UsageError(f"--gdb={port}: port {port} cannot be used ({e.strerror}); "
                             f"choose another, or --gdb=0 for any free port") from None
    return port


def kernel_elf(qemu_args: list[str]) -> str | None:
    """The guest given with -kernel, when it is an ELF file (its symbols are gdb's)."""
    for i, a in enumerate(qemu_args[:-1]):
        if a == "-kernel":
            p = Path(qemu_args[i + 1]).expanduser()
            with contextlib.suppress(OSError):
                if p.is_file() and p.open("rb").read(4) == b"\x7fELF":
                    return str(p.absolute())
    return None


class GdbSetup:
    """One --gdb session's files and arguments; `close` removes them (idempotent)."""

    def __init__(self, port: int, kind: str, elf: str | None = None):
        self.port = check_port(port)
        self.kind = kind
        self.elf = elf
        self.dir = Path(tempfile.mkdtemp(prefix="p4pmu-gdb-"))  # mode 0700
        self.control = str(self.dir / "control.sock")
        self.qmp = str(self.dir / "qmp.sock")
        self._session: Path | None = None

    @property
    def qemu_args(self) -> list[str]:
        return ["-gdb", f"tcp:127.0.0.1:{self.port}", "-S",
                "-qmp", f"unix:{self.qmp},server=on,wait=off"]

    @property
    def plugin_opts(self) -> dict[str, str]:
        return {"control": self.control, "qmp": self.qmp}

    def started(self, qemu_pid: int) -> None:
        """QEMU runs: record the session and tell the user how to attach."""
        import os

        from p4pmu.qemu_glue import gdb_cmd, sessions
        self._session = sessions.register({
            "p4pmu_pid": os.getpid(), "qemu_pid": qemu_pid, "gdb_port": self.port,
            "control": self.control, "qmp": self.qmp, "dir": str(self.dir), "elf": self.elf,
            "kind": self.kind, "started": time.time()})
        print(f"p4pmu: the guest waits for gdb on localhost:{self.port} (stopped before its "
              f"first instruction).\n"
              f"p4pmu: attach with:  p4pmu gdb{' ' + self.elf if self.elf else ''}\n"
              f"p4pmu: or from your own gdb:  source {gdb_cmd.extension_path()}\n"
              f"p4pmu:   set p4pmu socket {self.control}\n"
              f"p4pmu:   target remote localhost:{self.port}", file=sys.stderr, flush=True)

    def close(self) -> None:
        from p4pmu.qemu_glue import sessions
        if self._session is not None:
            sessions.unregister(self._session)
            self._session = None
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> GdbSetup:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
