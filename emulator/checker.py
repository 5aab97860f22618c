"""The programming checker: programming the hardware accepts silently but that is almost
certainly a mistake, each finding with the SDM section it rests on and the fix (docs/checker.md).

Pure functions over a `PMU`'s registers (the model's decoded state); nothing here changes what
the model counts.  `RULES` is the one table of finding kinds: the runtime report (plugin option
``lint=on``), the trace's ``finding`` records, ``p4pmu lint`` and the docs all use it.

- `check_counter(pmu, n)`: what is wrong with counter n's programming (its CCCR and the ESCR
  it selects) while it may count (ENABLE, CASCADE or the extended-cascade bit set);
- `check_write(pmu, msr, value, counting)`: what a WRMSR itself says, on the model after the
  write (reserved bits; an ESCR's event and mask bits, `check_escr`; a counter written while
  it counts; a 32-bit preset in a 40-bit counter);
- `check_idle(pmu)`: programmed ESCRs no counter that may count selects (for the end of a
  run or a trace: during a programming sequence the CCCR usually comes after its ESCR);
- `check_lvt(lvt)`: the local APIC's LVT performance entry when a counter requests a PMI.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import events as EV
from . import notices
from . import tables as T
from .pmu import documented_mask

F, E = T.CCCR_FIELD, T.ESCR_FIELD
_PROGRAMMED = E["EVENT_SELECT"].mask | E["T0_OS"].mask | E["T0_USR"].mask | \
    E["T1_OS"].mask | E["T1_USR"].mask
_STARTS = F["ENABLE"].mask | F["CASCADE"].mask | T.CCCR_EXT_CASCADE.mask


@dataclass(frozen=True)
class Rule:
    key: str
    sdm: str    # where the SDM says so (Vol. 3B unless named)
    title: str  # one line, for tables and summaries


RULES: tuple[Rule, ...] = (
    Rule("escr-select-unwired", "18.15.3, Table 18-63",
         "the CCCR's ESCR_SELECT names no ESCR of this counter on this model"),
    Rule("no-event", "18.15.3, Chapter 19 (Tables 19-28 to 19-30)",
         "the selected ESCR's event select is no event documented on that ESCR and model"),
    Rule("mask-bits-undefined", "Chapter 19 (Tables 19-28 to 19-30)",
         "ESCR mask bits the selected event does not define"),
    Rule("mask-empty", "18.15.3, Chapter 19",
         "no mask bit set: the event counts nothing"),
    Rule("no-cpl", "18.15.3 (Fig. 18-43), 18.16.2",
         "no T0_OS/T0_USR (or T1) qualification: the ESCR counts nothing"),
    Rule("no-lp1", "18.16.2, 18.15.3 (Figs. 18-43, 18-45)",
         "a logical-processor-1 bit on a processor without Hyper-Threading"),
    Rule("active-thread", "18.16.2, Fig. 18-45",
         "ACTIVE_THREAD does not count what the ESCR qualifies"),
    Rule("cascade-source-idle", "18.15.5.6",
         "CASCADE set but the counter that would start it never counts"),
    Rule("cascade-and-enable", "18.15.5.6 (Example 18-1)",
         "CASCADE together with ENABLE: the counter counts from the start"),
    Rule("ext-cascade-unavailable", "18.15.5.7, Table 18-65",
         "the extended-cascade bit on a CCCR or model without extended cascading"),
    Rule("pmi-cascade-erratum", "18.15.5.7",
         "OVF_PMI on a counter started by cascading, on a model whose erratum drops that PMI"),
    Rule("pmi-lvt", "18.15.5.8, Vol. 3A 10.5.1",
         "a PMI requested while the LVT performance entry is masked or has no valid vector"),
    Rule("reserved-bits", "Vol. 2B WRMSR, Figs. 18-43/18-45",
         "reserved bits set (accepted in default mode, #GP with strict=on)"),
    Rule("counter-written-while-counting", "18.15.5.4",
         "a counter written while it counts: events in between are lost or counted twice"),
    Rule("counter-preset-32bit", "18.15.5.4 (Fig. 18-44), Vol. 2B WRMSR",
         "a 32-bit negative preset in a 40-bit counter (EDX = 0)"),
    Rule("escr-unselected", "18.15.3, Table 18-63",
         "a programmed ESCR that no counter which may count selects"),
    Rule("unmodelled", "docs/events.md (this emulator)",
         "an event this emulator does not model: it reads 0 whatever the guest does"),
)
RULE = {r.key: r for r in RULES}


@dataclass(frozen=True)
class Finding:
    rule: Rule
    register: str  # the register the finding is about
    text: str      # what is wrong, in this programming's terms
    fix: str       # what to write instead

    @property
    def key(self) -> tuple[str, str]:
        """Findings are reported once per (rule, register)."""
        return self.rule.key, self.register

    def line(self) -> str:
        return (f"{self.register}: {self.text} (SDM {self.rule.sdm}). Fix: {self.fix} "
                f"[{self.rule.key}]")


def _f(key: str, register: str, text: str, fix: str) -> Finding:
    return Finding(RULE[key], register, text, fix)


def _may_count(pmu, n: int) -> bool:
    return bool(pmu.enable[n] or pmu.cascade[n] or pmu.ext_cascade[n])


def _clock_idiom(pmu, n: int) -> bool:
    """COMPARE + COMPLEMENT + THRESHOLD 15: every clock passes (SDM 18.17, non-sleep
    clockticks: any ESCR with a non-null event select)."""
    return bool(pmu.compare[n] and pmu.complement[n] and pmu.threshold[n] == 15)


def _selects_for(counter: int, escr_name: str, pmu) -> list[int]:
    return [s for s in range(8) if pmu.select_slot[counter, s] >= 0 and
            pmu.escrs[pmu.select_slot[counter, s]].name == escr_name]


# -- one counter's programming ----------------------------------------------------------------

def check_counter(pmu, n: int) -> list[Finding]:
    """Findings about counter `n` (its CCCR and selected ESCR) if it may count."""
    if not _may_count(pmu, n):
        return []
    c = T.COUNTERS[n]
    out = _cccr_findings(pmu, n)
    slot = int(pmu.escr_index[n])
    if slot < 0:
        sel = int(pmu.escr_select[n])
        ok = [f"{s} ({pmu.escrs[pmu.select_slot[n, s]].name})" for s in range(8)
              if pmu.select_slot[n, s] >= 0]
        out.append(_f("escr-select-unwired", c.cccr_name,
                      f"ESCR_SELECT={sel} reaches no ESCR from counter {n} on model "
                      f"{pmu.model.key}" + (", though its filter counts every clock"
                                            if _clock_idiom(pmu, n) else ""),
                      f"ESCR_SELECT is one of {', '.join(ok)}"))
        return out
    out += _escr_findings(pmu, n, slot)
    nt = notices.unmodelled(pmu, n)
    if nt is not None:
        fix = ("give each field of the mask the value of a request the model makes (its "
               "masks are in the text; docs/events.md, \"Bus requests\")"
               if isinstance(nt.key[2], int) else
               "count a modelled event (`p4pmu events` marks the others), or read this "
               "counter on real hardware")
        out.append(_f("unmodelled", pmu.escrs[slot].name, nt.text, fix))
    return out


def _cccr_findings(pmu, n: int) -> list[Finding]:
    c, raw, out = T.COUNTERS[n], int(pmu.cccr_raw[n]), []
    if F["CASCADE"].get(raw) and F["ENABLE"].get(raw):
        out.append(_f("cascade-and-enable", c.cccr_name,
                      f"CASCADE and ENABLE are both set: counter {n} counts from the start "
                      f"instead of when counter {c.cascade_from} overflows",
                      "clear ENABLE; set it only on the counter that starts the cascade"))
    if T.CCCR_EXT_CASCADE.get(raw) and not pmu.has_ext[n]:
        where = (f"model {pmu.model.key} has no extended cascading" if
                 not pmu.model.extended_cascade else f"{c.cccr_name} has no such bit")
        out.append(_f("ext-cascade-unavailable", c.cccr_name,
                      f"bit 11 (extended cascading) is set, but {where}: it is reserved",
                      "clear bit 11; extended cascading is bit 11 of IQ_CCCR0/3/4/5 on "
                      "0F_02, 0F_03, 0F_04, 0F_06"))
    if pmu.model.cascade_pmi_suppressed and not pmu.enable[n] and \
            (pmu.cascade[n] or pmu.ext_cascade[n]) and (pmu.pmi_t0[n] or pmu.pmi_t1[n]):
        out.append(_f("pmi-cascade-erratum", c.cccr_name,
                      f"counter {n} runs only when cascaded and asks for a PMI; on model "
                      f"{pmu.model.key} stepping {pmu.model.stepping} the erratum drops "
                      "PMIs in cascade mode", "sample on a counter that is ENABLEd"))
    if not pmu.ht:
        lp1 = [name for name in ("OVF_PMI_T1",) if F[name].get(raw)]
        if lp1:
            out.append(_f("no-lp1", c.cccr_name, "OVF_PMI_T1 is set on a processor without "
                          "Hyper-Threading: no logical processor 1 takes that interrupt",
                          "use OVF_PMI_T0"))
        if F["ACTIVE_THREAD"].get(raw) != 3:
            out.append(_f("active-thread", c.cccr_name,
                          f"ACTIVE_THREAD={F['ACTIVE_THREAD'].get(raw):02b}b on a processor "
                          "without Hyper-Threading (must be 11b)", "ACTIVE_THREAD=11b"))
    elif F["ACTIVE_THREAD"].get(raw) == 0:
        out.append(_f("active-thread", c.cccr_name, "ACTIVE_THREAD=00b: the counter never "
                      "counts", "ACTIVE_THREAD=11b (count while either LP is active)"))
    return out


def check_escr(pmu, slot: int, counter: int | None = None) -> list[Finding]:
    """The event an ESCR selects: documented on that ESCR and model, with mask bits it
    defines (`counter`: the counter that counts through it, if any).  An ESCR written 0
    (select 0, no mask) says nothing."""
    escr, out = pmu.escrs[slot], []
    sel, mask = int(pmu.event_select[slot]), int(pmu.event_mask[slot])
    ev = EV.event_for(escr.name, sel, pmu.model.model)
    if ev is None:
        if not sel and not mask and counter is None:
            return out
        if counter is not None and _clock_idiom(pmu, counter) and sel:
            return out  # any non-null event select counts every clock (SDM 18.17)
        other = EV.event_for(escr.name, sel)
        why = (f"{other.name} exists on {escr.name} but not on model {pmu.model.key}"
               if other else f"no event has select {sel:#04x} on {escr.name}")
        who = f"counter {counter} counts through {escr.name}, and " if counter is not None \
            else ""
        out.append(_f("no-event", escr.name, who + why,
                      f"an event of {escr.name} from `p4pmu events`"))
        return out
    undefined = [k for k in range(16) if mask >> k & 1 and k not in ev.mask]
    if undefined:
        hint = _same_select_elsewhere(pmu, escr, sel, ev)
        out.append(_f("mask-bits-undefined", escr.name,
                      f"{ev.name} defines no mask bit {', '.join(map(str, undefined))} "
                      f"(ESCR bits {', '.join(str(9 + k) for k in undefined)}){hint}",
                      f"mask bits of {ev.name}: {', '.join(ev.mask.values())}"))
    return out


def cascade_idle(pmu, n: int) -> Finding:
    """Counter `n` had CASCADE (without ENABLE) and the counter that would start it never
    counted meanwhile (SDM 18.15.5.6: each counter is started by its alternate only)."""
    c = T.COUNTERS[n]
    src = int(pmu.ext_src[n])
    if pmu.has_ext[n] and pmu.enable[src]:
        hint = (f"; counter {src} counts, but counters 16 and 17 start another only through "
                f"extended cascading: {c.ext_cascade_name} (bit 11 of {c.cccr_name})")
    elif n in (14, 15) and pmu.enable[n + 2]:
        hint = (f"; counter {n + 2} counts, but counter {n} cannot be cascaded from counter "
                f"{n + 2} with the CASCADE bit")
    else:
        hint = ""
    return _f("cascade-source-idle", c.cccr_name,
              f"CASCADE starts counter {n} when counter {c.cascade_from} overflows, and "
              f"counter {c.cascade_from} was not enabled while CASCADE was set{hint}",
              f"enable counter {c.cascade_from} ({T.COUNTERS[c.cascade_from].cccr_name}) "
              "with the event that should start it")


def _escr_findings(pmu, n: int, slot: int) -> list[Finding]:
    escr = pmu.escrs[slot]
    out = check_escr(pmu, slot, n)
    ev = EV.event_for(escr.name, int(pmu.event_select[slot]), pmu.model.model)
    if ev is None:
        return out
    mask = int(pmu.event_mask[slot])
    if not mask & sum(1 << k for k in ev.mask) and not _clock_idiom(pmu, n):
        out.append(_f("mask-empty", escr.name, f"{ev.name} with no defined mask bit set "
                      "counts nothing", f"set some of {', '.join(ev.mask.values())}"))
    out += _thread_findings(pmu, n, slot)
    return out


def _same_select_elsewhere(pmu, escr, sel: int, ev) -> str:
    """'; select 02h is instr_retired on MSR_CRU_ESCR0/1' when the select means another event
    on other ESCRs (a driver that took the select from another ESCR's table)."""
    others = sorted({(e.name, o.name) for e in pmu.escrs if e.name != escr.name
                     for o in [EV.event_for(e.name, sel, pmu.model.model)]
                     if o is not None and o.name != ev.name})
    if not others:
        return ""
    names = {}
    for e, o in others:
        names.setdefault(o, []).append(e)
    return "; select " + f"{sel:02X}h is " + "; ".join(
        f"{o} on {', '.join(es)}" for o, es in names.items())


def _thread_findings(pmu, n: int, slot: int) -> list[Finding]:
    escr, raw, out = pmu.escrs[slot], int(pmu.escr_raw[slot]), []
    t0 = E["T0_OS"].get(raw) or E["T0_USR"].get(raw)
    t1 = E["T1_OS"].get(raw) or E["T1_USR"].get(raw)
    if not pmu.ht and t1:
        out.append(_f("no-lp1", escr.name, "T1_OS/T1_USR qualify logical processor 1 on a "
                      "processor without Hyper-Threading" + ("" if t0 else
                                                             ": the ESCR counts nothing"),
                      "T0_OS/T0_USR (OS/USR without Hyper-Threading)"))
    elif not t0 and not (pmu.ht and t1):
        out.append(_f("no-cpl", escr.name, f"no OS/USR bit: counter {n} counts nothing "
                      "through it", "set T0_OS and/or T0_USR (and T1_* with "
                      "Hyper-Threading)"))
    return out


# -- a write itself ----------------------------------------------------------------------------

def check_write(pmu, msr: int, value: int, counting: bool) -> list[Finding]:
    """Findings a WRMSR of `value` to `msr` raises by itself, on `pmu` after the write;
    `counting`: the register is a counter that was counting when written."""
    reg = pmu.registers.get(msr)
    if reg is None:
        return []
    out = []
    counter = reg.index if reg.kind in ("counter", "cccr") else None
    bits = value & ~documented_mask(reg.kind, pmu.model, pmu.ht, counter) & 0xFFFF_FFFF
    if reg.kind != "counter" and bits:  # (bits 63:32 fault in either mode)
        out.append(_f("reserved-bits", reg.name, f"{reg.name} <- {value:#x} sets reserved "
                      f"bits {bits:#x}", f"write {value & ~bits:#x}"))
    if reg.kind == "escr":
        out += check_escr(pmu, reg.index)
    if reg.kind == "counter" and counting:
        out.append(_f("counter-written-while-counting", reg.name,
                      f"{reg.name} was written while counter {reg.index} counts",
                      f"clear ENABLE in {T.COUNTERS[reg.index].cccr_name} first, write the "
                      "counter, then enable it"))
    if reg.kind == "counter" and value >> 31 & 1 and not value >> 32 & 0xFF:
        out.append(_f("counter-preset-32bit", reg.name,
                      f"{reg.name} <- {value:#x}: bits 39:32 are 0, so the counter "
                      f"overflows after {(1 << 40) - value:,} events, not "
                      f"{(1 << 32) - value:,}", f"write {value | 0xFF_0000_0000:#x} "
                      "(EDX = FFh: counters are 40 bits)"))
    return out


# -- ESCRs nothing counts through ---------------------------------------------------------------

def check_idle(pmu) -> list[Finding]:
    """Programmed ESCRs (an event or a T bit) that no counter which may count selects."""
    used = {int(pmu.escr_index[n]) for n in range(T.NUM_COUNTERS) if _may_count(pmu, n)}
    out = []
    for slot, escr in enumerate(pmu.escrs):
        raw = int(pmu.escr_raw[slot])
        if slot in used or not raw & _PROGRAMMED:
            continue
        ev = EV.event_for(escr.name, int(pmu.event_select[slot]), pmu.model.model)
        users = [f"counter {n} with ESCR_SELECT={s}" for n in range(T.NUM_COUNTERS)
                 for s in _selects_for(n, escr.name, pmu)]
        selecting = [f"counter {n} ({T.COUNTERS[n].cccr_name}) selects "
                     f"{pmu.escrs[int(pmu.escr_index[n])].name}"
                     for n in range(T.NUM_COUNTERS) if _may_count(pmu, n) and
                     int(pmu.escr_index[n]) >= 0 and n in {int(u.split()[1]) for u in users}]
        out.append(_f("escr-unselected", escr.name,
                      f"{escr.name} is programmed ({ev.name if ev else 'no event'}) but no "
                      f"counter that may count selects it" +
                      (f"; {'; '.join(selecting)}" if selecting else ""),
                      f"select it from {' or '.join(users)}" if users else
                      "no counter reaches it on this model"))
    return out


# -- the LVT entry -------------------------------------------------------------------------------

def check_lvt(lvt: int, delivered_before: bool) -> Finding | None:
    """The LVT performance entry (local APIC FEE00340h) when a counter requests a PMI:
    masked although no PMI was ever delivered (so not masked by a delivery: SDM Vol. 3B
    18.15.5.8 sets the mask bit when it delivers), or fixed delivery with a vector below 16
    (Vol. 3A 10.5.2: illegal)."""
    mode, vec = lvt >> 8 & 7, lvt & 0xFF
    if lvt & 1 << 16 and not delivered_before:
        return _f("pmi-lvt", "LVT performance entry",
                  f"a counter requests a PMI but the LVT entry is masked ({lvt:#x})",
                  "clear the mask bit (16) of FEE00340h when the PMU is set up, and again "
                  "at the end of each PMI handler")
    if mode == 0 and vec < 16:
        return _f("pmi-lvt", "LVT performance entry",
                  f"fixed delivery with vector {vec} ({lvt:#x}): vectors 0-15 are illegal",
                  "a vector of 32 or more, or NMI delivery (mode 100b)")
    return None


# -- a run's findings, each once ----------------------------------------------------------------

def _slot_table(pmu) -> np.ndarray:
    """MSR 0-3FFh -> this PMU's ESCR slot, -1 for the other registers."""
    t = getattr(pmu, "_checker_slots", None)
    if t is None:
        t = np.full(0x400, -1, dtype=np.int64)
        for i, e in enumerate(pmu.escrs):
            t[e.msr] = i
        pmu._checker_slots = t
    return t


class Checker:
    """The findings of one run or trace, each (rule, register) once: the bridge feeds it the
    writes it serves, `p4pmu lint` the writes of a trace."""

    def __init__(self):
        self.seen: set[tuple[str, str]] = set()
        # per PMU: ESCR slots programmed since a counter that may count last selected them
        self._pending: dict[int, set[int]] = {}
        # per PMU: counters with CASCADE (no ENABLE) -> their source counted since
        self._cascades: dict[int, dict[int, bool]] = {}

    def _cascade(self, pmu, msr: int) -> list[Finding]:
        """A CASCADE counter whose source never counted while CASCADE was set: found when
        its CASCADE (or its whole programming) ends, or at the end (`idle`).  Not at the
        write: SDM Example 18-1 sets up the cascaded counter before enabling its source."""
        reg = pmu.registers.get(msr)
        if reg is None or reg.kind != "cccr":
            return []
        watch = self._cascades.setdefault(id(pmu), {})
        for m, seen in watch.items():
            if not seen and int(pmu.alt[m]) == reg.index and pmu.enable[reg.index]:
                watch[m] = True
        n = reg.index
        cascading = bool(pmu.cascade[n] and not pmu.enable[n])
        if n in watch and not cascading:
            return [] if watch.pop(n) else [cascade_idle(pmu, n)]
        if cascading and n not in watch:
            watch[n] = bool(pmu.enable[int(pmu.alt[n])])
        return []

    def track(self, pmu, msr: int, value: int) -> None:
        """Note which ESCRs a write programs, or selects from a counter that may count
        (for `idle`; also for writes the checker does not look at otherwise)."""
        reg = pmu.registers.get(msr)
        pending = self._pending.setdefault(id(pmu), set())
        if reg is None:
            return
        if reg.kind == "escr":
            if value & _PROGRAMMED:
                pending.add(reg.index)
            else:
                pending.discard(reg.index)
        elif reg.kind == "cccr" and value & _STARTS:
            pending.discard(int(pmu.select_slot[reg.index, F["ESCR_SELECT"].get(value)]))

    def new(self, findings) -> list[Finding]:
        """The findings not reported yet (each (rule, register) once)."""
        out = []
        for f in findings:
            if f is not None and f.key not in self.seen:
                self.seen.add(f.key)
                out.append(f)
        return out

    def track_many(self, pmu, msrs, values) -> None:
        """`track` for a run of writes at once (numpy arrays, in their order: the writes the
        plugin's C side served): per ESCR, the last of its programming, clearing or
        selection decides."""
        msrs = np.asarray(msrs, dtype=np.int64)
        values = np.asarray(values, dtype=np.uint64)
        slot_of = _slot_table(pmu)
        order, slots, kinds = [], [], []
        e = np.flatnonzero(slot_of[np.clip(msrs, 0, 0x3FF)] >= 0)
        order.append(e)
        slots.append(slot_of[msrs[e]])
        kinds.append(np.where(values[e] & np.uint64(_PROGRAMMED), 1, 0))
        c = np.flatnonzero((msrs >= T.CCCR_BASE) & (msrs < T.CCCR_BASE + T.NUM_COUNTERS) &
                           (values & np.uint64(_STARTS) != 0))
        sel = (values[c] >> np.uint64(F["ESCR_SELECT"].lo)) & np.uint64(7)
        cs = pmu.select_slot[msrs[c] - T.CCCR_BASE, sel.astype(np.int64)]
        order.append(c[cs >= 0])
        slots.append(cs[cs >= 0])
        kinds.append(np.zeros(int((cs >= 0).sum()), dtype=np.int64))
        idx, slot, kind = (np.concatenate(x) for x in (order, slots, kinds))
        if not idx.size:
            return
        by_time = np.argsort(idx, kind="stable")[::-1]  # last first
        last_slots, first = np.unique(slot[by_time], return_index=True)
        pending = self._pending.setdefault(id(pmu), set())
        for sl, k in zip(last_slots.tolist(), kind[by_time][first].tolist()):
            (pending.add if k else pending.discard)(sl)

    def write(self, pmu, msr: int, value: int, counting: bool) -> list[Finding]:
        """The new findings of a WRMSR already applied to `pmu` (`counting`: a counter that
        counted when written): the write's own, then those of every counter it concerns (a
        CCCR's counter, the counters that select a written ESCR)."""
        self.track(pmu, msr, value)
        found = self._cascade(pmu, msr) + check_write(pmu, msr, value, counting)
        reg = pmu.registers.get(msr)
        if reg is not None and reg.kind == "cccr":
            found += check_counter(pmu, reg.index)
        elif reg is not None and reg.kind == "escr":
            for n in range(T.NUM_COUNTERS):
                if int(pmu.escr_index[n]) == reg.index:
                    found += check_counter(pmu, n)
        return self.new(found)

    def idle(self, pmu) -> list[Finding]:
        """At the end: programmed ESCRs no counter that may count selects now, and none
        selected since they were written (an ESCR a driver leaves programmed after disabling
        its counter is not a finding)."""
        names = {pmu.escrs[s].name for s in self._pending.get(id(pmu), ())}
        idle = [cascade_idle(pmu, n) for n, seen in self._cascades.get(id(pmu), {}).items()
                if not seen]
        return self.new(idle + [f for f in check_idle(pmu) if f.register in names])

    def lvt(self, lvt: int, delivered_before: bool) -> list[Finding]:
        return self.new([check_lvt(lvt, delivered_before)])
