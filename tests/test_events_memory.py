"""Memory-side events on real guest activity (docs/memory-model.md): split loads and stores
counted exactly, in the clock their instruction retires in, through every counter filter
(threshold, complement, edge) and replay tagging's split metrics -- against the documented
clock model with the split accesses of the `split` loop (tests/guests/evexpect.py
ClockOracle), exact.  Every other loop has no split access: its split events must not move.
"""
from __future__ import annotations

import pytest
from guests.evexpect import ClockOracle, LoopModel, oracle_mismatches
from guests.evplan import Ctr, Plan, Setup
from guests.evscript import parse_events
from guests.loops import TRACEABLE

from p4pmu.qemu_glue.guests import build as guest_build

pytestmark = pytest.mark.guest

S0, S1 = "MSR_SAAT_ESCR0", "MSR_SAAT_ESCR1"
C0, C2, C3 = "MSR_CRU_ESCR0", "MSR_CRU_ESCR2", "MSR_CRU_ESCR3"
REPLAY_SPLIT_LD = [(0x3F1, (1 << 24) | (1 << 10)), (0x3F2, 1 << 0)]  # SDM Table 19-33
REPLAY_SPLIT_ST = [(0x3F1, (1 << 24) | (1 << 10)), (0x3F2, 1 << 1)]

SETUPS = [
    Setup("split", [
        Ctr(8, S0, "memory_complete", ("LSC", "SSC"), os=True, usr=True),
        # rising edges of "a split completes in this clock"
        Ctr(9, S0, "memory_complete", ("LSC", "SSC"), os=True, usr=True, compare=True,
            threshold=0, edge=True),
        Ctr(10, S1, "load_port_replay", ("SPLIT_LD",), os=True, usr=True),
        # clocks without a split load
        Ctr(11, S1, "load_port_replay", ("SPLIT_LD",), os=True, usr=True, compare=True,
            complement=True, threshold=0),
        Ctr(13, C2, "replay_event", ("NBOGUS",), os=True, usr=True),
        Ctr(12, C0, "instr_retired", ("NBOGUSNTAG",), os=True, usr=True),
    ], msr_writes=REPLAY_SPLIT_LD),
    Setup("split2", [
        Ctr(8, S0, "store_port_replay", ("SPLIT_ST",), usr=True),
        Ctr(9, S0, "store_port_replay", ("SPLIT_ST",), usr=True, compare=True, threshold=0),
        Ctr(10, S1, "memory_complete", ("LSC",), os=True),
        # falling edges (rising edges of "no split load completes")
        Ctr(11, S1, "memory_complete", ("LSC",), os=True, compare=True, complement=True,
            threshold=0, edge=True),
        Ctr(15, C3, "replay_event", ("NBOGUS",), os=True, usr=True),
    ], msr_writes=REPLAY_SPLIT_ST),
    # instruction fetches: one ITLB look-up per block execution, a hit once the loop's page
    # is in (it is, after the warm-up: the difference of two lengths has no miss)
    Setup("itlb", [
        Ctr(0, "MSR_ITLB_ESCR0", "ITLB_reference", ("HIT",), os=True, usr=True),
        Ctr(1, "MSR_ITLB_ESCR0", "ITLB_reference", ("HIT",), os=True, usr=True, compare=True,
            complement=True, threshold=0, edge=True),
        Ctr(2, "MSR_PMH_ESCR1", "page_walk_type", ("ITMISS",), os=True, usr=True),
        Ctr(3, "MSR_ITLB_ESCR1", "ITLB_reference", ("MISS", "HIT_UC"), usr=True),
        Ctr(12, C0, "instr_retired", ("NBOGUSNTAG",), os=True, usr=True),
    ]),
]

PLAN = Plan(SETUPS, list(TRACEABLE), rings=(0, 3), ns=(120, 1200))


@pytest.fixture(scope="module")
def memory(run_guest):
    cache = {}

    def get(bits: int):
        if bits not in cache:
            r = run_guest(f"events{bits}", script=PLAN.script(), timeout=300)
            r.require_completed()
            model = LoopModel(guest_build.BUILD_DIR / f"events{bits}.elf", bits)
            sym = model.img.symbols
            mem = {sym["split_body"]: {"split_ld": 1}, sym["split_ld2"]: {"split_ld": 1},
                   sym["split_ld3"]: {"split_ld": 1}, sym["split_ld4"]: {"split_ld": 1},
                   sym["split_st1"]: {"split_st": 1}}
            # every block's fetch: one ITLB hit (no loop crosses a page)
            cache[bits] = (parse_events(r.out.lines),
                           ClockOracle(model, mem=mem, fetch_hits=True))
        return cache[bits]

    return get


@pytest.mark.parametrize("loop", TRACEABLE)
@pytest.mark.parametrize("bits", (32, 64))
def test_split_accesses_count_exactly_in_their_clocks(memory, bits, loop):
    out, oracle = memory(bits)
    n1, n2 = PLAN.ns
    bad, rows = oracle_mismatches(PLAN, SETUPS, out, oracle, loop)
    if loop == "split":  # the loop does split: the expectations are not trivially 0
        assert PLAN.delta(out, "split", loop, 3, 10) == 4 * (n2 - n1)
    assert not bad, (f"{bits}-bit guest, loop {loop}, {n2} - {n1} iterations: {len(bad)} of "
                     f"{len(rows)} counts differ:\n" + "\n".join(bad))


def test_same_counts_with_the_trace_the_checker_and_the_control_channel(run_guest, memory,
                                                                        tmp_path):
    """Determinism: the memory-level run again with trace=, lint=on and control= (which also
    instrument from the first block): every value the guest read is the same."""
    first, _ = memory(32)
    opts = (f"trace={tmp_path / 't.jsonl'}", "lint=on", f"control={tmp_path / 'c.sock'}")
    r = run_guest("events32", script=PLAN.script(), timeout=300, plugin_opts=opts)
    r.require_completed()
    second = parse_events(r.out.lines)
    diff = [k for k in first.values if first.values[k] != second.values.get(k)]
    assert not diff, f"{len(diff)} of {len(first.values)} values differ, e.g. " + \
        ", ".join(f"{k}: {first.values[k]} vs {second.values.get(k)}" for k in diff[:10])
    assert (tmp_path / "t.jsonl").stat().st_size > 0
