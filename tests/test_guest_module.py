"""A kernel module built with `p4pmu module build` and loaded with `p4pmu linux --module`
(qemu_glue/module_cmd.py, linux_image/headers.py; docs/linux-guest.md "A driver developer's
tools").

tests/host_programs/p4count/ programs a counter from kernel code and reads it back around
loops of two lengths: the counts differ by the model's counts of the `count` workload's
loop, to the instruction, and the same length counts the same twice.  The register numbers
and values it uses are written here from the project's tables.  A module built for another
kernel is refused before boot.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from p4pmu.emulator import clockmodel as CM
from p4pmu.qemu_glue import perf_p4 as P
from p4pmu.qemu_glue import workloads as W

from guests.evscript import cccr_msr, cccr_value, counter_msr, escr_msr, escr_value

P4PMU = [sys.executable, "-m", "p4pmu.qemu_glue.cli"]
P4PMU_LINUX = [*P4PMU, "linux", *shlex.split(os.environ.get("P4PMU_LINUX_TEST_ARGS", ""))]
SRC = Path(__file__).parent / "host_programs" / "p4count"
N1, N2 = 100000, 300000
COUNTER, ESCR = 12, "MSR_CRU_ESCR0"  # IQ_COUNTER0: the NMI watchdog's is counter 0


def values_h() -> str:
    """values.h: where and what p4count programs (instr_retired NBOGUSNTAG at CPL 0)."""
    v = {"ESCR_MSR": escr_msr(ESCR), "CCCR_MSR": cccr_msr(COUNTER),
         "COUNTER_MSR": counter_msr(COUNTER),
         "ESCR_VALUE": escr_value("instr_retired", "NBOGUSNTAG", t0_os=True),
         "CCCR_VALUE": cccr_value(COUNTER, ESCR)}
    return "".join(f"#define P4COUNT_{k} {x:#x}ULL\n" for k, x in v.items())


@pytest.fixture(scope="module")
def module(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("p4count") / "p4count"
    shutil.copytree(SRC, d)
    shutil.copy(SRC.parent / "spin.h", d)
    (d / "values.h").write_text(values_h())
    r = subprocess.run([*P4PMU, "module", "build", str(d)], capture_output=True, text=True,
                       timeout=1200)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return d / "p4count.ko"


@pytest.mark.guest
def test_a_module_counts_its_own_loop_exactly(module):
    r = subprocess.run([*P4PMU_LINUX, "--timeout", "1500", "--append", "nmi_watchdog=0",
                        "--module", str(module), "--", "dmesg | grep 'p4count '"],
                       capture_output=True, text=True, timeout=1620, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    counts = [(int(n), int(c)) for n, c in re.findall(r"p4count (\d+) (\d+)", r.stdout)]
    assert [n for n, _ in counts] == [N1, N2, N1], r.stdout
    (_, a), (_, b), (_, c) = counts
    assert a == c, counts
    path = W.ensure_built("amd64") / "count"
    m1, m2 = (P.program_counts(path, n, CM.Predictor()) for n in (N1, N2))
    assert b - a == m2.instructions - m1.instructions == 4 * (N2 - N1), counts
    assert a > 4 * N1, counts


@pytest.mark.slow
def test_a_module_for_another_kernel_is_refused_before_boot(module):
    r = subprocess.run([*P4PMU_LINUX, "--kernel", "6.1", "--module", str(module), "--", "true"],
                       capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert r.returncode == 2, r.stderr
    assert "built for 5.10.0-32-amd64; the guest runs 6.1" in r.stderr, r.stderr


@pytest.mark.guest
def test_a_failing_insmod_ends_the_run_with_its_message(tmp_path):
    """A module whose init fails: the command does not run, status 125, insmod's word."""
    d = tmp_path / "failing"
    d.mkdir()
    (d / "failing.c").write_text(
        "#include <linux/module.h>\n"
        "static int __init f_init(void) { return -ENODEV; }\n"
        "module_init(f_init);\nMODULE_LICENSE(\"GPL\");\n")
    (d / "Kbuild").write_text("obj-m := failing.o\n")
    r = subprocess.run([*P4PMU, "module", "build", str(d)], capture_output=True, text=True,
                       timeout=1200)
    assert r.returncode == 0, r.stderr[-3000:]
    r = subprocess.run([*P4PMU_LINUX, "--clock", "host", "--module", str(d / "failing.ko"),
                        "--", "echo ran"], capture_output=True, text=True, timeout=1200,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 125 and "ran" not in r.stdout, r.stdout + r.stderr
    assert "insmod failing.ko failed" in r.stderr, r.stderr


def test_module_build_refuses_a_folder_without_kbuild(tmp_path):
    r = subprocess.run([*P4PMU, "module", "build", str(tmp_path)], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2 and "no Kbuild or Makefile" in r.stderr, r.stderr
