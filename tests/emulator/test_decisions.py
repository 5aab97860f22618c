"""One test per entry of docs/emulator.md "Decisions": behaviour the sources leave open and
the choice p4pmu makes.  The test name carries the decision number."""
import pytest
from pmu_cases import cccr, kind, neg, program, run_clocks

from p4pmu.emulator import events as EV
from p4pmu.emulator import tables as T
from p4pmu.emulator.activity import Activity
from p4pmu.emulator.models import get_model
from p4pmu.emulator.pmu import PMU, PMUFault

F = T.CCCR_FIELD
UOPS = ("uops_retired", "NBOGUS")


def ctr(pmu, n):
    return pmu.rdmsr(0, T.COUNTER_BASE + n)


def test_d1_cccr_write_resets_the_edge_detector():
    pmu = PMU(get_model())
    program(pmu, 12, "MSR_CRU_ESCR0", "uops_retired", ["NBOGUS"], ENABLE=1, COMPARE=1, EDGE=1)
    hi = kind(UOPS + (0, 1))
    pmu.advance(Activity.idle(5, hi))
    assert ctr(pmu, 12) == 1  # one rising edge: the first clock after the write
    pmu.advance(Activity.idle(5, hi))
    assert ctr(pmu, 12) == 1  # still high: no new edge
    pmu.wrmsr(0, 0x36C, pmu.rdmsr(0, 0x36C))  # rewrite the same CCCR value
    pmu.advance(Activity.idle(5, hi))
    assert ctr(pmu, 12) == 2


def test_d1_edge_detector_sees_clocks_while_the_counter_is_stopped():
    """A cascade start is not a CCCR write: the started counter's edge detector already saw
    the input high while the counter was stopped, so the start itself is no rising edge."""
    pmu = PMU(get_model())
    pmu.wrmsr(0, 0x30C, neg(3))
    pmu.wrmsr(0, 0x36C, cccr(threshold=15, ENABLE=1, COMPARE=1, COMPLEMENT=1))
    program(pmu, 14, "MSR_CRU_ESCR1", "uops_retired", ["NBOGUS"], CASCADE=1, COMPARE=1, EDGE=1)
    hi, lo = kind(UOPS + (0, 1)), kind()
    run_clocks(pmu, [hi] * 10)
    assert pmu.ovf[12] and pmu.running()[14] and ctr(pmu, 14) == 0
    run_clocks(pmu, [lo, hi])
    assert ctr(pmu, 14) == 1


def test_d2_ovf_is_writable_and_starts_cascade_partners():
    pmu = PMU(get_model())
    program(pmu, 14, "MSR_CRU_ESCR1", "uops_retired", ["NBOGUS"], CASCADE=1, OVF_PMI_T0=1)
    pmu.wrmsr(0, 0x36C, F["OVF"].mask)  # software sets OVF of 12, 14's alternate
    assert pmu.rdmsr(0, 0x36C) == F["OVF"].mask
    pmu.advance(Activity.idle(3, kind(UOPS + (0, 1))))
    assert ctr(pmu, 14) == 3
    pmu.wrmsr(0, 0x36E, pmu.rdmsr(0, 0x36E) | F["OVF"].mask)  # OVF written 1: no PMI yet
    assert not pmu.pmi_request(0)
    pmu.advance(Activity.idle(1, kind(UOPS + (0, 1))))  # the next counted event arms it
    assert pmu.pmi_request(0)



def test_d2_clearing_ovf_before_the_next_event_discards_the_pmi():
    """The PMI comes with the next counted event after the overflow (SDM 18.15.5.8): a CCCR
    write clearing OVF before it discards the interrupt -- Linux's P4 driver stopping a
    counter whose last counted event overflowed it loses that sample.  The PMU tallies such
    writes per counter (PMU.discarded_pmis; the plugin's log reports them)."""
    pmu = PMU(get_model())
    uop = kind(UOPS + (0, 1))
    program(pmu, 12, "MSR_CRU_ESCR0", "uops_retired", ["NBOGUS"], preset=neg(3), ENABLE=1,
            OVF_PMI_T0=1)
    run_clocks(pmu, [uop] * 3)  # overflows on the third
    assert pmu.ovf[12] and not pmu.pmi_request(0)
    stop = pmu.rdmsr(0, 0x36C) & ~F["ENABLE"].mask & ~F["OVF"].mask
    pmu.wrmsr(0, 0x36C, stop)
    assert pmu.discarded_pmis[12] == 1 and not pmu.pmi_request(0)
    # raised (one more event), then cleared by the handler: nothing discarded
    pmu.wrmsr(0, 0x30C, neg(3))
    pmu.wrmsr(0, 0x36C, stop | F["ENABLE"].mask)
    run_clocks(pmu, [uop] * 4)
    assert pmu.pmi_request(0)
    pmu.wrmsr(0, 0x36C, stop)
    assert pmu.discarded_pmis.tolist() == [0] * 12 + [1] + [0] * 5


def test_d3_forced_overflow_is_a_real_overflow():
    pmu = PMU(get_model())
    program(pmu, 12, "MSR_CRU_ESCR0", "uops_retired", ["NBOGUS"], preset=5, ENABLE=1,
            FORCE_OVF=1, OVF_PMI_T0=1)
    program(pmu, 14, "MSR_CRU_ESCR1", "uops_retired", ["NBOGUS"], CASCADE=1)
    run_clocks(pmu, [kind(UOPS + (0, 1))] * 4)
    assert ctr(pmu, 12) == 9 and pmu.ovf[12] and pmu.pmi_request(0)  # value not forced
    assert ctr(pmu, 14) == 3  # started by the forced overflow of the first clock


def test_d4_no_escr_undefined_select_undocumented_bits_and_tagging_feed_zero():
    pmu = PMU(get_model("0F_04"))
    everything = kind(*[(c.event, c.bit, 0, 1) for c in EV.CLASSES])
    pmu.wrmsr(0, 0x36C, cccr(0, ENABLE=1))  # IQ_ESCR0: absent on 0F_04
    pmu.wrmsr(0, 0x3B8, (0x3F << 25) | 0xFFFF << 9 | 0xF)  # CRU_ESCR0: undefined select 3Fh
    pmu.wrmsr(0, 0x36D, cccr(4, ENABLE=1))
    ev = EV.EVENT_BY_NAME["uops_retired"]
    undocumented = 0xFFFF & ~ev.mask_value(*ev.mask.values())
    pmu.wrmsr(0, 0x3B9, (ev.select << 25) | undocumented << 9 | 0xF)  # reserved mask bits
    pmu.wrmsr(0, 0x36E, cccr(4, ENABLE=1))
    pmu.wrmsr(0, 0x3BC, EV.EVENT_BY_NAME["uop_type"].escr_value("TAGLOADS", "TAGSTORES",
                                                                t0_os=True, t0_usr=True))
    pmu.wrmsr(0, 0x370, cccr(2, ENABLE=1))  # RAT_ESCR0 uop_type: tags, never counts
    pmu.advance(Activity.idle(10, everything))
    assert [ctr(pmu, n) for n in (12, 13, 14, 16)] == [0, 0, 0, 0]


@pytest.mark.parametrize("threshold", [0, 7, 15])
def test_d5_compare_complement_counts_every_clock_without_an_escr(threshold):
    pmu = PMU(get_model("0F_04"))
    pmu.wrmsr(0, 0x36C, cccr(0, threshold=threshold, ENABLE=1, COMPARE=1, COMPLEMENT=1))
    pmu.advance(Activity.from_kinds([kind(), kind(os=(True, False))], [4, 6]))
    assert ctr(pmu, 12) == 10


def test_d6_started_counter_counts_from_the_clock_after_the_overflow():
    pmu = PMU(get_model())
    program(pmu, 12, "MSR_CRU_ESCR0", "uops_retired", ["NBOGUS"], preset=neg(1), ENABLE=1)
    program(pmu, 14, "MSR_CRU_ESCR1", "uops_retired", ["NBOGUS"], CASCADE=1)
    r = run_clocks(pmu, [kind(UOPS + (0, 1))])
    assert pmu.ovf[12] and ctr(pmu, 14) == 0 and r[0].started_clock[14] == 1
    run_clocks(pmu, [kind(UOPS + (0, 1))])
    assert ctr(pmu, 14) == 1


def test_d7_cascade_with_alternate_ovf_already_set_runs_at_once():
    pmu = PMU(get_model())
    pmu.wrmsr(0, 0x36C, F["OVF"].mask)
    program(pmu, 14, "MSR_CRU_ESCR1", "uops_retired", ["NBOGUS"], CASCADE=1)
    assert pmu.running()[14]
    pmu.advance(Activity.idle(2, kind(UOPS + (0, 1))))
    assert ctr(pmu, 14) == 2


def test_d8_active_thread_gates_the_increment_not_the_edge_detector():
    pmu = PMU(get_model(), ht=True)
    program(pmu, 12, "MSR_CRU_ESCR0", "uops_retired", ["NBOGUS"], active_thread=2, ENABLE=1,
            COMPARE=1, EDGE=1)
    one = kind(UOPS + (0, 1), active=(True, False))
    both = kind(UOPS + (0, 1), active=(True, True))
    pmu.advance(Activity.from_clocks([one, both]))  # the edge is in a gated-off clock
    assert ctr(pmu, 12) == 0
    pmu.advance(Activity.from_clocks([kind(active=(True, True)), both]))
    assert ctr(pmu, 12) == 1


def test_d8_without_ht_counting_follows_lp0_activity():
    pmu = PMU(get_model(), ht=False)
    pmu.wrmsr(0, 0x36C, cccr(0, active_thread=1, threshold=15, ENABLE=1, COMPARE=1,
                             COMPLEMENT=1))  # ACTIVE_THREAD ignored: behaves as 11b
    pmu.advance(Activity.from_kinds([kind(active=(True, False)), kind(active=(False, True))],
                                    [5, 7]))
    assert ctr(pmu, 12) == 5


def test_d9_input_is_the_capped_sum_over_mask_bits_and_lps():
    pmu = PMU(get_model(), ht=True)
    program(pmu, 12, "MSR_CRU_ESCR0", "uops_retired", ["NBOGUS", "BOGUS"], tbits="ALL",
            ENABLE=1)
    k = kind(UOPS + (0, 3), ("uops_retired", "BOGUS", 0, 2), UOPS + (1, 4), active=(True, True))
    big = kind(UOPS + (0, 9), UOPS + (1, 9), active=(True, True))
    pmu.advance(Activity.from_kinds([k, big], [1, 1]))
    assert ctr(pmu, 12) == 9 + 15


def test_d10_ti_qualification_looks_at_halted_lps_too():
    pmu = PMU(get_model(), ht=True)
    program(pmu, 8, "MSR_FIRM_ESCR0", "x87_FP_uop", ["ALL"], tbits=dict(t0_os=True), ENABLE=1)
    k = kind(("x87_FP_uop", "ALL", 0, 1), active=(True, False), os=(False, True))
    pmu.advance(Activity.idle(3, k))  # LP 1 halted at CPL 0, LP 0 in user code
    assert ctr(pmu, 8) == 3


def test_d11_erratum_population_is_enable_clear_with_a_start_bit():
    pmu = PMU(get_model("0F_02"))
    for flags, expect in ((dict(CASCADE=1), True), (dict(EXT_CASCADE=1), True),
                          (dict(CASCADE=1, ENABLE=1), False), (dict(ENABLE=1), False)):
        pmu.wrmsr(0, 0x36C, cccr(**flags))
        assert pmu.in_cascade_mode()[12] == expect, flags


def test_d12_arming_needs_a_pmi_bit_when_the_event_is_counted():
    pmu = PMU(get_model())
    program(pmu, 12, "MSR_CRU_ESCR0", "uops_retired", ["NBOGUS"], preset=neg(1), ENABLE=1)
    run_clocks(pmu, [kind(UOPS + (0, 1))] * 3)  # overflow + 2 events, no PMI bit
    pmu.wrmsr(0, 0x36C, pmu.rdmsr(0, 0x36C) | F["OVF_PMI_T0"].mask)
    assert not pmu.pmi_request(0)  # setting the bit later does not fire for old events
    run_clocks(pmu, [kind(UOPS + (0, 1))])
    assert pmu.pmi_request(0)


def test_d13_writing_a_counter_keeps_ovf_and_the_request():
    pmu = PMU(get_model())
    program(pmu, 12, "MSR_CRU_ESCR0", "uops_retired", ["NBOGUS"], preset=neg(1), ENABLE=1,
            OVF_PMI_T0=1)
    run_clocks(pmu, [kind(UOPS + (0, 1))] * 2)
    pmu.wrmsr(0, 0x30C, neg(100))
    assert pmu.ovf[12] and pmu.pmi_request(0)


def test_d14_fsb_bus_events_keyed_on_fsb_escr_and_select_3_reaches_itlb():
    assert EV.event_for("MSR_FSB_ESCR0", 0x16).name == "b2b_cycles"
    assert T.escr_for(0, 3).name == "MSR_ITLB_ESCR0" and T.escr_for(0, 6).name == "MSR_FSB_ESCR0"
    pmu = PMU(get_model())
    pmu.wrmsr(0, 0x3A2, EV.EVENT_BY_NAME["bnr"].escr_value("BIT0", t0_os=True, t0_usr=True))
    pmu.wrmsr(0, 0x360, cccr(6, ENABLE=1))  # the self-consistent select
    pmu.wrmsr(0, 0x361, cccr(3, ENABLE=1))  # the SDM's printed select: ITLB_ESCR0 (empty)
    pmu.advance(Activity.idle(4, kind(("bnr", "BIT0", 0, 1))))
    assert (ctr(pmu, 0), ctr(pmu, 1)) == (4, 0)


def test_d15_tc_precise_event_has_no_documented_field_in_strict_mode():
    PMU(get_model()).wrmsr(0, T.MSR_TC_PRECISE_EVENT, 0xFC00)  # default: stored
    with pytest.raises(PMUFault, match="strict mode"):
        PMU(get_model(), strict=True).wrmsr(0, T.MSR_TC_PRECISE_EVENT, 0xFC00)


def test_d16_pebs_registers_are_stored_and_pebs_is_reported_unavailable():
    pmu = PMU(get_model(), ht=True)
    pmu.wrmsr(1, T.MSR_PEBS_ENABLE, 0x0300_0001)
    pmu.wrmsr(0, T.MSR_PEBS_MATRIX_VERT, 1)
    assert pmu.rdmsr(0, T.MSR_PEBS_ENABLE) == 0x0300_0001 and pmu.pebs_enable_writer == 1
    assert pmu.misc_enable(0) & T.MISC_PEBS_UNAVAILABLE


def test_d17_thread_attribution_of_events_missing_from_table_19_34():
    assert EV.EVENT_BY_NAME["bsq_active_entries"].thread == "TS"
    for name in ("b2b_cycles", "bnr", "snoop", "response"):
        assert EV.EVENT_BY_NAME[name].thread == "TI"


def test_d18_lp1_activity_is_ignored_without_ht():
    pmu = PMU(get_model(), ht=False)
    program(pmu, 8, "MSR_FIRM_ESCR0", "x87_FP_uop", ["ALL"], tbits="ALL", ENABLE=1)
    program(pmu, 12, "MSR_CRU_ESCR0", "uops_retired", ["NBOGUS"], tbits="ALL", ENABLE=1)
    k = kind(("x87_FP_uop", "ALL", 1, 1), UOPS + (1, 1), active=(True, True))
    pmu.advance(Activity.idle(4, k))
    assert (ctr(pmu, 8), ctr(pmu, 12)) == (0, 0)


def test_d19_overflow_inside_a_batch_is_apportioned_between_different_classes():
    """Counter 14 (event B) is started by 12 (event A) in the middle of one batch whose kinds
    do not say where: B's count in the batch is shared in proportion to the clocks left
    after the estimated overflow clock, and the step says it is not exact."""
    pmu = PMU(get_model())
    program(pmu, 12, "MSR_CRU_ESCR0", "instr_retired", ["NBOGUSNTAG"], preset=neg(50), ENABLE=1)
    program(pmu, 14, "MSR_CRU_ESCR3", "branch_retired", ["MMTP"], CASCADE=1)
    a = kind(("instr_retired", "NBOGUSNTAG", 0, 1))
    b = kind(("branch_retired", "MMTP", 0, 1))
    r = pmu.advance(Activity.from_kinds([a, b], [100, 100]))
    # X needs 50 of its 100 A-clocks: overflow estimated at clock ceil(200 * 50/100) = 100,
    # Y gets floor(100 * (200 - 100) / 200) = 50 of the batch's 100 B events
    assert not r.exact and r.overflow_clock[12] == 100 and r.started_clock[14] == 100
    assert ctr(pmu, 14) == 50


def test_d20_rdpmc_uncore_indices_are_not_modelled():
    with pytest.raises(PMUFault, match="not modelled"):
        PMU(get_model()).rdpmc(0, 18)


def test_d21_shared_clocks_count_events_but_not_clocks_again():
    """Hyper-Threading: the first `shared` clocks of a batch were already on the core's
    timeline (the sibling ran in them).  Events count as in any clock (counter 0: LP 1's
    RUNNING; counter 2: COMPARE without COMPLEMENT); the count-every-clock idiom (COMPARE +
    COMPLEMENT, threshold 15: Linux's cycles alias) counts only the new clocks, and its
    overflow clock is placed after the shared ones."""
    pmu = PMU(get_model(), ht=True)
    program(pmu, 0, "MSR_FSB_ESCR0", "global_power_events", ["RUNNING"], tbits="T1", ENABLE=1)
    program(pmu, 1, "MSR_FSB_ESCR0", "global_power_events", ["RUNNING"], tbits="T1",
            preset=neg(50), ENABLE=1, COMPARE=1, COMPLEMENT=1, threshold=15)
    program(pmu, 2, "MSR_FSB_ESCR1", "global_power_events", ["RUNNING"], tbits="T1", ENABLE=1,
            COMPARE=1)
    k = kind(("global_power_events", "RUNNING", 1, 1), active=(True, True))
    with pytest.raises(ValueError, match="shared"):
        Activity.from_arrays([10], [[True, True]], [[False, False]], [], [[]], [[9]], 0, 0,
                             shared=11)
    r = pmu.advance(Activity.from_kinds([k], [100], shared=40))
    assert (ctr(pmu, 0), ctr(pmu, 1), ctr(pmu, 2)) == (100, 10, 100)
    assert r.overflow_clock[1] == 90  # 40 shared clocks, then 50 counted ones
    pmu.advance(Activity.from_kinds([k], [100]))  # nothing shared: every clock counts
    assert (ctr(pmu, 0), ctr(pmu, 1), ctr(pmu, 2)) == (200, 110, 200)
