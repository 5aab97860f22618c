"""`p4pmu setup`: provision QEMU 11.1, build the PMU plugin, the Linux guest's workloads and
(in a source checkout) the test guests.  Idempotent: a second run only checks."""
from __future__ import annotations

import argparse
import sys

from p4pmu.qemu_glue.plugin_lib import plugin_file
from p4pmu.qemu_glue.provision import ProvisionError, ensure_qemu
from p4pmu.qemu_glue.bare_metal_guests import guest_builder


def _say(msg: str) -> None:
    print(f"p4pmu setup: {msg}", file=sys.stderr, flush=True)


def _test_guests() -> None:
    mod, why = guest_builder()
    if mod is None:
        _say(f"test guests: skipped: {why}")
        return
    try:
        mod.build_all(True)
    except Exception as e:  # noqa: BLE001
        raise ProvisionError(f"building the test guests failed: {e}") from e
    _say("test guests: built")


def _workloads() -> None:
    from p4pmu.qemu_glue import workloads
    try:
        dirs = [workloads.ensure_built(arch) for arch in workloads.ARCHES]
    except workloads.WorkloadBuildError as e:
        raise ProvisionError(str(e)) from e
    _say(f"workloads for the Linux guest: {', '.join(str(d) for d in dirs)}")


def main(a: argparse.Namespace) -> int:
    q = ensure_qemu(progress=True)
    _say(f"QEMU {q.version} ({q.source}): {q.binary}")
    if a.skip_plugin:
        _say("plugin: skipped (--skip-plugin)")
    else:
        _say(f"plugin: {plugin_file(build=True)}")
    if a.skip_guests:
        _say("test guests: skipped (--skip-guests)")
        _say("workloads: skipped (--skip-guests)")
    else:
        _test_guests()
        _workloads()
    _say("ready")
    return 0
