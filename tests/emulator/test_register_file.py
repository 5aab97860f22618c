"""Contract 1 (docs/architecture.md): the register file, its faults and RDPMC.

Expected values come from the tables (tables.py, models.py), never from copied constants,
except where a test checks the tables themselves against the SDM/reference text it cites.
"""
import itertools

import numpy as np
import pytest

from p4pmu.emulator import tables as T
from p4pmu.emulator.models import MODELS, get_model
from p4pmu.emulator.pmu import PMU, PMUFault, documented_mask

ALL = list(MODELS)


def snapshot(pmu):
    """Everything guest-visible plus the decoded arrays, to prove a fault changed nothing."""
    regs = {m: pmu.rdmsr(0, m) for m in pmu.registers}
    arrays = {k: v.copy() for k, v in vars(pmu).items() if isinstance(v, np.ndarray)}
    return regs, arrays


def same(a, b):
    return a[0] == b[0] and all(np.array_equal(a[1][k], b[1][k]) for k in a[1])


def model_msrs(model):
    m = get_model(model)
    msrs = {c.counter_msr for c in T.COUNTERS} | {c.cccr_msr for c in T.COUNTERS}
    msrs |= {e.msr for e in T.ESCRS if m.model in e.models}
    return msrs | {T.MSR_TC_PRECISE_EVENT, T.MSR_PEBS_ENABLE, T.MSR_PEBS_MATRIX_VERT}


# -- inventory (SDM Table 18-63, Table 35-41) -----------------------------------------------

def test_handles_is_the_whole_pmu_range():
    assert PMU.handles(0x300) and PMU.handles(0x3FF)
    assert not PMU.handles(0x2FF) and not PMU.handles(0x400) and not PMU.handles(0x1A0)


@pytest.mark.parametrize("key", ALL)
def test_register_inventory_per_model(key):
    """18 counters, 18 CCCRs, 45 ESCRs (43 without IQ_ESCR0/1 on models 3, 4, 6; SDM Table
    18-63 footnote), 3F0h-3F2h."""
    pmu = PMU(get_model(key))
    assert set(pmu.registers) == model_msrs(key)
    n_escr = sum(r.kind == "escr" for r in pmu.registers.values())
    assert n_escr == (45 if get_model(key).has_iq_escr else 43)


@pytest.mark.parametrize("key", ALL)
def test_every_other_address_faults(key):
    pmu = PMU(get_model(key))
    present = model_msrs(key)
    for msr in range(0x300, 0x400):
        if msr in present:
            continue
        with pytest.raises(PMUFault, match=f"no such MSR on model {key}"):
            pmu.rdmsr(0, msr)
        before = snapshot(pmu)
        with pytest.raises(PMUFault, match=f"WRMSR 0x{msr:X}: no such MSR"):
            pmu.wrmsr(0, msr, 0)
        assert same(before, snapshot(pmu))


def test_iq_escr_absent_message_names_the_models():
    with pytest.raises(PMUFault, match=r"MSR_IQ_ESCR0 exists only on models 0F_00, 0F_01, 0F_02"):
        PMU(get_model("0F_03")).rdmsr(0, 0x3BA)
    PMU(get_model("0F_02")).rdmsr(0, 0x3BA)  # present


def test_reset_state_is_zero_and_writes_read_back():
    pmu = PMU(get_model("0F_04"))
    for msr in pmu.registers:
        assert pmu.rdmsr(0, msr) == 0
    for i, msr in enumerate(sorted(pmu.registers)):
        reg = pmu.registers[msr]
        value = (0x5A5A_5A5A_A5 * (i + 1)) & ~reg.fault_mask & ((1 << 64) - 1)
        pmu.wrmsr(i & 1, msr, value)
        assert pmu.rdmsr(1 - (i & 1), msr) == value, hex(msr)  # shared by both LPs


# -- reserved bits (tables.RESERVED_POLICY, SDM Vol. 2B WRMSR) -------------------------------

def test_default_fault_message_matches_the_contract_example():
    pmu = PMU(get_model("0F_04"))
    with pytest.raises(PMUFault) as e:
        pmu.wrmsr(0, 0x36C, 0x1_0000_0000)
    assert str(e.value) == ("WRMSR 0x36C (MSR_IQ_CCCR0) = 0x100000000: bits 63:32 of a CCCR "
                            "are reserved (set: 0x100000000)")


@pytest.mark.parametrize("kind", sorted(T.RESERVED_POLICY))
def test_default_policy_faults_exactly_the_policy_bits(kind):
    pmu = PMU(get_model("0F_04"))
    fault_bits, desc = T.RESERVED_POLICY[kind]
    msr = next(m for m, r in pmu.registers.items() if r.kind == kind)
    for bit in range(64):
        before = snapshot(pmu)
        if fault_bits >> bit & 1:
            with pytest.raises(PMUFault, match=desc):
                pmu.wrmsr(0, msr, 1 << bit)
            assert same(before, snapshot(pmu))
        else:  # accepted, stored, read back as written
            pmu.wrmsr(0, msr, 1 << bit)
            assert pmu.rdmsr(0, msr) == 1 << bit
            pmu.wrmsr(0, msr, 0)


@pytest.mark.slow
@pytest.mark.parametrize("key,ht", list(itertools.product(ALL, (False, True))))
def test_strict_policy_accepts_exactly_the_documented_fields(key, ht):
    model = get_model(key)
    pmu = PMU(model, ht=ht, strict=True)
    for msr, reg in pmu.registers.items():
        ok = documented_mask(reg.kind, model, ht, reg.index if reg.kind in ("cccr", "counter")
                             else None)
        assert reg.fault_mask == ((1 << 64) - 1) & ~ok
        for bit in range(64):
            if ok >> bit & 1:
                pmu.wrmsr(0, msr, 1 << bit)
            else:
                before = snapshot(pmu)
                with pytest.raises(PMUFault, match="strict mode"):
                    pmu.wrmsr(0, msr, 1 << bit)
                assert same(before, snapshot(pmu))
        pmu.wrmsr(0, msr, 0)


def test_strict_bit11_only_for_extended_cascade_cccrs():
    """Table 18-65: bit 11 of IQ_CCCR0/3/4/5 only, only on 0F_02/03/04/06 (SDM 18.15.5.7)."""
    for key in ALL:
        model = get_model(key)
        pmu = PMU(model, strict=True)
        for c in T.COUNTERS:
            allowed = c.ext_cascade_from is not None and model.extended_cascade
            if allowed:
                pmu.wrmsr(0, c.cccr_msr, 1 << 11)
                assert pmu.ext_cascade[c.index]
            else:
                with pytest.raises(PMUFault, match="bit 11"):
                    pmu.wrmsr(0, c.cccr_msr, 1 << 11)
    assert {c.index for c in T.COUNTERS if c.ext_cascade_from is not None} == {12, 15, 16, 17}


def test_strict_ht_only_fields_named_in_message():
    pmu = PMU(get_model("0F_04"), ht=False, strict=True)
    with pytest.raises(PMUFault, match="OVF_PMI_T1 exists only on parts with Hyper-Threading"):
        pmu.wrmsr(0, 0x360, T.CCCR_FIELD["OVF_PMI_T1"].mask)
    with pytest.raises(PMUFault, match="T1_OS exists only"):
        pmu.wrmsr(0, 0x3B8, T.ESCR_FIELD["T1_OS"].mask)
    PMU(get_model("0F_04"), ht=True, strict=True).wrmsr(0, 0x360, T.CCCR_FIELD["OVF_PMI_T1"].mask)


def test_default_mode_reserved_low_bits_do_not_count():
    """Default policy: reserved low-word bits are kept for read-back and ignored by counting:
    bit 11 of a non-IQ CCCR, and the HT-only fields on a part without HT."""
    pmu = PMU(get_model("0F_04"), ht=False)
    pmu.wrmsr(0, 0x360, (1 << 11) | T.CCCR_FIELD["OVF_PMI_T1"].mask)
    assert pmu.rdmsr(0, 0x360) == (1 << 11) | T.CCCR_FIELD["OVF_PMI_T1"].mask
    assert not pmu.ext_cascade[0] and not pmu.pmi_t1[0]
    pmu.wrmsr(0, 0x3B8, 3)  # T1_OS | T1_USR
    assert pmu.rdmsr(0, 0x3B8) == 3 and not pmu.t1_os.any() and not pmu.t1_usr.any()
    old = PMU(get_model("0F_01"))  # no extended cascading (SDM 18.15.5.7)
    old.wrmsr(0, 0x36C, 1 << 11)
    assert old.rdmsr(0, 0x36C) == 1 << 11 and not old.ext_cascade[12]


def test_value_outside_64_bits_is_a_programming_error():
    with pytest.raises(ValueError):
        PMU(get_model()).wrmsr(0, 0x300, 1 << 64)


# -- decode at write time (SDM Fig. 18-43/18-45) --------------------------------------------

def test_cccr_and_escr_decoded_into_arrays():
    pmu = PMU(get_model("0F_04"), ht=True)
    # Linux's cycles alias on counter 12 (arch/x86/events/intel/p4.c): 04FF_1000h, and 3CCh.
    pmu.wrmsr(0, 0x36C, 0x04FF_B000)
    assert pmu.enable[12] and pmu.escr_select[12] == 5 and pmu.active_thread[12] == 3
    assert pmu.compare[12] and pmu.complement[12] and pmu.threshold[12] == 15
    assert pmu.pmi_t0[12] and not pmu.pmi_t1[12] and not pmu.edge[12]
    assert T.ESCRS[0].name  # tables in use
    assert pmu.escrs[pmu.escr_index[12]].name == "MSR_CRU_ESCR2"
    pmu.wrmsr(0, 0x3CC, 0x1801_FE0C)
    slot = pmu.escr_slot["MSR_CRU_ESCR2"]
    assert pmu.event_select[slot] == 0x0C and pmu.event_mask[slot] == 0xFF
    assert pmu.t0_os[slot] and pmu.t0_usr[slot] and not pmu.t1_os[slot]
    # ESCR select 0 on an IQ counter of model 4 reaches no ESCR (IQ_ESCR0 absent)
    pmu.wrmsr(0, 0x36C, 0x04FF_1000)
    assert pmu.escr_index[12] == -1


def test_ovf_is_read_write_and_clearing_it_disarms_the_pmi():
    pmu = PMU(get_model())
    pmu.wrmsr(0, 0x360, 1 << 31)
    assert pmu.ovf[0] and pmu.rdmsr(0, 0x360) == 1 << 31
    pmu.pmi_armed[0] = True
    pmu.wrmsr(0, 0x360, 0)
    assert not pmu.ovf[0] and not pmu.pmi_armed[0]


def test_pebs_enable_remembers_the_writing_lp():
    """MY_THR/OTH_THR are relative to the writer (SDM 18.16.3)."""
    pmu = PMU(get_model(), ht=True)
    pmu.wrmsr(1, T.MSR_PEBS_ENABLE, 1 << 25)
    assert pmu.pebs_enable_writer == 1 and pmu.rdmsr(0, T.MSR_PEBS_ENABLE) == 1 << 25


# -- RDPMC (SDM Vol. 2B RDPMC) --------------------------------------------------------------

def test_rdpmc_full_and_fast_reads():
    pmu = PMU(get_model())
    for n in range(T.NUM_COUNTERS):
        value = (0xAB_0000_0000 | n * 0x0101_0101) & T.COUNTER_MASK
        pmu.wrmsr(0, T.COUNTER_BASE + n, value)
        assert pmu.rdpmc(0, n) == value  # EDX = bits 39:32
        assert pmu.rdpmc(1, n | 1 << 31) == value & 0xFFFF_FFFF  # fast read: EDX = 0


@pytest.mark.parametrize("ecx", [18, 25, 0x7FFF_FFFF, 0x4000_0000, 0x8000_0012])
def test_rdpmc_bad_index_faults(ecx):
    with pytest.raises(PMUFault, match=r"RDPMC ECX=0x.*is not 0-17"):
        PMU(get_model()).rdpmc(0, ecx)


# -- IA32_MISC_ENABLE (SDM Table 35-41) -----------------------------------------------------

@pytest.mark.parametrize("key", ALL)
def test_misc_enable(key):
    model = get_model(key)
    pmu = PMU(model)
    for q in (0, 0xFFFF_FFFF, 0x1 | 1 << 22):
        v = pmu.misc_enable(q)
        assert v & T.MISC_PERFMON_AVAILABLE
        assert bool(v & T.MISC_BTS_UNAVAILABLE) == model.bts_unavailable
        assert bool(v & T.MISC_PEBS_UNAVAILABLE) == model.pebs_unavailable
        others = ~(T.MISC_PERFMON_AVAILABLE | T.MISC_BTS_UNAVAILABLE | T.MISC_PEBS_UNAVAILABLE)
        assert v & others == q & others


# -- the access hook: a read is a point where the state is current --------------------------

def test_host_storage_is_the_counter_state():
    """A host's fast path (the plugin's C register file) and the model share one copy of the
    counter state: the PMU reads and writes the host's arrays in place, also across reset."""
    host = {"counter": np.zeros(T.NUM_COUNTERS, np.uint64),
            "cccr_raw": np.zeros(T.NUM_COUNTERS, np.uint64),
            "ovf": np.zeros(T.NUM_COUNTERS, np.bool_),
            "pmi_armed": np.zeros(T.NUM_COUNTERS, np.bool_)}
    pmu = PMU(get_model(), storage=host)
    host["counter"][0] = 42  # what the host's fast path counted
    assert pmu.rdmsr(1, 0x300) == 42 and pmu.rdpmc(0, 0) == 42
    pmu.wrmsr(0, 0x301, 5)
    assert host["counter"][1] == 5
    host["ovf"][2] = True
    assert pmu.rdmsr(0, 0x362) >> 31 & 1
    pmu.wrmsr(0, 0x362, 0)
    assert not host["ovf"][2]
    pmu.reset()
    assert pmu.counter is host["counter"] and not host["counter"].any()
    with pytest.raises(ValueError, match="counter"):
        PMU(get_model(), storage={**host, "counter": np.zeros(4, np.uint64)})
