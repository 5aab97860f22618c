"""Clocks and filters on real guest activity: global_power_events RUNNING, the
"non-sleep clockticks" filter (COMPARE + COMPLEMENT + THRESHOLD 15), threshold, complement and
edge filters on per-clock uop/instruction/branch counts -- against the documented clock model
(docs/guest-events.md I6) fed through the emulator's PMU (tests/guests/evexpect.py
ClockOracle), exact.  And HLT: halted time is not counted, whatever its length.
"""
from __future__ import annotations

import pytest

from p4pmu.qemu_glue.guests import build as guest_build

from guests.evexpect import ClockOracle, LoopModel, oracle_mismatches
from guests.evplan import Ctr, Plan, Setup
from guests.evscript import EvScript, cccr_msr, counter_msr, escr_msr, parse_events
from guests.loops import TRACEABLE

pytestmark = pytest.mark.guest

FSB0, FSB1 = "MSR_FSB_ESCR0", "MSR_FSB_ESCR1"
C0, C1, C2, C3 = "MSR_CRU_ESCR0", "MSR_CRU_ESCR1", "MSR_CRU_ESCR2", "MSR_CRU_ESCR3"
TB0 = "MSR_TBPU_ESCR0"
ALL4 = ("MMNP", "MMNM", "MMTP", "MMTM")

SETUPS = [
    # first no EDGE detector at all: these batches collect no adjacent clock pairs (the
    # plugin skips them), the EDGE counters of the next setups must count exactly after them
    Setup("plain", [
        Ctr(12, C0, "instr_retired", ("NBOGUSNTAG",), os=True, usr=True),
        Ctr(0, FSB0, "global_power_events", ("RUNNING",), os=True, usr=True),
        Ctr(14, C1, "uops_retired", ("NBOGUS", "BOGUS"), os=True, usr=True, compare=True,
            complement=True, threshold=0),
    ]),
    Setup("clk", [
        Ctr(0, FSB0, "global_power_events", ("RUNNING",), os=True),
        Ctr(2, FSB1, "global_power_events", ("RUNNING",), usr=True),
        # non-sleep clockticks: passes every clock whatever the ESCR qualifies (D5)
        Ctr(1, FSB0, "global_power_events", ("RUNNING",), os=True, compare=True,
            complement=True, threshold=15),
        # clocks in which 3 uops retire
        Ctr(12, C0, "uops_retired", ("NBOGUS",), os=True, usr=True, compare=True,
            threshold=2),
        # rising edges of "some uop retires"
        Ctr(16, C0, "uops_retired", ("NBOGUS",), os=True, usr=True, compare=True,
            threshold=0, edge=True),
        # clocks in which no uop retires (bubbles, latencies, misprediction penalties)
        Ctr(14, C1, "uops_retired", ("NBOGUS", "BOGUS"), os=True, usr=True, compare=True,
            complement=True, threshold=0),
        Ctr(17, C1, "uops_retired", ("NBOGUS", "BOGUS"), os=True, usr=True),
        Ctr(4, TB0, "retired_branch_type", ("CONDITIONAL",), os=True, usr=True,
            compare=True, threshold=0, edge=True),
        Ctr(13, C2, "branch_retired", ALL4, os=True, usr=True, compare=True, threshold=0),
    ]),
    Setup("clk2", [
        # clocks with at least two instructions retiring, and falling below again
        Ctr(12, C0, "instr_retired", ("NBOGUSNTAG",), os=True, usr=True, compare=True,
            threshold=1),
        Ctr(16, C0, "instr_retired", ("NBOGUSNTAG",), os=True, usr=True, compare=True,
            complement=True, threshold=1, edge=True),
        Ctr(14, C1, "instr_retired", ("BOGUSNTAG",), os=True, usr=True, compare=True,
            threshold=2),
        Ctr(15, C3, "branch_retired", ("MMTM", "MMNM"), os=True, usr=True, compare=True,
            threshold=0),
        Ctr(0, FSB0, "global_power_events", ("RUNNING",), os=True, usr=True),
        Ctr(3, FSB1, "global_power_events", ("RUNNING",), os=True, compare=True,
            complement=True, threshold=0),  # qualified clocks present 1: fail; others pass
    ]),
]

PLAN = Plan(SETUPS, list(TRACEABLE), rings=(0, 3), ns=(120, 1200))


@pytest.fixture(scope="module")
def clocks(run_guest):
    cache = {}

    def get(bits: int):
        if bits not in cache:
            r = run_guest(f"events{bits}", script=PLAN.script(), timeout=900)
            r.require_completed()
            model = LoopModel(guest_build.BUILD_DIR / f"events{bits}.elf", bits)
            cache[bits] = (parse_events(r.out.lines), ClockOracle(model))
        return cache[bits]

    return get


@pytest.mark.parametrize("loop", TRACEABLE)
@pytest.mark.parametrize("bits", (32, 64))
def test_clocks_and_filters_follow_the_clock_model(clocks, bits, loop):
    out, oracle = clocks(bits)
    n1, n2 = PLAN.ns
    bad, rows = oracle_mismatches(PLAN, SETUPS, out, oracle, loop)
    assert not bad, (f"{bits}-bit guest, loop {loop}, {n2} - {n1} iterations: {len(bad)} of "
                     f"{len(rows)} counts differ:\n" + "\n".join(bad))


# --------------------------------------------------------------------------------------------
# HLT (global_power_events and halted time)

HALT_CTRS = [
    Ctr(0, FSB0, "global_power_events", ("RUNNING",), os=True, usr=True),
    Ctr(1, FSB0, "global_power_events", ("RUNNING",), os=True, usr=True, compare=True,
        complement=True, threshold=15),
    Ctr(12, C0, "instr_retired", ("NBOGUSNTAG",), os=True, usr=True),
]


def _halt_script(cases):
    s = EvScript()
    for c in HALT_CTRS:
        s.wrmsr(escr_msr(c.escr), c.escr_value())
    s.halt(2, 1000)  # warm-up, also of the counters (the first ENABLE starts counting)
    for name, n, ticks in cases:
        for c in HALT_CTRS:
            s.wrmsr(counter_msr(c.n), 0)
        s.ticks(f"{name}.t0")
        for c in HALT_CTRS:
            s.wrmsr(cccr_msr(c.n), c.cccr_value(True))
        s.halt(n, ticks)
        for c in HALT_CTRS:
            s.wrmsr(cccr_msr(c.n), c.cccr_value(False))
        s.ticks(f"{name}.t1")
        for c in HALT_CTRS:
            s.rdmsr(counter_msr(c.n), f"{name}.c{c.n}")
    return s


def test_halted_time_is_not_counted(run_guest):
    """The same HLT path (APIC timer wake-up) with a short and a long wait: the TSC sees the
    wait, global_power_events RUNNING and the non-sleep-clockticks filter do not (I6: a
    halted LP produces no clocks), and the counts are linear in the number of halts."""
    # Each compared case follows a case with the same number of halts: the interpreter's
    # `halt` loop is inside the counting window, and its branch predictor entries remember
    # how many iterations the previous `halt` command had.
    # (2-bit counters: three cases of the same kind saturate them).
    cases = [("w1a", 1, 2_000), ("w1b", 1, 2_000), ("w1c", 1, 2_000),
             ("short", 1, 2_000), ("long", 1, 20_000_000),
             ("w3a", 3, 2_000), ("w3b", 3, 2_000), ("w3c", 3, 2_000),
             ("short3", 3, 2_000), ("long3", 3, 20_000_000)]
    r = run_guest("events32", script=_halt_script(cases), timeout=60)
    r.require_completed()
    out = parse_events(r.out.lines)
    tsc = {n: out[f"{n}.t1"] - out[f"{n}.t0"] for n, *_ in cases}
    assert tsc["long"] > 3 * tsc["short"], f"the long halt was not long: {tsc}"
    for c in (0, 1, 12):
        v = {n: out[f"{n}.c{c}"] for n, *_ in cases}
        assert v["short"] > 0, f"counter {c} counted nothing around a halt: {v}"
        assert v["short"] == v["long"], (f"counter {c}: a longer halt changed the count "
                                         f"(halted clocks counted?): {v}, TSC {tsc}")
        assert v["short3"] == v["long3"], f"counter {c}: {v}"
        # two more halts cost clocks of their own (not exactly twice one halt's: the
        # interpreter's halt loop runs two more iterations, whose branch outcomes differ)
        per = v["short3"] - v["short"]
        assert per > 0, f"counter {c}: {v}"
    # the RUNNING clocks of the halting path equal the non-sleep clockticks (no HT: the
    # package sleeps exactly when the LP halts)
    assert out["short.c0"] == out["short.c1"]


def test_halting_guest_counts_are_deterministic(run_guest):
    """Timer interrupts wake the guest at host-dependent moments, but only inside HLT: the
    same case twice in a run, and two runs, give the same counts."""
    cases = [("w1", 2, 2_000), ("w2", 2, 2_000), ("w3", 2, 2_000), ("a", 2, 2_000),
             ("b", 2, 2_000)]
    outs = []
    for _ in range(2):
        r = run_guest("events32", script=_halt_script(cases), timeout=60)
        r.require_completed()
        outs.append(parse_events(r.out.lines))
    for o in outs:
        assert all(o[f"a.c{c}"] == o[f"b.c{c}"] for c in (0, 1, 12)), \
            f"the same halting case twice in one run gave different counts: {o.values}"
    counts = [{k: v for k, v in o.values.items() if ".c" in k} for o in outs]
    assert counts[0] == counts[1], f"two runs of the same halting guest differ: {counts}"
