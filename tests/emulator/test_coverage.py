"""emulator/coverage.py: every event and mask bit has a status and a reason, consistent with
what the clock model's lines drive (clockmodel.is_modelled), and the tables it reads are
complete (every feature described, every event without a model given a reason)."""
from __future__ import annotations

from p4pmu.emulator import clockmodel as CM
from p4pmu.emulator import coverage as COV
from p4pmu.emulator import events as EV


def _all():
    return [COV.bit_status(e.name, b) for e in EV.EVENTS for b in sorted(e.mask)]


def test_every_feature_says_what_it_counts():
    assert set(COV.FEATURE_SOURCE) == set(CM.FEATURES)


def test_status_follows_the_clock_models_lines():
    for st in _all():
        ev = EV.EVENT_BY_NAME[st.event]
        modelled = ev.counts and CM.is_modelled(st.event, st.bit)
        assert (st.status != COV.ZERO) == modelled, st
        assert st.text and st.text != "not modelled", st  # every 0 has its reason


def test_known_statuses():
    by = {(s.event, s.name): s for s in _all()}
    assert by[("instr_completed", "NBOGUS")].status == COV.EXACT
    assert by[("retired_branch_type", "CONDITIONAL")].status == COV.EXACT
    assert by[("global_power_events", "RUNNING")].status == COV.MODELLED
    assert by[("branch_retired", "MMTM")].status == COV.MODELLED  # the predictor
    assert by[("replay_event", "NBOGUS")].status == COV.MODELLED
    assert "mispredicted branches" in by[("replay_event", "NBOGUS")].text
    assert by[("BSQ_cache_reference", "RD_2ndL_MISS")].status == COV.MODELLED
    assert "memory model" in by[("BSQ_cache_reference", "RD_2ndL_MISS")].text
    assert by[("memory_complete", "LSC")].status == COV.EXACT  # address and size alone
    assert by[("BSQ_cache_reference", "RD_3rdL_MISS")].status == COV.ZERO
    assert by[("BSQ_cache_reference", "RD_3rdL_MISS")].text == COV.HARDWARE_ZERO[
        ("BSQ_cache_reference", "RD_3rdL_MISS")]
    assert by[("FSB_data_activity", "DRDY_OWN")].status == COV.MODELLED  # the bus model
    # the bus requests: their masks' bits count, the attributes no request has do not
    assert by[("IOQ_allocation", "ALL_READ")].status == COV.MODELLED
    assert "read 2821h, rfo 2821h" in by[("IOQ_allocation", "ALL_READ")].text
    assert by[("IOQ_allocation", "MEM_UC")].status == COV.ZERO
    assert by[("BSQ_allocation", "REQ_TYPE1")].text.endswith("writeback 328Fh")
    assert by[("BSQ_allocation", "REQ_LOCK_TYPE")].status == COV.ZERO
    # the queues' occupancy: the reads loads wait for; no time for stores' requests; the
    # attributes no request has say why, as the allocations do
    assert by[("bsq_active_entries", "REQ_LEN0")].status == COV.MODELLED
    assert by[("bsq_active_entries", "REQ_LEN0")].text.endswith(
        "read 328Ch for the clocks a load waits for it (timing=memory)")
    assert by[("bsq_active_entries", "REQ_TYPE0")].text == \
        COV.ZERO_REASON["bsq_active_entries"]  # rfo's bit
    assert by[("IOQ_active_entries", "ALL_WRITE")].text == \
        COV.ZERO_REASON["IOQ_active_entries"]  # writeback's bit
    assert by[("IOQ_active_entries", "MEM_UC")].text == by[("IOQ_allocation", "MEM_UC")].text
    assert by[("machine_clear", "SMCLEAR")].status == COV.MODELLED  # self-modifying code
    assert by[("MOB_load_replay", "NO_STA")].status == COV.ZERO
    # the trace cache: built block executions (the code-line record), modes per clock
    assert by[("uop_queue_writes", "FROM_TC_BUILD")].status == COV.MODELLED
    assert by[("TC_deliver_mode", "BI")].status == COV.MODELLED
    assert by[("TC_deliver_mode", "IB")].status == COV.MODELLED  # LP 1 with LP 0 halted
    assert by[("TC_deliver_mode", "BB")].status == COV.ZERO


def test_the_summary_counts_events_and_bits():
    sts = _all()
    events = {s.event for s in sts if s.status != COV.ZERO}
    bits = sum(s.status != COV.ZERO for s in sts)
    first = COV.markdown().splitlines()[0]
    assert first.startswith(f"{len(events)} of {len(EV.EVENTS)} events and {bits} of "), first
    assert len(events) >= 34
