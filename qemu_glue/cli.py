"""The ``p4pmu`` command: run QEMU with the emulated Pentium 4 PMU, show what is installed,
set everything up, run the demo."""
from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import os
import shlex
import signal
import subprocess
import sys
import sysconfig
from pathlib import Path

from p4pmu.emulator.models import DEFAULT_MODEL, MODELS, CpuModel, get_model
from p4pmu.qemu_glue import cpu as cpumod
from p4pmu.qemu_glue.provision import ProvisionError, ensure_qemu, find_qemu

PROG = "p4pmu"

# Plugin options (docs/architecture.md, contract 2).  The bridge's own list and parser are
# the authority when present (they may know more, e.g. verbose=on|off).
CONTRACT_PLUGIN_OPTS = ("model", "stepping", "strict", "log", "threads", "pypath")


def _bridge():
    try:
        return importlib.import_module("p4pmu.plugin.bridge")
    except ImportError:
        return None


def _plugin_opt_names() -> tuple[str, ...]:
    b = _bridge()
    names = tuple(getattr(b, "OPTION_NAMES", ()) or ())
    return CONTRACT_PLUGIN_OPTS + tuple(n for n in names if n not in CONTRACT_PLUGIN_OPTS)


PLUGIN_OPTS = _plugin_opt_names()
_ONOFF = {"on": "on", "off": "off", "true": "on", "false": "off", "yes": "on", "no": "off",
          "1": "on", "0": "off"}


class CliError(Exception):
    """A usage error found after parsing: printed like argparse's, exit status 2."""


def _esc(v: str) -> str:
    return cpumod.qemu_escape(v)


def site_packages() -> str:
    """The site-packages of the running interpreter's environment (the venv's when in one)."""
    return sysconfig.get_paths()["purelib"]


# --------------------------------------------------------------------------------------------
# The plugin (p4pmu.plugin.build)


def _plugin_build():
    """The plugin build module; a ProvisionError saying what to do when it is missing."""
    try:
        return importlib.import_module("p4pmu.plugin.build")
    except ModuleNotFoundError as e:
        if e.name not in ("p4pmu.plugin.build", "p4pmu.plugin"):
            raise
        raise ProvisionError("the plugin build module p4pmu.plugin.build is missing from this "
                             "installation, so the PMU plugin cannot be built or found; "
                             "reinstall p4pmu (`pip install -e .`), or pass a built plugin "
                             "with --plugin PATH") from None


def plugin_file(build: bool, progress: bool = True, must_exist: bool = True) -> Path:
    """The plugin's path; built first (if missing or stale) when ``build``."""
    mod = _plugin_build()
    if build:
        try:
            mod.ensure_built(progress)
        except ProvisionError:
            raise
        except Exception as e:  # the build module's own error: keep its message
            raise ProvisionError(f"building the PMU plugin failed: {e}") from e
    path = Path(mod.plugin_path())
    if must_exist and not path.is_file():
        raise ProvisionError(f"the PMU plugin {path} is not built; run `p4pmu setup`")
    return path


# --------------------------------------------------------------------------------------------
# Composing the QEMU command line


def _opt_value(args: list[str], i: int) -> tuple[str | None, int]:
    """The value of the option at args[i] ('-opt value' or '-opt=value'); (value, next i)."""
    a = args[i]
    if "=" in a and a.startswith("-") and a.split("=", 1)[0].lstrip("-") in (
            "smp", "cpu", "accel", "machine", "M"):
        return a.split("=", 1)[1], i + 1
    return (args[i + 1] if i + 1 < len(args) else None), i + 2


def _opt_name(a: str) -> str:
    """'-smp' / '--smp' / '-smp=...' -> 'smp'; non-options -> ''."""
    if not a.startswith("-") or a in ("-", "--"):
        return ""
    return a.lstrip("-").split("=", 1)[0]


def _split_qemu_opts(value: str) -> list[str]:
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
    accel: str | None = None  # accelerator the user named (-accel / -machine accel= / -M)
    smp_threads: int | None = None
    has_cpu: bool = False


def scan_qemu_args(qargs: list[str]) -> QemuArgsInfo:
    """What of p4pmu's business the user's QEMU arguments already say."""
    info = QemuArgsInfo()
    i = 0
    while i < len(qargs):
        name = _opt_name(qargs[i])
        if name == "cpu":
            info.has_cpu = True
        elif name in ("enable-kvm",):
            info.accel = "kvm"
        elif name == "accel":
            v, i2 = _opt_value(qargs, i)
            if v is not None:
                parts = _split_qemu_opts(v)
                first = parts[0]
                info.accel = first.split("=", 1)[1] if first.startswith("accel=") else first
            i = i2
            continue
        elif name in ("machine", "M"):
            v, i2 = _opt_value(qargs, i)
            for p in _split_qemu_opts(v or ""):
                if p.startswith("accel="):
                    info.accel = p.split("=", 1)[1]
            i = i2
            continue
        elif name == "smp":
            v, i2 = _opt_value(qargs, i)
            for p in _split_qemu_opts(v or ""):
                if p.startswith("threads="):
                    try:
                        info.smp_threads = int(p.split("=", 1)[1])
                    except ValueError:
                        pass  # QEMU reports it
            i = i2
            continue
        i += 1
    return info


def parse_plugin_opts(items: list[str]) -> dict[str, str]:
    """Check --plugin-opt K=V items; returns normalised values.  Raises CliError."""
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
        if k == "model":
            try:
                v = get_model(v).key
            except KeyError as e:
                raise CliError(f"--plugin-opt model={v}: {e.args[0]}") from None
        elif k == "stepping":
            v = str(_stepping(v, f"--plugin-opt stepping={v}"))
        elif k == "strict":
            if v.lower() not in _ONOFF:
                raise CliError(f"--plugin-opt strict={v}: expected on or off")
            v = _ONOFF[v.lower()]
        elif k == "threads":
            if v not in ("1", "2"):
                raise CliError(f"--plugin-opt threads={v}: expected 1 or 2 (a Pentium 4 "
                               "core runs at most two hardware threads)")
        elif k == "log":
            if not v:
                raise CliError("--plugin-opt log=: expected a file name")
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
        elif v.lower() in _ONOFF and k not in ("model", "stepping", "threads"):
            v = _ONOFF[v.lower()]  # other on/off options of the bridge (verbose)
        b = _bridge()
        if b is not None and hasattr(b, "parse_options"):
            try:  # the plugin would refuse to load with this value: say so now
                b.parse_options([f"{k}={v}"])
            except ValueError as e:
                raise CliError(f"--plugin-opt {item}: {e}") from None
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


def resolve_model(model_arg: str | None, stepping_arg: str | int | None,
                  popts: dict[str, str]) -> CpuModel:
    """The CpuModel from --model/--stepping and the model=/stepping= plugin options."""
    key = model_arg
    if "model" in popts:
        if key is not None and get_model(key).key != popts["model"]:
            raise CliError(f"--model {key} and --plugin-opt model={popts['model']} disagree")
        key = popts["model"]
    try:
        m = get_model(key)
    except KeyError as e:
        raise CliError(f"--model: {e.args[0]}") from None
    st = None
    if stepping_arg is not None:
        st = _stepping(stepping_arg, f"--stepping {stepping_arg}")
    if "stepping" in popts:
        if st is not None and st != int(popts["stepping"]):
            raise CliError(f"--stepping {st} and --plugin-opt stepping={popts['stepping']} "
                           "disagree")
        st = int(popts["stepping"])
    return m.with_stepping(st) if st is not None else m


def compose_qemu_command(qemu, model: CpuModel, qargs: list[str], popts: dict[str, str],
                         plugin: Path | None) -> list[str]:
    """The full QEMU argv.  ``plugin`` None: the CPU model without the PMU plugin."""
    info = scan_qemu_args(qargs)
    if info.has_cpu:
        raise CliError("QEMU's arguments contain -cpu, but p4pmu sets the CPU from --model "
                       f"(here: -cpu {cpumod.cpu_option(model)}); remove -cpu and choose the "
                       f"model with --model (known: {', '.join(MODELS)})")
    if info.accel is not None and info.accel.split(":")[0] != "tcg":
        raise CliError(f"QEMU's arguments select the {info.accel!r} accelerator; the PMU "
                       "emulation needs TCG plugins: use -accel tcg (or leave -accel out)")
    threads = popts.get("threads")
    if info.smp_threads is not None:
        if info.smp_threads > 2:
            raise CliError(f"-smp threads={info.smp_threads}: a Pentium 4 core has at most "
                           "two hardware threads")
        if threads is not None and int(threads) != info.smp_threads:
            raise CliError(f"--plugin-opt threads={threads} contradicts -smp "
                           f"threads={info.smp_threads} in QEMU's arguments")
        if info.smp_threads == 2:
            threads = "2"
    elif threads == "2":
        raise CliError("--plugin-opt threads=2 needs sibling threads: add -smp "
                       "...,threads=2 to QEMU's arguments")

    cmd = qemu.argv()
    if info.accel is None:
        cmd += ["-accel", "tcg"]
    cmd += cpumod.cpu_args(model)
    if plugin is not None:
        parts = [_esc(str(plugin)), f"model={model.key}", f"stepping={model.stepping}"]
        popts = dict(popts)
        popts.pop("model", None)
        popts.pop("stepping", None)
        popts.setdefault("pypath", site_packages())
        if threads is not None:
            popts["threads"] = threads
        for k in PLUGIN_OPTS:  # a stable order
            if k in popts:
                parts.append(f"{k}={_esc(popts[k])}")
        cmd += ["-plugin", ",".join(parts)]
    return cmd + list(qargs)


# --------------------------------------------------------------------------------------------
# Running QEMU


_FORWARD = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
            signal.SIGUSR2)


def run_forwarding(cmd: list[str]) -> int:
    """Run cmd, forward signals to it, return its exit status.  A child killed by a signal
    makes this process die of the same signal (as a shell would report it)."""
    child: subprocess.Popen | None = None
    pending: list[int] = []
    old = {}

    def forward(signum, _frame):
        if child is None:  # arrived while starting: deliver right after
            pending.append(signum)
            return
        try:
            child.send_signal(signum)
        except ProcessLookupError:
            pass

    # Handlers first, so no signal can kill us between starting QEMU and watching it.
    for s in _FORWARD:
        try:
            old[s] = signal.signal(s, forward)
        except (ValueError, OSError):  # not the main thread
            pass
    try:
        try:
            child = subprocess.Popen(cmd)
        except OSError as e:
            raise ProvisionError(f"cannot start {cmd[0]}: {e}") from e
        for s in pending:
            child.send_signal(s)
        while True:
            try:
                rc = child.wait()
                break
            except KeyboardInterrupt:  # pragma: no cover - handler replaced above
                continue
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    if rc < 0:
        sig = -rc
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            signal.signal(sig, signal.SIG_DFL)
            os.kill(os.getpid(), sig)
        except (OSError, ValueError):
            pass
        return 128 + sig
    return rc


def cmd_qemu(a: argparse.Namespace, qargs: list[str]) -> int:
    popts = parse_plugin_opts(a.plugin_opt or [])
    model = resolve_model(a.model, a.stepping, popts)
    if a.no_plugin and (a.plugin or a.plugin_opt):
        raise CliError("--no-plugin cannot go with --plugin or --plugin-opt")
    # Check what can be checked before provisioning anything.
    compose_qemu_command(_NoQemu(), model, qargs, popts, None)
    qemu = ensure_qemu(progress=True)
    plugin = None
    if not a.no_plugin:
        if a.plugin:
            plugin = Path(a.plugin).expanduser().absolute()
            if not plugin.is_file():
                raise ProvisionError(f"--plugin {a.plugin}: no such file")
        else:
            plugin = plugin_file(build=not a.dry_run, must_exist=not a.dry_run)
    cmd = compose_qemu_command(qemu, model, qargs, popts, plugin)
    if a.dry_run or a.verbose:
        print(shlex.join(cmd), file=sys.stdout if a.dry_run else sys.stderr, flush=True)
    if a.dry_run:
        return 0
    return run_forwarding(cmd)


class _NoQemu:
    def argv(self, *args):
        return list(args)


# --------------------------------------------------------------------------------------------
# info


def model_info(m: CpuModel) -> dict:
    features = {}
    for f in dataclasses.fields(m):
        v = getattr(m, f.name)
        if isinstance(v, bool):
            features[f.name] = v
    for name in dir(type(m)):
        if isinstance(getattr(type(m), name, None), property):
            v = getattr(m, name)
            if isinstance(v, bool):
                features[name] = v
    return {
        "key": m.key,
        "codename": m.codename,
        "brand": m.brand,
        "model": m.model,
        "stepping": m.stepping,
        "signature": f"0x{m.signature:X}",
        "cpuid_level": m.cpuid_level,
        "features": features,
        "default": m.key == DEFAULT_MODEL,
        "cpu_option": cpumod.cpu_option(m),
    }


def collect_info() -> dict:
    out: dict = {"python": sys.executable, "pypath": site_packages()}
    try:
        q = find_qemu()
        qerr = None
    except ProvisionError as e:
        q, qerr = None, str(e)
    out["qemu"] = str(q.binary) if q else None
    out["qemu_version"] = q.version if q else None
    out["qemu_package_version"] = q.package_version if q else None
    out["qemu_source"] = q.source if q else None
    out["qemu_argv_prefix"] = list(q.argv_prefix) if q else None
    out["qemu_data_dirs"] = [str(d) for d in q.data_dirs] if q else None
    if qerr or not q:
        out["qemu_error"] = qerr or "QEMU 11.1 not found: run `p4pmu setup`"
    try:
        p = Path(_plugin_build().plugin_path())
        out["plugin"] = str(p)
        out["plugin_built"] = p.is_file()
    except Exception as e:  # noqa: BLE001 - reported, not fatal for `info`
        out["plugin"] = None
        out["plugin_built"] = False
        out["plugin_error"] = str(e)
    out["default_model"] = DEFAULT_MODEL
    out["models"] = [model_info(m) for m in MODELS.values()]
    return out


def cmd_info(a: argparse.Namespace) -> int:
    info = collect_info()
    if a.json:
        print(json.dumps(info, indent=2))
        return 0
    w = print
    if info["qemu"]:
        w(f"QEMU:    {info['qemu_version']} ({info['qemu_source']}) {info['qemu']}")
        if info["qemu_package_version"]:
            w(f"         Debian package {info['qemu_package_version']}")
        w(f"         command: {' '.join(info['qemu_argv_prefix'])}")
    else:
        w(f"QEMU:    not available: {info['qemu_error']}")
    if info["plugin"]:
        w(f"plugin:  {info['plugin']} ({'built' if info['plugin_built'] else 'not built: run `p4pmu setup`'})")
    else:
        w(f"plugin:  unavailable: {info['plugin_error']}")
    w(f"python:  {info['python']} (pypath {info['pypath']})")
    w("models:")
    for m in info["models"]:
        feats = [k for k, v in m["features"].items() if v and k not in ("emulate_errata",)]
        w(f"  {m['key']}{' (default)' if m['default'] else ''}: {m['codename']}, "
          f"CPUID.1:EAX {m['signature']}, stepping {m['stepping']}, \"{m['brand']}\"")
        w(f"         {', '.join(feats) or '-'}")
    return 0


# --------------------------------------------------------------------------------------------
# setup


def cmd_setup(a: argparse.Namespace) -> int:
    say = lambda msg: print(f"p4pmu setup: {msg}", file=sys.stderr, flush=True)  # noqa: E731
    q = ensure_qemu(progress=True)
    say(f"QEMU {q.version} ({q.source}): {q.binary}")
    if a.skip_plugin:
        say("plugin: skipped (--skip-plugin)")
    else:
        p = plugin_file(build=True)
        say(f"plugin: {p}")
    if a.skip_guests:
        say("test guests: skipped (--skip-guests)")
    else:
        from p4pmu.qemu_glue.guests import build as guest_build
        try:
            guest_build.build_all(True)
        except Exception as e:  # noqa: BLE001
            raise ProvisionError(f"building the test guests failed: {e}") from e
        say("test guests: built")
    if a.skip_guests:
        say("workloads: skipped (--skip-guests)")
    else:
        from p4pmu.qemu_glue import workloads
        try:
            dirs = [workloads.ensure_built(arch) for arch in workloads.ARCHES]
        except workloads.WorkloadBuildError as e:
            raise ProvisionError(str(e)) from e
        say(f"workloads for the Linux guest: {', '.join(str(d) for d in dirs)}")
    say("ready")
    return 0


# --------------------------------------------------------------------------------------------
# demo (p4pmu.qemu_glue.demo, written separately)


def _demo_module():
    try:
        return importlib.import_module("p4pmu.qemu_glue.demo")
    except ModuleNotFoundError as e:
        if e.name != "p4pmu.qemu_glue.demo":
            raise
        return None


def cmd_demo(a: argparse.Namespace) -> int:
    mod = _demo_module()
    if mod is None:
        raise ProvisionError("the demo (p4pmu.qemu_glue.demo) is not part of this installation")
    rc = mod.main(a)
    return int(rc or 0)


# --------------------------------------------------------------------------------------------
# bench (p4pmu.qemu_glue.bench)


def cmd_bench(a: argparse.Namespace) -> int:
    from p4pmu.qemu_glue import bench
    return int(bench.main(a) or 0)


# --------------------------------------------------------------------------------------------
# events (p4pmu.qemu_glue.events_cmd)


def cmd_events(a: argparse.Namespace) -> int:
    from p4pmu.qemu_glue import events_cmd
    return events_cmd.main(a)


# --------------------------------------------------------------------------------------------
# Parser


def _models_help() -> str:
    return "; ".join(f"{m.key} {m.codename}" for m in MODELS.values())


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

    q = sub.add_parser(
        "qemu", formatter_class=fmt, help="run qemu-system-x86_64 with the emulated PMU",
        usage="p4pmu qemu [OPTIONS] -- QEMU_ARGS...",
        description="Run qemu-system-x86_64 (TCG) with the p4pmu plugin and the CPU of a "
                    "Pentium 4 model. QEMU's own arguments come after `--` and are passed "
                    "unchanged; p4pmu adds -accel tcg (unless given), -cpu (never give your "
                    "own) and -plugin. Exits with QEMU's exit status.",
        epilog="models: " + _models_help() + "\n\n"
               "examples:\n"
               "  p4pmu qemu --model 0F_02 -- -machine pc -m 256 -nographic -kernel vmlinux\n"
               "  p4pmu qemu --plugin-opt log=pmu.log --plugin-opt strict=on -- "
               "-smp 2,threads=2 ...\n"
               "  p4pmu qemu --dry-run -- -display none      (print the command line)")
    q.add_argument("--model", metavar="0F_MM",
                   help=f"CPU model (default {DEFAULT_MODEL}); also '4', '0f04'")
    q.add_argument("--stepping", metavar="N", help="CPUID stepping 0-15 (default: the model's)")
    q.add_argument("--plugin-opt", metavar="K=V", action="append",
                   help=f"plugin option, repeatable; keys: {', '.join(PLUGIN_OPTS)} "
                        "(strict=on|off, log=FILE, threads=1|2; threads=2 is set "
                        "automatically for -smp ...,threads=2; pypath defaults to this "
                        "environment's site-packages)")
    q.add_argument("--plugin", metavar="PATH",
                   help="use this plugin library instead of the built one")
    q.add_argument("--no-plugin", action="store_true",
                   help="run the model's CPU without the PMU plugin (for comparison)")
    q.add_argument("--dry-run", action="store_true",
                   help="print the QEMU command line instead of running it")
    q.add_argument("-v", "--verbose", action="store_true",
                   help="print the QEMU command line on stderr before running it")
    q.set_defaults(func=None)

    i = sub.add_parser("info", formatter_class=fmt,
                       help="show QEMU, the plugin and the known CPU models",
                       description="Show the QEMU p4pmu would use (without downloading it), "
                                   "the plugin and whether it is built, and the CPU models.")
    i.add_argument("--json", action="store_true",
                   help="machine-readable output (keys: qemu, qemu_version, plugin, "
                        "plugin_built, models, ...)")
    i.set_defaults(func=cmd_info)

    s = sub.add_parser("setup", formatter_class=fmt,
                       help="provision QEMU, build the plugin, the test guests and workloads",
                       description="Provision QEMU 11.1 (a system one if suitable, else "
                                   "Debian's, unpacked into ~/.cache/p4pmu), build the PMU "
                                   "plugin, the Linux guest's workloads (amd64 and i386) and "
                                   "the bare-metal guests. Idempotent: a second run only "
                                   "checks.")
    s.add_argument("--skip-plugin", action="store_true", help="do not build the plugin")
    s.add_argument("--skip-guests", action="store_true",
                   help="do not build the test guests and the workloads")
    s.set_defaults(func=cmd_setup)

    d = sub.add_parser("demo", formatter_class=fmt,
                       help="Linux perf on the emulated PMU: detection, perf stat, perf record",
                       description="Boot the Linux guest (by default Debian 11's 5.10 kernel) "
                                   "on the "
                                   "emulated Pentium 4 PMU and show the kernel's PMU detection, "
                                   "`perf stat` of a bundled workload next to the model's exact "
                                   "counts, and a `perf record` profile of a workload with known "
                                   "hot spots (about 15 s). --replay: the older bare-metal demo "
                                   "that replays the P4 driver's MSR traffic.")
    mod = _demo_module_quiet()
    if mod is not None and hasattr(mod, "add_arguments"):
        mod.add_arguments(d)
    d.set_defaults(func=cmd_demo)

    b = sub.add_parser("bench", formatter_class=fmt,
                       help="measure the plugin's cost on a CPU-bound guest",
                       description="Run a CPU-bound test guest under plain QEMU and under the "
                                   "plugin (nothing enabled, 18 counters, a PMI every 10,000 "
                                   "instructions) and time intercepted MSR accesses; prints "
                                   "CPU times and ratios.")
    from p4pmu.qemu_glue import bench as _bench
    _bench.add_arguments(b)
    b.set_defaults(func=cmd_bench)

    from p4pmu.qemu_glue import events_cmd  # p4pmu events (qemu_glue/events_cmd.py)
    ev = sub.add_parser("events", formatter_class=fmt,
                        help="list NetBurst events; encode event:MASK:...:u for perf",
                        description=events_cmd.DESCRIPTION, epilog=events_cmd.EPILOG)
    events_cmd.add_arguments(ev)
    ev.set_defaults(func=cmd_events)

    from p4pmu.qemu_glue import linux as linux_mod  # p4pmu linux (qemu_glue/linux.py)
    lx = sub.add_parser(
        "linux", formatter_class=fmt,
        help="run a command in a Linux guest (Debian's 5.10 or 6.1 kernel, perf) on the "
             "emulated PMU",
        usage="p4pmu linux [OPTIONS] -- COMMAND...",
        description="Boot a Linux guest (Debian 11's 5.10 or 12's 6.1 kernel, busybox, perf) "
                    "on an emulated "
                    "Pentium 4, run COMMAND in it with /bin/sh -c, print its stdout and stderr "
                    "here and exit with its status. The image is built from Debian's archive "
                    "into ~/.cache/p4pmu on first use.",
        epilog=linux_mod.usage_epilog())
    linux_mod.add_arguments(lx)
    lx.set_defaults(func=None)
    return ap


def _demo_module_quiet():
    try:
        return _demo_module()
    except Exception:  # noqa: BLE001 - a broken demo must not break the other commands
        return None


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = build_parser()
    # `p4pmu qemu [opts] -- QEMU_ARGS`: everything after the first `--` belongs to QEMU.
    qargs: list[str] = []
    if "--" in argv:
        k = argv.index("--")
        argv, qargs = argv[:k], argv[k + 1:]
    a, extra = ap.parse_known_args(argv)
    sp = ap._subparsers._group_actions[0].choices[a.command]  # type: ignore[union-attr]
    if extra:
        hint = {"qemu": "; QEMU's own arguments go after `--`",
                "linux": "; the guest's COMMAND goes after `--`"}.get(a.command, "")
        sp.error("unrecognized arguments: " + " ".join(extra) + hint)
    if a.command == "demo":
        a.qemu_args = qargs
    elif a.command not in ("qemu", "linux") and qargs:
        sp.error("unrecognized arguments after `--`: " + " ".join(qargs))
    try:
        if a.command == "qemu":
            return cmd_qemu(a, qargs)
        if a.command == "linux":
            from p4pmu.qemu_glue import linux as linux_mod
            try:
                return linux_mod.main(a, qargs)
            except linux_mod.UsageError as e:
                sp.error(str(e))  # exits 2
        return a.func(a)
    except CliError as e:
        sp.error(str(e))  # exits 2
    except ProvisionError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `p4pmu info | head`
        with __import__("contextlib").suppress(OSError):
            sys.stdout = open(os.devnull, "w")
        return 0
    return 0  # pragma: no cover


if __name__ == "__main__":
    sys.exit(main())
