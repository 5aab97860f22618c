"""The ``p4pmu`` command line: argument parsing and dispatch to the command modules.

Commands and the modules that do them: ``qemu`` (qemu_cmd.py), ``linux`` (linux.py),
``demo`` (demo.py; ``--replay``: demo_replay.py), ``bench`` (bench.py), ``events``
(events_cmd.py), ``trace`` (trace_cmd.py), ``lint`` (lint_cmd.py), ``fidelity``
(fidelity.py), ``gdb`` (gdb_cmd.py),
``info`` (info_cmd.py), ``setup`` (setup_cmd.py).
Every QEMU they start is a machine.P4Machine.  Here also: the checks of --plugin-opt and
--model/--stepping that every command shares (one message for a bad model, whichever command).

Errors: a UsageError (errors.py) found after parsing is reported like argparse's, exit
status 2; a ProvisionError (QEMU, the plugin or an image could not be had) exit status 1.
The command modules import this one; it imports them only when dispatching.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
from pathlib import Path

from p4pmu.emulator.models import DEFAULT_MODEL, MODELS, CpuModel, get_model
from p4pmu.qemu_glue.errors import UsageError
from p4pmu.qemu_glue.provision import ProvisionError

PROG = "p4pmu"

# --------------------------------------------------------------------------------------------
# Plugin options and the CPU model: the checks every command shares

def _plugin_opt_names() -> tuple[str, ...]:
    """The plugin's options, in the order of their table (p4pmu.plugin.options)."""
    from p4pmu.plugin import options
    return options.NAMES


PLUGIN_OPTS = _plugin_opt_names()


def _plugin_options_help() -> str:
    from p4pmu.plugin import options
    return options.help_text()


CliError = UsageError  # parse_plugin_opts' name for it


def parse_plugin_opts(items: list[str]) -> dict[str, str]:
    """Check --plugin-opt K=V items against the plugin's option table (p4pmu.plugin.options,
    docs/options.md); returns each value in its one spelling (booleans on/off, model keys,
    absolute paths).  Raises CliError."""
    from p4pmu.plugin import options
    opts: dict[str, str] = {}
    for item in items:
        if "=" not in item:
            raise CliError(f"--plugin-opt {item!r}: expected KEY=VALUE "
                           f"(keys: {', '.join(PLUGIN_OPTS)})")
        k, v = item.split("=", 1)
        k = k.strip()
        if k not in PLUGIN_OPTS:
            raise CliError(f"--plugin-opt {item!r}: unknown key {k!r} "
                           f"(known: {', '.join(PLUGIN_OPTS)})")
        if k in opts and opts[k] != v:
            raise CliError(f"--plugin-opt {k} given twice ({opts[k]!r} and {v!r})")
        if k == "model":  # the short forms of --model (0f_04, 0F04, 4) too
            try:
                v = get_model(v).key
            except KeyError as e:
                raise CliError(f"--plugin-opt model={v}: {e.args[0]}") from None
        try:
            v = options.canonical(k, options.parse_one(k, v))
        except options.OptionError as e:
            raise CliError(f"--plugin-opt {item}: {e}") from None
        if k == "log":
            p = Path(v).expanduser().absolute()
            if not p.parent.is_dir():
                raise CliError(f"--plugin-opt log={v}: folder {p.parent} does not exist")
            if p.is_dir():
                raise CliError(f"--plugin-opt log={v}: is a folder, expected a file name")
            v = str(p)
        elif k == "pypath":
            dirs = []
            for d in v.split(":"):
                p = Path(d).expanduser().absolute()
                if not d or not p.is_dir():
                    raise CliError(f"--plugin-opt pypath={v}: {p} is not a folder")
                dirs.append(str(p))
            v = ":".join(dirs)
        opts[k] = v
    return opts


def _stepping(v: str | int, what: str) -> int:
    try:
        n = int(str(v), 10) if str(v).strip().isdigit() else int(str(v), 0)
    except ValueError:
        raise CliError(f"{what}: not a number") from None
    if not 0 <= n <= 15:
        raise CliError(f"{what}: stepping must be 0-15")
    return n


def model_from_arg(key: str | None, option: str = "--model") -> CpuModel:
    """The CpuModel of a --model value (None: the default); the one UsageError every command
    gives for an unknown model."""
    try:
        return get_model(key)
    except KeyError as e:
        raise UsageError(f"{option}: {e.args[0]}") from None


def resolve_model(model_arg: str | None, stepping_arg: str | int | None,
                  popts: dict[str, str]) -> CpuModel:
    """The CpuModel from --model/--stepping and the model=/stepping= plugin options."""
    m = model_from_arg(model_arg)
    if "model" in popts:
        if model_arg is not None and m.key != popts["model"]:
            raise CliError(f"--model {model_arg} and --plugin-opt model={popts['model']} "
                           "disagree")
        m = model_from_arg(popts["model"])
    st = None
    if stepping_arg is not None:
        st = _stepping(stepping_arg, f"--stepping {stepping_arg}")
    if "stepping" in popts:
        if st is not None and st != int(popts["stepping"]):
            raise CliError(f"--stepping {st} and --plugin-opt stepping={popts['stepping']} "
                           "disagree")
        st = int(popts["stepping"])
    return m.with_stepping(st) if st is not None else m


TIMINGS = ("core", "memory")
TIMING_HELP = ("the clocks: core (default: pipeline, instruction latencies, every load an L1 "
               "hit) or memory (also L2 and memory latencies and page walks from the memory "
               "model, fed while any counter counts: slower); docs/timing.md. The same as "
               "--plugin-opt timing=")


def add_timing_argument(p) -> None:
    """--timing core|memory (commands that run the plugin)."""
    p.add_argument("--timing", choices=TIMINGS, default=None, help=TIMING_HELP)


def apply_timing(timing: str | None, popts: dict[str, str]) -> str:
    """Put --timing into the plugin options (a CliError if --plugin-opt timing= says
    otherwise); returns the timing in effect."""
    if timing is not None:
        if popts.get("timing", timing) != timing:
            raise CliError(f"--timing {timing} and --plugin-opt timing={popts['timing']} "
                           "disagree")
        popts["timing"] = timing
    return popts.get("timing", "core")


# --------------------------------------------------------------------------------------------
# The parser


def _models_help() -> str:
    return "; ".join(f"{m.key} {m.codename}" for m in MODELS.values())


def _add_qemu(sub, fmt) -> None:
    """The parser of `p4pmu qemu`."""
    q = sub.add_parser(
        "qemu", formatter_class=fmt, help="run qemu-system-x86_64 with the emulated PMU",
        usage="p4pmu qemu [OPTIONS] -- QEMU_ARGS...",
        description="Run qemu-system-x86_64 (TCG) with the p4pmu plugin and the CPU of a "
                    "Pentium 4 model. QEMU's own arguments come after `--` and are passed "
                    "unchanged; p4pmu adds -accel tcg (unless given), -cpu (never give your "
                    "own) and -plugin. Exits with QEMU's exit status, or 128 + N when SIGINT, "
                    "SIGTERM or SIGHUP (signal N) stopped QEMU.",
        epilog="models: " + _models_help() + "\n\n"
               "examples:\n"
               "  p4pmu qemu --model 0F_02 -- -machine pc -m 256 -nographic -kernel vmlinux\n"
               "  p4pmu qemu --plugin-opt log=pmu.log --plugin-opt strict=on -- "
               "-smp 2,threads=2 ...\n"
               "  p4pmu qemu --dry-run -- -display none      (print the command line)\n"
               "  p4pmu qemu --gdb -- -kernel guest.elf ...  (then, elsewhere: p4pmu gdb)\n\n"
               "QEMU_ARGS must not load the p4pmu plugin with -plugin (it would run twice and "
               "count\neverything twice): p4pmu adds it; choose a build with --plugin PATH, "
               "options with\n--plugin-opt. With --no-plugin such a -plugin is refused too "
               "(it is the run without\nthe plugin). Other QEMU plugins may be given.\n\n"
               "plugin options (--plugin-opt NAME=VALUE; docs/options.md):\n"
               + _plugin_options_help())
    q.add_argument("--model", metavar="0F_MM",
                   help=f"CPU model (default {DEFAULT_MODEL}); also '4', '0f04'")
    q.add_argument("--stepping", metavar="N", help="CPUID stepping 0-15 (default: the model's)")
    add_timing_argument(q)
    q.add_argument("--plugin-opt", metavar="K=V", action="append",
                   help="plugin option, repeatable (the list below; threads=2 is set "
                        "automatically for -smp ...,threads=2; pypath defaults to this "
                        "environment's site-packages)")
    q.add_argument("--plugin", metavar="PATH",
                   help="use this plugin library instead of the built one")
    q.add_argument("--no-plugin", action="store_true",
                   help="run the model's CPU without the PMU plugin (for comparison)")
    from p4pmu.qemu_glue import gdb_launch  # (--gdb: the same for p4pmu linux)
    gdb_launch.add_argument(q)
    q.add_argument("--dry-run", action="store_true",
                   help="print the QEMU command line instead of running it")
    q.add_argument("-v", "--verbose", action="store_true",
                   help="print the QEMU command line on stderr before running it")
    q.set_defaults(func=_cmd_qemu)


def _add_info(sub, fmt) -> None:
    """The parser of `p4pmu info`."""
    i = sub.add_parser("info", formatter_class=fmt,
                       help="show QEMU, the plugin and the known CPU models",
                       description="Show the QEMU p4pmu would use (without downloading it), "
                                   "the plugin and whether it is built, the gdb extension's "
                                   "file, and the CPU models.")
    i.add_argument("--json", action="store_true",
                   help="machine-readable output (keys: qemu, qemu_version, plugin, "
                        "plugin_built, gdb_script, models, ...)")
    i.set_defaults(func=_command("info_cmd"))


def _add_setup(sub, fmt) -> None:
    """The parser of `p4pmu setup`."""
    s = sub.add_parser("setup", formatter_class=fmt,
                       help="provision QEMU, build the plugin, the test guests and workloads",
                       description="Provision QEMU 11.1 (a system one if suitable, else "
                                   "Debian's, unpacked into ~/.cache/p4pmu), build the PMU "
                                   "plugin, the Linux guest's workloads (amd64 and i386) and, "
                                   "in a source checkout, the test guests. Idempotent: a "
                                   "second run only checks.")
    s.add_argument("--skip-plugin", action="store_true", help="do not build the plugin")
    s.add_argument("--skip-guests", action="store_true",
                   help="do not build the test guests and the workloads")
    s.set_defaults(func=_command("setup_cmd"))


def _add_demo(sub, fmt) -> None:
    """The parser of `p4pmu demo`."""
    d = sub.add_parser("demo", formatter_class=fmt,
                       help="Linux perf on the emulated PMU: detection, perf stat, perf record",
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


def _add_bench(sub, fmt) -> None:
    """The parser of `p4pmu bench`."""
    b = sub.add_parser("bench", formatter_class=fmt,
                       help="measure the plugin's cost on a CPU-bound guest (source checkout)",
                       description="Run a CPU-bound test guest under plain QEMU and under the "
                                   "plugin (nothing enabled, 18 counters, a PMI every 10,000 "
                                   "instructions) and time intercepted MSR accesses; prints "
                                   "CPU times and ratios. Needs the test guests of a source "
                                   "checkout.")
    from p4pmu.qemu_glue import bench as _bench
    _bench.add_arguments(b)
    b.set_defaults(func=_command("bench"))


# commands whose module has DESCRIPTION, EPILOG, add_arguments and main (name, module, help)
_SIMPLE_COMMANDS = (
    ("events", "events_cmd", "list NetBurst events; encode event:MASK:...:u for perf"),
    ("trace", "trace_cmd", "print a PMU access trace (--plugin-opt trace=FILE), decoded"),
    ("lint", "lint_cmd", "the programming checker over a PMU access trace"),
    ("fidelity", "fidelity", "compare p4pmu's counts with published Pentium 4 silicon "
                             "measurements (docs/fidelity.md)"),
    ("module", "module_cmd", "build an out-of-tree kernel module for the Linux guest's kernel"),
)


def _add_simple(sub, fmt, name: str, module: str, help_text: str) -> None:
    """The parser of `p4pmu NAME` from qemu_glue/MODULE.py (its help texts and arguments)."""
    mod = importlib.import_module(f"p4pmu.qemu_glue.{module}")
    p = sub.add_parser(name, formatter_class=fmt, help=help_text,
                       description=mod.DESCRIPTION, epilog=mod.EPILOG)
    mod.add_arguments(p)
    p.set_defaults(func=_command(module))


def _add_gdb(sub, fmt) -> None:
    """The parser of `p4pmu gdb` (qemu_glue/gdb_cmd.py: its help texts and arguments)."""
    from p4pmu.qemu_glue import gdb_cmd
    g = sub.add_parser("gdb", formatter_class=fmt,
                       help="gdb on a running `p4pmu qemu --gdb` / `p4pmu linux --gdb`, "
                            "with the PMU extension",
                       usage="p4pmu gdb [ELF] [--port N] [--batch] [-ex CMD]... "
                             "[-- GDB_ARGS...]",
                       description=gdb_cmd.DESCRIPTION, epilog=gdb_cmd.EPILOG)
    gdb_cmd.add_arguments(g)
    g.set_defaults(func=_cmd_gdb)


def _add_linux(sub, fmt) -> None:
    """The parser of `p4pmu linux`."""
    from p4pmu.qemu_glue import linux as linux_mod  # p4pmu linux (qemu_glue/linux.py)
    lx = sub.add_parser(
        "linux", formatter_class=fmt,
        help="run a command in a Linux guest (Debian's 5.10 or 6.1 kernel, perf) on the "
             "emulated PMU",
        usage="p4pmu linux [OPTIONS] [-- COMMAND...]",
        description="Boot a Linux guest (Debian 11's 5.10 or 12's 6.1 kernel, busybox, perf) "
                    "on an emulated "
                    "Pentium 4, run COMMAND in it with /bin/sh -c, print its stdout and stderr "
                    "here and exit with its status. The image is built from Debian's archive "
                    "into ~/.cache/p4pmu on first use.",
        epilog=linux_mod.usage_epilog())
    linux_mod.add_arguments(lx)
    lx.set_defaults(func=_cmd_linux)


def build_parser() -> argparse.ArgumentParser:
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
    except Exception:  # noqa: BLE001
        ver = "unknown"
    ap.add_argument("--version", action="version", version=f"%(prog)s {ver}")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    _add_qemu(sub, fmt)
    _add_info(sub, fmt)
    _add_setup(sub, fmt)
    _add_demo(sub, fmt)
    _add_bench(sub, fmt)
    for name, module, help_text in _SIMPLE_COMMANDS:
        _add_simple(sub, fmt, name, module, help_text)
    _add_gdb(sub, fmt)
    _add_linux(sub, fmt)
    return ap


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
    ap = build_parser()
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
