"""`p4pmu gdb [ELF]`: gdb on a running `p4pmu qemu --gdb` / `p4pmu linux --gdb` session.

One job: find the session (sessions.py), build gdb's command line — the p4pmu extension
(gdb_extension.py) sourced, its control socket set and connected, the ELF's symbols loaded,
`target remote` to the session's gdbstub, then the user's commands — and exec gdb, so the
terminal talks to gdb itself.  `gdb_argv` builds the command line without running it (for
the tests and for driving gdb through pygdbmi).  Exit statuses: 2 a bad option, a missing
ELF file or no (unique) session; 1 gdb not installed; else gdb's own.
"""
from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys
from pathlib import Path

from p4pmu.qemu_glue import sessions
from p4pmu.qemu_glue.errors import UsageError
from p4pmu.qemu_glue.provision import ProvisionError

PROG = "p4pmu gdb"
DESCRIPTION = """\
Start gdb on the running `p4pmu qemu --gdb` or `p4pmu linux --gdb` session: with the p4pmu
extension loaded (info p4pmu, p4pmu set, p4pmu break, $p4pmu_counter(N), ...; `help p4pmu`
in gdb), connected to the session's control socket, the ELF's symbols loaded (ELF, else the
session's guest ELF if it has one) and attached to the session's gdbstub with `target
remote`.  The guest is stopped at attach; `continue` runs it."""
EPILOG = """\
examples:
  p4pmu gdb                               the one running session
  p4pmu gdb build/mydriver.elf --port 1235
  p4pmu gdb --batch -ex 'info p4pmu all'  print the PMU and detach
  p4pmu gdb -- -nx                        gdb's own options after `--`

In your own gdb: `source FILE` with the FILE `p4pmu info` names as gdb_script, then
`p4pmu connect SOCKET` and `target remote :PORT`.  exit status: gdb's; 2 a bad option, a
missing ELF or no running session (several: choose one with --port); 1 gdb is missing."""


def extension_path() -> Path:
    """The gdb extension's file (sourced by gdb; `p4pmu info` names it as gdb_script)."""
    return Path(__file__).resolve().with_name("gdb_extension.py")


def gdb_argv(session: dict, elf: str | os.PathLike | None, ex: list[str] | tuple = (),
             batch: bool = False, gdb_args: list[str] | tuple = (),
             gdb: str = "gdb") -> list[str]:
    """gdb's command line for `session` (a sessions.py record): quiet, the extension
    sourced, set to the session's control socket and connected, ELF as the program (its
    symbols), `target remote` to the gdbstub, then `ex` in order, --batch, `gdb_args`."""
    # qemu-system-x86_64's gdbstub sends 64-bit registers, also for a 32-bit guest: the
    # architecture is set before gdb reads the ELF (which would choose i386 otherwise)
    argv = [gdb, "-q", "-iex", "set architecture i386:x86-64"]
    commands = [f"source {extension_path()}",
                f"set p4pmu socket {session['control']}",
                "p4pmu connect",
                f"target remote localhost:{int(session['gdb_port'])}",
                *ex]
    for command in commands:
        argv += ["-ex", command]
    if batch:
        argv.append("--batch")
    if elf is not None:
        argv.append(str(elf))  # the program argument: gdb reads it before the -ex commands
    return argv + list(gdb_args)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("elf", nargs="?", metavar="ELF",
                   help="the guest's ELF with symbols (default: the session's, if any)")
    p.add_argument("--port", type=int, metavar="N",
                   help="the session whose gdbstub listens on port N (needed when several "
                        "run)")
    p.add_argument("-ex", "--ex", dest="ex", action="append", default=[], metavar="CMD",
                   help="a gdb command to run after attaching, repeatable, in order")
    p.add_argument("--batch", action="store_true",
                   help="gdb's --batch: run the commands, then detach and exit (the guest "
                        "goes on)")
    p.add_argument("--dry-run", action="store_true",
                   help="print gdb's command line instead of running it")


def _elf(a: argparse.Namespace, session: dict) -> str | None:
    """The ELF to load: the argument (must exist), else the session's while it exists."""
    if a.elf is not None:
        path = Path(a.elf).expanduser()
        if not path.is_file():
            raise UsageError(f"{a.elf}: no such file (the guest ELF whose symbols gdb "
                             "loads)")
        return str(path.resolve())
    if session.get("elf"):
        if Path(session["elf"]).is_file():
            return session["elf"]
        print(f"{PROG}: note: the session's ELF {session['elf']} is gone: no symbols",
              file=sys.stderr)
    return None


def main(a: argparse.Namespace, gdb_args: list[str]) -> int:
    if a.port is not None and not 0 < a.port < 65536:
        raise UsageError(f"--port {a.port}: not a TCP port (1-65535)")
    session = sessions.find(a.port)
    elf = _elf(a, session)
    gdb = shutil.which("gdb")
    if gdb is None and not a.dry_run:
        raise ProvisionError("gdb not found on PATH: install it (Debian: `sudo apt-get "
                             "install gdb`)")
    argv = gdb_argv(session, elf, a.ex, a.batch, gdb_args, gdb=gdb or "gdb")
    if a.dry_run:
        print(shlex.join(argv))
        return 0
    sys.stdout.flush()
    sys.stderr.flush()
    os.execvp(argv[0], argv)
    return 127  # pragma: no cover (execvp does not return)
