"""The deadline check's tight bounds (the `tight` plugin option; docs/guest-events.md,
"Deadlines and exactness at an overflow") must never change results, only how often Python
is asked.

A counter one rare event away from a state change was stepped block by block in Python:
a FORCE_OVF counter on an event that hardly ever happens (its next event overflows it), a
counter whose next event arms a PMI, an EDGE counter with COMPLEMENT (its threshold passes
nearly every clock, so the passing-clock bound said "maybe an edge" at every block).  With
`tight=on` (the default) an order-free change is looked at once it may have happened, and an
EDGE counter with COMPLEMENT is bounded by its failing clocks.  Each script runs with
`tight=on` and `tight=off`: everything the guest printed (values, PMI records: vector, OVF
flags, interrupted IP, counter value) must be identical, the counts must be the hand-counted
ones, and the plugin's debug summary (P4PMU_DEBUG=1) must show Python deadline steps per
interrupt instead of per block.
"""
from __future__ import annotations

import re

import pytest

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

C0, C2 = "MSR_CRU_ESCR0", "MSR_CRU_ESCR2"
ALL_BRANCHES = ("MMNP", "MMNM", "MMTP", "MMTM")
QUIET = 20_000  # iterations of a loop in which the rare event never happens
_VCPU = re.compile(r"p4pmu-debug: vCPU 0: \d+ folds, (\d+) deadline callbacks \((\d+) re-armed "
                   r"by the C check\)")


def _run(run_guest, script: EvScript, tight: str, bits: int, opts=()):
    r = run_guest(f"events{bits}", model="0F_04", script=script,
                  plugin_opts=(f"tight={tight}", *opts), env={"P4PMU_DEBUG": "1"}, timeout=300)
    r.require_completed()
    v = [m for m in map(_VCPU.match, r.stderr.splitlines()) if m]
    assert len(v) == 1, r.stderr[-2000:]
    return r.out.lines, int(v[0].group(1))


def _both(run_guest, script: EvScript, bits: int, opts=()):
    """The guest's output (the same with both bounds) and Python's deadline steps per bound."""
    on, steps_on = _run(run_guest, script, "on", bits, opts)
    off, steps_off = _run(run_guest, script, "off", bits, opts)
    assert on == off, "guest output differs:\n" + "\n".join(
        f"  tight=on  {a!r}\n  tight=off {b!r}" for a, b in zip(on, off) if a != b)
    return parse_events(on), steps_on, steps_off


def _handler(s: EvScript, ctr: int, flags: int = PMI_CLEAR_OVF | PMI_UNMASK,
             reload: int = 0, cccr: int = 0) -> None:
    lvt = LVT_NMI | VEC_PMI
    s.pmi_config(flags, counter=ctr, reload=reload, cccr=cccr, lvt=lvt)
    s.pmi_reset()
    s.lvt(lvt)


@pytest.mark.parametrize("bits", (32, 64))
def test_a_force_ovf_counter_on_a_rare_event(run_guest, bits):
    """FORCE_OVF on self-modifying-code machine clears (SDM 18.15.5.8: every increment
    overflows): none in the quiet loop, then one clear per iteration of `smc` after the
    first (which stores into code not fetched yet), each an overflow, a PMI and the
    handler's OVF clear.  Nothing waits on counter 12 (no CASCADE): its overflow is
    order-free.  With `tight=off` it is stepped block by block, one-block batches whose
    clocks must keep their memory fields after the block's end is resolved (plugin/memory.c
    mem_patch_seq)."""
    s = EvScript()
    _handler(s, 12)
    s.wrmsr(escr_msr(C2), escr_value("machine_clear", "SMCLEAR", t0_os=True))
    s.wrmsr(counter_msr(12), 0)
    s.wrmsr(cccr_msr(12), cccr_value(12, C2, force_ovf=True, pmi_t0=True))
    s.loop("alu", QUIET)
    s.rdmsr(counter_msr(12), "quiet")
    s.loop("smc", 20)
    s.wrmsr(cccr_msr(12), 0)
    s.rdmsr(counter_msr(12), "clears")
    s.pmi_log()
    out, on, off = _both(run_guest, s, bits)
    assert (out["quiet"], out["clears"]) == (0, 19), out.values
    assert out.pmi_counts[0][0] == 19, out.pmi_counts
    assert all(p.ovf >> 12 & 1 for p in out.pmis), out.pmis
    assert off >= QUIET, (on, off)  # the quiet loop, block by block
    assert on <= 5 * 19 + 50, (on, off)  # a few per interrupt


def test_an_arming_counter_on_a_rare_event(run_guest):
    """OVF already set with OVF_PMI (written so): the next event arms the PMI request (SDM
    18.15.5.8), order-free.  None in the quiet loop; the first clear of `smc` (its second
    iteration) interrupts.  Without the register mirror (which serves this simple
    programming's deadlines in C by itself: docs/bridge.md), so that the feeder's bounds
    decide."""
    s = EvScript()
    _handler(s, 12, PMI_CLEAR_OVF)  # (the request stays asserted while OVF is set)
    s.wrmsr(escr_msr(C2), escr_value("machine_clear", "SMCLEAR", t0_os=True))
    s.wrmsr(counter_msr(12), 5)
    s.wrmsr(cccr_msr(12), cccr_value(12, C2, pmi_t0=True, ovf=True))
    s.loop("alu", QUIET)
    s.loop("smc", 3)
    s.wrmsr(cccr_msr(12), 0)
    s.rdmsr(counter_msr(12), "c12")
    s.pmi_log()
    out, on, off = _both(run_guest, s, 32, ("mirror=off",))
    assert out["c12"] == 5 + 2, out.values
    assert out.pmi_counts[0][0] == 1, out.pmi_counts
    assert off >= QUIET and on <= 50, (on, off)


def test_an_edge_counter_with_complement_that_always_passes(run_guest):
    """COMPARE + COMPLEMENT with threshold 15 passes every clock (no clock presents more
    than 15 events, SDM 18.15.5.2); EDGE counts its one rising edge, the first clock after
    the CCCR write (the detector starts from "not passing", docs/emulator.md D1).  Counter 12
    starts two edges from its overflow, with OVF_PMI: watched all along, one edge away.  The
    passing-clock bound saw a possible edge in every block; the failing-clock bound sees
    none.  (No FORCE_OVF here: a handler's CCCR write to clear OVF resets the detector, so
    such a counter would interrupt again at once, forever.)"""
    s = EvScript()
    _handler(s, 12)
    s.wrmsr(escr_msr(C0), escr_value("instr_retired", "NBOGUSNTAG", t0_os=True))
    s.wrmsr(counter_msr(12), preset(2))
    s.wrmsr(cccr_msr(12), cccr_value(12, C0, compare=True, complement=True, threshold=15,
                                     edge=True, pmi_t0=True))
    s.loop("alu", QUIET)
    s.wrmsr(cccr_msr(12), 0)
    s.rdmsr(counter_msr(12), "c12")
    s.rdmsr(cccr_msr(12), "cccr12")
    s.pmi_log()
    out, on, off = _both(run_guest, s, 32)
    assert out["c12"] == preset(2) + 1 and not out["cccr12"] >> 31 & 1, out.values
    assert out.pmi_counts[0][0] == 0, out.pmi_counts
    assert off >= QUIET and on <= 50, (on, off)


@pytest.mark.parametrize("bits", (32, 64))
def test_sampling_rising_edges_of_clocks_without_a_branch(run_guest, bits):
    """Real edges under the failing-clock bound: COMPARE + COMPLEMENT + EDGE, threshold 0,
    on retired branches counts the stretches of branch-free clocks; counter 12 interrupts
    every 40 of them in a ring-3 loop (the logging handler clears OVF, reloads, unmasks), and
    counter 13 counts the same edges without interrupting.  Both bounds must place every
    interrupt at the same instruction with the same counter value."""
    period = 40
    edges = cccr_value(12, C2, compare=True, complement=True, threshold=0, edge=True,
                       pmi_t0=True)
    s = EvScript()
    _handler(s, 12, PMI_CLEAR_OVF | PMI_RELOAD | PMI_UNMASK, reload=preset(period - 1),
             cccr=edges)
    s.wrmsr(escr_msr(C2), escr_value("branch_retired", *ALL_BRANCHES, t0_usr=True))
    s.wrmsr(counter_msr(12), preset(period - 1))
    s.wrmsr(counter_msr(13), 0)
    s.wrmsr(cccr_msr(13), cccr_value(13, C2, compare=True, complement=True, threshold=0,
                                     edge=True))
    s.wrmsr(cccr_msr(12), edges)
    s.loop("alt", 3000, user=True, intr=True)
    s.wrmsr(cccr_msr(12), 0)
    s.wrmsr(cccr_msr(13), 0)
    s.rdmsr(counter_msr(13), "edges")
    s.pmi_log()
    out, on, off = _both(run_guest, s, bits)
    n = out.pmi_counts[0][0]
    assert out["edges"] >= 3000 and n >= out["edges"] // (2 * period), (out.values, n)
    assert len({p.ip for p in out.pmis}) > 1, out.pmis  # interrupts in the loop, not one place
    assert on <= off, (on, off)
