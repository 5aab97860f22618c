"""The 47 NetBurst events as one declarative table (SDM Ch. 19 Tables 19-28/29/30/34;
SDM Vol. 3B 18.15.5.1 and Table 18-64 for how an entry is read).

An event is keyed on (ESCR, event select): the same select code means different events on
different ESCRs (SDM Tables 19-28/19-29 give each event its ESCRs and select).  Each documented
mask bit of an event is an *event class*: the unit of activity the counting engine consumes
(docs/emulator.md, "Activity").  A counter whose ESCR selects event E with mask M receives, per
clock, the sum of the values of the classes (E, k) for the bits k set in M, qualified by the
ESCR's T0/T1 OS/USR bits (SDM 18.15.5.2, Tables 18-66/18-67).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from . import bus_requests as BR
from . import tables as T

ALL_MODELS = T.ALL_MODELS
# the pseudo-bits of the request classes of the bus-queue events (Event.line_bits): above the
# 16 bits of the ESCR event mask, so they never name a mask bit
REQUEST_BIT0 = 16


@dataclass(frozen=True)
class Event:
    name: str
    kind: str  # "NR" non-retirement (Table 19-28), "AR" at-retirement (19-29/19-30)
    select: int  # ESCR[30:25]
    cccr_select: int  # CCCR[15:13] as printed by the SDM (see `note` where it is inconsistent)
    escrs: tuple[str, ...]  # ESCR names the event is documented on
    mask: dict = field(hash=False, compare=False)  # bit k (ESCR bit 9 + k) -> name
    thread: str | None = "TS"  # "TS" thread specific, "TI" thread independent (Table 19-34)
    models: frozenset = ALL_MODELS
    counts: bool = True  # False: the event only tags uops and never increments (uop_type)
    note: str = ""

    @property
    def selects_requests(self) -> bool:
        """Does the mask select bus requests by their attributes (bus_requests.py) rather
        than add up one class per mask bit?"""
        return self.name in BR.MATCHERS

    @property
    def line_bits(self) -> dict:
        """The event's classes: bit -> name.  Its mask bits; for an event that selects bus
        requests, one pseudo-bit per request instead (REQUEST_BIT0 + its index)."""
        if self.selects_requests:
            return {REQUEST_BIT0 + i: r.name for i, r in enumerate(BR.REQUESTS)}
        return self.mask

    def bit(self, name_or_bit) -> int:
        """A mask bit (or a request pseudo-bit, line_bits) by name or number."""
        bits = {**self.mask, **self.line_bits}
        if isinstance(name_or_bit, int):
            if name_or_bit not in bits:
                raise KeyError(f"{self.name} has no mask bit {name_or_bit}")
            return name_or_bit
        for k, n in bits.items():
            if n == name_or_bit:
                return k
        raise KeyError(f"{self.name} has no mask bit {name_or_bit!r}; "
                       f"known: {', '.join(bits.values())}")

    def mask_value(self, *names) -> int:
        """Event-mask field value (ESCR[24:9] >> 9) selecting the named bits."""
        v = 0
        for n in names:
            v |= 1 << self.bit(n)
        return v

    def escr_value(self, *bits, t0_os=False, t0_usr=False, t1_os=False, t1_usr=False) -> int:
        """ESCR image selecting this event with the named mask bits and T-bits (Fig. 18-43)."""
        f = T.ESCR_FIELD
        v = self.select << f["EVENT_SELECT"].lo | self.mask_value(*bits) << f["EVENT_MASK"].lo
        for name, on in (("T0_OS", t0_os), ("T0_USR", t0_usr), ("T1_OS", t1_os),
                         ("T1_USR", t1_usr)):
            if on:
                v |= f[name].mask
        return v


def _pair(base):
    return (f"MSR_{base}_ESCR0", f"MSR_{base}_ESCR1")


def _bits(*names, start=0):
    return {start + i: n for i, n in enumerate(names) if n}


_FIRM = _pair("FIRM")
_CRU01 = ("MSR_CRU_ESCR0", "MSR_CRU_ESCR1")
_CRU23 = ("MSR_CRU_ESCR2", "MSR_CRU_ESCR3")
_IOQ_MASK = {**_bits("ReqA0", "ReqA1", "ReqA2", "ReqA3", "ReqA4", "ALL_READ", "ALL_WRITE",
                     "MEM_UC", "MEM_WC", "MEM_WT", "MEM_WP", "MEM_WB"),
             13: "OWN", 14: "OTHER", 15: "PREFETCH"}
_BSQ_MASK = {**_bits("REQ_TYPE0", "REQ_TYPE1", "REQ_LEN0", "REQ_LEN1"),
             **_bits("REQ_IO_TYPE", "REQ_LOCK_TYPE", "REQ_CACHE_TYPE", "REQ_SPLIT_TYPE",
                     "REQ_DEM_TYPE", "REQ_ORD_TYPE", "MEM_TYPE0", "MEM_TYPE1", "MEM_TYPE2",
                     start=5)}
_BRANCH_TYPE = _bits("UNCONDITIONAL", "CONDITIONAL", "CALL", "RETURN", "INDIRECT")
_FSB_NOTE = ("SDM prints CCCR select 03h, but FSB_ESCR0/1 are ESCR number 6 (Table 18-63); "
             "attached to FSB_ESCR0/1 with select 6, the self-consistent reading")

EVENTS: tuple[Event, ...] = (
    # ---- non-retirement events, Table 19-28 (+ x87_SIMD_moves_uop from older editions) ----
    Event("TC_deliver_mode", "NR", 0x01, 0x01, _pair("TC"),
          _bits("DD", "DB", "DI", "BD", "BB", "BI", "ID", "IB"), "TI"),
    Event("BPU_fetch_request", "NR", 0x03, 0x00, _pair("BPU"), {0: "TCMISS"}),
    Event("ITLB_reference", "NR", 0x18, 0x03, _pair("ITLB"), _bits("HIT", "MISS", "HIT_UC")),
    Event("memory_cancel", "NR", 0x02, 0x05, _pair("DAC"), {2: "ST_RB_FULL", 3: "64K_CONF"}),
    Event("memory_complete", "NR", 0x08, 0x02, _pair("SAAT"), _bits("LSC", "SSC", "USC", "ULC")),
    Event("load_port_replay", "NR", 0x04, 0x02, _pair("SAAT"), {1: "SPLIT_LD"}),
    Event("store_port_replay", "NR", 0x05, 0x02, _pair("SAAT"), {1: "SPLIT_ST"}),
    Event("MOB_load_replay", "NR", 0x03, 0x02, _pair("MOB"),
          {1: "NO_STA", 3: "NO_STD", 4: "PARTIAL_DATA", 5: "UNALGN_ADDR"}),
    Event("page_walk_type", "NR", 0x01, 0x04, _pair("PMH"), _bits("DTMISS", "ITMISS"), "TI"),
    Event("BSQ_cache_reference", "NR", 0x0C, 0x07, _pair("BSU"),
          _bits("RD_2ndL_HITS", "RD_2ndL_HITE", "RD_2ndL_HITM", "RD_3rdL_HITS", "RD_3rdL_HITE",
                "RD_3rdL_HITM", "WR_2ndL_HIT", "WR_3rdL_HIT", "RD_2ndL_MISS", "RD_3rdL_MISS",
                "WR_2ndL_MISS", "WR_3rdL_MISS")),
    Event("IOQ_allocation", "NR", 0x03, 0x06, _pair("FSB"), _IOQ_MASK),
    Event("IOQ_active_entries", "NR", 0x1A, 0x06, ("MSR_FSB_ESCR1",), _IOQ_MASK),
    Event("FSB_data_activity", "NR", 0x17, 0x06, _pair("FSB"),
          _bits("DRDY_DRV", "DRDY_OWN", "DRDY_OTHER", "DBSY_DRV", "DBSY_OWN", "DBSY_OTHER"),
          "TI"),
    Event("BSQ_allocation", "NR", 0x05, 0x07, ("MSR_BSU_ESCR0",), _BSQ_MASK),
    Event("bsq_active_entries", "NR", 0x06, 0x07, ("MSR_BSU_ESCR1",), _BSQ_MASK, "TS",
          note="not in Table 19-34; TS as in FreeBSD (inherits from BSQ_allocation)"),
    Event("SSE_input_assist", "NR", 0x34, 0x01, _FIRM, {15: "ALL"}, "TI"),
    Event("packed_SP_uop", "NR", 0x08, 0x01, _FIRM, {15: "ALL"}, "TI"),
    Event("packed_DP_uop", "NR", 0x0C, 0x01, _FIRM, {15: "ALL"}, "TI"),
    Event("scalar_SP_uop", "NR", 0x0A, 0x01, _FIRM, {15: "ALL"}, "TI"),
    Event("scalar_DP_uop", "NR", 0x0E, 0x01, _FIRM, {15: "ALL"}, "TI"),
    Event("64bit_MMX_uop", "NR", 0x02, 0x01, _FIRM, {15: "ALL"}, "TI"),
    Event("128bit_MMX_uop", "NR", 0x1A, 0x01, _FIRM, {15: "ALL"}, "TI"),
    Event("x87_FP_uop", "NR", 0x04, 0x01, _FIRM, {15: "ALL"}, "TI"),
    Event("x87_SIMD_moves_uop", "NR", 0x2E, 0x01, _FIRM, {3: "ALLP0", 4: "ALLP2"}, "TI",
          note="only in older SDM editions; FreeBSD/OProfile/perfctr values"),
    Event("TC_misc", "NR", 0x06, 0x01, _pair("TC"), {4: "FLUSH"}),
    Event("global_power_events", "NR", 0x13, 0x06, _pair("FSB"), {0: "RUNNING"}),
    Event("tc_ms_xfer", "NR", 0x05, 0x00, _pair("MS"), {0: "CISC"}),
    Event("uop_queue_writes", "NR", 0x09, 0x00, _pair("MS"),
          _bits("FROM_TC_BUILD", "FROM_TC_DELIVER", "FROM_ROM")),
    Event("retired_mispred_branch_type", "NR", 0x05, 0x02, _pair("TBPU"), _BRANCH_TYPE),
    Event("retired_branch_type", "NR", 0x04, 0x02, _pair("TBPU"), _BRANCH_TYPE),
    Event("resource_stall", "NR", 0x01, 0x01, _pair("ALF"), {5: "SBFULL"}),
    Event("WC_Buffer", "NR", 0x05, 0x05, _pair("DAC"),
          _bits("WCB_EVICTS", "WCB_FULL_EVICT", "WCB_HITM_EVICT"), "TI"),
    Event("b2b_cycles", "NR", 0x16, 0x03, _pair("FSB"), {k: f"BIT{k}" for k in range(1, 7)},
          "TI", note=_FSB_NOTE + "; TS/TI not listed, TI as in FreeBSD"),
    Event("bnr", "NR", 0x08, 0x03, _pair("FSB"), {k: f"BIT{k}" for k in range(3)}, "TI",
          note=_FSB_NOTE + "; TS/TI not listed, TI as in FreeBSD"),
    Event("snoop", "NR", 0x06, 0x03, _pair("FSB"), {k: f"BIT{k}" for k in (2, 6, 7)}, "TI",
          note=_FSB_NOTE + "; TS/TI not listed, TI as in FreeBSD"),
    Event("response", "NR", 0x04, 0x03, _pair("FSB"), {k: f"BIT{k}" for k in (1, 2, 8, 9)},
          "TI", note=_FSB_NOTE + "; TS/TI not listed, TI as in FreeBSD"),
    # ---- at-retirement events, Table 19-29 ----
    Event("front_end_event", "AR", 0x08, 0x05, _CRU23, _bits("NBOGUS", "BOGUS")),
    Event("execution_event", "AR", 0x0C, 0x05, _CRU23,
          _bits("NBOGUS0", "NBOGUS1", "NBOGUS2", "NBOGUS3", "BOGUS0", "BOGUS1", "BOGUS2",
                "BOGUS3")),
    Event("replay_event", "AR", 0x09, 0x05, _CRU23, _bits("NBOGUS", "BOGUS")),
    Event("instr_retired", "AR", 0x02, 0x04, _CRU01,
          _bits("NBOGUSNTAG", "NBOGUSTAG", "BOGUSNTAG", "BOGUSTAG")),
    Event("uops_retired", "AR", 0x01, 0x04, _CRU01, _bits("NBOGUS", "BOGUS")),
    Event("uop_type", "AR", 0x02, 0x02, _pair("RAT"), {1: "TAGLOADS", 2: "TAGSTORES"},
          counts=False, note="tags loads/stores for front_end_event; never increments"),
    Event("branch_retired", "AR", 0x06, 0x05, _CRU23, _bits("MMNP", "MMNM", "MMTP", "MMTM")),
    Event("mispred_branch_retired", "AR", 0x03, 0x04, _CRU01, {0: "NBOGUS"}),
    Event("x87_assist", "AR", 0x03, 0x05, _CRU23, _bits("FPSU", "FPSO", "POAO", "POAU", "PREA")),
    Event("machine_clear", "AR", 0x02, 0x05, _CRU23, {0: "CLEAR", 2: "MOCLEAR", 6: "SMCLEAR"},
          note="MOCLEAR/SMCLEAR positions as in the SDM; Linux's perf_event_p4.h has bits 1, 2"),
    # ---- model-specific at-retirement event, Table 19-30 ----
    Event("instr_completed", "AR", 0x07, 0x04, _CRU01, _bits("NBOGUS", "BOGUS"),
          models=frozenset({3, 4, 6})),
)

EVENT_BY_NAME: dict[str, Event] = {e.name: e for e in EVENTS}

# (ESCR name, event select) -> Event.  The engine keys on this.
EVENT_BY_ESCR: dict[tuple[str, int], Event] = {
    (escr, e.select): e for e in EVENTS for escr in e.escrs}


def event_for(escr_name: str, select: int, model: int | None = None) -> Event | None:
    """The event an ESCR counts with this event select, or None (undocumented: input 0,
    docs/emulator.md decision D4)."""
    e = EVENT_BY_ESCR.get((escr_name, select))
    if e is None or (model is not None and model not in e.models):
        return None
    return e


# --------------------------------------------------------------------------------------------
# Event classes: one per (event, documented mask bit) of a counting event, and for the
# bus-queue events one per bus request (Event.line_bits).  Activity lines are (class, logical
# processor, privilege); see docs/emulator.md "Activity".
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EventClass:
    id: int
    event: str
    bit: int
    bit_name: str
    thread: str  # "TS" / "TI"

    @property
    def label(self) -> str:
        return f"{self.event}.{self.bit_name}"


CLASSES: tuple[EventClass, ...] = tuple(
    EventClass(i, e.name, b, n, e.thread or "TS")
    for i, (e, b, n) in enumerate((e, b, n) for e in EVENTS if e.counts
                                  for b, n in sorted(e.line_bits.items())))
CLASS_ID: dict[tuple[str, int], int] = {(c.event, c.bit): c.id for c in CLASSES}
NUM_CLASSES = len(CLASSES)

OS, USR = 0, 1  # privilege index: CPL 0 / CPL 1-3
NUM_LINES = NUM_CLASSES * 4  # (class, lp, priv)


def class_id(event: str, bit) -> int:
    """Class id of `event`'s mask bit (name or number)."""
    e = EVENT_BY_NAME[event]
    return CLASS_ID[(e.name, e.bit(bit))]


def selected_classes(ev: Event, mask: int, model: int) -> list[int]:
    """The classes a counter whose ESCR selects `ev` with event mask `mask` adds up, on CPU
    model `model`: one per mask bit set (undocumented bits select nothing); for a bus-queue
    event, one per bus request the mask matches (bus_requests.selects)."""
    if ev.selects_requests:
        return [CLASS_ID[(ev.name, REQUEST_BIT0 + i)] for i, r in enumerate(BR.REQUESTS)
                if BR.selects(ev.name, mask, r, model)]
    return [CLASS_ID[(ev.name, b)] for b in sorted(ev.mask) if mask >> b & 1]


def line_id(cls: int, lp: int, priv: int) -> int:
    """Column of an activity line: class `cls` caused by logical processor `lp` at `priv`."""
    return cls * 4 + lp * 2 + priv


# --------------------------------------------------------------------------------------------
# Replay tagging: the metrics replay_event counts (SDM Vol. 3B 18.15.7, Table 19-33)
# --------------------------------------------------------------------------------------------

PEBS_UOP_TAG = 1 << 24  # MSR_PEBS_ENABLE bit 24: replay tagging on


@dataclass(frozen=True)
class ReplayMetric:
    """One row of SDM Table 19-33: replay_event (NBOGUS) counts the retired uops tagged
    under these MSR_PEBS_ENABLE metric bits (all of them set, with UOP_TAG) and uop types
    (any of these MSR_PEBS_MATRIX_VERT bits set).  `upstream`: the extra ESCR programming
    the SDM asks for, as text."""
    name: str
    pebs: int
    vert: int
    upstream: str = ""


REPLAY_METRICS: tuple[ReplayMetric, ...] = (
    ReplayMetric("1stL_cache_load_miss_retired", 1 << 0, 1 << 0),
    ReplayMetric("2ndL_cache_load_miss_retired", 1 << 1, 1 << 0),
    ReplayMetric("DTLB_load_miss_retired", 1 << 2, 1 << 0),
    ReplayMetric("DTLB_store_miss_retired", 1 << 2, 1 << 1),
    ReplayMetric("DTLB_all_miss_retired", 1 << 2, (1 << 0) | (1 << 1)),
    ReplayMetric("Tagged_mispred_branch", (1 << 15) | (1 << 16), 1 << 4),
    ReplayMetric("MOB_load_replay_retired", 1 << 9, 1 << 0,
                 "MOB_load_replay with PARTIAL_DATA and UNALGN_ADDR"),
    ReplayMetric("split_load_retired", 1 << 10, 1 << 0,
                 "load_port_replay SPLIT_LD on SAAT_ESCR1"),
    ReplayMetric("split_store_retired", 1 << 10, 1 << 1,
                 "store_port_replay SPLIT_ST on SAAT_ESCR0"),
)


def replay_metrics(pebs_enable: int, matrix_vert: int) -> tuple[ReplayMetric, ...]:
    """The metrics MSR_PEBS_ENABLE and MSR_PEBS_MATRIX_VERT select (none without UOP_TAG):
    those whose bits are all set in both (MATRIX_VERT's bits select the uop types tagged:
    bit 0 loads, bit 1 stores, so 1 selects DTLB_load_miss_retired alone and 3 all three
    DTLB metrics, SDM Table 19-33)."""
    if not pebs_enable & PEBS_UOP_TAG:
        return ()
    return tuple(m for m in REPLAY_METRICS
                 if pebs_enable & m.pebs == m.pebs and matrix_vert & m.vert == m.vert)
