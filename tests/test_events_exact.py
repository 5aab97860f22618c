"""Exact deadlines (plugin/deadline.c W2; docs/guest-events.md "Exact deadlines") must never
change results, only how often C looks.

Each guest script runs with `exact=on` (the default) and `exact=off` (every deadline in
clocks, as before): everything the guest printed (register values, PMI records: vector,
LVT, OVF flags, interrupted IP, counter value) must be identical.  The plugin's debug
summary (P4PMU_DEBUG=1) says whether a signature was installed and how many deadline
callbacks C took; with exact deadlines the checks per interrupt must drop from the clock
bound's geometric approach (about 20 per interrupt here) to a handful.
"""
from __future__ import annotations

import re

import pytest

from p4pmu.emulator import tables as T
from p4pmu.qemu_glue import bench

from guests.evscript import (
    LVT_NMI,
    PMI_CLEAR_OVF,
    PMI_RELOAD,
    PMI_UNMASK,
    VEC_PMI,
    EvScript,
    cccr_msr,
    cccr_value,
    counter_msr,
    escr_msr,
    escr_value,
    parse_events,
    preset,
)

pytestmark = pytest.mark.guest

_VCPU = re.compile(r"p4pmu-debug: vCPU 0: \d+ folds, (\d+) deadline callbacks \((\d+) re-armed "
                   r"by the C check\).*; (\d+) exact-deadline callbacks$")
_PAIRS = re.compile(r"p4pmu-debug: vCPU 0: (\d+) of (\d+) batches without adjacent clock pairs")
_EXACT = re.compile(r"p4pmu-debug: exact deadlines: (on|off), (\d+) signature\(s\) installed, "
                    r"counter (-?\d+)$")


def _run(run_guest, script, exact, mirror, bits, lite="on"):
    r = run_guest(f"events{bits}", model="0F_04", script=script,
                  plugin_opts=(f"exact={exact}", f"mirror={mirror}", f"lite={lite}"),
                  env={"P4PMU_DEBUG": "1"}, timeout=120)
    r.require_completed()
    v = [m for m in map(_VCPU.match, r.stderr.splitlines()) if m]
    e = [m for m in map(_EXACT.match, r.stderr.splitlines()) if m]
    p = [m for m in map(_PAIRS.match, r.stderr.splitlines()) if m]
    assert len(v) == 1 and len(e) == 1 and len(p) == 1, r.stderr[-2000:]
    deadlines, rearmed, w2 = map(int, v[0].groups())
    return r.out.lines, {"checks": deadlines + rearmed + w2, "signatures": int(e[0].group(2)),
                         "counter": int(e[0].group(3)), "pairless": int(p[0].group(1)),
                         "folds": int(p[0].group(2))}


def _bench_script() -> EvScript:
    """`p4pmu bench`'s configuration (d) on a short loop: counter 12 counts OS and USR
    instructions and interrupts every 10,000 (NMI, the minimal handler)."""
    s = EvScript()
    s._add(bench.script("pmi", "bench", 30_000).replace("pmilog\n", "").strip())
    s.wrmsr(cccr_msr(12), 0)
    s.rdmsr(counter_msr(12), "d_ctr")
    s.pmi_log()
    return s


def _more(s: EvScript) -> EvScript:
    """Then periodic sampling of USR instructions with the logging handler (counter 12 with
    another ESCR: the installed signature does not match), then counter 13 interrupting on
    branches."""
    _sampling(s, 12, "MSR_CRU_ESCR0", escr_value("instr_retired", "NBOGUSNTAG", t0_usr=True),
              3000, "alu", 4000, "s_ctr")
    _sampling(s, 13, "MSR_CRU_ESCR2",
              escr_value("branch_retired", "MMNP", "MMNM", "MMTP", "MMTM", t0_usr=True),
              500, "alt", 3000, "b_ctr")
    return s


def _sampling(s: EvScript, ctr: int, escr: str, escr_val: int, period: int, loop: str,
              iters: int, tag: str) -> None:
    """Counter `ctr` interrupts (NMI) every `period` events of a ring-3 loop; the logging
    handler clears OVF, reloads and unmasks."""
    lvt = LVT_NMI | VEC_PMI
    cccr = cccr_value(ctr, escr, pmi_t0=True)
    s.pmi_config(PMI_CLEAR_OVF | PMI_RELOAD | PMI_UNMASK, counter=ctr,
                 reload=preset(period - 1), cccr=cccr, lvt=lvt)
    s.pmi_reset()
    s.lvt(lvt)
    s.wrmsr(escr_msr(escr), escr_val)
    s.wrmsr(counter_msr(ctr), preset(period - 1))
    s.wrmsr(cccr_msr(ctr), cccr)
    s.loop(loop, iters, user=True, intr=True)
    s.wrmsr(cccr_msr(ctr), 0)
    s.rdmsr(counter_msr(ctr), tag)
    s.pmi_log()


def _both(run_guest, script, mirror):
    """The 32-bit script with exact=on and exact=off: the guest output must be identical.
    Returns the interrupts of each logged phase and both runs' statistics."""
    on, st_on = _run(run_guest, script, "on", mirror, 32)
    off, st_off = _run(run_guest, script, "off", mirror, 32)
    _same(on, off)
    return [c[0] for c in parse_events(on).pmi_counts], st_on, st_off


def _same(on, off):
    assert on == off, "guest output differs:\n" + "\n".join(
        f"  exact=on  {a!r}\n  exact=off {b!r}" for a, b in zip(on, off) if a != b)


@pytest.mark.parametrize("bits,mirror,lite", ((32, "on", "on"), (32, "off", "on"),
                                              (64, "on", "on"), (32, "on", "off")))
def test_exact_deadline_of_the_benchmark_interrupt(run_guest, bits, mirror, lite):
    """Configuration (d): the same interrupts at the same places, with a fraction of the
    checks (the signature is installed after the first few interrupts); at the outcome-free
    level (the default for this programming: tests/test_events_lite.py) and the full one."""
    s = _bench_script()
    on, st_on = _run(run_guest, s, "on", mirror, bits, lite)
    off, st_off = _run(run_guest, s, "off", mirror, bits, lite)
    _same(on, off)
    n = parse_events(on).pmi_counts[0][0]
    assert n >= 50, n
    assert st_on["signatures"] == 1 and st_on["counter"] == 12, st_on
    assert st_off["signatures"] == 0, st_off
    # the clock bound closes in on each interrupt in many steps (fewer at the outcome-free
    # level: no misprediction clocks, so more instructions per clock); W2 fires near it only
    assert st_off["checks"] >= (8 if lite == "on" else 20) * n, (st_off, n)
    # a handful per interrupt once W2 watches; the first interrupts close in by the clock
    # bound (at the full level, with the 31-clock misprediction penalty of 0F_04: 12.0)
    assert st_on["checks"] <= 13 * n, (st_on, n)
    if lite == "off":
        assert st_on["checks"] <= 0.2 * st_off["checks"], (st_on, st_off, n)
    # no EDGE detector anywhere in this script: no batch collects adjacent clock pairs
    # (tests/test_events_clocks.py checks the EDGE counts after such batches)
    for st in (st_on, st_off):
        assert st["folds"] >= 3 * n and st["pairless"] == st["folds"], st


@pytest.mark.parametrize("mirror", ("on", "off"))
def test_another_watched_counter_keeps_its_clock_deadline(run_guest, mirror):
    """W's clock deadline covers the watched counters W2 does not watch.  Configuration (d)
    until W2 watches counter 12; then, with 12 still interrupting every 10,000
    instructions, counter 13 counts the same instructions from -123,457 and its overflow
    starts counter 15 (CASCADE, SDM 18.15.5.5).  Where 13 overflows must be found exactly,
    so 15's count and every interrupt are the same as without W2."""
    text = bench.script("pmi", "bench", 30_000).replace("pmilog\n", "")
    s = EvScript()
    s._add(text.rstrip("\n"))
    instr = escr_value("instr_retired", "NBOGUSNTAG", t0_os=True, t0_usr=True)
    s.wrmsr(escr_msr("MSR_CRU_ESCR1"), instr)
    s.wrmsr(counter_msr(15), 0)
    s.wrmsr(cccr_msr(15), cccr_value(15, "MSR_CRU_ESCR1", enable=False, cascade=True))
    s.wrmsr(counter_msr(13), preset(123_457))
    s.wrmsr(cccr_msr(13), cccr_value(13, "MSR_CRU_ESCR0"))
    s.loop("bench", 20_000)
    s.wrmsr(cccr_msr(12), 0)
    s.rdmsr(cccr_msr(13), "cccr13")
    s.rdmsr(counter_msr(15), "ctr15")
    s.pmi_log()
    on, st_on = _run(run_guest, s, "on", mirror, 32)
    off, _ = _run(run_guest, s, "off", mirror, 32)
    _same(on, off)
    out = parse_events(on)
    assert st_on["signatures"] == 1 and st_on["counter"] == 12, st_on
    assert out.pmi_counts[0][0] >= 80, out.pmi_counts
    assert out["cccr13"] >> T.CCCR_FIELD["OVF"].lo & 1, "counter 13 did not overflow"
    # 15 counted the second loop's instructions after 13's overflow (20,000 x 17.5 in all)
    assert 200_000 < out["ctr15"] < 20_000 * 18 - 123_457, out["ctr15"]


@pytest.mark.parametrize("mirror", ("on", "off"))
def test_programmings_the_signature_does_not_match(run_guest, mirror):
    """After the signature for counter 12 (OS and USR instructions) is installed, counter 12
    with another ESCR and counter 13 on branches interrupt exactly as without W2: their
    deadlines are in clocks until counter 13's samples have caused most of the last 512
    deadline checks, and then W2 watches counter 13 (a second signature)."""
    s = _more(_bench_script())
    on, st_on = _run(run_guest, s, "on", mirror, 32)
    off, _ = _run(run_guest, s, "off", mirror, 32)
    _same(on, off)
    pmis = [c[0] for c in parse_events(on).pmi_counts]
    assert len(pmis) == 3 and pmis[0] >= 50 and pmis[1] >= 8 and pmis[2] >= 8, pmis
    assert st_on["signatures"] == 2 and st_on["counter"] == 13, st_on


@pytest.mark.parametrize("mirror", ("on", "off"))
def test_the_signature_moves_to_the_counter_that_drives_the_deadline(run_guest, mirror):
    """A clock counter with a far overflow keeps counting (as Linux's NMI watchdog does)
    after W2 was installed for it; then counter 12 samples instructions every 3,000.  The
    sampling counter drives the deadline, so the signature must move to it (a second
    flush): with W2 left on the clock counter, every sample would be approached through the
    clock bound (a `perf record` after a `perf stat` in the Linux guest ran 10 times
    slower)."""
    clocks = escr_value("global_power_events", "RUNNING", t0_os=True, t0_usr=True)
    s = EvScript()
    _sampling(s, 0, "MSR_FSB_ESCR0", clocks, 20_000, "alu", 30_000, "c0_first")
    s.wrmsr(counter_msr(0), preset(10**9))
    s.wrmsr(cccr_msr(0), cccr_value(0, "MSR_FSB_ESCR0"))
    _sampling(s, 12, "MSR_CRU_ESCR0", escr_value("instr_retired", "NBOGUSNTAG", t0_usr=True),
              3000, "alu", 100_000, "s_ctr")
    s.wrmsr(cccr_msr(0), 0)
    s.rdmsr(counter_msr(0), "c0_last")
    pmis, st_on, st_off = _both(run_guest, s, mirror)
    assert pmis[0] >= 4 and pmis[1] >= 200, pmis
    assert st_on["signatures"] == 2 and st_on["counter"] == 12, st_on
    assert st_on["checks"] <= 0.5 * st_off["checks"], (st_on, st_off)


@pytest.mark.parametrize("mirror", ("on", "off"))
def test_clock_sampling_over_calls_returns_and_indirect_branches(run_guest, mirror):
    """A clock counter (global_power_events RUNNING, whose clocks include the misprediction
    penalties) samples every 700 clocks of loops ending in calls, returns, indirect jumps
    and conditional branches that change direction, some of them mispredicted every
    iteration (`swing`: an indirect jump between two targets, returns beyond the return
    stack buffer's depth).  W2 adds a call's, return's or indirect
    jump's penalty when its outcome is resolved, not in the block's increment: the
    interrupts and counts must still be those of clock deadlines alone, with fewer checks."""
    clocks = escr_value("global_power_events", "RUNNING", t0_usr=True)
    s = EvScript()
    for loop, tag in (("callret", "c_callret"), ("indirect", "c_indirect"),
                      ("phases", "c_phases"), ("swing", "c_swing")):
        _sampling(s, 0, "MSR_FSB_ESCR0", clocks, 700, loop, 3000, tag)
    on, st_on = _run(run_guest, s, "on", mirror, 32)
    off, st_off = _run(run_guest, s, "off", mirror, 32)
    _same(on, off)
    pmis = [c[0] for c in parse_events(on).pmi_counts]
    assert len(pmis) == 4 and min(pmis) >= 20, pmis
    assert st_on["signatures"] >= 1 and st_on["counter"] == 0, st_on
    assert st_on["checks"] < st_off["checks"], (st_on, st_off)


@pytest.mark.xfail(reason="W2 saves little on counter 14 (checks 3033 against 3338 without "
                          "W2); the counts are right. Likely cause, not yet confirmed: the "
                          "signature's loop retires "
                          "fewer instructions per clock (dependency stalls) than the alu loop, "
                          "whose kinds then exceed the signature's rate", strict=True)
@pytest.mark.parametrize("mirror", ("on", "off"))
def test_a_counter_with_the_signatures_events_shares_it(run_guest, mirror):
    """W2 watches whichever counter has the signature's increments, not only the counter it
    was taken from: after configuration (d) on counter 12 (the signature), counter 14
    counts the same events through the other ESCR (MSR_CRU_ESCR1) and interrupts every
    3,000 -- as the two logical processors of a core do under Linux's P4 driver (thread 1
    gets counter 14 where thread 0 has 12).  It is watched exactly at once: no second
    signature, no flush; with the signature tied to counter 12, the two would take it from
    each other up to 16 times per run, each time with a flush."""
    s = _bench_script()
    instr = escr_value("instr_retired", "NBOGUSNTAG", t0_os=True, t0_usr=True)
    _sampling(s, 14, "MSR_CRU_ESCR1", instr, 3000, "alu", 100_000, "c14")
    pmis, st_on, st_off = _both(run_guest, s, mirror)
    assert pmis[0] >= 50 and pmis[1] >= 250, pmis
    assert st_on["signatures"] == 1 and st_on["counter"] == 12, st_on
    assert st_on["checks"] <= 0.75 * st_off["checks"], (st_on, st_off)
