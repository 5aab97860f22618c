"""Programming the hardware accepts but whose counts a user should not trust silently.

Pure functions over a `PMU`'s decoded state, called by the bridge after a guest's WRMSR (the
bridge says each finding once).  Nothing here changes what the model counts: the findings are
about this emulator's coverage (an event it does not model reads 0) and about programming that
makes two uses of the PMU read each other's counts (as they would on silicon).

- `unmodelled`: an enabled counter whose ESCR selects mask bits the clock model never drives
  (docs/emulator.md; `clockmodel.modelled_classes`): cache, TLB, bus and replay events.  A
  COMPARE+COMPLEMENT filter counts every clock whose input is at most the threshold
  (SDM Vol. 3B 18.15.5.2, "threshold comparison"), so such a counter is not silent.  For a
  bus-queue event (bus_requests.py): a mask that selects none of the modelled bus requests.
- `needs_memory_timing`: an enabled counter counting the bus queues' occupancy
  (bsq_active_entries, IOQ_active_entries) while the plugin's clocks do not charge the
  memory's latency (timing=core, the default): it reads 0.
- `empty_mask`: an enabled counter whose ESCR selects an event with none of its defined mask
  bits set: it counts nothing, on a Pentium 4 too.  Linux's P4 driver maps `ref-cycles` and
  `stalled-cycles-frontend`/`-backend` to no event, and such a request reaches the PMU as
  TC_deliver_mode (ESCR select 1) with an empty mask (docs/linux-guest.md, "Which perf
  events count what").
- `escr_changed_under`, `cccr_changed_under`: a WRMSR that gives an ESCR another event or
  mask while an enabled counter counts through it (its CCCR's ESCR_SELECT reaches that ESCR,
  SDM Vol. 3B Table 18-63), or reprograms an enabled counter's CCCR without disabling it
  first: from then on the counter counts the new programming.  Linux's P4 scheduler does this
  when two multiplexed events that last ran on the same counter are scheduled together
  (`p4_pmu_schedule_events` reuses `hwc->idx` without checking the used-counter mask;
  docs/linux-guest.md, "Multiplexed events").
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import bus_requests as BR
from . import clockmodel as CM
from . import coverage as COV
from . import events as EV
from . import tables as T


@dataclass(frozen=True)
class Notice:
    key: tuple  # findings with the same key are said once
    text: str


def _event_of(pmu, slot: int):
    escr = pmu.escrs[slot]
    return escr, EV.event_for(escr.name, int(pmu.event_select[slot]), pmu.model.model)


def _counted_event(pmu, counter: int):
    """(ESCR, event, its mask as written) for an enabled `counter` whose input is its ESCR's
    documented event; None otherwise (disabled, no ESCR, the count-every-clock filter, an
    undocumented select: 0 on silicon as here, a driver bug rather than coverage)."""
    if not pmu.enable[counter]:
        return None
    slot = int(pmu.escr_index[counter])
    if slot < 0 or (pmu.compare[counter] and pmu.complement[counter]):
        return None
    escr, ev = _event_of(pmu, slot)
    if ev is None or not ev.counts:
        return None
    return escr, ev, int(pmu.event_mask[slot])


def unmodelled(pmu, counter: int) -> Notice | None:
    """A notice if enabled `counter` selects mask bits this emulator does not count."""
    got = _counted_event(pmu, counter)
    if got is None:
        return None
    escr, ev, mask = got
    if ev.selects_requests:
        return _unmatched(pmu, counter, escr, ev, mask)
    bits = [k for k in ev.mask if mask >> k & 1]
    missing = [ev.mask[k] for k in bits if not CM.is_modelled(ev.name, k) and
               (ev.name, ev.mask[k]) not in COV.HARDWARE_ZERO]
    name = T.COUNTERS[counter].counter_name
    if not missing:
        return None
    if len(missing) == len(bits):
        what = (f"counts {ev.name} [{'|'.join(missing)}], which this emulator does not model: "
                "it reads 0 whatever the guest does")
    else:
        what = (f"counts {ev.name}; of its mask bits, {'|'.join(missing)} are not modelled "
                "and contribute 0")
    return Notice(("unmodelled", ev.name, tuple(missing)),
                  f"counter {counter} ({name}, through {escr.name}) {what} (docs/events.md "
                  "lists what is modelled)")


def _unmatched(pmu, counter: int, escr, ev, mask: int) -> Notice | None:
    """A notice if a bus-queue event's mask selects none of the requests this emulator
    models (bus_requests.py: the mask is matched field by field, not summed per bit)."""
    reqs = CM.modelled_requests(ev.name)
    if any(BR.selects(ev.name, mask, r, pmu.model.model) for r in reqs):
        return None
    name = T.COUNTERS[counter].counter_name
    what = (f" with mask {mask:04X}h, which selects none of the bus requests this emulator "
            f"models ({BR.mask_list(ev.name, reqs)}): it reads 0" if reqs else
            ", which this emulator does not model: it reads 0 whatever the guest does")
    return Notice(("unmodelled", ev.name, mask),
                  f"counter {counter} ({name}, through {escr.name}) counts {ev.name}{what} "
                  "(docs/events.md, \"Bus requests\")")


def empty_mask(pmu, counter: int) -> Notice | None:
    """A notice if enabled `counter` counts an event with none of its mask bits set."""
    got = _counted_event(pmu, counter)
    if got is None:
        return None
    escr, ev, mask = got
    if not ev.mask or mask & sum(1 << k for k in ev.mask) or ev.selects_requests:
        return None  # (a bus-queue event's empty mask selects no request: `unmodelled`)
    name = T.COUNTERS[counter].counter_name
    return Notice(("empty_mask", ev.name),
                  f"counter {counter} ({name}, through {escr.name}) counts {ev.name} with "
                  f"none of its event mask bits ({'|'.join(ev.mask.values())}) set: it counts "
                  "nothing, on a Pentium 4 too. Linux's P4 driver has no NetBurst event for "
                  "ref-cycles and stalled-cycles-frontend/-backend and programs them so "
                  "(docs/linux-guest.md, \"Which perf events count what\")")


def needs_memory_timing(pmu, counter: int, memory_timing: bool) -> Notice | None:
    """A notice if enabled `counter` counts the bus queues' occupancy while the clocks do not
    include the memory's time (the plugin's timing=core): the requests are active for no
    clock then, and it reads 0."""
    got = _counted_event(pmu, counter)
    if memory_timing or got is None or got[1].name not in CM.ACTIVE_EVENTS:
        return None
    escr, ev, _ = got
    name = T.COUNTERS[counter].counter_name
    return Notice(("needs_memory_timing", ev.name),
                  f"counter {counter} ({name}, through {escr.name}) counts {ev.name}: the bus "
                  "queues hold a request for the clocks a load waits for memory, which only "
                  "timing=memory charges (p4pmu linux --timing memory, or the plugin option "
                  "timing=memory); with timing=core it reads 0 (docs/events.md, \"Bus "
                  "requests\")")


def programming(pmu, counter: int, memory_timing: bool = True) -> list[Notice]:
    """What enabled `counter`'s programming makes a user not trust silently (unmodelled
    mask bits, an empty mask, an occupancy event without the memory's time)."""
    found = (unmodelled(pmu, counter), empty_mask(pmu, counter),
             needs_memory_timing(pmu, counter, memory_timing))
    return [n for n in found if n is not None]


_SHARED = ("Linux's P4 driver does this to multiplexed perf events: p4_pmu_schedule_events "
           "gives an event the counter it last ran on without checking that another event "
           "took it meanwhile, so events that share counters or an ESCR (on NetBurst "
           "instructions, branch-misses and the cycles alias all use CRU_ESCR0/2 and "
           "counters 12, 13, 16) read each other's counts, as on a real Pentium 4. Count "
           "such events in separate runs (docs/linux-guest.md, \"Multiplexed events\")")


def _event_name(pmu, escr: T.Escr, raw: int) -> str:
    ev = EV.event_for(escr.name, T.ESCR_FIELD["EVENT_SELECT"].get(raw), pmu.model.model)
    return ev.name if ev else "no event"


def escr_changed_under(pmu, slot: int, old_raw: int) -> Notice | None:
    """A notice if the write that replaced `old_raw` in ESCR `slot` changed the event or mask
    of a counter that is enabled on it."""
    F = T.ESCR_FIELD
    new_raw = int(pmu.escr_raw[slot])
    if all(F[f].get(old_raw) == F[f].get(new_raw) for f in ("EVENT_SELECT", "EVENT_MASK")):
        return None
    users = np.flatnonzero(pmu.enable & (pmu.escr_index == slot))
    if len(users) == 0:
        return None
    escr = pmu.escrs[slot]
    names = ", ".join(f"{int(c)} ({T.COUNTERS[int(c)].counter_name})" for c in users)
    return Notice(("shared-counter",),
                  f"{escr.name} was reprogrammed from {_event_name(pmu, escr, old_raw)} to "
                  f"{_event_name(pmu, escr, new_raw)} while counter {names} counts through it: "
                  f"from now on that counter counts the new event. " + _SHARED)


def cccr_changed_under(pmu, counter: int, old_raw: int) -> Notice | None:
    """A notice if a CCCR write changed the configuration of a counter that was enabled and
    stays enabled (no disabling write in between: the counter changes meaning while it
    runs)."""
    F = T.CCCR_FIELD
    new_raw = int(pmu.cccr_raw[counter])
    both_on = F["ENABLE"].get(old_raw) and F["ENABLE"].get(new_raw)
    if not both_on or (old_raw ^ new_raw) & ~F["OVF"].mask & 0xFFFF_FFFF == 0:
        return None
    c = T.COUNTERS[counter]
    return Notice(("shared-counter",),
                  f"counter {counter} ({c.counter_name}) was reprogrammed while enabled "
                  f"({c.cccr_name} 0x{old_raw:X} -> 0x{new_raw:X}, no disabling write in "
                  f"between): from now on it counts the new programming. " + _SHARED)


def counter_rewritten(msr: int, first: int, second: int) -> Notice:
    """Two back-to-back WRMSRs of one counter with different values: the second of a driver's
    two counter writes (the work-around for erratum N15) installs another value than the
    first.  Linux 6.1 and later write the counter's previous period there."""
    c = next(c for c in T.COUNTERS if c.counter_msr == msr)
    mod = 1 << T.COUNTER_BITS
    return Notice(("counter-rewritten",),
                  f"counter {c.index} ({c.counter_name}) was written 0x{first:X} then at once "
                  f"0x{second:X} (periods {(mod - first) % mod} and {(mod - second) % mod}): "
                  f"the signature "
                  f"of Linux 6.1's p4_pmu_set_period, which installs the counter's previous "
                  f"period as its second write. perf's counts on this kernel are wrong (the "
                  f"first use of a counter reads 2^39-1 too high; a task switched out and back "
                  f"in, or multiplexed events, read nonsense), as on a real Pentium 4. Use the "
                  f"default 5.10 kernel (p4pmu linux --kernel 5.10), or follow the recipe in "
                  f"docs/linux-guest.md")
