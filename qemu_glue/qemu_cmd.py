"""`p4pmu qemu`: run qemu-system-x86_64 with the emulated PMU and the caller's arguments.

p4pmu adds ``-accel tcg`` (unless given), the model's ``-cpu`` and ``-plugin``
(qemu_argv.py); QEMU runs in p4pmu's process group, gets the signals p4pmu gets, and its
exit status is p4pmu's, 128 + N when a stop signal N ended it (machine.P4Machine.run_forwarding).
Exit status 2: the command line was refused, by p4pmu before QEMU started or by the plugin,
which then did not load (QEMU's own status, 1, is also what a guest's isa-debug-exit 0 gives).
"""
from __future__ import annotations

import argparse
import contextlib
import shlex
import sys
from pathlib import Path

from p4pmu.emulator.models import DEFAULT_MODEL, MODELS
from p4pmu.plugin import LOADED_FILE_ENV
from p4pmu.qemu_glue import gdb_launch
from p4pmu.qemu_glue.errors import UsageError
from p4pmu.qemu_glue.gdb_launch import GdbSetup
from p4pmu.qemu_glue.machine import P4Machine
from p4pmu.qemu_glue.plugin_lib import plugin_file
from p4pmu.qemu_glue.provision import ensure_qemu
from p4pmu.qemu_glue.qemu_argv import NoQemu, compose_qemu_argv, refuse_own_plugin
from p4pmu.qemu_glue.run_options import (
    add_timing_argument,
    apply_timing,
    parse_plugin_opts,
    plugin_options_help,
    resolve_model,
)

USAGE = "p4pmu qemu [OPTIONS] -- QEMU_ARGS..."
DESCRIPTION = ("Run qemu-system-x86_64 (TCG) with the p4pmu plugin and the CPU of a Pentium 4 "
               "model. QEMU's own arguments come after `--` and are passed unchanged; p4pmu "
               "adds -accel tcg (unless given), -cpu (never give your own) and -plugin. Exits "
               "with QEMU's exit status, 128 + N when SIGINT, SIGTERM or SIGHUP (signal N) "
               "stopped QEMU, or 2 when p4pmu or the plugin refused the command line.")
EXIT_REFUSED = 2


def epilog() -> str:
    models = "; ".join(f"{m.key} {m.codename}" for m in MODELS.values())
    return ("models: " + models + "\n\n"
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
            + plugin_options_help())


def add_arguments(q: argparse.ArgumentParser) -> None:
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
    gdb_launch.add_argument(q)  # (--gdb: the same for p4pmu linux)
    q.add_argument("--dry-run", action="store_true",
                   help="print the QEMU command line instead of running it")
    q.add_argument("-v", "--verbose", action="store_true",
                   help="print the QEMU command line on stderr before running it")


def _plugin(a: argparse.Namespace) -> Path | None:
    """The plugin library to load: None with --no-plugin, --plugin's, else the built one."""
    if a.no_plugin:
        return None
    if a.plugin:
        plugin = Path(a.plugin).expanduser().absolute()
        if not plugin.is_file():
            raise UsageError(f"--plugin {a.plugin}: no such file")
        return plugin
    return plugin_file(build=not a.dry_run, must_exist=not a.dry_run)


def check_request(a: argparse.Namespace, qargs: list[str]) -> tuple[dict, object]:
    """Every check that needs nothing provisioned: (plugin options, CPU model)."""
    if not qargs:
        raise UsageError("no QEMU arguments: give them after `--`, e.g. p4pmu qemu -- "
                         "-machine pc -display none -serial stdio -kernel guest.elf "
                         "(without any, QEMU would boot nothing and wait on a VNC display)")
    popts = parse_plugin_opts(a.plugin_opt or [])
    apply_timing(a.timing, popts)
    model = resolve_model(a.model, a.stepping, popts)
    if a.no_plugin and (a.plugin or a.plugin_opt):
        raise UsageError("--no-plugin cannot go with --plugin or --plugin-opt")
    plugin_arg = Path(a.plugin).expanduser().absolute() if a.plugin else None
    if plugin_arg is not None and not plugin_arg.is_file():
        raise UsageError(f"--plugin {a.plugin}: no such file")
    refuse_own_plugin(qargs, a.no_plugin, plugin_arg)
    return popts, model


def main(a: argparse.Namespace, qargs: list[str]) -> int:
    popts, model = check_request(a, qargs)
    gdb = _gdb_setup(a, qargs, popts)
    with contextlib.ExitStack() as stack:
        if gdb is not None:
            stack.enter_context(gdb)
            qargs = [*qargs, *gdb.qemu_args]
            popts = {**popts, **gdb.plugin_opts}
        compose_qemu_argv(NoQemu(), model, qargs, popts, None)  # checks, before provisioning
        qemu = ensure_qemu(progress=True)
        plugin = _plugin(a)
        with P4Machine(qemu, model, qargs, plugin=plugin, plugin_opts=popts,
                       stdin=None) as machine:
            # an in-memory file the plugin writes "loaded" into once it is installed
            loaded = machine.add_memfd("loaded") if plugin is not None and not a.dry_run \
                else None
            if loaded is not None:
                machine.env = {LOADED_FILE_ENV: loaded}
            if a.dry_run or a.verbose:
                print(shlex.join(machine.command), file=sys.stdout if a.dry_run else sys.stderr,
                      flush=True)
            if a.dry_run:
                return 0
            rc = machine.run_forwarding(started=gdb.started if gdb is not None else None)
            if loaded is not None and rc != 0 and not machine.memfd_bytes(loaded):
                print("p4pmu: error: the plugin did not load (QEMU's message above says why); "
                      f"exit status {EXIT_REFUSED}", file=sys.stderr)
                return EXIT_REFUSED
            return rc


def _gdb_setup(a: argparse.Namespace, qargs: list[str], popts: dict) -> GdbSetup | None:
    """--gdb[=PORT]: the session's directory, arguments and options (qemu_glue/gdb_launch.py),
    after the checks that need nothing made."""
    port = getattr(a, "gdb", None)
    gdb_launch.check_request(port, a.no_plugin, popts, qargs)
    return None if port is None else GdbSetup(port, "qemu", gdb_launch.kernel_elf(qargs))
