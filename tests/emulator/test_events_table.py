"""The declarative tables against the SDM (Tables 18-63, 19-28, 19-29, 35-41) and against the
register encodings Linux writes (arch/x86/events/intel/p4.c, docs/linux-guest.md)."""
import collections

import pytest

from p4pmu.emulator import events as EV
from p4pmu.emulator import tables as T
from p4pmu.emulator.models import get_model
from p4pmu.emulator.pmu import PMU

FSB_BUS = {"b2b_cycles", "bnr", "snoop", "response"}


def test_47_events_36_non_retirement_11_at_retirement():
    """SDM Ch. 19: 35 NR events of Table 19-28 + x87_SIMD_moves_uop, 10 AR of Table 19-29 and
    instr_completed of Table 19-30 -- 47 in all."""
    kinds = collections.Counter(e.kind for e in EV.EVENTS)
    assert len(EV.EVENTS) == 47 and kinds == {"NR": 36, "AR": 11}
    assert len(EV.EVENT_BY_NAME) == 47


def test_events_are_keyed_uniquely_on_escr_and_select():
    pairs = [(escr, e.select) for e in EV.EVENTS for escr in e.escrs]
    assert len(pairs) == len(set(pairs)) == len(EV.EVENT_BY_ESCR)
    for e in EV.EVENTS:
        for escr in e.escrs:
            assert escr in T.ESCR_BY_NAME, (e.name, escr)


def test_cccr_select_is_the_escr_number_except_the_four_fsb_bus_events():
    """SDM 18.15.5.1: 'CCCR select ... is the number of the ESCR from the Number column in Table
    18-63'.  b2b_cycles/bnr/snoop/response print 03h against FSB's number 6 (decision D14)."""
    for e in EV.EVENTS:
        numbers = {T.ESCR_BY_NAME[x].number for x in e.escrs}
        if e.name in FSB_BUS:
            assert e.cccr_select == 3 and numbers == {6} and "select 6" in e.note
        else:
            assert numbers == {e.cccr_select}, e.name


def test_mask_bits_are_within_the_16_bit_field():
    for e in EV.EVENTS:
        assert e.mask and all(0 <= b <= 15 for b in e.mask), e.name
        assert len(set(e.mask.values())) == len(e.mask), e.name


def test_thread_independent_events_are_table_19_34_plus_the_unlisted_bus_events():
    ti = {e.name for e in EV.EVENTS if e.thread == "TI"}
    assert ti == {"TC_deliver_mode", "page_walk_type", "FSB_data_activity", "SSE_input_assist",
                  "packed_SP_uop", "packed_DP_uop", "scalar_SP_uop", "scalar_DP_uop",
                  "64bit_MMX_uop", "128bit_MMX_uop", "x87_FP_uop", "x87_SIMD_moves_uop",
                  "WC_Buffer"} | FSB_BUS


def test_event_classes_cover_every_mask_bit_of_every_counting_event():
    # (a bus-queue event has one class per bus request instead: bus_requests.py)
    assert EV.NUM_CLASSES == sum(len(e.line_bits) for e in EV.EVENTS if e.counts)
    assert {c.bit_name for c in EV.CLASSES if c.event == "BSQ_allocation"} == \
        {"read", "rfo", "writeback"}
    assert not any(c.event == "uop_type" for c in EV.CLASSES)
    assert EV.CLASSES[EV.class_id("branch_retired", "MMTM")].label == "branch_retired.MMTM"


@pytest.mark.parametrize("escr,value,event,bits", [
    # arch/x86/events/intel/p4.c, p4_general_events (T0_OS|T0_USR = 0Ch)
    ("MSR_FSB_ESCR0", 0x2600_020C, "global_power_events", {"RUNNING"}),
    ("MSR_CRU_ESCR2", 0x1801_FE0C, "execution_event",
     {"NBOGUS0", "NBOGUS1", "NBOGUS2", "NBOGUS3", "BOGUS0", "BOGUS1", "BOGUS2", "BOGUS3"}),
    ("MSR_CRU_ESCR0", 0x0400_0A0C, "instr_retired", {"NBOGUSNTAG", "BOGUSNTAG"}),
    ("MSR_BSU_ESCR0", 0x1800_7E0C, "BSQ_cache_reference",
     {"RD_2ndL_HITS", "RD_2ndL_HITE", "RD_2ndL_HITM", "RD_3rdL_HITS", "RD_3rdL_HITE",
      "RD_3rdL_HITM"}),
    ("MSR_BSU_ESCR0", 0x180E_000C, "BSQ_cache_reference",
     {"RD_2ndL_MISS", "RD_3rdL_MISS", "WR_2ndL_MISS"}),
    ("MSR_TBPU_ESCR0", 0x0800_3C0C, "retired_branch_type",
     {"CONDITIONAL", "CALL", "RETURN", "INDIRECT"}),
    ("MSR_CRU_ESCR0", 0x0600_020C, "mispred_branch_retired", {"NBOGUS"}),
    ("MSR_FSB_ESCR0", 0x2E00_060C, "FSB_data_activity", {"DRDY_DRV", "DRDY_OWN"}),
    # SDM 18.15.5.7, Example 18-2 (its values decoded against Table 18-65)
    ("MSR_CRU_ESCR0", 0x0400_0603, "instr_retired", {"NBOGUSNTAG", "NBOGUSTAG"}),
    ("MSR_CRU_ESCR2", 0x0400_060C, "machine_clear", {"CLEAR"}),  # + undocumented bit 1
])
def test_linux_and_sdm_encodings_decode_to_the_documented_events(escr, value, event, bits):
    pmu = PMU(get_model())
    pmu.wrmsr(0, T.ESCR_BY_NAME[escr].msr, value)
    slot = pmu.escr_slot[escr]
    ev = EV.event_for(escr, int(pmu.event_select[slot]))
    assert ev.name == event
    mask = int(pmu.event_mask[slot])
    assert {n for b, n in ev.mask.items() if mask >> b & 1} == bits
    assert ev.escr_value(*bits, t0_os=bool(value & 8), t0_usr=bool(value & 4),
                         t1_os=bool(value & 2), t1_usr=bool(value & 1)) == value & ~(
        (mask & ~ev.mask_value(*bits)) << 9)


def test_escr_inventory_per_block():
    """SDM Table 18-63: per-block ESCR counts BPU 16, MS 6, FLAME 10, IQ 13 (11 without
    IQ_ESCR0/1)."""
    per_block = collections.Counter(e.block for e in T.ESCRS)
    assert per_block == {"BPU": 16, "MS": 6, "FLAME": 10, "IQ": 13}
    assert sum(1 for e in T.ESCRS if 4 in e.models and e.block == "IQ") == 11
