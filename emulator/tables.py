"""Declarative tables of the NetBurst PMU: one table, one truth.

Everything that decode, validation, error messages, docs and tests need about registers,
fields, ESCR/counter wiring and the reserved-bit policy lives here as data.  Sources are cited
as the Intel SDM: Vol. 3B section 18.15 (Table 18-63 = ESCR/counter wiring,
Figures 18-44/18-45 = register layouts), Table 35-41 (model availability).

CPU models are in models.py, events in events.py; both are tables too.
"""
from __future__ import annotations

from dataclasses import dataclass

# --------------------------------------------------------------------------------------------
# Counters and CCCRs (SDM 18.15.2, Table 18-63)
# --------------------------------------------------------------------------------------------

NUM_COUNTERS = 18
COUNTER_BITS = 40  # SDM Fig. 18-44
COUNTER_MASK = (1 << COUNTER_BITS) - 1
COUNTER_BASE = 0x300  # counter n = 300h + n
CCCR_BASE = 0x360  # CCCR n = 360h + n


@dataclass(frozen=True)
class Counter:
    index: int
    counter_name: str  # e.g. MSR_BPU_COUNTER0
    cccr_name: str  # e.g. MSR_BPU_CCCR0
    block: str  # BPU, MS, FLAME, IQ
    side: int  # 0 = "even side" (reaches ..._ESCR0), 1 = "odd side" (reaches ..._ESCR1)
    cascade_from: int | None  # CASCADE bit in this CCCR: start when this counter overflows
    ext_cascade_from: int | None  # bit 11 (extended cascading, SDM Table 18-65)
    ext_cascade_name: str | None

    @property
    def counter_msr(self) -> int:
        return COUNTER_BASE + self.index

    @property
    def cccr_msr(self) -> int:
        return CCCR_BASE + self.index


def _counter(n, block, blk_idx, side, casc, ext=None, ext_name=None):
    return Counter(n, f"MSR_{block}_COUNTER{blk_idx}", f"MSR_{block}_CCCR{blk_idx}", block, side,
                   casc, ext, ext_name)


# Cascade partners: 0<->2, 1<->3 in every block; 16 only from 14, 17 only from 15 (SDM
# 18.15.5.5, 18.15.5.6).  Extended cascading: IQ_CCCR0/3/4/5 bit 11 (SDM 18.15.5.7, Table 18-65).
COUNTERS: tuple[Counter, ...] = (
    _counter(0, "BPU", 0, 0, 2), _counter(1, "BPU", 1, 0, 3),
    _counter(2, "BPU", 2, 1, 0), _counter(3, "BPU", 3, 1, 1),
    _counter(4, "MS", 0, 0, 6), _counter(5, "MS", 1, 0, 7),
    _counter(6, "MS", 2, 1, 4), _counter(7, "MS", 3, 1, 5),
    _counter(8, "FLAME", 0, 0, 10), _counter(9, "FLAME", 1, 0, 11),
    _counter(10, "FLAME", 2, 1, 8), _counter(11, "FLAME", 3, 1, 9),
    _counter(12, "IQ", 0, 0, 14, 16, "CASCNT4INTO0"),
    _counter(13, "IQ", 1, 0, 15),
    _counter(14, "IQ", 2, 1, 12),
    _counter(15, "IQ", 3, 1, 13, 17, "CASCNT5INTO3"),
    _counter(16, "IQ", 4, 0, 14, 17, "CASCNT5INTO4"),
    _counter(17, "IQ", 5, 1, 15, 16, "CASCNT4INTO5"),
)

BLOCKS = ("BPU", "MS", "FLAME", "IQ")

# --------------------------------------------------------------------------------------------
# ESCRs (SDM 18.15.5.1, Table 18-63, Table 35-41)
# --------------------------------------------------------------------------------------------

ALL_MODELS = frozenset({0, 1, 2, 3, 4, 6})


@dataclass(frozen=True)
class Escr:
    name: str
    msr: int
    number: int  # the value a CCCR's ESCR_SELECT field holds to pick this ESCR
    block: str
    side: int  # 0: feeds the block's even-side counters, 1: odd-side
    models: frozenset = ALL_MODELS  # CPUID family 0Fh model numbers on which it exists

    def feeds(self) -> tuple[int, ...]:
        """Counters whose CCCR can select this ESCR (SDM Table 18-63)."""
        return tuple(c.index for c in COUNTERS if c.block == self.block and c.side == self.side)


def _pair(base_name, msr0, number, block, models=ALL_MODELS):
    return (Escr(f"MSR_{base_name}_ESCR0", msr0, number, block, 0, models),
            Escr(f"MSR_{base_name}_ESCR1", msr0 + 1, number, block, 1, models))


ESCRS: tuple[Escr, ...] = (
    *_pair("BSU", 0x3A0, 7, "BPU"),
    *_pair("FSB", 0x3A2, 6, "BPU"),
    *_pair("FIRM", 0x3A4, 1, "FLAME"),
    *_pair("FLAME", 0x3A6, 0, "FLAME"),
    *_pair("DAC", 0x3A8, 5, "FLAME"),
    *_pair("MOB", 0x3AA, 2, "BPU"),
    *_pair("PMH", 0x3AC, 4, "BPU"),
    *_pair("SAAT", 0x3AE, 2, "FLAME"),
    *_pair("U2L", 0x3B0, 3, "FLAME"),
    *_pair("BPU", 0x3B2, 0, "BPU"),
    *_pair("IS", 0x3B4, 1, "BPU"),
    *_pair("ITLB", 0x3B6, 3, "BPU"),
    Escr("MSR_CRU_ESCR0", 0x3B8, 4, "IQ", 0), Escr("MSR_CRU_ESCR1", 0x3B9, 4, "IQ", 1),
    # IQ_ESCR0/1 exist on models 0, 1, 2 only (SDM Table 18-63 footnote, Table 35-41).
    *_pair("IQ", 0x3BA, 0, "IQ", frozenset({0, 1, 2})),
    *_pair("RAT", 0x3BC, 2, "IQ"),
    # SSU_ESCR0 only: the SDM documents no SSU_ESCR1 (3BFh is a Linux-only guess, absent here).
    Escr("MSR_SSU_ESCR0", 0x3BE, 3, "IQ", 0),
    *_pair("MS", 0x3C0, 0, "MS"),
    *_pair("TBPU", 0x3C2, 2, "MS"),
    *_pair("TC", 0x3C4, 1, "MS"),
    *_pair("IX", 0x3C8, 5, "BPU"),
    *_pair("ALF", 0x3CA, 1, "IQ"),
    Escr("MSR_CRU_ESCR2", 0x3CC, 5, "IQ", 0), Escr("MSR_CRU_ESCR3", 0x3CD, 5, "IQ", 1),
    Escr("MSR_CRU_ESCR4", 0x3E0, 6, "IQ", 0), Escr("MSR_CRU_ESCR5", 0x3E1, 6, "IQ", 1),
)

ESCR_BY_MSR = {e.msr: e for e in ESCRS}
ESCR_BY_NAME = {e.name: e for e in ESCRS}


def escr_for(counter: int, select: int) -> Escr | None:
    """The ESCR that CCCR[counter].ESCR_SELECT == select picks, or None ("no ESCR documented
    for that select value": the counter's input is then 0, docs/emulator.md decision D4)."""
    return _ESCR_FOR.get((counter, select))


# (counter, ESCR_SELECT) -> ESCR, derived once from COUNTERS and ESCRS (Table 18-63)
_ESCR_FOR = {(c.index, e.number): e for c in COUNTERS for e in ESCRS
             if e.block == c.block and e.side == c.side}


# --------------------------------------------------------------------------------------------
# Other PMU MSRs handled by the emulator (SDM Table 35-41)
# --------------------------------------------------------------------------------------------

MSR_IA32_MISC_ENABLE = 0x1A0
MSR_TC_PRECISE_EVENT = 0x3F0
MSR_PEBS_ENABLE = 0x3F1
MSR_PEBS_MATRIX_VERT = 0x3F2

PMU_RANGE = (0x300, 0x3FF)  # every address here belongs to the PMU model: absent ones #GP

# IA32_MISC_ENABLE bits the PMU owns (read-only; SDM Table 35-2).
MISC_PERFMON_AVAILABLE = 1 << 7
MISC_BTS_UNAVAILABLE = 1 << 11
MISC_PEBS_UNAVAILABLE = 1 << 12

# --------------------------------------------------------------------------------------------
# Register fields (SDM Fig. 18-45 CCCR, Fig. 18-43 ESCR)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Field:
    name: str
    lo: int
    hi: int
    doc: str
    ht_only: bool = False  # an HT-layout field: reserved on a part without Hyper-Threading

    @property
    def mask(self) -> int:
        return ((1 << (self.hi - self.lo + 1)) - 1) << self.lo

    def get(self, value: int) -> int:
        return (value >> self.lo) & ((1 << (self.hi - self.lo + 1)) - 1)


CCCR_FIELDS: tuple[Field, ...] = (
    Field("ENABLE", 12, 12, "1 = count"),
    Field("ESCR_SELECT", 13, 15, "ESCR number (not address), SDM Table 18-63"),
    Field("ACTIVE_THREAD", 16, 17,
          "00 none, 01 exactly one LP active, 10 both, 11 any (must be 11b without HT)"),
    Field("COMPARE", 18, 18, "enable the threshold/complement/edge filter"),
    Field("COMPLEMENT", 19, 19, "0: pass when input > THRESHOLD; 1: when input <= THRESHOLD"),
    Field("THRESHOLD", 20, 23, "0-15, used only with COMPARE"),
    Field("EDGE", 24, 24, "count rising edges of the filter output (only with COMPARE)"),
    Field("FORCE_OVF", 25, 25, "treat every increment as an overflow"),
    Field("OVF_PMI_T0", 26, 26, "PMI to logical processor 0 on overflow (OVF_PMI without HT)"),
    Field("OVF_PMI_T1", 27, 27, "PMI to logical processor 1 on overflow", ht_only=True),
    Field("CASCADE", 30, 30, "start when the alternate counter overflows"),
    Field("OVF", 31, 31, "sticky overflow flag, cleared only by software"),
)
CCCR_EXT_CASCADE = Field("EXT_CASCADE", 11, 11,
                         "extended cascading CASCNTxINTOy (IQ_CCCR0/3/4/5, models 2/3/4/6)")

ESCR_FIELDS: tuple[Field, ...] = (
    Field("T1_USR", 0, 0, "count LP 1 at CPL 1-3", ht_only=True),
    Field("T1_OS", 1, 1, "count LP 1 at CPL 0", ht_only=True),
    Field("T0_USR", 2, 2, "count (LP 0) at CPL 1-3 (USR without HT)"),
    Field("T0_OS", 3, 3, "count (LP 0) at CPL 0 (OS without HT)"),
    Field("TAG_ENABLE", 4, 4, "tag uops that hit this event (execution tagging)"),
    Field("TAG_VALUE", 5, 8, "4-bit tag value"),
    Field("EVENT_MASK", 9, 24, "sub-event bits; table bit k is ESCR bit 9+k"),
    Field("EVENT_SELECT", 25, 30, "event class code, meaningful per ESCR"),
)

CCCR_FIELD = {f.name: f for f in CCCR_FIELDS + (CCCR_EXT_CASCADE,)}
ESCR_FIELD = {f.name: f for f in ESCR_FIELDS}

# PEBS_ENABLE (3F1h) documented bits (SDM Table 35-41 and Table 19-33, 18.16.3)
PEBS_ENABLE_FIELDS: tuple[Field, ...] = (
    Field("METRIC", 0, 12, "replay-tagging metric selectors (documented: 0, 1, 2, 9, 10)"),
    Field("METRIC_MISPRED", 15, 16, "tagged mispredicted-branch metric (Table 19-33)"),
    Field("UOP_TAG", 24, 24, "enable replay tagging"),
    Field("ENABLE_PEBS_MY_THR", 25, 25, "PEBS for the writing LP (ENABLE_PEBS without HT)"),
    Field("ENABLE_PEBS_OTH_THR", 26, 26, "PEBS for the other LP", ht_only=True),
)
PEBS_MATRIX_VERT_FIELDS: tuple[Field, ...] = (
    Field("LOAD", 0, 0, "replay-tag load uops"),
    Field("STORE", 1, 1, "replay-tag store uops"),
    Field("BRANCH", 4, 4, "replay-tag mispredicted-branch uops"),
)


def fields_mask(fields, ht: bool = True) -> int:
    m = 0
    for f in fields:
        if ht or not f.ht_only:
            m |= f.mask
    return m


# --------------------------------------------------------------------------------------------
# Reserved-bit policy (SDM Vol. 2B WRMSR; docs/emulator.md "Register file").  One table, both modes.
#
#   default: #GP when a write sets bits 63:40 of a counter or 63:32 of any other PMU
#            register; other reserved bits are accepted, kept for read-back and ignored.
#   strict:  #GP when a write sets any bit that is not a documented field of that register
#            on this model (HT-only fields count as reserved on a part without HT; bit 11 of
#            a CCCR counts as reserved unless it is an extended-cascade bit on a model that
#            has extended cascading).
# --------------------------------------------------------------------------------------------

RESERVED_POLICY = {
    # kind: (bits that fault in default mode, description)
    "counter": (~COUNTER_MASK & (2**64 - 1), "bits 63:40 of a 40-bit counter"),
    "cccr": (0xFFFF_FFFF_0000_0000, "bits 63:32 of a CCCR"),
    "escr": (0xFFFF_FFFF_0000_0000, "bits 63:32 of an ESCR"),
    "pebs_enable": (0xFFFF_FFFF_0000_0000, "bits 63:32 of MSR_PEBS_ENABLE"),
    "pebs_matrix_vert": (0xFFFF_FFFF_0000_0000, "bits 63:32 of MSR_PEBS_MATRIX_VERT"),
    "tc_precise_event": (0xFFFF_FFFF_0000_0000, "bits 63:32 of MSR_TC_PRECISE_EVENT"),
}
