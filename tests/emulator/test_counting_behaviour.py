"""Directed tests of the counting behaviour the SDM documents, in eight groups (event
selection, filtering, overflow and PMI, cascading, halting, extended cascading, the
cascade-PMI erratum, Hyper-Threading), each citing its source: the Intel SDM Vol. 3B sections
18.15.5.1 (selecting events, Table 18-64), 18.15.5.2 (filtering, Fig. 18-46), 18.15.5.5
(halting), 18.15.5.6 (cascading, Example 18-1), 18.15.5.7 (extended cascading, Table 18-65,
Example 18-2), 18.15.5.8 (interrupt on overflow), 18.16 (Hyper-Threading); Linux's driver
arch/x86/events/intel/p4.c; the decisions D1-D21 of docs/emulator.md.
"""
import pytest
from lvt_reference import LVT_MASK, lvt_decode, pmi_delivery
from pmu_cases import WRAP, cccr, kind, neg, program, run_clocks, select_of

from p4pmu.emulator import events as EV
from p4pmu.emulator import tables as T
from p4pmu.emulator.activity import Activity, ClockKind
from p4pmu.emulator.models import MODELS, get_model
from p4pmu.emulator.pmu import PMU

F = T.CCCR_FIELD


def ctr(pmu, n):
    return pmu.rdmsr(0, T.COUNTER_BASE + n)


def ovf(pmu, n):
    return bool(pmu.rdmsr(0, T.CCCR_BASE + n) & F["OVF"].mask)


def clear_ovf(pmu, n):
    pmu.wrmsr(0, T.CCCR_BASE + n, pmu.rdmsr(0, T.CCCR_BASE + n) & ~F["OVF"].mask)


INSTR = ("instr_retired", "NBOGUSNTAG")
BRANCH = ("branch_retired", "MMTP")


# ============================================================================================
# 1. Event selection (SDM 18.15.5.1, Table 18-63, Tables 18-66/18-67)
# ============================================================================================

def test_escr_select_picks_a_wired_escr_and_its_event():
    """CCCR ESCR_SELECT is the ESCR *number*; MS-block counter 4 with select 2 reaches
    TBPU_ESCR0, where select 04h is retired_branch_type (SDM 18.15.5.1, Table 19-28)."""
    pmu = PMU(get_model())
    program(pmu, 4, "MSR_TBPU_ESCR0", "retired_branch_type", ["CONDITIONAL"], ENABLE=1)
    assert select_of(4, "MSR_TBPU_ESCR0") == 2
    k = kind(("retired_branch_type", "CONDITIONAL", 0, 1), ("retired_branch_type", "CALL", 0, 1))
    pmu.advance(Activity.from_kinds([k], [10]))
    assert ctr(pmu, 4) == 10  # CALL not in the mask
    # the same ESCR value behind another select reaches TC_ESCR0: nothing programmed there
    pmu.wrmsr(0, 0x364, cccr(select_of(4, "MSR_TC_ESCR0"), ENABLE=1))
    pmu.advance(Activity.from_kinds([k], [10]))
    assert ctr(pmu, 4) == 10


def test_event_mask_selects_sub_events_and_they_add_up():
    """branch_retired (SDM Table 18-64's example): the mask bits MMNP..MMTM pick sub-events; with
    COMPARE clear the selected lines of one clock add up (18.15.5.2)."""
    pmu = PMU(get_model())
    program(pmu, 12, "MSR_CRU_ESCR2", "branch_retired", ["MMNP", "MMTP"], ENABLE=1)
    a = kind(("branch_retired", "MMNP", 0, 1))
    b = kind(("branch_retired", "MMTM", 0, 1))
    c = kind(("branch_retired", "MMNP", 0, 1), ("branch_retired", "MMTP", 0, 2))
    pmu.advance(Activity.from_kinds([a, b, c], [5, 7, 3]))
    assert ctr(pmu, 12) == 5 * 1 + 0 + 3 * 3


def test_ts_event_qualified_per_lp_and_privilege():
    """Table 18-66: a TS event caused by LP t counts iff Tt_OS at CPL 0 / Tt_USR at CPL 1-3."""
    pmu = PMU(get_model(), ht=True)
    program(pmu, 12, "MSR_CRU_ESCR0", "instr_retired", ["NBOGUSNTAG"],
            tbits=dict(t0_os=True, t1_usr=True), ENABLE=1)
    clocks = {  # (lp0 os?, lp1 os?) -> expected per clock with one instruction on each LP
        (True, True): 1, (True, False): 2, (False, True): 0, (False, False): 1}
    for (os0, os1), per_clock in clocks.items():
        before = ctr(pmu, 12)
        k = kind(("instr_retired", "NBOGUSNTAG", 0, 1), ("instr_retired", "NBOGUSNTAG", 1, 1),
                 active=(True, True), os=(os0, os1))
        pmu.advance(Activity.from_kinds([k], [10]))
        assert ctr(pmu, 12) - before == 10 * per_clock, (os0, os1)


@pytest.mark.parametrize("tbits,expect", [
    # (T0_OS, T0_USR, T1_OS, T1_USR) -> counted in clocks where (LP0, LP1) are at
    # [(OS,OS), (OS,USR), (USR,OS), (USR,USR)]
    ((0, 1, 0, 0), [0, 1, 1, 1]),  # T0_USR alone: either LP in user code
    ((1, 0, 0, 1), [1, 1, 1, 1]),  # T0_OS + T1_USR: regardless of CPL
    ((0, 0, 1, 0), [1, 1, 1, 0]),  # T1_OS alone: some LP at CPL 0
    ((0, 0, 0, 0), [0, 0, 0, 0]),
])
def test_ti_event_qualification(tbits, expect):
    """Table 18-67 (SDM 18.16): a TI event counts iff (OSen and some LP at CPL 0) or
    (USRen and some LP at CPL 1-3)."""
    pmu = PMU(get_model(), ht=True)
    t = dict(zip(("t0_os", "t0_usr", "t1_os", "t1_usr"), map(bool, tbits)))
    program(pmu, 8, "MSR_FIRM_ESCR0", "x87_FP_uop", ["ALL"], tbits=t, ENABLE=1)
    got = []
    for os0, os1 in ((True, True), (True, False), (False, True), (False, False)):
        before = ctr(pmu, 8)
        k = kind(("x87_FP_uop", "ALL", 0, 1), active=(True, True), os=(os0, os1))
        pmu.advance(Activity.from_kinds([k], [4]))
        got.append((ctr(pmu, 8) - before) // 4)
    assert got == expect


@pytest.mark.parametrize("at,expect", [(0, [1, 0, 0]), (1, [0, 1, 0]), (2, [0, 0, 1]),
                                       (3, [0, 1, 1])])
def test_active_thread_gates_counting(at, expect):
    """CCCR ACTIVE_THREAD (SDM 18.16.1): 00 none, 01 exactly one, 10 both, 11 any LP active."""
    pmu = PMU(get_model(), ht=True)
    pmu.wrmsr(0, 0x36C, cccr(active_thread=at, threshold=15, ENABLE=1, COMPARE=1, COMPLEMENT=1))
    got = []
    for active in ((False, False), (True, False), (True, True)):
        before = ctr(pmu, 12)
        pmu.advance(Activity.idle(3, ClockKind(active=active)))
        got.append((ctr(pmu, 12) - before) // 3)
    assert got == expect


def test_only_enabled_counters_count_and_counters_share_an_escr():
    """Counters 12, 13 and 16 all reach CRU_ESCR0 (Table 18-63: 'either counter 0 or 1 can be
    programmed to detect an event via MSR_MOB_ESCR0'); each applies its own CCCR filter."""
    pmu = PMU(get_model())
    ev = EV.EVENT_BY_NAME["uops_retired"]
    pmu.wrmsr(0, 0x3B8, ev.escr_value("NBOGUS", t0_os=True, t0_usr=True))
    sel = select_of(12, "MSR_CRU_ESCR0")
    pmu.wrmsr(0, 0x36C, cccr(sel, ENABLE=1))  # adds the value
    pmu.wrmsr(0, 0x36D, cccr(sel, threshold=1, ENABLE=1, COMPARE=1))  # clocks with v > 1
    pmu.wrmsr(0, 0x370, cccr(sel))  # not enabled
    k1 = kind(("uops_retired", "NBOGUS", 0, 1))
    k3 = kind(("uops_retired", "NBOGUS", 0, 3))
    pmu.advance(Activity.from_kinds([k1, k3], [4, 6]))
    assert (ctr(pmu, 12), ctr(pmu, 13), ctr(pmu, 16)) == (4 + 18, 6, 0)


def test_select_with_no_wired_escr_counts_nothing_unless_the_filter_decides():
    """Table 18-63: MS block select 3 has no ESCR; input 0 (decision D4).  COMPARE +
    COMPLEMENT passes v = 0, so the filter alone makes it count (Linux's cycles alias,
    arch/x86/events/intel/p4.c)."""
    pmu = PMU(get_model())
    assert T.escr_for(4, 3) is None
    pmu.wrmsr(0, 0x364, cccr(3, ENABLE=1))
    pmu.wrmsr(0, 0x365, cccr(3, ENABLE=1, COMPARE=1, COMPLEMENT=1, threshold=0))
    everything = kind(*[(c.event, c.bit, 0, 1) for c in EV.CLASSES[:40]])
    pmu.advance(Activity.from_kinds([everything], [9]))
    assert (ctr(pmu, 4), ctr(pmu, 5)) == (0, 9)


def test_instr_completed_only_on_models_3_4_6():
    """SDM Table 19-30: instr_completed exists on 0F_03/04/06 only; elsewhere select 07h on
    CRU_ESCR0 is an undefined event and feeds 0."""
    for key, model in MODELS.items():
        pmu = PMU(model)
        program(pmu, 12, "MSR_CRU_ESCR0", "instr_completed", ["NBOGUS"], ENABLE=1)
        pmu.advance(Activity.idle(5, kind(("instr_completed", "NBOGUS", 0, 1))))
        assert ctr(pmu, 12) == (5 if model.instr_completed else 0), key


# ============================================================================================
# 2. Per-clock input and filtering (SDM 18.15.5.2)
# ============================================================================================

def test_without_compare_the_input_value_is_added_and_capped_at_15():
    """'it adds this binary input value to the counter value on each clock cycle ... from 0
    (no event) to 15' (SDM 18.15.5.2)."""
    pmu = PMU(get_model())
    program(pmu, 12, "MSR_CRU_ESCR0", "instr_retired", ["NBOGUSNTAG", "BOGUSNTAG"], ENABLE=1)
    k = kind(("instr_retired", "NBOGUSNTAG", 0, 3))
    big = kind(("instr_retired", "NBOGUSNTAG", 0, 10), ("instr_retired", "BOGUSNTAG", 0, 10))
    pmu.advance(Activity.from_kinds([k, big], [2, 2]))
    assert ctr(pmu, 12) == 2 * 3 + 2 * 15


@pytest.mark.parametrize("complement,expect", [(0, [0] * 7 + [1] * 9), (1, [1] * 7 + [0] * 9)])
def test_threshold_and_complement(complement, expect):
    """SDM 18.15.5.2's example: threshold 6, complement clear: 'any input value of 7 or greater ...
    will cause the counter to be incremented by 1'; complement set: 0 to 6 increment."""
    pmu = PMU(get_model())
    program(pmu, 12, "MSR_CRU_ESCR0", "uops_retired", ["NBOGUS"], ENABLE=1, COMPARE=1,
            COMPLEMENT=complement, threshold=6)
    got = []
    for v in range(16):
        before = ctr(pmu, 12)
        pmu.advance(Activity.idle(1, kind(("uops_retired", "NBOGUS", 0, v))))
        got.append(ctr(pmu, 12) - before)
    assert got == expect


def test_edge_counts_false_to_true_transitions():
    """SDM Fig. 18-46: with EDGE the threshold output feeds an edge filter that counts
    only rising (false-to-true) transitions."""
    pmu = PMU(get_model())
    program(pmu, 12, "MSR_CRU_ESCR0", "uops_retired", ["NBOGUS"], ENABLE=1, COMPARE=1, EDGE=1)
    hi, lo = kind(("uops_retired", "NBOGUS", 0, 2)), kind()
    pattern = [lo, hi, hi, lo, hi, lo, lo, hi, hi, hi, lo]  # 3 rising edges
    pmu.advance(Activity.from_clocks(pattern))
    assert ctr(pmu, 12) == 3
    pmu.advance(Activity.from_clocks([hi, hi]))  # history carries across batches
    assert ctr(pmu, 12) == 4
    pmu.advance(Activity.from_clocks([hi]))
    assert ctr(pmu, 12) == 4
    # the same clocks described as runs (Activity.from_kinds) count the same
    pmu2 = PMU(get_model())
    program(pmu2, 12, "MSR_CRU_ESCR0", "uops_retired", ["NBOGUS"], ENABLE=1, COMPARE=1, EDGE=1)
    pmu2.advance(Activity.from_kinds([lo, hi, lo, hi, lo, hi, lo], [1, 2, 1, 1, 2, 3, 1]))
    assert ctr(pmu2, 12) == 3


def test_edge_is_inactive_without_compare():
    """'The edge flag is only active when the compare flag is set' (SDM 18.15.5.2)."""
    pmu = PMU(get_model())
    program(pmu, 12, "MSR_CRU_ESCR0", "uops_retired", ["NBOGUS"], ENABLE=1, EDGE=1)
    pmu.advance(Activity.idle(5, kind(("uops_retired", "NBOGUS", 0, 2))))
    assert ctr(pmu, 12) == 10


def _without_pairs(act: Activity) -> Activity:
    """The same batch with its adjacent-pair counts left out (what the plugin's feeder passes
    when no EDGE counter is effective)."""
    return Activity.from_arrays(act.count, act.active, act.os, act.cols, act.vals, None,
                                act.first, act.last, act.shared)


def test_a_batch_without_pairs_counts_the_same_unless_an_edge_detector_needs_them():
    """Only an effective EDGE counter (EDGE with COMPARE, SDM 18.15.5.2) reads the adjacent
    pairs: without one, a batch without them counts exactly as with them; with one, such a
    batch is refused rather than counted wrong."""
    hi, lo = kind(("uops_retired", "NBOGUS", 0, 2)), kind()
    pattern = [lo, hi, hi, lo, hi, lo, lo, hi, hi, hi, lo]
    full, bare = PMU(get_model()), PMU(get_model())
    for pmu in (full, bare):
        program(pmu, 12, "MSR_CRU_ESCR0", "uops_retired", ["NBOGUS"], ENABLE=1, COMPARE=1)
        program(pmu, 13, "MSR_CRU_ESCR0", "uops_retired", ["NBOGUS"], ENABLE=1)
    full.advance(Activity.from_clocks(pattern))
    bare.advance(_without_pairs(Activity.from_clocks(pattern)))
    assert ctr(bare, 12) == ctr(full, 12) == 6 and ctr(bare, 13) == ctr(full, 13) == 12
    edge = PMU(get_model())
    program(edge, 12, "MSR_CRU_ESCR0", "uops_retired", ["NBOGUS"], ENABLE=1, COMPARE=1, EDGE=1)
    with pytest.raises(ValueError, match="EDGE"):
        edge.advance(_without_pairs(Activity.from_clocks(pattern)))


@pytest.mark.parametrize("key", ["0F_04", "0F_02"])
def test_linux_count_every_clock_alias(key):
    """arch/x86/events/intel/p4.c / docs/linux-guest.md: perf's cycles alias writes CRU_ESCR2 =
    1801_FE0Ch and IQ_CCCR0 = 04FF_1000h (ESCR select 0: IQ_ESCR0, absent on 0F_04 and
    unprogrammed on 0F_02).  COMPARE + COMPLEMENT + threshold 15 counts every clock whatever
    the selected ESCR holds, at any CPL (SDM 18.15.5.2, 18.17; decision D5)."""
    pmu = PMU(get_model(key))
    pmu.wrmsr(0, 0x3CC, 0x1801_FE0C)
    pmu.wrmsr(0, 0x36C, 0x04FF_1000)
    kinds = [kind(os=(True, False)), kind(INSTR + (0, 3)),
             kind(("execution_event", "NBOGUS0", 0, 1))]
    pmu.advance(Activity.from_kinds(kinds, [100, 200, 300]))
    assert ctr(pmu, 12) == 600


# ============================================================================================
# 3. 40-bit counters, OVF, FORCE_OVF, PMI (SDM 18.15.3, 18.15.5.8)
# ============================================================================================

def test_wrap_sets_sticky_ovf_that_only_software_clears():
    """A 40-bit counter wraps from FF_FFFF_FFFFh to 0 and sets OVF (SDM 18.15.5.5: 'The OVF flag
    is a sticky flag'); it keeps counting; only software clears OVF."""
    pmu = PMU(get_model())
    program(pmu, 0, "MSR_FSB_ESCR0", "global_power_events", ["RUNNING"], preset=neg(3), ENABLE=1)
    run = kind(("global_power_events", "RUNNING", 0, 1))
    pmu.advance(Activity.idle(2, run))
    assert ctr(pmu, 0) == WRAP - 1 and not ovf(pmu, 0)
    pmu.advance(Activity.idle(5, run))
    assert ctr(pmu, 0) == 4 and ovf(pmu, 0)
    pmu.wrmsr(0, 0x300, 0)  # writing the counter does not clear OVF (decision D14)
    pmu.advance(Activity.idle(WRAP // 2, run))
    assert ovf(pmu, 0) and ctr(pmu, 0) == WRAP // 2
    clear_ovf(pmu, 0)
    assert not ovf(pmu, 0) and ctr(pmu, 0) == WRAP // 2


def test_force_ovf_makes_every_increment_an_overflow():
    """FORCE_OVF (SDM 18.15.3; decision D3): with OVF_PMI the counter interrupts after
    every increment -- here: OVF at the first event, a PMI request at once."""
    pmu = PMU(get_model())
    program(pmu, 0, "MSR_FSB_ESCR0", "global_power_events", ["RUNNING"], preset=100,
            ENABLE=1, FORCE_OVF=1, OVF_PMI_T0=1)
    pmu.advance(Activity.idle(3, kind()))
    assert not ovf(pmu, 0) and not pmu.pmi_request(0)
    r = pmu.advance(Activity.idle(1, kind(("global_power_events", "RUNNING", 0, 1))))
    assert ovf(pmu, 0) and pmu.pmi_request(0) and r.pmi_raised == (True, False)
    assert ctr(pmu, 0) == 101  # the count itself is not disturbed


@pytest.mark.parametrize("n_events", [2, 3, 100])
def test_pmi_on_the_next_event_after_the_overflow(n_events):
    """'to be interrupted on the N-th event preset the counter to -(N-1)' (SDM
    18.15.5.8): the overflow is at event N-1, the PMI request at event N."""
    pmu = PMU(get_model())
    program(pmu, 12, "MSR_CRU_ESCR0", "instr_retired", ["NBOGUSNTAG"], preset=neg(n_events - 1),
            ENABLE=1, OVF_PMI_T0=1)
    clocks = [kind(INSTR + (0, 1)), kind()] * n_events
    raised_at = None
    events = 0
    for _i, k in enumerate(clocks):
        r = pmu.advance(Activity.from_clocks([k]))
        events += bool(k.lines)
        if r.pmi_raised[0]:
            raised_at = events
    assert raised_at == n_events


def test_pmi_request_is_a_level_while_ovf_is_set_and_the_lvt_masks_on_delivery():
    """SDM 18.15.5.8 / p4_pmu_handle_irq (arch/x86/events/intel/p4.c): the request stays
    asserted while OVF is set; NetBurst masks the LVT entry on delivery; unmasking before
    clearing OVF gives a second NMI, clearing OVF first (what Linux does) does not."""
    pmu = PMU(get_model())
    program(pmu, 12, "MSR_CRU_ESCR0", "instr_retired", ["NBOGUSNTAG"], preset=neg(1),
            ENABLE=1, OVF_PMI_T0=1)
    pmu.advance(Activity.idle(3, kind(INSTR + (0, 1))))
    lvt = 0x400  # Linux: NMI, unmasked
    assert lvt_decode(lvt) == ("nmi", 0)
    deliver, lvt = pmi_delivery(pmu.pmi_request(0), lvt)
    assert deliver and lvt & LVT_MASK
    assert pmi_delivery(pmu.pmi_request(0), lvt) == (False, lvt)  # masked: no storm
    # wrong order: unmask first -> a second interrupt
    deliver, _ = pmi_delivery(pmu.pmi_request(0), 0x400)
    assert deliver
    # Linux order: clear OVF, then unmask -> quiet
    clear_ovf(pmu, 12)
    assert pmi_delivery(pmu.pmi_request(0), 0x400) == (False, 0x400)
    # it takes a new overflow and a new event to ask again
    pmu.advance(Activity.idle(3, kind(INSTR + (0, 1))))
    assert not pmu.pmi_request(0)


def test_disabling_without_clearing_ovf_keeps_requesting():
    """Linux p4_pmu_disable_event clears OVF together with ENABLE 'otherwise the interrupt is
    raised again and again' (arch/x86/events/intel/p4.c)."""
    pmu = PMU(get_model())
    program(pmu, 12, "MSR_CRU_ESCR0", "instr_retired", ["NBOGUSNTAG"], preset=neg(1),
            ENABLE=1, OVF_PMI_T0=1)
    pmu.advance(Activity.idle(2, kind(INSTR + (0, 1))))
    value = pmu.rdmsr(0, 0x36C)
    pmu.wrmsr(0, 0x36C, value & ~F["ENABLE"].mask)
    assert pmu.pmi_request(0)
    pmu.wrmsr(0, 0x36C, value & ~F["ENABLE"].mask & ~F["OVF"].mask)
    assert not pmu.pmi_request(0)


# ============================================================================================
# 4. Cascading (SDM 18.15.5.5, 18.15.5.6)
# ============================================================================================

def test_cascade_partner_table():
    """'Counters 0 and 2 can be cascaded in any order, as can counters 1 and 3 ... counter 16
    can only be cascaded from counter 14 ... counter 14 cannot be cascaded from counter 16'
    (SDM 18.15.5.6); 'similar restrictions apply to counter 17'."""
    alt = {c.index: c.cascade_from for c in T.COUNTERS}
    for x, y in ((0, 2), (1, 3), (4, 6), (5, 7), (8, 10), (9, 11), (12, 14), (13, 15)):
        assert alt[x] == y and alt[y] == x
    assert alt[16] == 14 and alt[17] == 15
    assert 16 not in alt.values() and 17 not in alt.values()  # 16/17 start nothing by CASCADE


def test_cascade_starts_only_from_the_alternate():
    """For every ordered pair (X, Y): Y with CASCADE (ENABLE clear) starts when X overflows
    iff X is Y's alternate (Table 18-63 pairing, SDM 18.15.5.6)."""
    every_clock = dict(COMPARE=1, COMPLEMENT=1, threshold=15)
    for y in range(T.NUM_COUNTERS):
        for x in range(T.NUM_COUNTERS):
            if x == y:
                continue
            pmu = PMU(get_model())
            pmu.wrmsr(0, T.COUNTER_BASE + x, neg(2))
            pmu.wrmsr(0, T.CCCR_BASE + x, cccr(ENABLE=1, **every_clock))
            pmu.wrmsr(0, T.CCCR_BASE + y, cccr(CASCADE=1, **every_clock))
            run_clocks(pmu, [kind()] * 5)
            started = ctr(pmu, y) > 0
            assert started == (T.COUNTERS[y].cascade_from == x), (x, y)
            if started:
                assert ctr(pmu, y) == 3  # from the clock after the overflow (decision D7)


def _example_18_1(a_every, b_every, total_clocks):
    pmu = PMU(get_model())
    # X = counter 12 counts event A (instr_retired) preset -200; Y = counter 14 counts event
    # B (branch_retired) preset -400, CASCADE set, ENABLE clear (SDM Example 18-1).
    program(pmu, 12, "MSR_CRU_ESCR0", "instr_retired", ["NBOGUSNTAG"], preset=neg(200), ENABLE=1)
    program(pmu, 14, "MSR_CRU_ESCR3", "branch_retired", ["MMTP"], preset=neg(400), CASCADE=1,
            OVF_PMI_T0=1)
    clocks = []
    for i in range(total_clocks):
        lines = []
        if i % a_every == 0:
            lines.append(INSTR + (0, 1))
        if i % b_every == 0:
            lines.append(BRANCH + (0, 1))
        clocks.append(kind(*lines))
    return pmu, clocks


@pytest.mark.parametrize("a_every,b_every", [(1, 1), (3, 2), (2, 7), (5, 1)])
def test_example_18_1_exactly(a_every, b_every):
    """SDM Example 18-1: X overflows on the 200th A event; Y starts then and overflows
    on the 400th B event after that -- to the clock, with horizon-sized batches."""
    total = 200 * a_every + 400 * b_every + 50
    pmu, clocks = _example_18_1(a_every, b_every, total)
    results = run_clocks(pmu, clocks)
    clock_of = {}
    done = 0
    for r in results:
        for n in (12, 14):
            if r.overflow_clock[n] >= 0:
                clock_of[n] = done + int(r.overflow_clock[n])
        done += r.clocks
    a_seen = [i for i, k in enumerate(clocks, 1) if ("instr_retired", "NBOGUSNTAG", 0) in k.lines]
    x_ovf = a_seen[199]  # the clock of the 200th A event
    b_after = [i for i, k in enumerate(clocks, 1)
               if ("branch_retired", "MMTP", 0) in k.lines and i > x_ovf]
    assert clock_of == {12: x_ovf, 14: b_after[399]}
    assert ovf(pmu, 12) and ovf(pmu, 14)
    assert ctr(pmu, 14) == len(b_after) - 400


def test_example_18_1_single_event_in_one_batch():
    """'The cascading counters mechanism can be used to count a single event ... the contents
    of the two counters can be added together' (SDM 18.15.5.6): one batch, exact."""
    pmu = PMU(get_model())
    program(pmu, 12, "MSR_CRU_ESCR0", "instr_retired", ["NBOGUSNTAG"], preset=neg(200), ENABLE=1)
    program(pmu, 14, "MSR_CRU_ESCR1", "instr_retired", ["NBOGUSNTAG"], preset=0, CASCADE=1)
    r = pmu.advance(Activity.from_kinds([kind(INSTR + (0, 1)), kind()], [1000, 500]))
    assert r.exact and r.started_clock[14] >= 0
    assert ovf(pmu, 12) and ctr(pmu, 12) == 800 and ctr(pmu, 14) == 800  # 200 + 800 = 1000


def test_two_independent_cascades_in_one_block():
    """'It's possible to set up 4 counters in the same block to cascade on two pairs of
    independent events' (SDM 18.15.5.6): 0 -> 2 and 1 -> 3 in the BPU block."""
    pmu = PMU(get_model())
    program(pmu, 0, "MSR_FSB_ESCR0", "global_power_events", ["RUNNING"], preset=neg(10), ENABLE=1)
    program(pmu, 2, "MSR_FSB_ESCR1", "global_power_events", ["RUNNING"], CASCADE=1)
    program(pmu, 1, "MSR_BPU_ESCR0", "BPU_fetch_request", ["TCMISS"], preset=neg(30), ENABLE=1)
    program(pmu, 3, "MSR_BPU_ESCR1", "BPU_fetch_request", ["TCMISS"], CASCADE=1)
    k = kind(("global_power_events", "RUNNING", 0, 1), ("BPU_fetch_request", "TCMISS", 0, 1))
    run_clocks(pmu, [k] * 50)
    assert (ctr(pmu, 2), ctr(pmu, 3)) == (40, 20)


def test_one_overflow_starts_every_counter_that_cascades_from_it():
    """Counter 14's overflow starts both 12 (CASCADE) and 16 (CASCADE, 16 only from 14):
    the running() formula (SDM 18.15.5.6; decision D8)."""
    pmu = PMU(get_model())
    program(pmu, 14, "MSR_CRU_ESCR1", "instr_retired", ["NBOGUSNTAG"], preset=neg(5), ENABLE=1)
    program(pmu, 12, "MSR_CRU_ESCR0", "instr_retired", ["NBOGUSNTAG"], CASCADE=1)
    pmu.wrmsr(0, 0x370, cccr(select_of(16, "MSR_CRU_ESCR0"), CASCADE=1))
    run_clocks(pmu, [kind(INSTR + (0, 1))] * 20)
    assert (ctr(pmu, 12), ctr(pmu, 16)) == (15, 15)


# ============================================================================================
# 5. Halting (SDM 18.15.5.5)
# ============================================================================================

def test_clearing_enable_stops_a_counter_and_keeps_its_count():
    """'To halt counting, the CCCR enable flag for the counter must be cleared' (SDM 18.15.5.5)."""
    pmu = PMU(get_model())
    program(pmu, 12, "MSR_CRU_ESCR0", "instr_retired", ["NBOGUSNTAG"], ENABLE=1)
    pmu.advance(Activity.idle(7, kind(INSTR + (0, 1))))
    pmu.wrmsr(0, 0x36C, pmu.rdmsr(0, 0x36C) & ~F["ENABLE"].mask)
    pmu.advance(Activity.idle(7, kind(INSTR + (0, 1))))
    assert ctr(pmu, 12) == 7


@pytest.mark.parametrize("how", ["clear CASCADE", "clear alternate OVF"])
def test_halting_a_cascaded_counter(how):
    """'To halt a cascaded counter ..., either clear the Cascade flag in the cascaded counter's
    CCCR MSR or clear the OVF flag in the alternate counter's CCCR MSR' (SDM 18.15.5.5)."""
    pmu = PMU(get_model())
    program(pmu, 12, "MSR_CRU_ESCR0", "instr_retired", ["NBOGUSNTAG"], preset=neg(1), ENABLE=1)
    program(pmu, 14, "MSR_CRU_ESCR1", "instr_retired", ["NBOGUSNTAG"], CASCADE=1)
    run_clocks(pmu, [kind(INSTR + (0, 1))] * 11)
    assert ctr(pmu, 14) == 10 and ovf(pmu, 12)
    if how == "clear CASCADE":
        pmu.wrmsr(0, 0x36E, pmu.rdmsr(0, 0x36E) & ~F["CASCADE"].mask)
    else:
        clear_ovf(pmu, 12)
    run_clocks(pmu, [kind(INSTR + (0, 1))] * 11)
    assert ctr(pmu, 14) == 10
    assert ctr(pmu, 12) == 21  # the alternate keeps counting (it is enabled)


# ============================================================================================
# 6. Extended cascading (SDM 18.15.5.7, Table 18-65)
# ============================================================================================

EXT = [(12, 16, "CASCNT4INTO0"), (15, 17, "CASCNT5INTO3"), (16, 17, "CASCNT5INTO4"),
       (17, 16, "CASCNT4INTO5")]


@pytest.mark.parametrize("started,source,name", EXT)
@pytest.mark.parametrize("key", sorted(MODELS))
def test_extended_cascade_bits(key, started, source, name):
    """Table 18-65: bit 11 of IQ_CCCR0/3/4/5 lets counter 16 or 17 start an IQ counter, only
    on 0F_02, 0F_03, 0F_04, 0F_06 (SDM 18.15.5.7).  Elsewhere the bit is reserved (default mode:
    stored and ignored)."""
    model = get_model(key)
    assert T.COUNTERS[started].ext_cascade_from == source
    assert T.COUNTERS[started].ext_cascade_name == name
    pmu = PMU(model)
    every = dict(COMPARE=1, COMPLEMENT=1, threshold=15)
    pmu.wrmsr(0, T.COUNTER_BASE + source, neg(3))
    pmu.wrmsr(0, T.CCCR_BASE + source, cccr(ENABLE=1, **every))
    pmu.wrmsr(0, T.CCCR_BASE + started, cccr(EXT_CASCADE=1, **every))
    run_clocks(pmu, [kind()] * 10)
    assert ctr(pmu, started) == (7 if model.extended_cascade else 0)
    assert model.extended_cascade == (model.model in (2, 3, 4, 6))


def test_extended_cascade_bit_is_reserved_in_iq_cccr1_and_2():
    """Table 18-65: 'MSR_IQ_CCCR1|2:11 Reserved' -- 16/17 never start 13 or 14."""
    pmu = PMU(get_model())
    every = dict(COMPARE=1, COMPLEMENT=1, threshold=15)
    for src in (16, 17):
        pmu.wrmsr(0, T.COUNTER_BASE + src, neg(1))
        pmu.wrmsr(0, T.CCCR_BASE + src, cccr(ENABLE=1, **every))
    for n in (13, 14):
        pmu.wrmsr(0, T.CCCR_BASE + n, cccr(EXT_CASCADE=1, **every))
    run_clocks(pmu, [kind()] * 5)
    assert ctr(pmu, 13) == ctr(pmu, 14) == 0


def _lp(lp, n=1):
    return ("instr_retired", "NBOGUSNTAG", lp, n)


def _example_18_2_clocks(lp0_instr, lp1_after):
    """Both LPs retire one instruction per clock for `lp0_instr` clocks, then LP 1 alone
    retires `lp1_after` more."""
    both = kind(_lp(0), _lp(1), active=(True, True))
    only1 = kind(_lp(1), active=(True, True))
    return [both] * lp0_instr + [only1] * lp1_after


def test_example_18_2_corrected():
    """SDM Example 18-2, with its three mistakes fixed (against Table 18-65): 'sample
    instructions retired on logical processor 1 after the first 4096 instructions retired on
    logical processor 0'.  instr_retired exists only on CRU_ESCR0/1 and the two counters need
    different T-bits, so they must sit on different sides: the starter is counter 17
    (CRU_ESCR1, LP 0, the SDM's 0400_060Ch moved from CRU_ESCR2 to CRU_ESCR1) preset to
    FF_FFFF_F000h (EDX = FFh), the sampled counter is 16 with CASCNT5INTO4 (IQ_CCCR4 =
    0403_8800h, select 4 = CRU_ESCR0 = the SDM's 0400_0603h for LP 1); IQ_CCCR5 = 0003_9000h
    now selects CRU_ESCR1 as intended."""
    pmu = PMU(get_model("0F_04"), ht=True)
    pmu.wrmsr(0, 0x310, 0)  # 1. counter 16 (the sampled one) = 0; preset -N for a sample
    pmu.wrmsr(0, 0x3B8, 0x0400_0603)  # 2. CRU_ESCR0: instr_retired NBOGUS*, LP 1 only
    pmu.wrmsr(0, 0x370, 0x0403_8800)  # 3. IQ_CCCR4: CASCNT5INTO4, OVF_PMI_T0, select 4
    pmu.wrmsr(0, 0x311, 0xFF_FFFF_F000)  # 4. counter 17 = -4096 in 40 bits
    pmu.wrmsr(0, 0x3B9, 0x0400_060C)  # 5. CRU_ESCR1: instr_retired NBOGUS*, LP 0 only
    pmu.wrmsr(0, 0x371, 0x0003_9000)  # 6. IQ_CCCR5: ENABLE, select 4 = CRU_ESCR1
    assert pmu.engine.describe(16) == "instr_retired(NBOGUSNTAG|NBOGUSTAG)"
    results = run_clocks(pmu, _example_18_2_clocks(lp0_instr=5000, lp1_after=700))
    assert ovf(pmu, 17)
    # counter 16 counts the LP-1 instructions retired after LP 0's 4096th
    assert ctr(pmu, 16) == (5000 - 4096) + 700
    started = sum(r.clocks for r in results[:next(i for i, r in enumerate(results)
                                                   if r.started_clock[16] >= 0)]) + \
        int(next(r.started_clock[16] for r in results if r.started_clock[16] >= 0))
    assert started == 4096


def test_example_18_2_literal_values():
    """The SDM's literal values (SDM Example 18-2) really do this (Table 18-65): IQ_CCCR4 =
    0003_9000h selects ESCR 4 = CRU_ESCR0, so counter 16 counts LP-1 instructions (not LP 0);
    CRU_ESCR2 = 0400_060Ch is machine_clear there, not instr_retired, and nothing reads it;
    counter 16 = 00_FFFF_F000h (EDX = 0) needs FF_0000_1000h LP-1 instructions to overflow
    before counter 12 starts."""
    pmu = PMU(get_model("0F_04"), ht=True)
    pmu.wrmsr(0, 0x30C, 0)
    pmu.wrmsr(0, 0x3B8, 0x0400_0603)
    pmu.wrmsr(0, 0x36C, 0x0403_8800)
    pmu.wrmsr(0, 0x310, 0xFFFF_F000)
    pmu.wrmsr(0, 0x3CC, 0x0400_060C)
    pmu.wrmsr(0, 0x370, 0x0003_9000)
    assert pmu.engine.describe(16) == "instr_retired(NBOGUSNTAG|NBOGUSTAG)"
    assert EV.event_for("MSR_CRU_ESCR2", 0x02).name == "machine_clear"
    run_clocks(pmu, _example_18_2_clocks(lp0_instr=5000, lp1_after=700))
    assert ctr(pmu, 16) == 0xFFFF_F000 + 5700  # LP-1 instructions, not LP 0's
    assert ctr(pmu, 12) == 0 and not ovf(pmu, 16)
    # what it would take: FF_0000_1000h - 5700 more LP-1 instructions, in one batch
    need = WRAP - 0xFFFF_F000 - 5700
    assert pmu.horizon(max_input=1) == need
    lp1 = kind(_lp(1), active=(True, True))
    pmu.advance(Activity.from_kinds([lp1], [need]))
    assert ovf(pmu, 16) and ctr(pmu, 12) == 0
    pmu.advance(Activity.from_kinds([lp1], [10]))
    assert ctr(pmu, 12) == 10  # CRU_ESCR0 is LP 1 for counter 12 as well


def test_extended_cascade_stall_scenario_with_force_ovf():
    """SDM 18.15.5.7's second scenario: the started counter has FORCE_OVF and a CASCNTxINTOy bit,
    so after the starter overflows every event of the started counter requests a PMI
    (forced overflow behaves like a real one, decision D3)."""
    pmu = PMU(get_model("0F_04"), ht=True)
    program(pmu, 16, "MSR_CRU_ESCR0", "instr_retired", ["NBOGUSNTAG"], preset=neg(10),
            tbits="T1", ENABLE=1)
    program(pmu, 12, "MSR_ALF_ESCR0", "resource_stall", ["SBFULL"], FORCE_OVF=1,
            EXT_CASCADE=1, OVF_PMI_T0=1)
    stall = kind(("resource_stall", "SBFULL", 0, 1), active=(True, True))
    replay = kind(_lp(1), active=(True, True))
    run_clocks(pmu, [stall] * 5 + [replay] * 10)
    assert not ovf(pmu, 12) and not pmu.pmi_request(0)
    results = run_clocks(pmu, [stall])
    assert ovf(pmu, 12) and pmu.pmi_request(0) and results[-1].pmi_raised[0]


# ============================================================================================
# 7. The cascade-PMI erratum (SDM 18.15.5.7)
# ============================================================================================

def test_erratum_table():
    """'This erratum applies to processors with CPUID DisplayFamily_DisplayModel signature of
    0F_02. For ... 0F_00 and 0F_01, the erratum applies to ... stepping encoding greater than
    09H' (SDM 18.15.5.7)."""
    for key in MODELS:
        for stepping in range(16):
            m = get_model(key, stepping)
            expect = m.model == 2 or (m.model in (0, 1) and stepping > 9)
            assert m.cascade_pmi_erratum == expect
            assert m.cascade_pmi_suppressed == expect
            assert not m.without_errata().cascade_pmi_suppressed


def _cascaded_pmi(model, enable_y=False):
    pmu = PMU(model)
    program(pmu, 12, "MSR_CRU_ESCR0", "instr_retired", ["NBOGUSNTAG"], preset=neg(1), ENABLE=1)
    program(pmu, 14, "MSR_CRU_ESCR1", "instr_retired", ["NBOGUSNTAG"], preset=neg(1),
            CASCADE=1, ENABLE=enable_y, OVF_PMI_T0=1)
    run_clocks(pmu, [kind(INSTR + (0, 1))] * 6)
    assert ovf(pmu, 14)
    return pmu.pmi_request(0)


@pytest.mark.parametrize("key,stepping,expect_pmi", [
    ("0F_02", 4, False), ("0F_02", 9, False), ("0F_00", 10, False), ("0F_01", 15, False),
    ("0F_00", 9, True), ("0F_01", 2, True), ("0F_03", 4, True), ("0F_04", 3, True),
    ("0F_06", 5, True)])
def test_no_pmi_in_cascade_mode_on_affected_models(key, stepping, expect_pmi):
    """SDM 18.15.5.7: 'performance counters do not generate PMI in cascade mode or extended
    cascade mode due to an erratum'."""
    model = get_model(key, stepping)
    assert _cascaded_pmi(model) == expect_pmi
    assert _cascaded_pmi(model.without_errata())  # switchable off
    assert _cascaded_pmi(model, enable_y=True)  # an enabled counter is not in cascade mode


def test_no_pmi_in_extended_cascade_mode_on_0f_02():
    pmu = PMU(get_model("0F_02"))
    every = dict(COMPARE=1, COMPLEMENT=1, threshold=15)
    pmu.wrmsr(0, 0x310, neg(1))
    pmu.wrmsr(0, 0x370, cccr(ENABLE=1, **every))
    pmu.wrmsr(0, 0x30C, neg(1))
    pmu.wrmsr(0, 0x36C, cccr(EXT_CASCADE=1, OVF_PMI_T0=1, **every))
    run_clocks(pmu, [kind()] * 6)
    assert ovf(pmu, 12) and not pmu.pmi_request(0)


# ============================================================================================
# 8. Hyper-Threading (SDM 18.16)
# ============================================================================================

def test_ht_shared_register_file_thread_qualified_counting_and_per_thread_pmi():
    """Both LPs share one register file; T0/T1 qualification splits the counting; OVF_PMI_T0/
    T1 route the request to LP 0 / LP 1; both bits interrupt both (FreeBSD note, beh. 5)."""
    pmu = PMU(get_model(), ht=True)
    ev = EV.EVENT_BY_NAME["instr_retired"]
    pmu.wrmsr(1, 0x3B8, ev.escr_value("NBOGUSNTAG", t0_os=True, t0_usr=True))  # written by LP 1
    pmu.wrmsr(1, 0x3B9, ev.escr_value("NBOGUSNTAG", t1_os=True, t1_usr=True))
    pmu.wrmsr(0, 0x30C, neg(4))
    pmu.wrmsr(0, 0x30E, neg(6))
    pmu.wrmsr(0, 0x36C, cccr(4, ENABLE=1, OVF_PMI_T0=1))
    pmu.wrmsr(1, 0x36E, cccr(4, ENABLE=1, OVF_PMI_T1=1))
    k = kind(_lp(0), _lp(1, 2), active=(True, True))
    run_clocks(pmu, [k] * 5)
    assert pmu.rdmsr(1, 0x30C) == 1 and pmu.rdmsr(0, 0x30E) == 4  # 5 vs 10 events
    assert (pmu.pmi_request(0), pmu.pmi_request(1)) == (True, True)
    clear_ovf(pmu, 12)
    assert (pmu.pmi_request(0), pmu.pmi_request(1)) == (False, True)
    pmu.wrmsr(0, 0x36E, pmu.rdmsr(0, 0x36E) | F["OVF_PMI_T0"].mask)
    assert (pmu.pmi_request(0), pmu.pmi_request(1)) == (True, True)


def test_without_ht_lp1_fields_and_activity_are_ignored():
    """SDM Fig. 18-43/18-45: on a part without HT the HT-only fields are reserved (default mode:
    kept and ignored), ACTIVE_THREAD 'must be 11b' and LP 1 does not exist."""
    pmu = PMU(get_model(), ht=False)
    ev = EV.EVENT_BY_NAME["instr_retired"]
    pmu.wrmsr(0, 0x3B8, ev.escr_value("NBOGUSNTAG", t0_usr=True, t1_os=True, t1_usr=True))
    pmu.wrmsr(0, 0x36C, cccr(4, active_thread=0, ENABLE=1, OVF_PMI_T1=1))
    k = kind(_lp(0), _lp(1, 5), active=(True, True))
    pmu.advance(Activity.idle(4, k))
    assert ctr(pmu, 12) == 4
    pmu.advance(Activity.idle(4, kind(_lp(0), active=(False, True))))  # LP 0 halted
    assert ctr(pmu, 12) == 4
