"""Human-readable decode of PMU register values, from the tables alone.

Used by the bridge's access log, `p4pmu demo` and error messages: a driver developer sees
`MSR_IQ_CCCR1 = 0x04039000: ENABLE ESCR_SELECT=4 (MSR_CRU_ESCR0) ACTIVE_THREAD=11b
OVF_PMI_T0` instead of a hex number.  Field layouts: SDM Fig. 18-43 (ESCR), Fig. 18-45 (CCCR).
"""
from __future__ import annotations

from . import events as E
from . import tables as T
from .models import CpuModel, get_model


def register_name(msr: int, model: CpuModel | None = None) -> str | None:
    """Architectural name of a PMU MSR on `model`, or None when the model has no such MSR."""
    model = model or get_model()
    if T.COUNTER_BASE <= msr < T.COUNTER_BASE + T.NUM_COUNTERS:
        return T.COUNTERS[msr - T.COUNTER_BASE].counter_name
    if T.CCCR_BASE <= msr < T.CCCR_BASE + T.NUM_COUNTERS:
        return T.COUNTERS[msr - T.CCCR_BASE].cccr_name
    e = T.ESCR_BY_MSR.get(msr)
    if e is not None:
        return e.name if model.model in e.models else None
    return {T.MSR_TC_PRECISE_EVENT: "MSR_TC_PRECISE_EVENT", T.MSR_PEBS_ENABLE: "MSR_PEBS_ENABLE",
            T.MSR_PEBS_MATRIX_VERT: "MSR_PEBS_MATRIX_VERT",
            T.MSR_IA32_MISC_ENABLE: "IA32_MISC_ENABLE"}.get(msr)


def register_msrs() -> dict[str, int]:
    """Every PMU register's name, upper case without `MSR_`, -> its MSR (on some model; and
    IA32_MISC_ENABLE): the inverse of `register_name`, for names users type."""
    names = {}
    for c in T.COUNTERS:
        names[c.counter_name], names[c.cccr_name] = c.counter_msr, c.cccr_msr
    for e in T.ESCRS:
        names[e.name] = e.msr
    for msr in (T.MSR_TC_PRECISE_EVENT, T.MSR_PEBS_ENABLE, T.MSR_PEBS_MATRIX_VERT,
                T.MSR_IA32_MISC_ENABLE):
        names[register_name(msr)] = msr
    return {bare_name(n): m for n, m in names.items()}


def bare_name(name: str) -> str:
    """`msr_iq_cccr0` / `MSR_IQ_CCCR0` / `iq_cccr0` -> `IQ_CCCR0`."""
    n = name.strip().upper()
    return n[4:] if n.startswith("MSR_") else n


def _flags(fields, value: int, skip=()) -> list[str]:
    out = []
    for f in fields:
        if f.name in skip:
            continue
        v = f.get(value)
        if f.hi == f.lo:
            if v:
                out.append(f.name)
        elif v:
            out.append(f"{f.name}={v}")
    return out


def describe_cccr(counter: int, value: int, model: CpuModel | None = None) -> str:
    model = model or get_model()
    c = T.COUNTERS[counter]
    F = T.CCCR_FIELD
    parts = []
    if F["ENABLE"].get(value):
        parts.append("ENABLE")
    sel = F["ESCR_SELECT"].get(value)
    escr = T.escr_for(counter, sel)
    escr_txt = escr.name if escr is not None and model.model in escr.models else "no ESCR"
    parts.append(f"ESCR_SELECT={sel} ({escr_txt})")
    parts.append(f"ACTIVE_THREAD={F['ACTIVE_THREAD'].get(value):02b}b")
    if F["COMPARE"].get(value):
        op = "<=" if F["COMPLEMENT"].get(value) else ">"
        filt = f"COMPARE(input {op} {F['THRESHOLD'].get(value)})"
        if F["EDGE"].get(value):
            filt += " EDGE"
        parts.append(filt)
    parts += _flags(T.CCCR_FIELDS, value,
                    skip={"ENABLE", "ESCR_SELECT", "ACTIVE_THREAD", "COMPARE", "COMPLEMENT",
                          "THRESHOLD", "EDGE"})
    if T.CCCR_EXT_CASCADE.get(value):
        if c.ext_cascade_from is not None and model.extended_cascade:
            parts.append(f"{c.ext_cascade_name} (start when counter {c.ext_cascade_from} "
                         f"overflows)")
        else:
            parts.append("bit 11 (reserved here)")
    return " ".join(parts)


def describe_escr(escr: T.Escr, value: int, model: CpuModel | None = None) -> str:
    model = model or get_model()
    F = T.ESCR_FIELD
    sel = F["EVENT_SELECT"].get(value)
    mask = F["EVENT_MASK"].get(value)
    ev = E.event_for(escr.name, sel, model.model)
    if ev is None:
        head = f"event select {sel:#04x} (no documented event on {escr.name})"
        bits = [f"bit{k}" for k in range(16) if mask >> k & 1]
    else:
        head = ev.name
        bits = [ev.mask.get(k, f"bit{k}?") for k in range(16) if mask >> k & 1]
    parts = [head + (f" [{'|'.join(bits)}]" if bits else " [no mask bits]")]
    parts += [n for n in ("T0_OS", "T0_USR", "T1_OS", "T1_USR") if F[n].get(value)]
    if F["TAG_ENABLE"].get(value):
        parts.append(f"TAG_ENABLE TAG_VALUE={F['TAG_VALUE'].get(value)}")
    return " ".join(parts)


def describe(msr: int, value: int, model: CpuModel | None = None) -> str:
    """`NAME = 0x...: decoded fields` for any PMU register value."""
    model = model or get_model()
    name = register_name(msr, model)
    if name is None:
        return f"MSR {msr:#x} (not a PMU register of model {model.key})"
    head = f"{name} = {value:#x}"
    if T.COUNTER_BASE <= msr < T.COUNTER_BASE + T.NUM_COUNTERS:
        v = value & T.COUNTER_MASK
        signed = v - (1 << T.COUNTER_BITS) if v >> (T.COUNTER_BITS - 1) else v
        tail = f"{v} (= -{-signed} as a 40-bit preset)" if signed < 0 else f"{v}"
        return f"{head}: {tail}"
    if T.CCCR_BASE <= msr < T.CCCR_BASE + T.NUM_COUNTERS:
        return f"{head}: {describe_cccr(msr - T.CCCR_BASE, value, model)}"
    escr = T.ESCR_BY_MSR.get(msr)
    if escr is not None:
        return f"{head}: {describe_escr(escr, value, model)}"
    if msr == T.MSR_PEBS_ENABLE:
        return f"{head}: " + (" ".join(_flags(T.PEBS_ENABLE_FIELDS, value)) or "all clear")
    if msr == T.MSR_PEBS_MATRIX_VERT:
        return f"{head}: " + (" ".join(_flags(T.PEBS_MATRIX_VERT_FIELDS, value)) or "all clear")
    if msr == T.MSR_IA32_MISC_ENABLE:
        bits = [n for b, n in ((T.MISC_PERFMON_AVAILABLE, "PERFMON_AVAILABLE"),
                               (T.MISC_BTS_UNAVAILABLE, "BTS_UNAVAILABLE"),
                               (T.MISC_PEBS_UNAVAILABLE, "PEBS_UNAVAILABLE")) if value & b]
        return f"{head}: {' '.join(bits)}"
    return head


# --------------------------------------------------------------------------------------------
# Structured decode for the access trace (docs/trace.md): every field by its table name, and
# the inverse, so that a trace record's fields re-encode to its value.
# --------------------------------------------------------------------------------------------

def register_kind(msr: int) -> str | None:
    """"counter", "cccr", "escr", "pebs_enable", "pebs_matrix_vert", "tc_precise_event" or
    None (not a PMU register with fields)."""
    if T.COUNTER_BASE <= msr < T.COUNTER_BASE + T.NUM_COUNTERS:
        return "counter"
    if T.CCCR_BASE <= msr < T.CCCR_BASE + T.NUM_COUNTERS:
        return "cccr"
    if msr in T.ESCR_BY_MSR:
        return "escr"
    return {T.MSR_PEBS_ENABLE: "pebs_enable", T.MSR_PEBS_MATRIX_VERT: "pebs_matrix_vert",
            T.MSR_TC_PRECISE_EVENT: "tc_precise_event"}.get(msr)


_LAYOUT = {"cccr": T.CCCR_FIELDS + (T.CCCR_EXT_CASCADE,), "escr": T.ESCR_FIELDS,
           "pebs_enable": T.PEBS_ENABLE_FIELDS, "pebs_matrix_vert": T.PEBS_MATRIX_VERT_FIELDS,
           "tc_precise_event": ()}


def fields(msr: int, value: int, model: CpuModel | None = None) -> dict:
    """The value's fields by their table names (SDM Fig. 18-43 ESCR, Fig. 18-45 CCCR), plus
    what they mean: a CCCR's `escr` (the ESCR its ESCR_SELECT names on that counter, or None),
    an ESCR's `event` and `mask_bits` (None / bit numbers for an undocumented select), and
    `reserved`: the bits no field covers, when any are set.  A counter: `count` (40 bits).
    `encode` inverts it."""
    model = model or get_model()
    kind = register_kind(msr)
    out: dict = {}
    if kind == "counter":
        out["count"] = value & T.COUNTER_MASK
        rest = value & ~T.COUNTER_MASK
    elif kind is None:
        return {}
    else:
        layout = _LAYOUT[kind]
        for f in layout:
            out[f.name] = f.get(value)
        rest = value & ~T.fields_mask(layout)
        if kind == "cccr":
            escr = T.escr_for(msr - T.CCCR_BASE, out["ESCR_SELECT"])
            out["escr"] = escr.name if escr is not None and model.model in escr.models else None
        elif kind == "escr":
            ev = E.event_for(T.ESCR_BY_MSR[msr].name, out["EVENT_SELECT"], model.model)
            out["event"] = ev.name if ev is not None else None
            bits = [k for k in range(16) if out["EVENT_MASK"] >> k & 1]
            out["mask_bits"] = [ev.mask.get(k, f"bit{k}") for k in bits] if ev else \
                [f"bit{k}" for k in bits]
    if rest:
        out["reserved"] = f"{rest:#x}"
    return out


def encode(msr: int, decoded: dict) -> int:
    """The register value whose `fields` are `decoded` (the derived names are ignored)."""
    kind = register_kind(msr)
    if kind is None:
        raise ValueError(f"MSR {msr:#x} has no fields")
    value = int(decoded.get("reserved", "0x0"), 16)
    if kind == "counter":
        return value | int(decoded["count"])
    for f in _LAYOUT[kind]:
        v = int(decoded[f.name])
        if v >> (f.hi - f.lo + 1):
            raise ValueError(f"{f.name}={v} does not fit bits {f.hi}:{f.lo}")
        value |= v << f.lo
    return value


def changed(msr: int, old: int, new: int, model: CpuModel | None = None) -> list[str]:
    """The names of the fields (and `reserved`) a write of `new` over `old` changes."""
    a, b = fields(msr, old, model), fields(msr, new, model)
    keys = list(b) + [k for k in a if k not in b]  # the table's field order
    return [k for k in keys if a.get(k) != b.get(k) and k not in ("escr", "event", "mask_bits")]
