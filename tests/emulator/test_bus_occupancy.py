"""The bus queues' occupancy (bsq_active_entries, IOQ_active_entries; docs/events.md, "Bus
requests"): with timing=memory a load's L2 miss stalls it for the memory latency, and the
queues hold its line read for those clocks -- every clock on a Northwood, every other clock
on a Prescott (SDM Vol. 3B Table 19-28) -- as the last of the execution's stall clocks."""
from __future__ import annotations

import pytest
from pmu_cases import program

from p4pmu.emulator import bus_requests as BR
from p4pmu.emulator import clockmodel as CM
from p4pmu.emulator import insn_classes as IC
from p4pmu.emulator import notices as N
from p4pmu.emulator import tables as T
from p4pmu.emulator import timing as TM
from p4pmu.emulator.activity import Activity
from p4pmu.emulator.models import MODELS, get_model
from p4pmu.emulator.pmu import PMU

READ = BR.REQUEST_BY_NAME["read"]
LOAD_NOP = bytes.fromhex("8b03" "90")  # mov eax, [ebx]; nop


def _clocks(core: str, mem: dict) -> list:
    p = CM.core_params(core, memory_timing=1)
    return CM.block_clocks(IC.classify(LOAD_NOP, 0x1000, 32, core), params=p, mem=mem)


@pytest.mark.parametrize("core", TM.CORES)
def test_a_misses_stall_clocks_hold_its_read_last(core):
    t = TM.CORE_TIMING[core]
    stall = t.mem_load - t.l1_load
    assert stall % t.queue_update == 0  # (so per access and per instruction agree)
    base = _clocks(core, {})
    got = _clocks(core, {0: {"l2_ld": 1, "ld_l2miss": 1, "dtlb_ld": 1, "ld_dtlb": 1}})
    active = stall // t.queue_update
    assert len(got) == len(base) + stall + t.dtlb_walk
    flags = [c["rd_active"] for c in got]
    start = 1 + stall + t.dtlb_walk - active  # after the bubble and the idle stalls
    assert flags == [0] * start + [1] * active + [0] * (len(got) - start - active)
    assert all(c.key() == CM.Clock().key() for c in got[:start])  # the others stay empty
    assert len(got) - start - active == len(base) - 1  # then the instructions' clocks
    assert {"northwood": 288, "prescott": 143}[core] == active  # (docs/events.md)
    # timing=core: no stall, no occupancy
    p = CM.core_params(core)
    assert CM.queue_active({"l2_ld": 1}, p) == 0


def _count(model, clocks, escr: str, event: str, select: int, mask: int, counter: int,
           edge: bool = False) -> int:
    pmu = PMU(model)
    cccr = dict(ENABLE=1, COMPARE=1, EDGE=1) if edge else dict(ENABLE=1)
    program(pmu, counter, escr, event, [], **cccr)
    pmu.wrmsr(0, T.ESCR_BY_NAME[escr].msr, (select << 25) | mask << 9 | 0xC)  # OS | USR
    pmu.advance(Activity.from_clocks([CM.clock_kind(c) for c in clocks]))
    return pmu.rdmsr(0, T.COUNTER_BASE + counter)


@pytest.mark.parametrize("key", sorted(MODELS))
def test_the_engine_counts_one_entry_per_active_clock(key):
    """Two executions, one with a load that misses L2 twice (a split line): the occupancy
    events count the read's active clocks with its masks (an edge once per execution), and
    nothing with a store's or a write-back's."""
    model = get_model(key)
    core = model.core
    t = TM.CORE_TIMING[core]
    per = (t.mem_load - t.l1_load) // t.queue_update
    miss = _clocks(core, {0: {"l2_ld": 2, "ld_l2miss": 1}})
    clocks = miss + _clocks(core, {}) + miss
    want = 2 * 2 * per
    bsq = ("MSR_BSU_ESCR1", "bsq_active_entries", 0x06)
    assert _count(model, clocks, *bsq, READ.bsq, 2) == want
    assert _count(model, clocks, *bsq, READ.bsq, 2, edge=True) == 2
    for r in BR.REQUESTS[1:]:
        assert _count(model, clocks, *bsq, r.bsq, 2) == 0, r.name
    ioq = ("MSR_FSB_ESCR1", "IOQ_active_entries", 0x1A)
    assert _count(model, clocks, *ioq, 0x2861, 2) == want  # every request
    assert _count(model, clocks, *ioq, READ.ioq, 3) == want
    assert _count(model, clocks, *ioq, BR.REQUEST_BY_NAME["writeback"].ioq, 3) == \
        (want if model.model < 2 else 0)  # (models 0, 1: the default type ORs in)


def test_a_counter_of_occupancy_without_memory_timing_gets_a_notice():
    model = get_model("0F_04")
    pmu = PMU(model)
    program(pmu, 2, "MSR_BSU_ESCR1", "bsq_active_entries", [], ENABLE=1)
    pmu.wrmsr(0, T.ESCR_BY_NAME["MSR_BSU_ESCR1"].msr, (0x06 << 25) | READ.bsq << 9 | 0xC)
    (n,) = N.programming(pmu, 2, memory_timing=False)
    assert n.key == ("needs_memory_timing", "bsq_active_entries")
    assert "only timing=memory charges" in n.text and "reads 0" in n.text
    assert N.programming(pmu, 2, memory_timing=True) == []
