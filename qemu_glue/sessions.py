"""Where the running `p4pmu qemu --gdb` and `p4pmu linux --gdb` sessions are recorded, so
that `p4pmu gdb` finds their gdbstub port and control socket (docs/gdb.md).

One job: one small JSON file per session in a private folder (mode 0700; each file 0600,
written to a temporary name and renamed, so a reader never sees half a file):
`$XDG_RUNTIME_DIR/p4pmu/` when that is set, else `~/.cache/p4pmu/sessions/` (the cache
root of provision.py).  The launchers `register` a session when its QEMU is up and
`unregister` it when it ends; a session whose p4pmu process has died without that is
dropped (and its file deleted) by the next `live_sessions`.

A session's keys: `p4pmu_pid`, `qemu_pid`, `gdb_port` (int), `control` (the control
socket), `qmp` (the QMP socket), `dir` (the session's private folder), `elf` (the guest ELF
with symbols, or null), `kind` ("qemu" or "linux"), `started` (time.time()).
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from p4pmu.qemu_glue.errors import UsageError
from p4pmu.qemu_glue.provision import cache_root

NO_SESSION = ("no p4pmu session with --gdb is running: start one with `p4pmu qemu --gdb "
              "GUEST` or `p4pmu linux --gdb`")


def sessions_dir() -> Path:
    """The folder of the session files, created (mode 0700) when missing."""
    runtime = os.environ.get("XDG_RUNTIME_DIR") or ""
    if runtime and os.path.isabs(runtime):  # the XDG spec says: ignore relative paths
        folder = Path(runtime) / "p4pmu"
    else:
        folder = cache_root() / "sessions"
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(folder, 0o700)  # mkdir's mode passes through the umask
    return folder


def register(info: dict) -> Path:
    """Record a session; returns its file (the argument of `unregister`)."""
    folder = sessions_dir()
    path = folder / f"{int(info['p4pmu_pid'])}.json"
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{path.stem}.", suffix=".tmp")  # 0600
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(info, f, indent=1)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def unregister(path: Path | str) -> None:
    """Forget a session (its file may already be gone)."""
    Path(path).unlink(missing_ok=True)


def _alive(pid) -> bool:
    """Whether process `pid` exists (signal 0 checks without sending anything)."""
    try:
        pid = int(pid)
        if pid <= 0:  # kill(0 or -N) would address process groups
            return False
        os.kill(pid, 0)
    except (ProcessLookupError, TypeError, ValueError, OverflowError):
        return False
    except PermissionError:  # a process of another user has this pid
        return True
    return True


def live_sessions() -> list[dict]:
    """The recorded sessions whose p4pmu process runs, newest first; the files of the
    others (and files that are not a session's) are deleted."""
    found = []
    for path in sessions_dir().glob("*.json"):
        info = None  # not the previous file's: its directory must survive this one
        try:
            info = json.loads(path.read_text())
            alive = isinstance(info, dict) and _alive(info.get("p4pmu_pid"))
        except (OSError, ValueError):
            alive = False
        if alive:
            found.append(info)
        else:
            if isinstance(info, dict):
                _remove_private_dir(info.get("dir"))
            path.unlink(missing_ok=True)
    return sorted(found, key=lambda s: float(s.get("started") or 0), reverse=True)


def _remove_private_dir(d) -> None:
    """The sockets' directory of a session whose p4pmu died without cleaning up (SIGKILL):
    only a p4pmu-gdb-* directory of this user (qemu_glue/gdb_launch.py makes them)."""
    if not isinstance(d, str) or not Path(d).name.startswith("p4pmu-gdb-"):
        return
    with contextlib.suppress(OSError):
        if Path(d).is_dir() and Path(d).stat().st_uid == os.getuid():
            shutil.rmtree(d, ignore_errors=True)


def describe(session: dict) -> str:
    """One line for a person: port, kind, processes, start time, ELF."""
    started = time.strftime("%H:%M:%S", time.localtime(float(session.get("started") or 0)))
    elf = f", ELF {session['elf']}" if session.get("elf") else ""
    return (f"port {session.get('gdb_port')}: p4pmu {session.get('kind', '?')} (pid "
            f"{session.get('p4pmu_pid')}, QEMU pid {session.get('qemu_pid')}, started "
            f"{started}{elf})")


def find(port: int | None = None) -> dict:
    """The one running session (with `port`: the one whose gdbstub listens there); a
    UsageError saying what runs when that is not exactly one."""
    sessions = live_sessions()
    listing = "".join(f"\n  {describe(s)}" for s in sessions)
    if port is not None:
        chosen = [s for s in sessions if s.get("gdb_port") == port]
        if not chosen:
            if not sessions:
                raise UsageError(NO_SESSION)
            raise UsageError(f"no p4pmu session with --gdb listens on port {port}; running:"
                             + listing)
        return chosen[0]
    if not sessions:
        raise UsageError(NO_SESSION)
    if len(sessions) > 1:
        raise UsageError(f"{len(sessions)} p4pmu sessions with --gdb are running: choose one "
                         "with --port N:" + listing)
    return sessions[0]
