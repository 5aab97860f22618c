"""`p4pmu demo` (the README's main command: Linux perf on the emulated PMU) and
`p4pmu demo --replay` (the bare-metal replay of the P4 driver's MSR traffic), on the real QEMU."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

from p4pmu.emulator.models import get_model
from p4pmu.emulator.pmu import PMU, PMUFault
from p4pmu.plugin import bookkeeping_errors

P4PMU = Path(sys.executable).with_name("p4pmu")


@pytest.mark.guest
@pytest.mark.parametrize("model", ["0F_04", "0F_02"])
def test_demo_replays_linux_and_reports_each_fault(model):
    r = subprocess.run([str(P4PMU), "demo", "--replay", "--model", model], capture_output=True,
                       text=True, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    assert not bookkeeping_errors(r.stderr), r.stderr
    out = r.stdout
    assert "PERFMON_AVAILABLE" in out
    # RDPMC of counter 13 (preset -100000, counting instructions): 40 bits, counted upward
    counted = [int(n) for n in re.findall(
        r"RDPMC counter 13\n    -> 0x[0-9a-f]{10} = written value \+ (\d+) counted", out)]
    assert len(counted) == 3 and 0 < counted[0] < counted[1] == counted[2], out
    # the fast read returns bits 31:0 only (EDX = 0)
    fast = re.search(r"RDPMC fast counter 13\n    -> 0x([0-9a-f]+)\n", out)
    assert fast and len(fast.group(1)) <= 8 and int(fast.group(1), 16) >= 0xFFFE7960
    # The faults the emulator reports are the ones the model raises for the same accesses.
    pmu = PMU(get_model(model))
    expected = []
    for what in (lambda: pmu.wrmsr(0, 0x36D, 0x1_0403_9000), lambda: pmu.rdmsr(0, 0x3BA),
                 lambda: pmu.rdpmc(0, 18)):
        try:
            what()
            expected.append(None)
        except PMUFault as f:
            expected.append(str(f))
    reasons = re.findall(r"^ +emulator: (.*)", out, re.M)
    assert reasons == [e for e in expected if e is not None]
    if model == "0F_02":  # IQ_ESCR0 exists on 0F_02: read back, no fault
        assert "RDMSR 0x3ba (MSR_IQ_ESCR0)" in out
    assert re.search(r"PMU accesses served by the emulator: .* 0 Python errors", out)
    again = subprocess.run([str(P4PMU), "demo", "--replay", "--model", model],
                           capture_output=True, text=True, timeout=180)
    assert again.stdout == out  # deterministic: the same guest run twice gives the same counts


@pytest.mark.guest
@pytest.mark.slow
def test_demo_linux_perf():
    """The Linux demo (default kernel 5.10): the driver's detection line, perf stat counts
    equal to the model's (with one instruction per page fault, as silicon counts), from the
    first run after boot on, a profile of the two hot functions near 3:1."""
    r = subprocess.run([str(P4PMU), "demo"], capture_output=True, text=True, timeout=300)
    out = r.stdout
    assert r.returncode == 0, out + r.stderr[-3000:]
    assert not bookkeeping_errors(r.stderr), r.stderr
    assert "Performance Events: Netburst events, Netburst P4/Xeon PMU driver." in out
    assert "NMI watchdog: Enabled" in out
    stat = re.findall(r"^ +([\d,]+)  (\S+:u) +model +([\d,]+)  (.*)$", out, re.M)
    assert {ev for _, ev, _, _ in stat} == {"cycles:u", "instructions:u", "branches:u",
                                            "branch-misses:u"}, out
    for got, ev, model, verdict in stat:
        assert got == model and verdict == "exact", (ev, got, model, verdict)
    # the program's page faults, which the model's instructions include (docs/fidelity.md)
    assert re.search(r"^ +[1-9][\d,]*  page-faults:u ", out, re.M), out
    flat = " ".join(out.split())  # explanations are wrapped
    assert "the model's counts of that run (a cold branch predictor), exactly" in flat, out
    m = re.search(r"hot_a ([\d.]+)% and hot_b ([\d.]+)% of their samples", flat)
    assert m and abs(float(m.group(1)) - 75) <= 3, out
    assert "Done in" in out
