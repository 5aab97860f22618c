"""emulator/notices.py: the findings the bridge says once (pure model, no QEMU)."""
from __future__ import annotations

import pytest

from p4pmu.emulator import clockmodel as CM
from p4pmu.emulator import events as EV
from p4pmu.emulator import notices as N
from p4pmu.emulator import tables as T
from p4pmu.emulator.models import get_model
from p4pmu.emulator.pmu import PMU

CRU_ESCR0, CRU_ESCR2, BSU_ESCR0, FSB_ESCR0 = 0x3B8, 0x3CC, 0x3A0, 0x3A2
IQ_CCCR0, BPU_CCCR0 = 0x36C, 0x360
ENABLE = 1 << 12
INSTR_ESCR = 0x0400_0A0C  # instr_retired NBOGUSNTAG|BOGUSNTAG, T0_OS|T0_USR (Linux's)
MISP_ESCR = 0x0600_020C  # mispred_branch_retired NBOGUS


def cccr(sel: int, *, compare=False, complement=False, threshold=0) -> int:
    return (ENABLE | sel << 13 | 3 << 16 | compare << 18 | complement << 19
            | threshold << 20)


def pmu() -> PMU:
    return PMU(get_model("0F_04"))


def slot(p: PMU, msr: int) -> int:
    return p.registers[msr].index


def test_modelled_classes_are_the_clock_models_lines():
    assert CM.is_modelled("instr_retired", "NBOGUSNTAG")
    assert CM.is_modelled("branch_retired", "MMTM")
    assert CM.is_modelled("front_end_event", "NBOGUS")  # through load/store tagging
    assert CM.is_modelled("BSQ_cache_reference", "RD_2ndL_MISS")  # the memory model
    assert not CM.is_modelled("BSQ_cache_reference", "RD_3rdL_MISS")  # no L3
    assert CM.is_modelled("FSB_data_activity", "DRDY_OWN")  # the bus model
    assert not CM.is_modelled("FSB_data_activity", "DRDY_OTHER")  # no other agent
    assert CM.is_modelled("IOQ_allocation", "ALL_READ")  # the bus requests (bus_requests.py)
    assert not CM.is_modelled("IOQ_allocation", "MEM_UC")  # no memory types
    assert CM.is_modelled("IOQ_active_entries", "ALL_READ")  # loads wait for reads
    assert not CM.is_modelled("IOQ_active_entries", "ALL_WRITE")  # write-backs hold up nothing
    assert CM.is_modelled("replay_event", "NBOGUS")  # through the replay-tagging metrics
    assert not CM.is_modelled("replay_event", "BOGUS")
    assert not CM.is_modelled("uop_type", "TAGLOADS")  # tags, never counts
    assert all(0 <= c < EV.NUM_CLASSES for c in CM.modelled_classes())


def test_unmodelled_event_on_an_enabled_counter():
    p = pmu()
    p.wrmsr(0, FSB_ESCR0, (0x03 << 25) | (0x60 << 9) | 0xC)  # IOQ_allocation ALL_READ|WRITE
    p.wrmsr(0, BPU_CCCR0, cccr(6))
    n = N.unmodelled(p, 0)  # (no request type, memory type or agent: selects nothing)
    assert n is not None and "IOQ_allocation" in n.text and "reads 0" in n.text
    assert n.key == ("unmodelled", "IOQ_allocation", 0x60)
    assert "read 2821h, rfo 2821h, writeback 2841h" in n.text
    p.wrmsr(0, FSB_ESCR0, (0x03 << 25) | (0x2861 << 9) | 0xC)  # every own write-back request
    assert N.unmodelled(p, 0) is None
    # BSQ_allocation's mask is an encoding per sub-group: REQ_TYPE0 alone is a read
    # invalidate of 0 chunks to UC memory, which the model never makes
    p.wrmsr(0, BSU_ESCR0, (0x05 << 25) | (0x0001 << 9) | 0xC)
    p.wrmsr(0, BPU_CCCR0, cccr(7))
    n = N.unmodelled(p, 0)
    assert n is not None and "mask 0001h" in n.text and N.empty_mask(p, 0) is None
    p.wrmsr(0, BSU_ESCR0, (0x05 << 25) | (0x328D << 9) | 0xC)  # reads for ownership
    assert N.unmodelled(p, 0) is None
    p.wrmsr(0, FSB_ESCR0, (0x03 << 25) | (0x60 << 9) | 0xC)
    p.wrmsr(0, BPU_CCCR0, cccr(6))
    p.wrmsr(0, FSB_ESCR0, 0x2E00_060C)  # FSB_data_activity DRDY_DRV|DRDY_OWN (bus-cycles)
    assert N.unmodelled(p, 0) is None  # the bus model
    p.wrmsr(0, BPU_CCCR0, cccr(6) & ~ENABLE)
    assert N.unmodelled(p, 0) is None  # not enabled: nothing counts
    # Linux's cache-misses: L2 misses (modelled), L3 misses and L1 write-back lookups (none on
    # these parts: 0 as on the hardware): no notice
    p.wrmsr(0, BSU_ESCR0, 0x180E_000C)
    p.wrmsr(0, BPU_CCCR0, cccr(7))
    assert N.unmodelled(p, 0) is None


def test_modelled_events_and_the_every_clock_filter_are_not_reported():
    p = pmu()
    p.wrmsr(0, CRU_ESCR0, INSTR_ESCR)
    p.wrmsr(0, IQ_CCCR0, cccr(4))
    assert N.unmodelled(p, 12) is None
    # an event without a model (x87_assist) under COMPARE+COMPLEMENT threshold 15 counts
    # every clock
    p.wrmsr(0, CRU_ESCR2, (0x03 << 25) | (0x1F << 9) | 0xC)
    p.wrmsr(0, IQ_CCCR0, cccr(5, compare=True, complement=True, threshold=15))
    assert N.unmodelled(p, 12) is None
    p.wrmsr(0, IQ_CCCR0, cccr(5))
    assert "x87_assist" in N.unmodelled(p, 12).text


def test_an_escr_reprogrammed_under_an_enabled_counter():
    p = pmu()
    p.wrmsr(0, CRU_ESCR0, MISP_ESCR)
    p.wrmsr(0, IQ_CCCR0, cccr(4))
    old = int(p.escr_raw[slot(p, CRU_ESCR0)])
    p.wrmsr(0, CRU_ESCR0, INSTR_ESCR)
    n = N.escr_changed_under(p, slot(p, CRU_ESCR0), old)
    assert n is not None and n.key == ("shared-counter",)
    assert "mispred_branch_retired to instr_retired" in n.text and "counter 12" in n.text
    # the same event written again, or any write while the counter is off: nothing to say
    assert N.escr_changed_under(p, slot(p, CRU_ESCR0), INSTR_ESCR) is None
    p.wrmsr(0, IQ_CCCR0, cccr(4) & ~ENABLE)
    p.wrmsr(0, CRU_ESCR0, MISP_ESCR)
    assert N.escr_changed_under(p, slot(p, CRU_ESCR0), INSTR_ESCR) is None


@pytest.mark.parametrize("old, new, said", [
    (cccr(4), cccr(5, compare=True, complement=True, threshold=15), True),  # Linux's alias
    (cccr(4), cccr(4) | 1 << 31, False),  # only OVF differs
    (cccr(4) & ~ENABLE, cccr(5), False),  # enabled from off: a plain start
    (cccr(4), cccr(4) & ~ENABLE, False),  # stopped
])
def test_a_cccr_reprogrammed_while_enabled(old, new, said):
    p = pmu()
    p.wrmsr(0, IQ_CCCR0, new)
    assert (N.cccr_changed_under(p, 12, old) is not None) == said


def test_counter_rewritten_names_the_61_driver():
    n = N.counter_rewritten(0x30C, (1 << 40) - 1000, 0)
    assert "counter 12 (MSR_IQ_COUNTER0)" in n.text and "p4_pmu_set_period" in n.text
    assert "periods 1000 and 0" in n.text and "--kernel 5.10" in n.text


def test_every_replay_metric_is_modelled():
    """replay_event counts replay-tagged uops (SDM Table 19-33): every metric has a model
    (the predictor, the memory model), and no metric at all reads 0 on silicon too."""
    assert {m.name for m in EV.REPLAY_METRICS} == set(CM.REPLAY_FEATURES)
    p = pmu()
    CRU_ESCR2, IQ_CCCR1 = 0x3CC, 0x36D
    p.wrmsr(0, CRU_ESCR2, (0x09 << 25) | (1 << 9) | (1 << 2) | (1 << 3))
    p.wrmsr(0, IQ_CCCR1, (1 << 12) | (5 << 13) | (3 << 16))
    assert N.unmodelled(p, 13) is None  # no metric selected
    p.wrmsr(0, T.MSR_PEBS_ENABLE, 0x0101_8000)
    p.wrmsr(0, T.MSR_PEBS_MATRIX_VERT, 0x10)
    assert N.unmodelled(p, 13) is None  # Tagged_mispred_branch
    p.wrmsr(0, T.MSR_PEBS_ENABLE, 0x0100_0004)
    p.wrmsr(0, T.MSR_PEBS_MATRIX_VERT, 0x1)
    assert N.unmodelled(p, 13) is None  # DTLB_load_miss_retired (the memory model)
    p.wrmsr(0, T.MSR_PEBS_ENABLE, 0x0100_0200)
    assert N.unmodelled(p, 13) is None  # MOB_load_replay_retired (the store buffers)
    assert [m.name for m in EV.replay_metrics(0x0100_0004, 0x3)] == [
        "DTLB_load_miss_retired", "DTLB_store_miss_retired", "DTLB_all_miss_retired"]
    assert EV.replay_metrics(0x4, 0x1) == ()  # no UOP_TAG: nothing tagged
    # MATRIX_VERT's bits select the uop types: loads alone, stores alone (Linux's
    # dTLB-load-misses and dTLB-store-misses)
    assert [m.name for m in EV.replay_metrics(0x0100_0004, 0x1)] == ["DTLB_load_miss_retired"]
    assert [m.name for m in EV.replay_metrics(0x0100_0004, 0x2)] == ["DTLB_store_miss_retired"]


def test_an_event_with_an_empty_mask_explains_itself():
    """Linux's ref-cycles (and stalled-cycles-*): no NetBurst event, so the driver programs
    TC_deliver_mode (ESCR select 1) with no mask bit: nothing counts, on silicon too, and the
    notice says so and why."""
    p = pmu()
    tc_escr0 = next(e.msr for e in T.ESCRS if e.name == "MSR_TC_ESCR0")
    sel = next(s for s in range(8) if (e := T.escr_for(4, s)) and e.name == "MSR_TC_ESCR0")
    p.wrmsr(0, tc_escr0, (0x01 << 25) | 0xC)  # TC_deliver_mode, mask 0, T0_OS|T0_USR
    p.wrmsr(0, T.CCCR_BASE + 4, cccr(sel))
    n = N.empty_mask(p, 4)
    assert n is not None and n.key == ("empty_mask", "TC_deliver_mode")
    assert "counts nothing, on a Pentium 4 too" in n.text and "ref-cycles" in n.text
    assert N.programming(p, 4) == [n]
    assert N.unmodelled(p, 4) is None  # (no mask bit: nothing unmodelled is counted)
    p.wrmsr(0, tc_escr0, (0x01 << 25) | (1 << 9) | 0xC)  # DD: a mask bit
    assert N.empty_mask(p, 4) is None
    p.wrmsr(0, tc_escr0, (0x01 << 25) | 0xC)
    p.wrmsr(0, T.CCCR_BASE + 4, cccr(sel, compare=True, complement=True, threshold=15))
    assert N.empty_mask(p, 4) is None  # the count-every-clock idiom does count
    p.wrmsr(0, T.CCCR_BASE + 4, cccr(sel) & ~ENABLE)
    assert N.empty_mask(p, 4) is None  # not enabled

