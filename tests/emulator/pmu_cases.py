"""Random PMU programming and activity for the engine-versus-reference property tests.

A case is generated from one integer seed (numpy's PCG64), so hypothesis only has to draw the
seed: generation stays cheap, every case is reproducible from the seed hypothesis prints, and
with `derandomize=True` the same seeds run on every CI run.
"""
from __future__ import annotations

import math

import numpy as np

from p4pmu.emulator import bus_requests as BR
from p4pmu.emulator import events as EV
from p4pmu.emulator import tables as T
from p4pmu.emulator.activity import Activity, ClockKind
from p4pmu.emulator.models import MODELS, get_model
from p4pmu.emulator.pmu import PMU

F = T.CCCR_FIELD
MODEL_KEYS = sorted(MODELS)
WRAP = 1 << T.COUNTER_BITS


def _p(rng, prob):
    return bool(rng.random() < prob)


def random_escr(rng, escr_name):
    evs = [e for e in EV.EVENTS if escr_name in e.escrs]
    f = T.ESCR_FIELD
    if evs and _p(rng, 0.85):
        ev = evs[rng.integers(len(evs))]
        select = ev.select
        bits = [b for b in ev.mask if _p(rng, 0.5)] or [min(ev.mask)]
        mask = sum(1 << b for b in bits)
        if ev.selects_requests and _p(rng, 0.6):  # a mask that selects a bus request
            r = BR.REQUESTS[int(rng.integers(len(BR.REQUESTS)))]
            mask = BR.canonical_mask(ev.name, r)
            if _p(rng, 0.3):
                mask ^= 1 << int(rng.choice(sorted(ev.mask)))  # one field off
        if _p(rng, 0.1):
            mask |= 1 << int(rng.integers(16))  # possibly an undocumented (reserved) bit
    else:
        select, mask = int(rng.integers(64)), int(rng.integers(1 << 16))
    tbits = int(rng.integers(16)) if _p(rng, 0.7) else int(rng.choice([0xC, 0x3, 0x4, 0x8]))
    value = select << f["EVENT_SELECT"].lo | mask << f["EVENT_MASK"].lo | tbits
    if _p(rng, 0.2):
        value |= int(rng.integers(32)) << f["TAG_ENABLE"].lo  # tag enable/value: no effect
    return value


def random_cccr(rng, n, pmu):
    wired = [s for s in range(8) if pmu.select_slot[n, s] >= 0]
    sel = int(rng.choice(wired)) if wired and _p(rng, 0.85) else int(rng.integers(8))
    v = sel << F["ESCR_SELECT"].lo
    v |= (3 if _p(rng, 0.6) else int(rng.integers(4))) << F["ACTIVE_THREAD"].lo
    enable = _p(rng, 0.55)
    # counters left disabled are mostly set up to be started by a cascade (SDM 18.15.5.6/7)
    flags = {"ENABLE": float(enable), "COMPARE": 0.4, "COMPLEMENT": 0.4, "EDGE": 0.3,
             "FORCE_OVF": 0.07, "OVF_PMI_T0": 0.4, "OVF_PMI_T1": 0.3,
             "CASCADE": 0.2 if enable else 0.6, "OVF": 0.12}
    for name, prob in flags.items():
        if _p(rng, prob):
            v |= F[name].mask
    v |= int(rng.choice([0, 0, 1, 2, 15, int(rng.integers(16))])) << F["THRESHOLD"].lo
    if _p(rng, 0.2 if enable else 0.6):
        v |= T.CCCR_EXT_CASCADE.mask
    if _p(rng, 0.05):
        v |= int(rng.integers(1 << 11))  # reserved low bits: stored, ignored
    return v


def random_counter(rng):
    r = rng.random()
    if r < 0.55:
        return WRAP - int(rng.integers(1, 40))
    if r < 0.75:
        return int(rng.integers(WRAP))
    return int(rng.integers(64))


def random_kinds(rng, classes, count):
    kinds = []
    for _ in range(count):
        active = (_p(rng, 0.85), _p(rng, 0.6))
        os = (_p(rng, 0.4), _p(rng, 0.4))
        lines = {}
        for _ in range(int(rng.integers(0, 5))):
            c = EV.CLASSES[int(rng.choice(classes))]
            lp = int(rng.integers(2))
            v = int(rng.choice([1, 1, 1, 2, 3, 15, int(rng.integers(16))]))
            lines[(c.event, c.bit, lp)] = v
        kinds.append(ClockKind(active, os, lines))
    return kinds


def random_clocks(rng, kinds, length):
    seq, k = [], int(rng.integers(len(kinds)))
    while len(seq) < length:
        if _p(rng, 0.5):
            k = int(rng.integers(len(kinds)))
        seq.append(kinds[k])
    return seq


def build(seed, max_clocks=16):
    """A programmed PMU and 1-3 segments of clocks with software writes between them."""
    rng = np.random.default_rng(seed)
    model = get_model(MODEL_KEYS[rng.integers(len(MODEL_KEYS))],
                      stepping=int(rng.choice([0, 9, 10, 15, int(rng.integers(16))])))
    if _p(rng, 0.25):
        model = model.without_errata()
    pmu = PMU(model, ht=_p(rng, 0.5))
    for e in pmu.escrs:
        pmu.wrmsr(0, e.msr, random_escr(rng, e.name) if _p(rng, 0.8) else 0)
    for n in range(T.NUM_COUNTERS):
        pmu.wrmsr(0, T.COUNTER_BASE + n, random_counter(rng))
        pmu.wrmsr(0, T.CCCR_BASE + n, random_cccr(rng, n, pmu))
    # activity on the classes the programmed ESCRs select, plus a few others
    classes = set(int(x) for x in rng.integers(EV.NUM_CLASSES, size=3))
    for slot, e in enumerate(pmu.escrs):
        ev = EV.event_for(e.name, int(pmu.event_select[slot]))
        if ev is not None and ev.counts:
            classes.update(EV.selected_classes(ev, int(pmu.event_mask[slot]), model.model))
    classes = sorted(classes)
    kinds = random_kinds(rng, classes, int(rng.integers(1, 6)))
    segments = []
    for _ in range(int(rng.integers(1, 4))):
        clocks = random_clocks(rng, kinds, int(rng.integers(1, max_clocks + 1)))
        writes = []
        for _ in range(int(rng.integers(0, 3))):
            n = int(rng.integers(T.NUM_COUNTERS))
            r = rng.random()
            if r < 0.4:  # software clears OVF (halts cascaded partners, SDM 18.15.5.5)
                writes.append((T.CCCR_BASE + n, None))
            elif r < 0.7:
                writes.append((T.CCCR_BASE + n, random_cccr(rng, n, pmu)))
            else:
                writes.append((T.COUNTER_BASE + n, random_counter(rng)))
        segments.append((clocks, writes))
    return pmu, segments


def apply_write(pmu, ref, msr, value):
    """One WRMSR on both models (`value` None: clear the CCCR's OVF bit)."""
    if value is None:
        value = pmu.rdmsr(0, msr) & ~F["OVF"].mask
    pmu.wrmsr(0, msr, value)
    if msr >= T.CCCR_BASE:
        n = msr - T.CCCR_BASE
        ref.cccr[n] = value
        ref.ovf[n] = bool(F["OVF"].get(value))
        if not ref.ovf[n]:
            ref.armed[n] = False  # software clearing OVF ends the request
        ref.prev_pass[n] = False  # decision D1: a CCCR write resets the edge detector
    else:
        ref.counter[msr - T.COUNTER_BASE] = value


def feed_exact(pmu, clocks):
    """Feed clocks in batches shorter than the horizon (or single clocks): exact batches."""
    i, results = 0, []
    while i < len(clocks):
        h = pmu.horizon()
        size = len(clocks) - i if math.isinf(h) else max(1, int(h) - 1)
        size = min(size, len(clocks) - i)
        results.append(pmu.advance(Activity.from_clocks(clocks[i:i + size])))
        i += size
    return results


def edge_counter(cccr):
    return bool(F["EDGE"].get(cccr) and F["COMPARE"].get(cccr))


def state(pmu):
    return {"counter": [int(x) for x in pmu.counter],
            "cccr": [pmu.rdmsr(0, T.CCCR_BASE + n) for n in range(T.NUM_COUNTERS)],
            "armed": [bool(x) for x in pmu.pmi_armed],
            # the edge history is observable only where EDGE and COMPARE are set (a CCCR
            # write resets it, decision D1)
            "edge": [bool(x) and edge_counter(pmu.rdmsr(0, T.CCCR_BASE + n))
                     for n, x in enumerate(pmu.edge_prev)],
            "pmi": [pmu.pmi_request(0), pmu.pmi_request(1)]}


def ref_state(ref):
    return {"counter": list(ref.counter),
            "cccr": [ref.cccr_value(n) for n in range(T.NUM_COUNTERS)],
            "armed": list(ref.armed),
            "edge": [x and edge_counter(ref.cccr[n]) for n, x in enumerate(ref.prev_pass)],
            "pmi": [ref.pmi_request(0), ref.pmi_request(1)]}


def diff(a, b):
    out = []
    for k in a:
        for i, (x, y) in enumerate(zip(a[k], b[k])):
            if x != y:
                out.append(f"{k}[{i}]: engine {x!r} reference {y!r}")
    return out


# -- small builders for the directed tests ---------------------------------------------------

def cccr(escr_select=0, active_thread=3, threshold=0, **flags) -> int:
    """CCCR image from field names (tables.CCCR_FIELD), e.g. cccr(4, ENABLE=1, OVF_PMI_T0=1)."""
    v = escr_select << F["ESCR_SELECT"].lo | active_thread << F["ACTIVE_THREAD"].lo
    v |= threshold << F["THRESHOLD"].lo
    for name, on in flags.items():
        if on:
            v |= (T.CCCR_EXT_CASCADE if name == "EXT_CASCADE" else F[name]).mask
    return v


def select_of(counter, escr_name) -> int:
    """The ESCR_SELECT value with which `counter` reaches `escr_name` (Table 18-63)."""
    for s in range(8):
        e = T.escr_for(counter, s)
        if e is not None and e.name == escr_name:
            return s
    raise ValueError(f"counter {counter} cannot reach {escr_name}")


def program(pmu, counter, escr_name, event, bits, preset=0, tbits="T0", **cccr_flags):
    """Program `counter` to count EV `event` (mask `bits`) through `escr_name`."""
    ev = EV.EVENT_BY_NAME[event]
    if isinstance(tbits, str):
        tbits = {"T0": dict(t0_os=True, t0_usr=True), "T1": dict(t1_os=True, t1_usr=True),
                 "ALL": dict(t0_os=True, t0_usr=True, t1_os=True, t1_usr=True)}[tbits]
    t = tbits
    msr = T.ESCR_BY_NAME[escr_name].msr
    pmu.wrmsr(0, msr, ev.escr_value(*bits, **t))
    pmu.wrmsr(0, T.COUNTER_BASE + counter, preset % WRAP)
    at = cccr_flags.pop("active_thread", 3)
    pmu.wrmsr(0, T.CCCR_BASE + counter,
              cccr(select_of(counter, escr_name), active_thread=at, **cccr_flags))


def kind(*lines, active=(True, False), os=(False, False)) -> ClockKind:
    """ClockKind from (event, bit, lp, value) tuples."""
    return ClockKind(active, os, {(e, b, lp): v for e, b, lp, v in lines})


def run_clocks(pmu, clocks):
    """Feed clocks exactly (horizon-sized batches); returns the step results."""
    return feed_exact(pmu, list(clocks))


def neg(n: int) -> int:
    """-n as a 40-bit counter value (SDM 18.15.5.6 Example 18-1: 'preset for a count of -200')."""
    return (-n) % WRAP
