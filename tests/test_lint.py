"""The programming checker in a running guest (plugin option lint=on; docs/checker.md) and
`p4pmu lint` over its trace: a bare-metal guest making every mistake of tests/guests/mistakes.py
gets each finding once, on stderr and in the trace, and the correct versions of the same
programmings none; the LVT entry's finding (masked when a PMI is requested) comes from the
running plugin; Linux's P4 driver gives only the findings docs/checker.md explains."""
from __future__ import annotations

import json
import subprocess

import pytest
from conftest import P4PMU

from p4pmu.emulator import checker as K

from guests.evscript import (
    LVT_MASK,
    LVT_NMI,
    PMI_CLEAR_OVF,
    VEC_PMI,
    EvScript,
    cccr_msr,
    cccr_value,
    counter_msr,
    escr_msr,
    escr_value,
    preset,
)
from guests.mistakes import CASES, IDLE_WRONG, INSTR

pytestmark = pytest.mark.guest

C0 = "MSR_CRU_ESCR0"
BUS = escr_value("IOQ_allocation", "ALL_READ", "ALL_WRITE", t0_usr=True)  # selects no request


def _pmi(s: EvScript, lvt: int) -> None:
    """Counter 12 asks for a PMI 100 instructions into a ring-3 loop, with LVT entry `lvt`."""
    cccr = cccr_value(12, C0, pmi_t0=True)
    s.pmi_config(PMI_CLEAR_OVF, counter=12, cccr=cccr, lvt=lvt)
    s.pmi_reset()
    s.lvt(lvt)
    s.wrmsr(escr_msr(C0), INSTR)
    s.wrmsr(counter_msr(12), preset(100))
    s.wrmsr(cccr_msr(12), cccr)
    s.loop("alu", 200, user=True, intr=True)
    s.wrmsr(cccr_msr(12), 0)
    s.wrmsr(escr_msr(C0), 0)


def script(right: bool) -> EvScript:
    s = EvScript()
    for case in CASES:
        if case.model == "0F_04":
            for msr, value in (case.right if right else case.wrong):
                s.wrmsr(msr, value)
    if not right:  # an event this emulator does not model (FSB_ESCR0, counter 0)
        s.wrmsr(escr_msr("MSR_FSB_ESCR0"), BUS)
        s.wrmsr(cccr_msr(0), cccr_value(0, "MSR_FSB_ESCR0"))
        s.wrmsr(cccr_msr(0), 0)
        s.wrmsr(escr_msr("MSR_FSB_ESCR0"), 0)
    _pmi(s, LVT_NMI | VEC_PMI | (0 if right else LVT_MASK))
    if not right:
        for msr, value in IDLE_WRONG:
            s.wrmsr(msr, value)
    return s


def _stderr_findings(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.startswith("p4pmu: finding:")]


def lint(path) -> tuple[int, str]:
    p = subprocess.run([str(P4PMU), "lint", str(path)], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode in (0, 1), p.stderr
    return p.returncode, p.stdout


def test_every_mistake_is_found_once(run_guest, tmp_path):
    trace = tmp_path / "t.jsonl"
    r = run_guest("events32", script=script(right=False), timeout=120,
                  plugin_opts=("lint=on", f"trace={trace}"))
    r.require_completed()
    expected = {c.rule for c in CASES if c.model == "0F_04"} | \
        {"unmodelled", "pmi-lvt", "escr-unselected"}
    said = _stderr_findings(r.stderr)
    got = {ln.rsplit("[", 1)[1].rstrip("]") for ln in said}
    assert got == expected, "\n".join(said)
    keys = [(ln.split(": ")[3], ln.rsplit("[", 1)[1]) for ln in said]  # (register, rule)
    assert len(keys) == len(set(keys)), "\n".join(said)  # each once
    recs = [json.loads(x) for x in trace.read_text().splitlines()]
    in_trace = {x["rule"] for x in recs if x["k"] == "finding"}
    assert in_trace == expected
    status, out = lint(trace)
    assert status == 1
    assert {r for r in expected if f"[{r}]" in out} == expected, out


def test_the_correct_programmings_give_none(run_guest, tmp_path):
    trace = tmp_path / "t.jsonl"
    r = run_guest("events32", script=script(right=True), timeout=120,
                  plugin_opts=("lint=on", f"trace={trace}"))
    r.require_completed()
    assert _stderr_findings(r.stderr) == [], r.stderr[-3000:]
    status, out = lint(trace)
    assert status == 0 and "no findings" in out, out


# docs/checker.md, "Linux's P4 driver": the cycles alias's CCCR selects no ESCR (and the
# ESCR it programs is never selected); the interrupt handler reloads a counting counter
LINUX_FINDINGS = {"escr-select-unwired", "escr-unselected", "counter-written-while-counting"}


@pytest.mark.slow
@pytest.mark.parametrize("kernel", ("5.10", "6.1"))
def test_linux_driver_findings_are_the_documented_ones(tmp_path, kernel):
    trace = tmp_path / "t.jsonl"
    cmd = [str(P4PMU), "linux", "--kernel", kernel, "--timeout", "400",
           "--plugin-opt", "lint=on", "--plugin-opt", f"trace={trace}", "--",
           "perf stat -e instructions,cycles,branches,branch-misses -- ls / >/dev/null && "
           "perf record -q -F 1000 -o /tmp/p.data -- sh -c 'head -c 200000 /usr/bin/perf | "
           "gzip -c | wc -c'"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    said = {ln.rsplit("[", 1)[1].rstrip("]") for ln in _stderr_findings(p.stderr)}
    assert said <= LINUX_FINDINGS, _stderr_findings(p.stderr)
    status, out = lint(trace)
    linted = {r.key for r in K.RULES if f"[{r.key}]" in out}
    assert linted <= LINUX_FINDINGS, out
