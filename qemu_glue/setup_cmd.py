"""`p4pmu setup`: provision QEMU 11.1, build the PMU plugin, the bare-metal guests
(qemu_glue/guests: the bench's, the replay demo's and the tests') and the Linux guest's
workloads.  Idempotent: a second run only checks."""
from __future__ import annotations

import argparse
import sys

from p4pmu.qemu_glue.guests import build as guest_build
from p4pmu.qemu_glue.plugin_lib import plugin_file
from p4pmu.qemu_glue.provision import ProvisionError, ensure_qemu


def _say(msg: str) -> None:
    print(f"p4pmu setup: {msg}", file=sys.stderr, flush=True)


def _bare_metal_guests() -> None:
    try:
        guest_build.build_all(True)
    except Exception as e:
        raise ProvisionError(f"building the bare-metal guests failed: {e}") from e
    _say("bare-metal guests: built")


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
        _say("bare-metal guests: skipped (--skip-guests)")
        _say("workloads: skipped (--skip-guests)")
    else:
        _bare_metal_guests()
        _workloads()
    _say("ready")
    return 0
