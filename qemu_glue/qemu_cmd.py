"""`p4pmu qemu`: run qemu-system-x86_64 with the emulated PMU and the caller's arguments.

p4pmu adds ``-accel tcg`` (unless given), the model's ``-cpu`` and ``-plugin``
(qemu_command.py); QEMU runs in p4pmu's process group, gets the signals p4pmu gets, and its
exit status is p4pmu's, 128 + N when a stop signal N ended it (machine.P4Machine.run_forwarding).
"""
from __future__ import annotations

import argparse
import contextlib
import shlex
import sys
from pathlib import Path

from p4pmu.qemu_glue.cli import apply_timing, parse_plugin_opts, resolve_model
from p4pmu.qemu_glue.errors import UsageError
from p4pmu.qemu_glue import gdb_launch
from p4pmu.qemu_glue.gdb_launch import GdbSetup
from p4pmu.qemu_glue.machine import P4Machine
from p4pmu.qemu_glue.plugin_lib import plugin_file
from p4pmu.qemu_glue.provision import ProvisionError, ensure_qemu
from p4pmu.qemu_glue.qemu_command import NoQemu, compose_qemu_command, refuse_own_plugin


def _plugin(a: argparse.Namespace) -> Path | None:
    """The plugin library to load: None with --no-plugin, --plugin's, else the built one."""
    if a.no_plugin:
        return None
    if a.plugin:
        plugin = Path(a.plugin).expanduser().absolute()
        if not plugin.is_file():
            raise ProvisionError(f"--plugin {a.plugin}: no such file")
        return plugin
    return plugin_file(build=not a.dry_run, must_exist=not a.dry_run)


def main(a: argparse.Namespace, qargs: list[str]) -> int:
    popts = parse_plugin_opts(a.plugin_opt or [])
    apply_timing(a.timing, popts)
    model = resolve_model(a.model, a.stepping, popts)
    if a.no_plugin and (a.plugin or a.plugin_opt):
        raise UsageError("--no-plugin cannot go with --plugin or --plugin-opt")
    plugin_arg = Path(a.plugin).expanduser().absolute() if a.plugin else None
    refuse_own_plugin(qargs, a.no_plugin, plugin_arg)
    gdb = _gdb_setup(a, qargs, popts)
    with contextlib.ExitStack() as stack:
        if gdb is not None:
            stack.enter_context(gdb)
            qargs = [*qargs, *gdb.qemu_args]
            popts = {**popts, **gdb.plugin_opts}
        # check what can be checked before provisioning anything
        compose_qemu_command(NoQemu(), model, qargs, popts, None)
        qemu = ensure_qemu(progress=True)
        with P4Machine(qemu, model, qargs, plugin=_plugin(a), plugin_opts=popts,
                       stdin=None) as machine:
            if a.dry_run or a.verbose:
                print(shlex.join(machine.command), file=sys.stdout if a.dry_run else sys.stderr,
                      flush=True)
            if a.dry_run:
                return 0
            return machine.run_forwarding(started=gdb.started if gdb is not None else None)


def _gdb_setup(a: argparse.Namespace, qargs: list[str], popts: dict) -> GdbSetup | None:
    """--gdb[=PORT]: the session's directory, arguments and options (qemu_glue/gdb_launch.py),
    after the checks that need nothing made."""
    port = getattr(a, "gdb", None)
    gdb_launch.check_request(port, a.no_plugin, popts, qargs)
    return None if port is None else GdbSetup(port, "qemu", gdb_launch.kernel_elf(qargs))
