"""The bus-queue events select bus requests by their attributes, field by field (SDM Vol. 3B
Table 19-28: BSQ_allocation "specify an encoding for each sub-group"; IOQ_allocation's
request type AND direction AND memory type AND agent on models 2 and later, the OR form on
models 0 and 1), not by adding up one line per mask bit (emulator/bus_requests.py,
docs/events.md "Bus requests").  Checked on the matching functions, then through the counting
engine with clocks of the clock model."""
import pytest
from pmu_cases import program

from p4pmu.emulator import bus_requests as BR
from p4pmu.emulator import clockmodel as CM
from p4pmu.emulator import tables as T
from p4pmu.emulator.activity import Activity
from p4pmu.emulator.models import MODELS, get_model
from p4pmu.emulator.pmu import PMU

READ, RFO, WB = (BR.REQUEST_BY_NAME[n] for n in ("read", "rfo", "writeback"))
MODEL_NUMBERS = sorted({m.model for m in MODELS.values()})


def test_the_encodings_follow_the_sdm_sub_groups():
    # REQ_TYPE 0 read / 1 read invalidate / 3 write-back, REQ_LEN 3 (8 chunks: a 64-byte
    # line), REQ_CACHE_TYPE and REQ_DEM_TYPE, MEM_TYPE 6 (write-back)
    assert (READ.bsq, RFO.bsq, WB.bsq) == (0x328C, 0x328D, 0x328F)
    # IOQ: default type 00001b, ALL_READ / ALL_WRITE, MEM_WB, OWN
    assert (READ.ioq, RFO.ioq, WB.ioq) == (0x2821, 0x2821, 0x2841)


@pytest.mark.parametrize("model", MODEL_NUMBERS)
def test_each_requests_mask_selects_it_on_every_model(model):
    for event in ("BSQ_allocation", "IOQ_allocation"):
        for r in BR.REQUESTS:
            assert r in BR.selected(event, BR.canonical_mask(event, r), model), (event, r)
    assert BR.selected("BSQ_allocation", READ.bsq, model) == (READ,)
    assert BR.selected("BSQ_allocation", WB.bsq, model) == (WB,)
    assert BR.selected("IOQ_allocation", 0x2861, model) == BR.REQUESTS  # all own WB traffic


def test_bsq_every_sub_group_must_match():
    """One bit off in any sub-group selects nothing; the undefined bit 4 and bits 14-15 are
    not part of the encoding."""
    for r in BR.REQUESTS:
        for bit in (0, 1, 2, 3, 5, 6, 7, 8, 9, 10, 11, 12, 13):
            assert not BR.bsq_selects(r.bsq ^ 1 << bit, r), (r.name, bit)
        for bit in (4, 14, 15):
            assert BR.bsq_selects(r.bsq | 1 << bit, r)
    # "read" and "read invalidate" differ in REQ_TYPE0 only: each is its own encoding
    assert BR.selected("BSQ_allocation", READ.bsq | 1, 2) == (RFO,)
    assert BR.selected("BSQ_allocation", 0x0001, 2) == ()  # REQ_TYPE0 alone: no sum of bits


@pytest.mark.parametrize("model", [m for m in MODEL_NUMBERS if m >= 2])
def test_ioq_fields_are_anded_on_models_2_and_later(model):
    full = 0x2861
    for bit, name in ((0, "type"), (11, "memory type"), (13, "agent")):
        assert BR.selected("IOQ_allocation", full & ~(1 << bit), model) == (), name
    assert BR.selected("IOQ_allocation", full & ~BR.IOQ_ALL_WRITE, model) == (READ, RFO)
    assert BR.selected("IOQ_allocation", full & ~BR.IOQ_ALL_READ, model) == (WB,)
    assert BR.selected("IOQ_allocation", full | 0x2, model) == ()  # a non-default type
    assert BR.selected("IOQ_allocation", (full & ~(1 << 11)) | 1 << 7, model) == ()  # UC
    assert BR.selected("IOQ_allocation", (full & ~(1 << 13)) | 1 << 14, model) == ()  # OTHER
    assert BR.selected("IOQ_allocation", full | BR.IOQ_PREFETCH, model) == BR.REQUESTS


@pytest.mark.parametrize("model", [m for m in MODEL_NUMBERS if m < 2])
def test_ioq_fields_are_ored_on_models_0_and_1(model):
    own = BR.IOQ_OWN
    assert BR.selected("IOQ_allocation", BR.IOQ_ALL_READ | own, model) == (READ, RFO)
    assert BR.selected("IOQ_allocation", BR.IOQ_DEFAULT_TYPE | own, model) == BR.REQUESTS
    assert BR.selected("IOQ_allocation", 1 << 11 | own, model) == BR.REQUESTS  # MEM_WB
    # the memory type is ignored when ALL_READ or ALL_WRITE is set
    assert BR.selected("IOQ_allocation", 1 << 7 | BR.IOQ_ALL_WRITE | own, model) == (WB,)
    assert BR.selected("IOQ_allocation", 1 << 7 | own, model) == ()  # UC alone
    assert BR.selected("IOQ_allocation", 0x0861, model) == ()  # no agent


def _clock(**fields):
    c = CM.Clock()
    for k, v in fields.items():
        c.f[CM.FI[k]] = v
    return c


@pytest.mark.parametrize("key", ["0F_01", "0F_02"])
def test_the_engine_counts_the_requests_the_mask_selects(key):
    """Clocks with 2 load line reads, 1 read for ownership and 1 write-back, fed to the PMU:
    each counter counts the requests its mask matches, however many bits they share."""
    model = get_model(key)
    kinds = [CM.clock_kind(_clock(l2_ld=2, l2_rfo=1, wb=1)), CM.clock_kind(_clock(l2_ld=1))]
    for mask, want in ((READ.bsq, 13), (RFO.bsq, 5), (WB.bsq, 5), (0x328E, 0), (0x0001, 0)):
        pmu = PMU(model)
        program(pmu, 0, "MSR_BSU_ESCR0", "BSQ_allocation", [], ENABLE=1)
        pmu.wrmsr(0, T.ESCR_BY_NAME["MSR_BSU_ESCR0"].msr,
                  (0x05 << 25) | mask << 9 | 0xC)  # T0_OS | T0_USR
        pmu.advance(Activity.from_kinds(kinds, [5, 3]))
        assert pmu.rdmsr(0, T.COUNTER_BASE) == want, hex(mask)
    # (models 0 and 1: the default request type alone selects every request, OR form)
    ored = model.model < 2
    for mask, want in ((0x2861, 23), (0x2821, 23 if ored else 18), (0x2841, 23 if ored else 5),
                       (0x2020, 18 if ored else 0), (0x0821, 0)):
        pmu = PMU(model)
        program(pmu, 2, "MSR_FSB_ESCR1", "IOQ_allocation", [], ENABLE=1)
        pmu.wrmsr(0, T.ESCR_BY_NAME["MSR_FSB_ESCR1"].msr, (0x03 << 25) | mask << 9 | 0xC)
        pmu.advance(Activity.from_kinds(kinds, [5, 3]))
        assert pmu.rdmsr(0, T.COUNTER_BASE + 2) == want, hex(mask)


def test_the_care_form_is_the_matching_of_models_2_and_later():
    """The guest's p4event warns with mask & care == canonical (sh arithmetic): the same
    requests as the matching, for every 16-bit mask."""
    for event in ("BSQ_allocation", "IOQ_allocation"):
        for r in BR.REQUESTS:
            care, canon = BR.care_mask(event, r), BR.canonical_mask(event, r)
            for mask in range(1 << 16):
                assert (mask & care == canon) == BR.selects(event, mask, r, 2), \
                    (event, r.name, hex(mask))


def test_default_masks():
    assert BR.default_mask("BSQ_allocation", BR.REQUESTS) == READ.bsq  # one encoding
    assert BR.default_mask("IOQ_allocation", BR.REQUESTS) == 0x2861  # every request
    assert BR.default_mask("IOQ_allocation", ()) == 0
