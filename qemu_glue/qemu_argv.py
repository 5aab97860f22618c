"""Composing QEMU's command line for a Pentium 4 model with the PMU plugin.

The composition of every QEMU that p4pmu starts (`p4pmu qemu`, `p4pmu linux`, the demos,
`p4pmu bench`): the QEMU binary, ``-accel tcg`` (unless the caller chose TCG itself), the
model's ``-cpu`` (qemu_glue/cpu.py), ``-plugin`` with its options (docs/architecture.md,
contract 2) and ``-d plugin`` (the plugin prints through QEMU's log: plugin/messages.c), then
the caller's own arguments unchanged but for their own ``-d``, which gets ``plugin`` added.
The caller's arguments are checked for what would contradict the emulation: their own
``-cpu``, another accelerator, more than two threads per core, the p4pmu plugin loaded a
second time.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

from p4pmu.emulator.models import MODELS, CpuModel
from p4pmu.qemu_glue import cpu as cpumod
from p4pmu.qemu_glue.errors import UsageError
from p4pmu.qemu_glue.plugin_lib import is_p4pmu_plugin, site_packages
from p4pmu.qemu_glue.run_options import PLUGIN_OPTS

# options whose value may follow a '=' ("-smp=2"), as QEMU accepts
_EQUALS_OPTIONS = ("smp", "cpu", "accel", "machine", "M", "plugin")


def _opt_value(args: list[str], i: int) -> tuple[str | None, int]:
    """The value of the option at args[i] ('-opt value' or '-opt=value'); (value, next i)."""
    a = args[i]
    if "=" in a and a.startswith("-") and a.split("=", 1)[0].lstrip("-") in _EQUALS_OPTIONS:
        return a.split("=", 1)[1], i + 1
    return (args[i + 1] if i + 1 < len(args) else None), i + 2


def _opt_name(a: str) -> str:
    """'-smp' / '--smp' / '-smp=...' -> 'smp'; non-options -> ''."""
    if not a.startswith("-") or a in ("-", "--"):
        return ""
    return a.lstrip("-").split("=", 1)[0]


def split_qemu_opts(value: str) -> list[str]:
    """Split a QEMU option string at single commas (',,' is an escaped comma)."""
    out, cur, i = [], "", 0
    while i < len(value):
        if value[i] == ",":
            if value[i + 1:i + 2] == ",":
                cur += ","
                i += 2
                continue
            out.append(cur)
            cur = ""
        else:
            cur += value[i]
        i += 1
    out.append(cur)
    return out


@dataclasses.dataclass
class QemuArgsInfo:
    """What of p4pmu's business the caller's QEMU arguments already say."""
    accel: str | None = None  # accelerator the user named (-accel / -machine accel= / -M)
    smp_threads: int | None = None
    has_cpu: bool = False
    plugins: list[str] = dataclasses.field(default_factory=list)  # -plugin libraries


def _plugin_library(value: str) -> str:
    """The library of a ``-plugin`` value: ``[file=]PATH[,arg=...]``."""
    parts = split_qemu_opts(value)
    for p in parts:
        if p.startswith("file="):
            return p[len("file="):]
    return parts[0]


def _scan_value(info: QemuArgsInfo, name: str, value: str) -> None:
    """Note what the value of ``-accel``, ``-machine``, ``-smp`` or ``-plugin`` says."""
    parts = split_qemu_opts(value)
    if name == "accel":
        first = parts[0]
        info.accel = first.split("=", 1)[1] if first.startswith("accel=") else first
    elif name in ("machine", "M"):
        for p in parts:
            if p.startswith("accel="):
                info.accel = p.split("=", 1)[1]
    elif name == "smp":
        for p in parts:
            if p.startswith("threads="):
                try:
                    info.smp_threads = int(p.split("=", 1)[1])
                except ValueError:
                    pass  # QEMU reports it
    elif name == "plugin":
        info.plugins.append(_plugin_library(value))


def scan_qemu_args(qargs: list[str]) -> QemuArgsInfo:
    """What of p4pmu's business the user's QEMU arguments already say."""
    info = QemuArgsInfo()
    i = 0
    while i < len(qargs):
        name = _opt_name(qargs[i])
        if name == "cpu":
            info.has_cpu = True
        elif name == "enable-kvm":
            info.accel = "kvm"
        elif name in ("accel", "machine", "M", "smp", "plugin"):
            v, i = _opt_value(qargs, i)
            if v is not None:
                _scan_value(info, name, v)
            continue
        i += 1
    return info


def refuse_own_plugin(qargs: list[str], no_plugin: bool, plugin_arg: Path | None) -> None:
    """UsageError when QEMU's arguments load the p4pmu plugin themselves: p4pmu adds it (a
    second copy would count every instruction twice), and with --no-plugin the run would not
    be the plain-CPU comparison that option promises."""
    own = [lib for lib in scan_qemu_args(qargs).plugins if is_p4pmu_plugin(lib, plugin_arg)]
    if not own:
        return
    if no_plugin:
        raise UsageError(f"QEMU's arguments load the p4pmu plugin ({own[0]}), but --no-plugin "
                         "runs without it: drop one of the two (with the plugin, let p4pmu "
                         "add it: --plugin PATH, --plugin-opt K=V)")
    raise UsageError(f"QEMU's arguments load the p4pmu plugin ({own[0]}), which p4pmu adds "
                     "itself: remove that -plugin and give its options with --plugin-opt K=V "
                     "(another build of it with --plugin PATH)")


def _threads(info: QemuArgsInfo, popts: dict[str, str]) -> str | None:
    """The plugin's threads= option from -smp threads= and --plugin-opt threads=."""
    threads = popts.get("threads")
    if info.smp_threads is not None:
        if info.smp_threads > 2:
            raise UsageError(f"-smp threads={info.smp_threads}: a Pentium 4 core has at most "
                             "two hardware threads")
        if threads is not None and int(threads) != info.smp_threads:
            raise UsageError(f"--plugin-opt threads={threads} contradicts -smp "
                             f"threads={info.smp_threads} in QEMU's arguments")
        if info.smp_threads == 2:
            threads = "2"
    elif threads == "2":
        raise UsageError("--plugin-opt threads=2 needs sibling threads: add -smp "
                         "...,threads=2 to QEMU's arguments")
    return threads


def plugin_argument(plugin: Path, model: CpuModel, popts: dict[str, str],
                    threads: str | None) -> str:
    """The value of ``-plugin``: the library, model=, stepping=, then the other options in
    the plugin's order (pypath defaults to this environment's site-packages)."""
    parts = [cpumod.qemu_escape(str(plugin)), f"model={model.key}",
             f"stepping={model.stepping}"]
    popts = {k: v for k, v in popts.items() if k not in ("model", "stepping")}
    popts.setdefault("pypath", site_packages())
    if threads is not None:
        popts["threads"] = threads
    parts += [f"{k}={cpumod.qemu_escape(popts[k])}" for k in PLUGIN_OPTS if k in popts]
    return ",".join(parts)


def _with_plugin_log(qargs: list[str]) -> tuple[list[str], list[str]]:
    """QEMU's log must include the plugin's output (plugin/messages.c prints through
    qemu_plugin_outs, which QEMU shows only with ``-d plugin``).  QEMU takes the last ``-d``
    alone, so a caller's ``-d LIST`` gets ``plugin`` appended (``-d help`` is left as it
    is); without one, ``-d plugin`` is added.  Returns (arguments to add, the caller's
    arguments)."""
    last = max((i for i, a in enumerate(qargs[:-1]) if a in ("-d", "--d")), default=None)
    if last is None:
        return ["-d", "plugin"], list(qargs)
    items = qargs[last + 1].split(",")
    if "plugin" in items or qargs[last + 1] in ("help", "?"):
        return [], list(qargs)
    return [], qargs[:last + 1] + [qargs[last + 1] + ",plugin"] + qargs[last + 2:]


def compose_qemu_argv(qemu, model: CpuModel, qargs: list[str], popts: dict[str, str],
                         plugin: Path | None) -> list[str]:
    """The full QEMU argv.  ``plugin`` None: the CPU model without the PMU plugin.
    ``qemu``: a provision.Qemu (or NoQemu, to check the arguments before provisioning)."""
    info = scan_qemu_args(qargs)
    if info.has_cpu:
        raise UsageError("QEMU's arguments contain -cpu, but p4pmu sets the CPU from --model "
                         f"(here: -cpu {cpumod.cpu_option(model)}); remove -cpu and choose "
                         f"the model with --model (known: {', '.join(MODELS)})")
    if info.accel is not None and info.accel.split(":")[0] != "tcg":
        raise UsageError(f"QEMU's arguments select the {info.accel!r} accelerator; the PMU "
                         "emulation needs TCG plugins: use -accel tcg (or leave -accel out)")
    threads = _threads(info, popts)
    cmd = qemu.argv()
    if info.accel is None:
        cmd += ["-accel", "tcg"]
    cmd += cpumod.cpu_args(model)
    if plugin is not None:
        cmd += ["-plugin", plugin_argument(plugin, model, popts, threads)]
        log, qargs = _with_plugin_log(qargs)
        cmd += log
    return cmd + list(qargs)


class NoQemu:
    """Stands in for a provision.Qemu to check a composition before QEMU is provisioned."""

    def argv(self, *args: str) -> list[str]:
        return list(args)
