"""The NetBurst PMU register file (Contract 1 of docs/architecture.md).

One `PMU` object is the register file of one physical core: the two logical processors of a
Hyper-Threading core share every counter, CCCR, ESCR and 3F0h-3F2h register (SDM Table 35-41
"Shared"; SDM Vol. 3B 18.16).  The bridge calls `rdmsr`, `wrmsr`, `rdpmc` and
`misc_enable`; every guest-visible fault is a `PMUFault` (the guest gets #GP(0)) raised before
anything is changed.

Register values are decoded into numpy arrays when they are written (never per counting step);
the counting engine (engine.py) works on those arrays.  Which bits are fields, which are
reserved and which fault comes from tables.py (`CCCR_FIELDS`, `ESCR_FIELDS`,
`RESERVED_POLICY`, ...), never from masks written here again.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import tables as T
from .engine import Engine, StepResult
from .models import CpuModel

U64 = (1 << 64) - 1
_OVF_BIT = T.CCCR_FIELD["OVF"].mask


# Why a PMU access faults: PMUFault.kind -> what it means (one table: messages, the bridge's
# per-kind fault totals and docs/bridge.md use it)
FAULT_KINDS = {
    "not_pmu": "not a PMU register",
    "absent": "no such MSR on this model",
    "reserved": "reserved bits set",
    "rdpmc_index": "counter index not 0-17",
}


class PMUFault(Exception):
    """A guest-visible #GP(0) from a PMU access.  `str(fault)` says what was wrong and why;
    `kind` is a key of FAULT_KINDS."""

    def __init__(self, message: str, kind: str):
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown PMU fault kind {kind!r}")
        super().__init__(message)
        self.kind = kind


# --------------------------------------------------------------------------------------------
# Register descriptors (built from the tables, per model)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Register:
    msr: int
    name: str
    kind: str  # "counter", "cccr", "escr", "tc_precise_event", "pebs_enable", "pebs_matrix_vert"
    index: int  # counter number, ESCR slot in this PMU's ESCR arrays, or 0
    fault_mask: int  # bits whose setting faults in the current mode
    fault_desc: str  # human description of fault_mask, for messages
    strict: bool  # fault_mask is the strict (documented-fields) mask


def _bit_ranges(mask: int) -> str:
    """0x30000C00 -> 'bits 29:28, 11:10'; 0x800 -> 'bit 11' (highest first, like the SDM)."""
    ranges, bit = [], 63
    while bit >= 0:
        if mask >> bit & 1:
            hi = bit
            while bit >= 0 and mask >> bit & 1:
                bit -= 1
            lo = bit + 1
            ranges.append(f"{hi}" if hi == lo else f"{hi}:{lo}")
        else:
            bit -= 1
    if not ranges:
        return "no bits"
    single = len(ranges) == 1 and ":" not in ranges[0]
    return ("bit " if single else "bits ") + ", ".join(ranges)


def documented_mask(kind: str, model: CpuModel, ht: bool, counter: int | None = None) -> int:
    """Bits of a register that are documented fields on this model (strict mode accepts
    exactly these).  HT-only fields count only with `ht`; CCCR bit 11 only for the four IQ
    CCCRs that have an extended-cascade bit, on models with extended cascading (SDM
    18.15.5.7, Table 18-65)."""
    if kind == "counter":
        return T.COUNTER_MASK
    if kind == "cccr":
        m = T.fields_mask(T.CCCR_FIELDS, ht)
        if counter is not None and model.extended_cascade and \
                T.COUNTERS[counter].ext_cascade_from is not None:
            m |= T.CCCR_EXT_CASCADE.mask
        return m
    if kind == "escr":
        return T.fields_mask(T.ESCR_FIELDS, ht)
    if kind == "pebs_enable":
        return T.fields_mask(T.PEBS_ENABLE_FIELDS, ht)
    if kind == "pebs_matrix_vert":
        return T.fields_mask(T.PEBS_MATRIX_VERT_FIELDS, ht)
    if kind == "tc_precise_event":
        return 0  # bit layout undocumented (SDM Table 35-41): nothing is a known field
    raise KeyError(kind)


def build_registers(model: CpuModel, ht: bool, strict: bool) -> dict[int, Register]:
    """Every MSR of 300h-3FFh that exists on `model`, with its fault mask for the mode."""
    regs: dict[int, Register] = {}

    def add(msr, name, kind, index, counter=None):
        default_mask, default_desc = T.RESERVED_POLICY[kind]
        if strict:
            mask = U64 & ~documented_mask(kind, model, ht, counter)
            where = "" if ht else " without Hyper-Threading"
            desc = (f"not a documented field of {name} on model {model.key}{where} "
                    f"(strict mode)")
        else:
            mask, desc = default_mask, default_desc
        regs[msr] = Register(msr, name, kind, index, mask, desc, strict)

    for c in T.COUNTERS:
        add(c.counter_msr, c.counter_name, "counter", c.index, c.index)
        add(c.cccr_msr, c.cccr_name, "cccr", c.index, c.index)
    slot = 0
    for e in T.ESCRS:
        if model.model in e.models:
            add(e.msr, e.name, "escr", slot)
            slot += 1
    add(T.MSR_TC_PRECISE_EVENT, "MSR_TC_PRECISE_EVENT", "tc_precise_event", 0)
    add(T.MSR_PEBS_ENABLE, "MSR_PEBS_ENABLE", "pebs_enable", 0)
    add(T.MSR_PEBS_MATRIX_VERT, "MSR_PEBS_MATRIX_VERT", "pebs_matrix_vert", 0)
    return regs


# --------------------------------------------------------------------------------------------
# The register file
# --------------------------------------------------------------------------------------------

_F = T.CCCR_FIELD
_E = T.ESCR_FIELD


class PMU:
    """Register file + decoded state of one NetBurst core's PMU.

    Counting: `advance(activity)` (engine.py) moves the counters forward.

    The counter state -- `counter`, `cccr_raw` (uint64 per counter), `ovf` and `pmi_armed`
    (bool per counter) -- lives in arrays the PMU writes in place and never rebinds.  A host
    with a fast path of its own (the plugin's C register file, docs/bridge.md) passes them as
    `storage` (name -> array of NUM_COUNTERS elements): then both see one copy of the state
    and nothing is handed back and forth.
    """

    STATE_ARRAYS = {"counter": np.uint64, "cccr_raw": np.uint64, "ovf": np.bool_,
                    "pmi_armed": np.bool_}

    def __init__(self, model: CpuModel, ht: bool = False, strict: bool = False,
                 storage: dict[str, np.ndarray] | None = None):
        self.model = model
        self.ht = bool(ht)
        self.strict = bool(strict)
        self.registers = build_registers(model, self.ht, self.strict)
        self.escrs: tuple[T.Escr, ...] = tuple(e for e in T.ESCRS if model.model in e.models)
        self.escr_slot = {e.name: i for i, e in enumerate(self.escrs)}
        self._bind_state(storage)
        # Static wiring, per counter: the ESCR slot each ESCR_SELECT value reaches (-1: none),
        # the CASCADE source (alternate) and the extended-cascade source (SDM Table 18-63,
        # 18.15.5.6, Table 18-65).
        self.select_slot = np.full((T.NUM_COUNTERS, 8), -1, dtype=np.int64)
        for c in T.COUNTERS:
            for sel in range(8):
                e = T.escr_for(c.index, sel)
                if e is not None and e.name in self.escr_slot:
                    self.select_slot[c.index, sel] = self.escr_slot[e.name]
        self.alt = np.array([c.cascade_from for c in T.COUNTERS], dtype=np.int64)
        self.ext_src = np.array([c.ext_cascade_from if c.ext_cascade_from is not None else c.index
                                 for c in T.COUNTERS], dtype=np.int64)
        self.has_ext = np.array([c.ext_cascade_from is not None and model.extended_cascade
                                 for c in T.COUNTERS], dtype=bool)
        self.reset()
        self.engine = Engine(self)

    # -- state ----------------------------------------------------------------------------

    def reset(self) -> None:
        """Power-on state: every counter, CCCR and ESCR zero (SDM 18.15.1/18.15.3)."""
        n, e = T.NUM_COUNTERS, len(self.escrs)
        # counter: 40-bit values; cccr_raw: as written, OVF kept in ovf (CCCR bit 31, sticky);
        # pmi_armed: an event counted after the overflow (SDM 18.15.5.8)
        for name in self.STATE_ARRAYS:
            getattr(self, name)[:] = 0
        self.edge_prev = np.zeros(n, dtype=bool)  # edge-detector history (beh. 1)
        # per counter: overflows whose PMI was discarded before it was raised (OVF cleared by
        # software before the next counted event, SDM 18.15.5.8): a diagnostic, not state
        self.discarded_pmis = np.zeros(n, dtype=np.int64)
        # decoded CCCR fields (effective values: HT-only fields are 0 / "any" without HT)
        self.enable = np.zeros(n, dtype=bool)
        self.escr_select = np.zeros(n, dtype=np.int64)
        self.active_thread = np.full(n, 3 if not self.ht else 0, dtype=np.int64)
        self.compare = np.zeros(n, dtype=bool)
        self.complement = np.zeros(n, dtype=bool)
        self.threshold = np.zeros(n, dtype=np.int64)
        self.edge = np.zeros(n, dtype=bool)
        self.force_ovf = np.zeros(n, dtype=bool)
        self.pmi_t0 = np.zeros(n, dtype=bool)
        self.pmi_t1 = np.zeros(n, dtype=bool)
        self.cascade = np.zeros(n, dtype=bool)
        self.ext_cascade = np.zeros(n, dtype=bool)  # bit 11, only where it is a field
        self.escr_index = self.select_slot[np.arange(n), 0].copy()  # slot or -1
        # decoded ESCR fields (per ESCR slot)
        self.escr_raw = np.zeros(e, dtype=np.uint64)
        self.event_select = np.zeros(e, dtype=np.int64)
        self.event_mask = np.zeros(e, dtype=np.int64)
        self.t0_os = np.zeros(e, dtype=bool)
        self.t0_usr = np.zeros(e, dtype=bool)
        self.t1_os = np.zeros(e, dtype=bool)
        self.t1_usr = np.zeros(e, dtype=bool)
        self.tag_enable = np.zeros(e, dtype=bool)
        self.tag_value = np.zeros(e, dtype=np.int64)
        # other PMU MSRs
        self.tc_precise_event = 0
        self.pebs_enable = 0
        self.pebs_enable_writer = 0  # LP that wrote PEBS_ENABLE (MY_THR/OTH_THR are relative)
        self.pebs_matrix_vert = 0
        # bumped by every CCCR/ESCR write and reset (the engine's caches key on it)
        self.config_version = getattr(self, "config_version", 0) + 1
        self.dirty_counters: set[int] = set(range(n))

    # -- Contract 1 -----------------------------------------------------------------------

    @staticmethod
    def handles(msr: int) -> bool:
        """True for every address the PMU model owns: 300h-3FFh (absent ones fault)."""
        return T.PMU_RANGE[0] <= msr <= T.PMU_RANGE[1]

    def misc_enable(self, qemu_value: int) -> int:
        """IA32_MISC_ENABLE as the guest must see it: bit 7 (performance monitoring
        available) set, bits 11/12 (BTS/PEBS unavailable) per model (SDM Table 35-2)."""
        v = qemu_value | T.MISC_PERFMON_AVAILABLE
        for bit, off in ((T.MISC_BTS_UNAVAILABLE, self.model.bts_unavailable),
                         (T.MISC_PEBS_UNAVAILABLE, self.model.pebs_unavailable)):
            v = (v | bit) if off else (v & ~bit)
        return v

    def rdmsr(self, lp: int, msr: int) -> int:
        reg = self._lookup("RDMSR", msr)
        k, i = reg.kind, reg.index
        if k == "counter":
            return int(self.counter[i])
        if k == "cccr":
            return (int(self.cccr_raw[i]) & ~_OVF_BIT) | (_OVF_BIT if self.ovf[i] else 0)
        if k == "escr":
            return int(self.escr_raw[i])
        if k == "tc_precise_event":
            return self.tc_precise_event
        if k == "pebs_enable":
            return self.pebs_enable
        return self.pebs_matrix_vert

    def wrmsr(self, lp: int, msr: int, value: int) -> None:
        reg = self._lookup("WRMSR", msr)
        if not 0 <= value <= U64:
            raise ValueError(f"WRMSR value must be a 64-bit unsigned integer, got {value!r}")
        bad = value & reg.fault_mask
        if bad:
            if reg.strict:
                raise PMUFault(f"WRMSR 0x{msr:X} ({reg.name}) = 0x{value:X}: "
                               f"{_bit_ranges(bad)} set, {reg.fault_desc}; documented fields: "
                               f"0x{U64 & ~reg.fault_mask:X}{self._strict_hint(reg, bad)}",
                               "reserved")
            raise PMUFault(f"WRMSR 0x{msr:X} ({reg.name}) = 0x{value:X}: {reg.fault_desc} "
                           f"are reserved (set: 0x{bad:X})", "reserved")
        k, i = reg.kind, reg.index
        if k == "counter":
            # All 40 bits written (SDM 18.15.5.4, Fig. 18-44); OVF unchanged (decision D13).
            self.counter[i] = value
        elif k == "cccr":
            self._write_cccr(i, value)
        elif k == "escr":
            self._write_escr(i, value)
        elif k == "tc_precise_event":
            self.tc_precise_event = value
        elif k == "pebs_enable":
            self.pebs_enable = value
            self.pebs_enable_writer = lp
            self.config_version += 1  # the replay-tagging metrics replay_event counts
        else:
            self.pebs_matrix_vert = value
            self.config_version += 1

    def rdpmc(self, lp: int, ecx: int) -> int:
        """RDPMC (SDM Vol. 2B RDPMC): ECX[30:0] = counter 0-17, ECX[31] = fast read
        (EAX = counter[31:0], EDX = 0); otherwise EDX:EAX = the 40-bit value."""
        ecx &= 0xFFFF_FFFF
        index, fast = ecx & 0x7FFF_FFFF, ecx >> 31
        if index >= T.NUM_COUNTERS:
            raise PMUFault(
                f"RDPMC ECX=0x{ecx:X}: counter index {index} (ECX[30:0]) is not 0-17 on model "
                f"{self.model.key}; ECX[31] is the fast-read flag, there is no counter-type "
                f"bit on NetBurst (indices 18-25 exist only on L3-equipped Xeon MP parts, "
                f"not modelled)", "rdpmc_index")
        v = int(self.counter[index])
        return v & 0xFFFF_FFFF if fast else v

    # -- counting (engine.py) -------------------------------------------------------------

    def advance(self, activity) -> StepResult:
        """Count one batch of activity (activity.Activity) on every counter at once."""
        return self.engine.advance(activity)

    def horizon(self, max_input: int = 15) -> float:
        """Clocks before any OVF flag can go from 0 to 1; batches shorter than this are
        exact (docs/emulator.md, "Exactness")."""
        return self.engine.horizon(max_input)

    # -- helpers for the bridge, the engine and the tests ---------------------------------

    def name_of(self, msr: int) -> str | None:
        r = self.registers.get(msr)
        return r.name if r else None

    def pmi_request(self, lp: int) -> bool:
        """Level of the performance-monitoring interrupt request for logical processor `lp`:
        some counter has OVF set, OVF_PMI_T<lp> set and has counted an event since it
        overflowed (SDM 18.15.5.8; it stays asserted while OVF is set).  Counters running in
        cascade mode give none on models with the cascade-PMI erratum (SDM 18.15.5.7)."""
        return bool(self.pmi_sources(lp).any())

    def pmi_sources(self, lp: int) -> np.ndarray:
        """Boolean array over the 18 counters: which ones assert `lp`'s PMI request."""
        want = self.pmi_t0 if lp == 0 else self.pmi_t1
        req = self.ovf & self.pmi_armed & want
        if self.model.cascade_pmi_suppressed:
            req &= ~self.in_cascade_mode()
        return req

    def in_cascade_mode(self) -> np.ndarray:
        """Counters that run only because of a CASCADE / extended-cascade start (ENABLE clear,
        the start bit set): the PMI-erratum population (SDM 18.15.5.7)."""
        return ~self.enable & (self.cascade | self.ext_cascade)

    def running(self) -> np.ndarray:
        """Effective running condition (SDM 18.15.5.3): ENABLE, or CASCADE and the
        alternate's OVF, or the extended-cascade bit and its source's OVF (SDM 18.15.5.5/6/7:
        clearing CASCADE or the alternate's OVF halts a cascaded counter)."""
        return self.enable | (self.cascade & self.ovf[self.alt]) | \
            (self.ext_cascade & self.ovf[self.ext_src])

    # -- internals ------------------------------------------------------------------------

    def _lookup(self, op: str, msr: int) -> Register:
        reg = self.registers.get(msr)
        if reg is not None:
            return reg
        if not self.handles(msr):
            raise PMUFault(f"{op} 0x{msr:X}: not a PMU register (the PMU model owns "
                           f"0x300-0x3FF only)", "not_pmu")
        hint = ""
        for e in T.ESCRS:
            if e.msr == msr:
                models = ", ".join(f"0F_{m:02d}" for m in sorted(e.models))
                hint = f" ({e.name} exists only on models {models})"
        if msr == 0x3BF:
            hint = " (MSR_SSU_ESCR1 is a Linux-only guess; the SDM documents no such register)"
        raise PMUFault(f"{op} 0x{msr:X}: no such MSR on model {self.model.key}: 0x300-0x3FF "
                       f"holds counters 0x300-0x311, CCCRs 0x360-0x371, this model's ESCRs in "
                       f"0x3A0-0x3E1 and 0x3F0-0x3F2{hint}", "absent")

    def _strict_hint(self, reg: Register, bad: int) -> str:
        """Name the fields that exist elsewhere (HT layout, extended cascading)."""
        notes = []
        fields = {"cccr": T.CCCR_FIELDS, "escr": T.ESCR_FIELDS,
                  "pebs_enable": T.PEBS_ENABLE_FIELDS}.get(reg.kind, ())
        for f in fields:
            if f.ht_only and bad & f.mask:
                notes.append(f"{f.name} exists only on parts with Hyper-Threading")
        if reg.kind == "cccr" and bad & T.CCCR_EXT_CASCADE.mask:
            c = T.COUNTERS[reg.index]
            if c.ext_cascade_from is None:
                notes.append("bit 11 is an extended-cascade bit only in MSR_IQ_CCCR0/3/4/5")
            else:
                notes.append(f"bit 11 ({c.ext_cascade_name}) exists only on models 0F_02, "
                             f"0F_03, 0F_04, 0F_06")
        return "; " + "; ".join(notes) if notes else ""

    def _bind_state(self, storage: dict[str, np.ndarray] | None) -> None:
        """The counter-state arrays: the host's (`storage`) or the PMU's own."""
        for name, dtype in self.STATE_ARRAYS.items():
            a = None if storage is None else storage[name]
            if a is None:
                a = np.zeros(T.NUM_COUNTERS, dtype=dtype)
            elif a.dtype != dtype or a.shape != (T.NUM_COUNTERS,) or not a.flags.writeable:
                raise ValueError(f"storage[{name!r}]: a writable {np.dtype(dtype).name} array "
                                 f"of {T.NUM_COUNTERS} elements is needed, not {a.dtype}"
                                 f"{a.shape}")
            setattr(self, name, a)

    def reload(self, cccrs, escrs: dict) -> None:
        """Registers another authority wrote (the plugin's C register mirror serves some
        CCCR and ESCR writes itself): decode CCCRs `cccrs`, whose values are already in the
        shared `cccr_raw` and `ovf` (PMU(storage=...)), and set ESCR slot s to escrs[s],
        as the writes would have.  Nothing is checked: the writes were valid."""
        for n in cccrs:
            raw = int(self.cccr_raw[n]) & ~_OVF_BIT
            self._write_cccr(n, raw | (_OVF_BIT if self.ovf[n] else 0))
        for slot, value in escrs.items():
            self._write_escr(slot, value)

    def _write_cccr(self, n: int, value: int) -> None:
        """Decode a CCCR once, at write time (SDM Fig. 18-45)."""
        v = value & 0xFFFF_FFFF
        # an overflow that asked for a PMI, not raised yet: it comes with the next counted
        # event (SDM 18.15.5.8), so a write clearing OVF before that discards it
        waiting = self.ovf[n] and not self.pmi_armed[n] and (self.pmi_t0[n] or self.pmi_t1[n])
        self.cccr_raw[n] = value
        self.enable[n] = _F["ENABLE"].get(v)
        sel = _F["ESCR_SELECT"].get(v)
        self.escr_select[n] = sel
        self.escr_index[n] = self.select_slot[n, sel]
        self.active_thread[n] = _F["ACTIVE_THREAD"].get(v) if self.ht else 3
        self.compare[n] = _F["COMPARE"].get(v)
        self.complement[n] = _F["COMPLEMENT"].get(v)
        self.threshold[n] = _F["THRESHOLD"].get(v)
        self.edge[n] = _F["EDGE"].get(v)
        self.force_ovf[n] = _F["FORCE_OVF"].get(v)
        self.pmi_t0[n] = _F["OVF_PMI_T0"].get(v)
        self.pmi_t1[n] = _F["OVF_PMI_T1"].get(v) if self.ht else 0
        self.cascade[n] = _F["CASCADE"].get(v)
        self.ext_cascade[n] = self.has_ext[n] and T.CCCR_EXT_CASCADE.get(v)
        ovf = bool(_F["OVF"].get(v))
        if not ovf:
            self.pmi_armed[n] = False  # software clearing OVF ends the request (decision D2)
            self.discarded_pmis[n] += int(waiting)
        self.ovf[n] = ovf  # plain R/W bit (decision D2)
        self.edge_prev[n] = False  # decision D1: a CCCR write resets the edge detector
        self.config_version += 1
        self.dirty_counters.add(n)

    def _write_escr(self, slot: int, value: int) -> None:
        """Decode an ESCR once, at write time (SDM Fig. 18-43)."""
        v = value & 0xFFFF_FFFF
        self.escr_raw[slot] = value
        self.event_select[slot] = _E["EVENT_SELECT"].get(v)
        self.event_mask[slot] = _E["EVENT_MASK"].get(v)
        self.t0_os[slot] = _E["T0_OS"].get(v)
        self.t0_usr[slot] = _E["T0_USR"].get(v)
        self.t1_os[slot] = _E["T1_OS"].get(v) if self.ht else 0
        self.t1_usr[slot] = _E["T1_USR"].get(v) if self.ht else 0
        self.tag_enable[slot] = _E["TAG_ENABLE"].get(v)
        self.tag_value[slot] = _E["TAG_VALUE"].get(v)
        self.config_version += 1
        self.dirty_counters.update(int(c) for c in np.flatnonzero(self.escr_index == slot))
