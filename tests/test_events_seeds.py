"""The SDM's worked examples on real guest activity: cascading (SDM Vol. 3B 18.15.5.6,
Example 18-1), halting a counter and a cascaded counter (18.15.5.5), extended cascading
(18.15.5.7, Example 18-2 on a part without HT; the HT form is in test_events_ht.py).  The
cascade-PMI erratum (18.15.5.7) is in test_events_pmi.py, the filters (18.15.5.2) in
test_events_clocks.py.

All counters count USR instructions or branches of ring-3 loops, so every counted event is
part of a known stream (evexpect.user_stream: the ring-3 trampoline and the loop, from the
ELF); where in that stream an overflow starts another counter is given by the documented
clock model (a started counter counts from the clock after the overflow, docs/emulator.md D6), so
the expectations are exact.
"""
from __future__ import annotations

import pytest

from p4pmu.qemu_glue.guests import build as guest_build

from guests.evexpect import LoopModel, overflow_split, user_stream
from guests.evscript import (
    LVT_NMI,
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

MASK40 = (1 << 40) - 1
OVF = 1 << 31
C0, C1, C3 = "MSR_CRU_ESCR0", "MSR_CRU_ESCR1", "MSR_CRU_ESCR3"
USR_INSTR = escr_value("instr_retired", "NBOGUSNTAG", t0_usr=True)
USR_BRANCH = escr_value("branch_retired", "MMNP", "MMNM", "MMTP", "MMTM", t0_usr=True)


def _model():
    return LoopModel(guest_build.BUILD_DIR / "events32.elf", 32)


def _run(run_guest, s, model="0F_04"):
    r = run_guest("events32", model=model, script=s, timeout=60)
    r.require_completed()
    return parse_events(r.out.lines)


def _read(s, counters, prefix):
    for n in counters:
        s.rdmsr(counter_msr(n), f"{prefix}c{n}")
        s.rdmsr(cccr_msr(n), f"{prefix}cccr{n}")


def test_cascade_single_event_extends_the_count(run_guest):
    """SDM Example 18-1: X (counter 12) counts USR instructions from -P, Y (14, CASCADE, ENABLE
    clear) counts the same events and starts when X overflows; Z (15) counts them all.
    Z = the ring-3 instructions of the two loops; Y = the instructions in the clocks after
    X's overflow clock; X wrapped to Z - P and holds OVF; Y's OVF is clear."""
    P = 3000
    s = EvScript()
    s.wrmsr(escr_msr(C0), USR_INSTR)
    s.wrmsr(escr_msr(C1), USR_INSTR)
    s.wrmsr(counter_msr(14), 0)
    s.wrmsr(cccr_msr(14), cccr_value(14, C1, enable=False, cascade=True))
    s.wrmsr(counter_msr(15), 0)
    s.wrmsr(cccr_msr(15), cccr_value(15, C1))
    s.wrmsr(counter_msr(12), preset(P))
    s.wrmsr(cccr_msr(12), cccr_value(12, C0))
    s.loop("alu", 1000, user=True)
    s.loop("callret", 300, user=True)
    _read(s, (12, 14, 15), "")
    out = _run(run_guest, s)
    m = _model()
    streams = [user_stream(m, "alu", 1000), user_stream(m, "callret", 300)]
    z = sum(len(x) for x in streams)
    _, after = overflow_split(m, streams, P)
    assert out["c15"] == z, f"USR instructions: guest {out['c15']}, model {z}"
    assert out["c14"] == after, f"Y counted {out['c14']}; model: {after} (Z {z}, P {P})"
    assert out["c12"] == (z - P) & MASK40 and out["cccr12"] & OVF
    assert not out["cccr14"] & OVF


@pytest.mark.parametrize("shift", (0, 1, 2, 8, 80, 2000))
def test_cascade_two_events_example_18_1(run_guest, shift):
    """SDM Example 18-1 with two events: X counts USR instructions from -(P + shift), Y (CASCADE,
    ENABLE clear) counts USR branches from -Q with OVF_PMI (NMI).  Y counts the branches in
    the clocks after X's overflow clock, overflows iff there are at least Q of them, and
    then interrupts (0F_04: no cascade-PMI erratum)."""
    P, Q = 2000, 1600
    s = EvScript()
    s.pmi_config(0, counter=14)
    s.pmi_reset()
    s.lvt(LVT_NMI | VEC_PMI)
    s.wrmsr(escr_msr(C0), USR_INSTR)
    s.wrmsr(escr_msr(C3), USR_BRANCH)
    s.wrmsr(counter_msr(14), preset(Q))
    s.wrmsr(cccr_msr(14), cccr_value(14, C3, enable=False, cascade=True, pmi_t0=True))
    s.wrmsr(counter_msr(12), preset(P + shift))
    s.wrmsr(cccr_msr(12), cccr_value(12, C0))
    s.loop("alu", 2000, user=True)
    s.loop("nop4", 10)
    _read(s, (12, 14), "")
    s.pmi_log()
    out = _run(run_guest, s)
    _, want = overflow_split(_model(), [user_stream(_model(), "alu", 2000)], P + shift, "br")
    y = (out["c14"] - preset(Q)) & MASK40  # branches Y counted
    assert y == want, f"shift {shift}: Y counted {y} branches; model: {want}"
    assert out["cccr12"] & OVF
    overflowed = y >= Q
    assert bool(out["cccr14"] & OVF) == overflowed, (y, hex(out["cccr14"]))
    assert out.pmi_counts[-1][0] == (1 if overflowed else 0)
    if overflowed:
        assert out.pmis[0].ovf >> 14 & 1


def halting_script() -> EvScript:
    """The guest script of SDM 18.15.5.5, halting (also run by test_mirror with the mirror
    on and off)."""
    P = 500
    s = EvScript()
    s.wrmsr(escr_msr(C0), USR_INSTR)
    s.wrmsr(escr_msr(C1), USR_INSTR)
    # X = 12 (from -P), Y = 14 (cascade from 12), Y2 = 13 (cascade from 15), X2 = 15
    s.wrmsr(counter_msr(14), 0)
    s.wrmsr(cccr_msr(14), cccr_value(14, C1, enable=False, cascade=True))
    s.wrmsr(counter_msr(13), 0)
    s.wrmsr(cccr_msr(13), cccr_value(13, C0, enable=False, cascade=True))
    s.wrmsr(counter_msr(15), preset(P))
    s.wrmsr(cccr_msr(15), cccr_value(15, C1))
    s.wrmsr(counter_msr(12), preset(P))
    s.wrmsr(cccr_msr(12), cccr_value(12, C0))
    s.wrmsr(counter_msr(16), 0)  # reference: counts everything
    s.wrmsr(cccr_msr(16), cccr_value(16, C0))
    s.loop("alu", 300, user=True)
    _read(s, (12, 13, 14, 15, 16), "a.")
    # halt Y by clearing X's OVF (X keeps counting); halt Y2 by clearing its CASCADE bit;
    # halt X2 by clearing ENABLE
    s.wrmsr(cccr_msr(12), cccr_value(12, C0))
    s.wrmsr(cccr_msr(13), cccr_value(13, C0, enable=False, cascade=False))
    s.wrmsr(cccr_msr(15), cccr_value(15, C1, enable=False, ovf=True))
    s.loop("alu", 300, user=True)
    _read(s, (12, 13, 14, 15, 16), "b.")
    return s


def test_halting_a_counter_and_a_cascaded_counter(run_guest):
    """SDM 18.15.5.5: clearing ENABLE stops a counter (the count is kept); a cascaded counter
    stops when its CASCADE bit is cleared or when the OVF flag of its alternate is cleared."""
    s = halting_script()
    out = _run(run_guest, s)
    for n in (13, 14):
        assert out[f"a.c{n}"] > 0, f"cascaded counter {n} never started: {out.values}"
        assert out[f"b.c{n}"] == out[f"a.c{n}"], f"cascaded counter {n} did not stop"
    assert out["b.c15"] == out["a.c15"], "counter 15 counted with ENABLE clear"
    grew = out["b.c16"] - out["a.c16"]
    assert grew > 2400
    assert out["b.c12"] - out["a.c12"] == grew, "X stopped although only its OVF was cleared"


@pytest.mark.parametrize("model,works", [("0F_04", True), ("0F_01", False)])
def test_extended_cascade_example_18_2_without_ht(run_guest, model, works):
    """SDM Example 18-2 on a part without HT: counter 16 counts USR instructions from -P;
    counter 12 has bit 11 (CASCNT4INTO0) and neither ENABLE nor CASCADE, counts the same events and
    starts when counter 16 overflows; counter 13 counts them all.  Models without extended
    cascading (0F_00/01) ignore bit 11: counter 12 never starts."""
    P = 4096
    s = EvScript()
    s.wrmsr(escr_msr(C0), USR_INSTR)
    s.wrmsr(counter_msr(12), 0)
    s.wrmsr(cccr_msr(12), cccr_value(12, C0, enable=False, ext_cascade=True))
    s.wrmsr(counter_msr(13), 0)
    s.wrmsr(cccr_msr(13), cccr_value(13, C0))
    s.wrmsr(counter_msr(16), preset(P))
    s.wrmsr(cccr_msr(16), cccr_value(16, C0))
    s.loop("alu", 1000, user=True)
    _read(s, (12, 13, 16), "")
    out = _run(run_guest, s, model=model)
    m = _model()
    stream = user_stream(m, "alu", 1000)
    _, after = overflow_split(m, [stream], P)
    assert out["c13"] == len(stream)
    assert out["cccr16"] & OVF
    assert out["c12"] == (after if works else 0), (model, out["c12"], after)
