"""The counting engine: one vectorised advance step over all 18 counters.

Per clock, for every counter (SDM Vol. 3B 18.15.5.2, Fig. 18-46; stage order of SDM 18.15.3):

    v    = min(15, sum of the selected event's mask-bit lines, qualified by T0/T1 OS/USR)
    pass = COMPLEMENT ? v <= THRESHOLD : v > THRESHOLD
    inc  = COMPARE ? (EDGE ? pass and not pass_previous_clock : pass) : v
    inc  = 0 unless the ACTIVE_THREAD gate is open (SDM 18.16.1)
    if running (ENABLE, or started by a cascade: SDM 18.15.5.5/6/7): counter += inc (40 bits)

`advance` computes this for a whole batch (activity.Activity) at once: per-kind inputs are
one matrix product of the batch's line values with a selection matrix built when registers
are written; the filter, gate and per-kind increments are (kinds x counters) array
operations; totals are a dot product with the kind counts; rising edges come from the
adjacent-pair counts.  Overflow, cascade starts and PMI arming follow (SDM 18.15.5.6-18.15.5.8;
docs/emulator.md, "Decisions").

Exactness (docs/emulator.md "Exactness"): for every counter that runs for the whole batch,
its total (edges included) and OVF are exact for any batch.  Where inside a batch a counter first
overflows is not part of the activity, so a
counter *started* by that overflow gets its share of the batch by proportion, except when it
receives the same per-clock increments as the counter that started it and those increments
take a single non-zero value (then the share is exact: SDM Example 18-1 on one event class).
A batch shorter than `horizon()` clocks, and any one-clock batch, is exact in every respect.

Shared clocks (Hyper-Threading, activity.py): in the first `act.shared` clocks of a batch the
sibling LP also ran, and its batches already counted those core clocks with this LP shown
active and without its events.  Events add up (a TS event of this LP counts in them as in any
clock), and so does a COMPARE counter without COMPLEMENT (this LP's contribution passes the
threshold or not; the sibling's clock with no events of this LP did not).  A COMPARE +
COMPLEMENT counter passed in those clocks already: it does not count them again.  Its batch
total is reduced by floor(total * shared / clocks) -- exact when it passes in every gated
clock, as the "count every clock" idiom (threshold 15) does; a proportional estimate
otherwise (docs/emulator.md D21).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import events as EV
from . import tables as T

LIMIT = float(1 << T.COUNTER_BITS)
N = T.NUM_COUNTERS
_NONE = np.full(N, -1, dtype=np.int64)
_NONE.setflags(write=False)

# ACTIVE_THREAD (CCCR 17:16, SDM 18.16.1) -> open for 0, 1, 2 active logical processors.
GATE = np.array([[True, False, False],   # 00 none: count only while no LP is active
                 [False, True, False],   # 01 single: exactly one LP active
                 [False, False, True],   # 10 both: both LPs active
                 [False, True, True]])   # 11 any: at least one LP active


@dataclass(slots=True)
class StepResult:
    """What one advance step did.

    overflow_clock[n]: clock (1..clocks) of the batch in which counter n's OVF went from 0
        to 1, -1 if it did not (an estimate when `exact` is False).  Aim the next batch
        boundary with `PMU.horizon()`.
    started_clock[n]: counter n was started by a cascade after this clock (-1: not started
        in this batch).
    pmi_raised: per logical processor, whether its interrupt request went from 0 to 1 in
        this batch (the level itself: PMU.pmi_request(lp)).
    exact: False when a cascade start or PMI arming inside the batch had to be apportioned.
    """
    clocks: int
    overflow_clock: np.ndarray
    started_clock: np.ndarray
    pmi_raised: tuple
    exact: bool = True


class Engine:
    def __init__(self, pmu):
        self.pmu = pmu
        self.W = np.zeros((EV.NUM_LINES, N))  # line -> counter selection (ESCR + T-bits)
        self.G = np.zeros((N, 3))  # ACTIVE_THREAD gate per number of active LPs (0/1)
        self.TQ = np.ones((N, 4))  # TI qualification factor per (some LP OS, some LP USR)
        self.is_ti = np.zeros(N, dtype=bool)
        self.ti_os = np.zeros(N, dtype=bool)
        self.ti_usr = np.zeros(N, dtype=bool)
        self._sel_event = [None] * N  # (event, mask) per counter, for describe()
        self.state_version = 0  # bumped whenever OVF or the PMI arming change (note_state_change)
        self._key = None

    # -- derived state, rebuilt only for counters whose CCCR/ESCR was written ---------------

    def refresh(self) -> None:
        pmu = self.pmu
        ht = pmu.ht
        for n in sorted(pmu.dirty_counters):
            col = self.W[:, n]
            col[:] = 0
            self.is_ti[n] = self.ti_os[n] = self.ti_usr[n] = False
            self._sel_event[n] = None
            slot = int(pmu.escr_index[n])
            if slot >= 0:
                escr = pmu.escrs[slot]
                ev = EV.event_for(escr.name, int(pmu.event_select[slot]), pmu.model.model)
                if ev is not None and ev.counts:
                    mask = int(pmu.event_mask[slot])
                    self._sel_event[n] = (ev, mask)
                    ti = ev.thread == "TI"
                    t = ((pmu.t0_os[slot], pmu.t0_usr[slot]), (pmu.t1_os[slot], pmu.t1_usr[slot]))
                    # the mask's bits, or the bus requests it matches (undocumented bits
                    # select nothing)
                    for cls in EV.selected_classes(ev, mask, pmu.model.model):
                        for lp in ((0, 1) if ht else (0,)):
                            for priv in (EV.OS, EV.USR):
                                # TS: the LP's own T-bit for its CPL (Table 18-66); TI: every
                                # line, qualified per clock below (Table 18-67).
                                col[EV.line_id(cls, lp, priv)] = 1.0 if ti else float(t[lp][priv])
                    self.is_ti[n] = ti
                    self.ti_os[n] = pmu.t0_os[slot] or pmu.t1_os[slot]
                    self.ti_usr[n] = pmu.t0_usr[slot] or pmu.t1_usr[slot]
            self.G[n] = GATE[pmu.active_thread[n]]
            for idx in range(4):  # idx = 2 * (some LP at CPL 0) + (some LP at CPL 1-3)
                q = (self.ti_os[n] and idx & 2) or (self.ti_usr[n] and idx & 1)
                self.TQ[n, idx] = 0.0 if self.is_ti[n] and not q else 1.0
        pmu.dirty_counters.clear()
        self.edge_eff = pmu.edge & pmu.compare  # EDGE is only active with COMPARE (18.15.5.2)
        self.eidx = np.flatnonzero(self.edge_eff)
        self.pmi_any = pmu.pmi_t0 | pmu.pmi_t1
        self.any_ti = bool(self.is_ti.any())
        self.any_complement = bool(pmu.complement.any())
        self.thr = pmu.threshold.astype(np.float64)
        self._key = None

    def note_state_change(self) -> None:
        """OVF or the PMI arming changed outside the engine (a host's fast path wrote the
        shared state arrays): the derived vectors are rebuilt at their next use."""
        self.state_version += 1

    def update_derived(self) -> None:
        """Per-counter vectors that change only with register writes or OVF/arming changes:
        running(), PMI masks, overflow candidates (rebuilt only when one of those changed)."""
        pmu = self.pmu
        key = (pmu.config_version, self.state_version)
        if key != self._key:
            if pmu.dirty_counters:
                self.refresh()
            run = pmu.running()
            self.run_f = run.astype(np.float64)
            self.run = run
            supp = pmu.in_cascade_mode() if pmu.model.cascade_pmi_suppressed else \
                np.zeros(N, dtype=bool)
            self.pmi_mask = (pmu.pmi_t0 & ~supp, pmu.pmi_t1 & ~supp)
            self.arm_cand = self.pmi_any & pmu.ovf & ~pmu.pmi_armed
            self.any_arm_cand = bool(self.arm_cand.any())
            self.force_cand = pmu.force_ovf & ~pmu.ovf & run
            self.any_force_cand = bool(self.force_cand.any())
            self._key = (pmu.config_version, self.state_version)

    def running(self) -> np.ndarray:
        self.update_derived()
        return self.run

    def pmi_levels(self) -> tuple:
        self.update_derived()
        ok = self.pmu.ovf & self.pmu.pmi_armed
        return (bool(np.count_nonzero(ok & self.pmi_mask[0])),
                bool(np.count_nonzero(ok & self.pmi_mask[1])))

    # -- the step ----------------------------------------------------------------------------

    def increments(self, act):
        """Per-kind filter output and increments, and the batch total per counter (assuming
        the counter runs for the whole batch).  Returns (pas, inc, gate, total)."""
        pmu = self.pmu
        if pmu.dirty_counters:
            self.refresh()
        if act.cols.shape[0]:
            v = np.dot(act.vals, self.W.take(act.cols, axis=0))  # (K, 18) selected, qualified
        else:
            v = np.zeros((act.count.shape[0], N))
        if self.any_ti:  # thread-independent events: OS/USR of any LP (Table 18-67)
            v *= self.TQ.take(act.tidx_ht if pmu.ht else act.tidx_1, axis=1).T
        np.minimum(v, 15.0, out=v)  # four input lines: at most 15 per clock (18.15.5.2)
        gate = self.G.take(act.gidx_ht if pmu.ht else act.gidx_1, axis=1).T
        pas = np.greater(v, self.thr)  # threshold filter (18.15.5.2)
        if self.any_complement:
            pas ^= pmu.complement
        np.copyto(v, pas, where=pmu.compare)  # COMPARE: a passing clock adds exactly 1
        v *= gate
        inc = v
        total = np.dot(act.count, inc)
        if self.eidx.size:
            if act.trans is None:
                raise ValueError("a batch without adjacent-pair counts cannot drive an EDGE "
                                 "counter (SDM Vol. 3B 18.15.5.2, Fig. 18-46)")
            # Rising edges of `pass` on gated clocks (Fig. 18-46).  For a COMPARE counter
            # inc = pass * gate, and with into[b] = sum_a trans[a, b] = count[b] - [b == first]:
            #   edges = sum_ab trans[a,b] (1 - pass[a]) inc[b] + (1 - prev) inc[first]
            #         = total - sum_ab trans[a,b] pass[a] inc[b] - prev * inc[first]
            both = (np.dot(act.trans.T, pas.astype(np.float64)) * inc).sum(axis=0)
            rising = total - both
            rising -= inc[act.first] * pmu.edge_prev
            np.copyto(total, rising, where=self.edge_eff)
        if act.shared and self.any_complement:
            self.drop_shared_clocks(total, act.shared, act.clocks)
        return pas, inc, gate, total

    def drop_shared_clocks(self, total, shared: int, clocks: int) -> None:
        """D21, in place on a batch's per-counter totals: a COMPARE + COMPLEMENT counter
        (without EDGE) does not count the batch's `shared` clocks again -- floor(total *
        shared / clocks) less (exact integers; exact for the count-every-clock idiom)."""
        pmu = self.pmu
        for n in np.flatnonzero(pmu.compare & pmu.complement & ~self.edge_eff):
            total[n] -= int(total[n]) * shared // clocks

    def advance(self, act) -> StepResult:
        pmu = self.pmu
        C = act.clocks
        if C == 0:
            return StepResult(0, _NONE, _NONE, (False, False))
        self.update_derived()
        pas, inc, gate, total = self.increments(act)
        delta = total * self.run_f
        new = pmu.counter.astype(np.float64)
        new += delta
        wrap = new >= LIMIT
        if np.count_nonzero(wrap):
            if np.count_nonzero(wrap & ~pmu.ovf) or \
                    (self.any_force_cand and np.count_nonzero(self.force_cand & (delta > 0))):
                return self._cascade(act, inc, pas, gate, total)
            np.mod(new, LIMIT, out=new)
        elif self.any_force_cand and np.count_nonzero(self.force_cand & (delta > 0)):
            return self._cascade(act, inc, pas, gate, total)
        # fast path: no OVF 0 -> 1 transition, hence no cascade start (SDM 18.15.5.6)
        pmu.counter[:] = new
        self._edge_history(act, pas)
        raised = (False, False)
        if self.any_arm_cand:  # OVF set and a PMI bit: the next counted event arms (beh. 5)
            newly = self.arm_cand & (delta > 0)
            if np.count_nonzero(newly):
                before = self.pmi_levels()
                pmu.pmi_armed |= newly
                self.state_version += 1
                after = self.pmi_levels()
                raised = (after[0] and not before[0], after[1] and not before[1])
        return StepResult(C, _NONE, _NONE, raised)

    # -- overflow inside the batch: cascade starts (SDM 18.15.5.6, 18.15.5.7) --------------------

    def _cascade(self, act, inc, pas, gate, total) -> StepResult:
        pmu = self.pmu
        C = act.clocks
        run = self.run
        val = pmu.counter.astype(np.float64)
        before = self.pmi_levels()
        ovf0 = pmu.ovf.copy()
        skip = np.where(run, 0.0, total)  # own increments before the counter started
        started = np.full(N, -1, dtype=np.int64)
        ovf_clock = np.full(N, -1, dtype=np.int64)
        ovf_cum = np.zeros(N)  # own cumulative increment at the end of the overflow clock
        new_ovf = np.zeros(N, dtype=bool)
        counting = run.copy()
        exact = True
        nz = act.nonzero
        frontier = np.flatnonzero(run & ~ovf0)
        while frontier.size:
            newly = []
            d = total[frontier] - skip[frontier]
            over = (d >= LIMIT - val[frontier]) | (pmu.force_ovf[frontier] & (d > 0))
            for n in frontier[over]:
                need = LIMIT - val[n]
                force = pmu.force_ovf[n]
                step = self._single_increment(n, inc, nz)
                if step is None:  # increments of several sizes: the overflow clock is unknown
                    exact = False
                    step_min = inc[nz & (inc[:, n] > 0), n].min() if not self.edge_eff[n] else 1
                    u = skip[n] + (step_min if force else need)
                else:
                    u = skip[n] + (step if force else math.ceil(need / step) * step)
                u = min(u, total[n])
                new_ovf[n] = True
                ovf_cum[n] = u
                sh = act.shared if pmu.compare[n] and pmu.complement[n] and \
                    not self.edge_eff[n] else 0  # it counts after the shared clocks
                ovf_clock[n] = min(C, max(1, sh + math.ceil((C - sh) * u / total[n])))
                newly.append(n)
            if not newly:
                break
            # Counters started by these overflows: CASCADE from the alternate, bit 11 from the
            # extended-cascade source; a started counter counts from the next clock on.
            nxt = []
            cand = ~counting & ((pmu.cascade & new_ovf[pmu.alt]) |
                                (pmu.ext_cascade & new_ovf[pmu.ext_src]))
            for m in np.flatnonzero(cand):
                srcs = []
                if pmu.cascade[m] and new_ovf[pmu.alt[m]]:
                    srcs.append(int(pmu.alt[m]))
                if pmu.ext_cascade[m] and new_ovf[pmu.ext_src[m]]:
                    srcs.append(int(pmu.ext_src[m]))
                if not srcs:
                    continue
                src = min(srcs, key=lambda s: ovf_clock[s])
                pos = int(ovf_clock[src])
                if self._same_sequence(src, m, inc, pas, gate, nz) and \
                        self._single_increment(src, inc, nz) is not None:
                    skip[m] = min(ovf_cum[src], total[m])  # the same clocks: exact
                else:
                    skip[m] = total[m] - math.floor(total[m] * (C - pos) / C)
                    if total[m] > 0 and C > 1:  # apportioned: the overflow clock is estimated
                        exact = False
                started[m] = pos
                counting[m] = True
                nxt.append(m)
            frontier = np.array([m for m in nxt if not ovf0[m]], dtype=np.int64)
        delta = np.where(counting, total - skip, 0.0)
        armed = (ovf0 & (delta > 0)) | (new_ovf & pmu.force_ovf & (delta > 0)) | \
            (new_ovf & ~pmu.force_ovf & (total - ovf_cum > 0))
        for n in np.flatnonzero(new_ovf & ~pmu.force_ovf & self.pmi_any):
            if self._single_increment(n, inc, act.nonzero) is None:
                exact = False
        pmu.pmi_armed |= self.pmi_any & armed
        pmu.counter[:] = np.mod(val + delta, LIMIT)
        self._edge_history(act, pas)
        pmu.ovf |= new_ovf
        self.state_version += 1
        after = self.pmi_levels()
        raised = (after[0] and not before[0], after[1] and not before[1])
        return StepResult(C, ovf_clock, started, raised, exact)

    def _edge_history(self, act, pas):
        """The edge detector sees every clock, counting or not; only EDGE counters use it."""
        if self.eidx.size:
            np.copyto(self.pmu.edge_prev, pas[act.last], where=self.edge_eff)

    def _single_increment(self, n, inc, nz):
        """The one non-zero per-clock increment counter n receives in this batch, or None
        when it receives several different ones.  Edge counts are 0/1 per clock."""
        if self.edge_eff[n]:
            return 1.0
        vals = np.unique(inc[nz, n])
        vals = vals[vals > 0]
        if vals.size == 1:
            return float(vals[0])
        return 1.0 if vals.size == 0 else None

    def _same_sequence(self, a, b, inc, pas, gate, nz):
        """Counters a and b receive the same increment in every clock of the batch."""
        ea, eb = self.edge_eff[a], self.edge_eff[b]
        if ea != eb:
            return False
        if not ea:
            return bool(np.array_equal(inc[nz, a], inc[nz, b]))
        return bool(np.array_equal(pas[:, a], pas[:, b]) and np.array_equal(gate[:, a], gate[:, b])
                    and self.pmu.edge_prev[a] == self.pmu.edge_prev[b])

    # -- batch planning --------------------------------------------------------------------------

    def horizon(self, max_input: int = 15) -> float:
        """Clocks that can pass before any OVF flag goes from 0 to 1 (the only event that
        starts cascaded counters or arms a PMI differently): a batch shorter than this is
        exact.  math.inf when no running counter has OVF clear."""
        pmu = self.pmu
        if pmu.dirty_counters:
            self.refresh()
        cand = self.running() & ~pmu.ovf
        if not cand.any():
            return math.inf
        need = LIMIT - pmu.counter[cand].astype(np.float64)
        rate = np.where(pmu.compare[cand] | pmu.force_ovf[cand], 1.0, float(max_input))
        need = np.where(pmu.force_ovf[cand], 1.0, need)
        return float(np.ceil(need / rate).min())

    def describe(self, n: int) -> str:
        """What counter n counts, for logs and errors."""
        if self.pmu.dirty_counters:
            self.refresh()
        sel = self._sel_event[n]
        if sel is None:
            return "nothing (no ESCR or no documented event selected)"
        ev, mask = sel
        bits = [name for b, name in sorted(ev.mask.items()) if mask >> b & 1]
        return f"{ev.name}({'|'.join(bits) or 'no mask bits'})"
