"""The ``p4pmu`` command line: argument parsing and dispatch to the command modules.

Commands and the modules that do them: ``qemu`` (qemu_cmd.py), ``linux`` (linux.py),
``demo`` (demo.py; ``--replay``: demo_replay.py), ``bench`` (bench.py), ``events``
(events_cmd.py), ``trace`` (trace_cmd.py), ``lint`` (lint_cmd.py), ``fidelity``
(fidelity.py), ``gdb`` (gdb_cmd.py),
``info`` (info_cmd.py), ``setup`` (setup_cmd.py), ``module`` (module_cmd.py).
Every QEMU they start is a machine.P4Machine.

Errors: a UsageError (errors.py) found after parsing is reported like argparse's, exit
status 2; a ProvisionError (QEMU, the plugin or an image could not be had) exit status 1.
It sits at the top: no module imports it; it imports a command's module when it builds that
command's parser or runs it.  What commands share is in run_options.py.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys

from p4pmu.qemu_glue.errors import UsageError
from p4pmu.qemu_glue.provision import ProvisionError

PROG = "p4pmu"

# --------------------------------------------------------------------------------------------
# The parser


def _add_qemu(sub, fmt, help_text: str) -> None:
    """The parser of `p4pmu qemu` (qemu_glue/qemu_cmd.py: its help texts and arguments)."""
    from p4pmu.qemu_glue import qemu_cmd
    q = sub.add_parser("qemu", formatter_class=fmt,
                       help=help_text,
                       usage=qemu_cmd.USAGE, description=qemu_cmd.DESCRIPTION,
                       epilog=qemu_cmd.epilog())
    qemu_cmd.add_arguments(q)
    q.set_defaults(func=_cmd_qemu)


def _add_info(sub, fmt, help_text: str) -> None:
    """The parser of `p4pmu info`."""
    i = sub.add_parser("info", formatter_class=fmt,
                       help=help_text,
                       description="Show the QEMU p4pmu would use (without downloading it), "
                                   "the plugin and whether it is built, the gdb extension's "
                                   "file, and the CPU models.")
    i.add_argument("--json", action="store_true",
                   help="machine-readable output (keys: qemu, qemu_version, plugin, "
                        "plugin_built, gdb_script, models, ...)")
    i.set_defaults(func=_command("info_cmd"))


def _add_setup(sub, fmt, help_text: str) -> None:
    """The parser of `p4pmu setup`."""
    s = sub.add_parser("setup", formatter_class=fmt,
                       help=help_text,
                       description="Provision QEMU 11.1 (a system one if suitable, else "
                                   "Debian's, unpacked into ~/.cache/p4pmu), build the PMU "
                                   "plugin, the Linux guest's workloads (amd64 and i386) and, "
                                   "in a source checkout, the test guests. Idempotent: a "
                                   "second run only checks.")
    s.add_argument("--skip-plugin", action="store_true", help="do not build the plugin")
    s.add_argument("--skip-guests", action="store_true",
                   help="do not build the test guests and the workloads")
    s.set_defaults(func=_command("setup_cmd"))


def _add_demo(sub, fmt, help_text: str) -> None:
    """The parser of `p4pmu demo`."""
    d = sub.add_parser("demo", formatter_class=fmt,
                       help=help_text,
                       description="Boot the Linux guest (by default Debian 11's 5.10 kernel) "
                                   "on the "
                                   "emulated Pentium 4 PMU and show the kernel's PMU detection, "
                                   "`perf stat` of a bundled workload next to the model's exact "
                                   "counts, and a `perf record` profile of a workload with known "
                                   "hot spots (about 15 s). --replay: the bare-metal demo "
                                   "that replays the P4 driver's MSR traffic.")
    from p4pmu.qemu_glue import demo
    demo.add_arguments(d)
    d.set_defaults(func=_command("demo"))


def _add_bench(sub, fmt, help_text: str) -> None:
    """The parser of `p4pmu bench`."""
    b = sub.add_parser("bench", formatter_class=fmt,
                       help=help_text,
                       description="Run a CPU-bound test guest under plain QEMU and under the "
                                   "plugin (nothing enabled, 18 counters, a PMI every 10,000 "
                                   "instructions) and time intercepted MSR accesses; prints "
                                   "CPU times and ratios. Needs the test guests of a source "
                                   "checkout.")
    from p4pmu.qemu_glue import bench as _bench
    _bench.add_arguments(b)
    b.set_defaults(func=_command("bench"))


# commands whose module has DESCRIPTION, EPILOG, add_arguments and main (name, module)
_SIMPLE_MODULES = {"events": "events_cmd", "trace": "trace_cmd", "lint": "lint_cmd",
                   "fidelity": "fidelity", "module": "module_cmd"}


def _add_simple(sub, fmt, help_text: str, name: str) -> None:
    """The parser of `p4pmu NAME` from qemu_glue/MODULE.py (its help texts and arguments)."""
    module = _SIMPLE_MODULES[name]
    mod = importlib.import_module(f"p4pmu.qemu_glue.{module}")
    p = sub.add_parser(name, formatter_class=fmt, help=help_text,
                       description=mod.DESCRIPTION, epilog=mod.EPILOG)
    mod.add_arguments(p)
    p.set_defaults(func=_command(module))


def _add_gdb(sub, fmt, help_text: str) -> None:
    """The parser of `p4pmu gdb` (qemu_glue/gdb_cmd.py: its help texts and arguments)."""
    from p4pmu.qemu_glue import gdb_cmd
    g = sub.add_parser("gdb", formatter_class=fmt,
                       help=help_text,
                       usage="p4pmu gdb [ELF] [--port N] [--batch] [-ex CMD]... "
                             "[-- GDB_ARGS...]",
                       description=gdb_cmd.DESCRIPTION, epilog=gdb_cmd.EPILOG)
    gdb_cmd.add_arguments(g)
    g.set_defaults(func=_cmd_gdb)


def _add_linux(sub, fmt, help_text: str) -> None:
    """The parser of `p4pmu linux`."""
    from p4pmu.qemu_glue import linux as linux_mod  # p4pmu linux (qemu_glue/linux.py)
    lx = sub.add_parser(
        "linux", formatter_class=fmt,
        help=help_text,
        usage="p4pmu linux [OPTIONS] [-- COMMAND...]",
        description="Boot a Linux guest (Debian 11's 5.10 or 12's 6.1 kernel, busybox, perf) "
                    "on an emulated "
                    "Pentium 4, run COMMAND in it with /bin/sh -c, print its stdout and stderr "
                    "here and exit with its status. The image is built from Debian's archive "
                    "into ~/.cache/p4pmu on first use.",
        epilog=linux_mod.usage_epilog())
    linux_mod.add_arguments(lx)
    lx.set_defaults(func=_cmd_linux)


def _simple(name: str):
    return lambda sub, fmt, help_text: _add_simple(sub, fmt, help_text, name)


# Every command: its name, its one-line help, the function that builds its parser (which
# imports the command's module).
COMMANDS = (
    ("qemu", "run qemu-system-x86_64 with the emulated PMU", _add_qemu),
    ("info", "show QEMU, the plugin and the known CPU models", _add_info),
    ("setup", "provision QEMU, build the plugin, the test guests and workloads", _add_setup),
    ("demo", "Linux perf on the emulated PMU: detection, perf stat, perf record", _add_demo),
    ("bench", "measure the plugin's cost on a CPU-bound guest (source checkout)", _add_bench),
    ("events", "list NetBurst events; encode event:MASK:...:u for perf", _simple("events")),
    ("trace", "print a PMU access trace (--plugin-opt trace=FILE), decoded", _simple("trace")),
    ("lint", "the programming checker over a PMU access trace", _simple("lint")),
    ("fidelity", "compare p4pmu's counts with published Pentium 4 silicon measurements "
                 "(docs/fidelity.md)", _simple("fidelity")),
    ("module", "build an out-of-tree kernel module for the Linux guest's kernel",
     _simple("module")),
    ("gdb", "gdb on a running `p4pmu qemu --gdb` / `p4pmu linux --gdb`, with the PMU "
            "extension", _add_gdb),
    ("linux", "run a command in a Linux guest (Debian's 5.10 or 6.1 kernel, perf) on the "
              "emulated PMU", _add_linux),
)
COMMAND_NAMES = tuple(name for name, _, _ in COMMANDS)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole parser; with `only`, that command's parser in full and the others by name
    and help line only (so that `p4pmu events` does not import the modules of `linux` or
    `qemu`: the top-level help and a command's own parsing need no more)."""
    fmt = argparse.RawDescriptionHelpFormatter
    ap = argparse.ArgumentParser(
        prog=PROG, formatter_class=fmt,
        description="Emulated Intel Pentium 4 (NetBurst) performance-monitoring unit for x86 "
                    "guests under QEMU TCG.",
        epilog="Run `p4pmu COMMAND --help` for a command's options.\n"
               "First time: `p4pmu setup` (downloads QEMU 11.1 into ~/.cache/p4pmu, builds "
               "the plugin).")
    try:
        from importlib.metadata import version as _v
        ver = _v("p4pmu")
    except Exception:
        ver = "unknown"
    ap.add_argument("--version", action="version", version=f"%(prog)s {ver}")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, help_text, add in COMMANDS:
        if only is None or name == only:
            add(sub, fmt, help_text)
        else:
            sub.add_parser(name, help=help_text)
    return ap


def _command_word(argv: list[str]) -> str:
    """The command `argv` names (its first word that is not an option), or "" when none
    does (top-level help, --version, a typing error: argparse's messages then)."""
    word = next((w for w in argv if not w.startswith("-")), "")
    return word if word in COMMAND_NAMES else ""


def _command(module: str):
    """The handler of a command whose module has main(args)."""
    def run(a: argparse.Namespace, _rest: list[str]) -> int:
        mod = importlib.import_module(f"p4pmu.qemu_glue.{module}")
        return int(mod.main(a) or 0)
    return run


def _cmd_qemu(a: argparse.Namespace, qemu_args: list[str]) -> int:
    from p4pmu.qemu_glue import qemu_cmd
    return qemu_cmd.main(a, qemu_args)


def _cmd_linux(a: argparse.Namespace, command_words: list[str]) -> int:
    from p4pmu.qemu_glue import linux
    return linux.main(a, command_words)


def _cmd_gdb(a: argparse.Namespace, gdb_args: list[str]) -> int:
    from p4pmu.qemu_glue import gdb_cmd
    return gdb_cmd.main(a, gdb_args)


def _split_at_dashes(argv: list[str]) -> tuple[list[str], list[str]]:
    """`p4pmu qemu [opts] -- QEMU_ARGS` (and linux, demo, gdb): everything after the first
    `--` is the command's."""
    if "--" in argv:
        k = argv.index("--")
        return argv[:k], argv[k + 1:]
    return argv, []


def main(argv: list[str] | None = None) -> int:
    argv, rest = _split_at_dashes(list(sys.argv[1:] if argv is None else argv))
    ap = build_parser(only=_command_word(argv))
    a, extra = ap.parse_known_args(argv)
    sp = ap._subparsers._group_actions[0].choices[a.command]  # type: ignore[union-attr]
    if extra:
        hint = {"qemu": "; QEMU's own arguments go after `--`",
                "linux": "; the guest's COMMAND goes after `--`",
                "gdb": "; gdb's own arguments go after `--`"}.get(a.command, "")
        sp.error("unrecognized arguments: " + " ".join(extra) + hint)
    if a.command not in ("qemu", "linux", "demo", "gdb") and rest:
        sp.error("unrecognized arguments after `--`: " + " ".join(rest))
    try:
        return a.func(a, rest)
    except UsageError as e:
        sp.error(str(e))  # exits 2
    except ProvisionError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `p4pmu info | head`
        with contextlib.suppress(OSError):
            sys.stdout = open(os.devnull, "w")
        return 0
    return 0  # pragma: no cover


if __name__ == "__main__":
    # `python -m p4pmu.qemu_glue.cli`: run the imported module, not a second copy named
    # __main__ (whose UsageError would not be the command modules')
    from p4pmu.qemu_glue.cli import main as _main
    sys.exit(_main())
