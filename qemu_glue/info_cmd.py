"""`p4pmu info`: the QEMU p4pmu would use (never downloaded here), the plugin and whether it
is built, the gdb extension's file, and the CPU models (as text, or JSON with --json)."""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from p4pmu.emulator.models import DEFAULT_MODEL, MODELS, CpuModel
from p4pmu.qemu_glue import cpu as cpumod
from p4pmu.qemu_glue.gdb_cmd import extension_path
from p4pmu.qemu_glue.plugin_lib import plugin_status, site_packages
from p4pmu.qemu_glue.provision import ProvisionError, find_qemu


def model_info(m: CpuModel) -> dict:
    """A model's identity and its boolean features (fields and properties)."""
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


def _qemu_info() -> dict:
    try:
        q, qerr = find_qemu(), None
    except ProvisionError as e:
        q, qerr = None, str(e)
    out = {
        "qemu": str(q.binary) if q else None,
        "qemu_version": q.version if q else None,
        "qemu_package_version": q.package_version if q else None,
        "qemu_source": q.source if q else None,
        "qemu_argv_prefix": list(q.argv_prefix) if q else None,
        "qemu_data_dirs": [str(d) for d in q.data_dirs] if q else None,
    }
    if qerr or not q:
        out["qemu_error"] = qerr or "QEMU 11.1 not found: run `p4pmu setup`"
    return out


def collect_info() -> dict:
    out: dict = {"python": sys.executable, "pypath": site_packages()}
    out.update(_qemu_info())
    path, built, err = plugin_status()
    out["plugin"] = str(path) if path else None
    out["plugin_built"] = built
    if err is not None:
        out["plugin_error"] = err
    out["gdb_script"] = str(extension_path())
    out["default_model"] = DEFAULT_MODEL
    out["models"] = [model_info(m) for m in MODELS.values()]
    return out


def _print_text(info: dict) -> None:
    w = print
    if info["qemu"]:
        w(f"QEMU:    {info['qemu_version']} ({info['qemu_source']}) {info['qemu']}")
        if info["qemu_package_version"]:
            w(f"         Debian package {info['qemu_package_version']}")
        w(f"         command: {' '.join(info['qemu_argv_prefix'])}")
    else:
        w(f"QEMU:    not available: {info['qemu_error']}")
    if info["plugin"]:
        state = "built" if info["plugin_built"] else "not built: run `p4pmu setup`"
        w(f"plugin:  {info['plugin']} ({state})")
    else:
        w(f"plugin:  unavailable: {info['plugin_error']}")
    w(f"python:  {info['python']} (pypath {info['pypath']})")
    w(f"gdb:     {info['gdb_script']} (in gdb: `source` it; or run `p4pmu gdb`)")
    w("models:")
    for m in info["models"]:
        feats = [k for k, v in m["features"].items() if v and k not in ("emulate_errata",)]
        w(f"  {m['key']}{' (default)' if m['default'] else ''}: {m['codename']}, "
          f"CPUID.1:EAX {m['signature']}, stepping {m['stepping']}, \"{m['brand']}\"")
        w(f"         {', '.join(feats) or '-'}")


def main(a: argparse.Namespace) -> int:
    info = collect_info()
    if a.json:
        print(json.dumps(info, indent=2))
    else:
        _print_text(info)
    return 0
