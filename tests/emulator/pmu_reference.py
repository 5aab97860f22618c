"""A deliberately simple per-clock reference model of the NetBurst counters.

It reads like the SDM text, one clock at a time, one counter at a time, with plain Python
integers, and shares nothing with the engine except the declarative tables (register fields,
ESCR wiring, events, CPU models).  It starts from the raw register values of a PMU (what
RDMSR returns) plus the two pieces of hidden state the SDM implies (edge-detector history,
"an event was counted since the overflow").
"""
from __future__ import annotations

from p4pmu.emulator import bus_requests as BR
from p4pmu.emulator import events as EV
from p4pmu.emulator import tables as T

F = T.CCCR_FIELD
E = T.ESCR_FIELD
WRAP = 1 << T.COUNTER_BITS


class Reference:
    def __init__(self, pmu):
        self.model = pmu.model
        self.ht = pmu.ht
        self.lps = (0, 1) if self.ht else (0,)
        self.counter = [pmu.rdmsr(0, T.COUNTER_BASE + n) for n in range(T.NUM_COUNTERS)]
        self.cccr = [pmu.rdmsr(0, T.CCCR_BASE + n) for n in range(T.NUM_COUNTERS)]
        self.escr = {e.name: pmu.rdmsr(0, e.msr) for e in T.ESCRS if pmu.model.model in e.models}
        self.ovf = [bool(F["OVF"].get(c)) for c in self.cccr]
        self.armed = [bool(x) for x in pmu.pmi_armed]
        self.prev_pass = [bool(x) for x in pmu.edge_prev]

    # -- SDM 18.15.5.5 / 18.15.5.6 / 18.15.5.7: is counter n counting in this clock? --------
    def running(self, n):
        c = self.cccr[n]
        if F["ENABLE"].get(c):
            return True
        ctr = T.COUNTERS[n]
        if F["CASCADE"].get(c) and self.ovf[ctr.cascade_from]:
            return True
        if self.model.extended_cascade and ctr.ext_cascade_from is not None and \
                T.CCCR_EXT_CASCADE.get(c) and self.ovf[ctr.ext_cascade_from]:
            return True
        return False

    def tbit(self, escr, lp, os):
        name = f"T{lp}_{'OS' if os else 'USR'}"
        if lp == 1 and not self.ht:
            return False  # HT-only field: reserved and ignored without Hyper-Threading
        return bool(E[name].get(escr))

    # -- SDM 18.15.5.1/18.15.5.2, Tables 18-66/18-67: the value on the four input lines -----
    def input(self, n, kind):
        sel = F["ESCR_SELECT"].get(self.cccr[n])
        escr_def = T.escr_for(n, sel)
        if escr_def is None or escr_def.name not in self.escr:
            return 0  # no ESCR wired for that select value: input 0
        escr = self.escr[escr_def.name]
        event = EV.event_for(escr_def.name, E["EVENT_SELECT"].get(escr), self.model.model)
        if event is None or not event.counts:
            return 0
        mask = E["EVENT_MASK"].get(escr)
        lines = {}
        for (ev_name, bit, lp), value in kind.lines.items():
            if ev_name == event.name:
                lines[(event.bit(bit), lp)] = lines.get((event.bit(bit), lp), 0) + value
        total = 0
        if event.selects_requests:  # a bus-queue event: the requests its mask matches
            bits = [b for b, name in event.line_bits.items()
                    if BR.selects(event.name, mask, BR.REQUEST_BY_NAME[name], self.model.model)]
        else:
            bits = [b for b in event.mask if mask >> b & 1]
        for bit in bits:
            for lp in self.lps:
                value = lines.get((bit, lp), 0)
                if event.thread == "TS":
                    ok = self.tbit(escr, lp, kind.os[lp])
                else:
                    os_en = any(self.tbit(escr, t, True) for t in self.lps)
                    usr_en = any(self.tbit(escr, t, False) for t in self.lps)
                    ok = (os_en and any(kind.os[t] for t in self.lps)) or \
                        (usr_en and any(not kind.os[t] for t in self.lps))
                if ok:
                    total += value
        return min(total, 15)

    def gate(self, n, kind):
        at = F["ACTIVE_THREAD"].get(self.cccr[n]) if self.ht else 3
        active = sum(1 for t in self.lps if kind.active[t])
        return {0: active == 0, 1: active == 1, 2: active == 2, 3: active >= 1}[at]

    def clock(self, kind, inputs: dict | None = None):
        """One clock of `kind`; `inputs` (from run) keeps each counter's input per kind, which
        depends only on the registers, fixed within a run."""
        run = [self.running(n) for n in range(T.NUM_COUNTERS)]  # state at the clock's start
        for n in range(T.NUM_COUNTERS):
            c = self.cccr[n]
            if inputs is None:
                v = self.input(n, kind)
            elif (v := inputs.get((n, id(kind)))) is None:
                v = inputs[(n, id(kind))] = self.input(n, kind)
            threshold = F["THRESHOLD"].get(c)
            passed = v <= threshold if F["COMPLEMENT"].get(c) else v > threshold
            if F["COMPARE"].get(c):
                if F["EDGE"].get(c):
                    inc = 1 if passed and not self.prev_pass[n] else 0
                else:
                    inc = 1 if passed else 0
            else:
                inc = v
            self.prev_pass[n] = passed
            if not self.gate(n, kind):
                inc = 0
            if run[n] and inc:
                pmi = F["OVF_PMI_T0"].get(c) or (self.ht and F["OVF_PMI_T1"].get(c))
                force = F["FORCE_OVF"].get(c)
                if self.ovf[n] and pmi:
                    self.armed[n] = True  # the next counted event after the overflow
                total = self.counter[n] + inc
                if total >= WRAP or force:
                    self.ovf[n] = True
                    if force and pmi:
                        self.armed[n] = True
                self.counter[n] = total % WRAP

    def run(self, clocks):
        inputs: dict = {}  # (counter, id of the kind) -> its input
        for kind in clocks:
            self.clock(kind, inputs)

    def pmi_request(self, lp):
        if lp == 1 and not self.ht:
            return False
        for n in range(T.NUM_COUNTERS):
            c = self.cccr[n]
            if not (self.ovf[n] and self.armed[n] and F[f"OVF_PMI_T{lp}"].get(c)):
                continue
            cascade_mode = not F["ENABLE"].get(c) and (
                F["CASCADE"].get(c) or (self.model.extended_cascade and
                                        T.COUNTERS[n].ext_cascade_from is not None and
                                        T.CCCR_EXT_CASCADE.get(c)))
            if cascade_mode and self.model.cascade_pmi_erratum and self.model.emulate_errata:
                continue
            return True
        return False

    def cccr_value(self, n):
        return (self.cccr[n] & ~F["OVF"].mask) | (F["OVF"].mask if self.ovf[n] else 0)
