"""The guest-activity feeder inside QEMU (docs/guest-events.md).

The C side (plugin/translate.c, fold.c) counts block executions with inline operations and, at
a PMU access or a deadline, closes the batch of activity since the last fold into a joint
histogram over (clock kind, CPL) with adjacent-pair counts (`struct p4c_out`).
`Feeder.consume` turns that into an `activity.Activity` (zero-copy views of the C arrays) and
steps the vCPU's PMU; `Feeder.after` tells the C side when the next deadline is (clocks until
an armed counter could overflow), whether to deliver a PMI, and (count=auto) when to start
instrumenting.

Runs only at PMU accesses, deadlines and batch folds, never per block.

With a simple programming (`Feeder.mirror_rule`) and the option mirror=on, the C-side register
file (plugin/mirror.c) serves counter/CCCR reads, RDPMC, counter writes, OVF-only CCCR writes and
counting deadlines by itself between two Python calls (`Feeder.enable_fast_path` /
`disable_fast_path`).  The PMU model's counter state (counters, CCCRs, OVF, arming) is stored in
that register file (`Feeder.storage`), so both sides work on one copy.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from p4pmu.emulator import clockmodel as CM
from p4pmu.emulator import events as EV
from p4pmu.emulator import tables as T
from p4pmu.emulator.activity import Activity

LIMIT = float(1 << T.COUNTER_BITS)
MAX_BUDGET = 1 << 60
_TABLES_KEPT = 64  # per-kind tables kept per vCPU, one per programming (Feeder._kind_incs)

# Largest value a class line can present in one clock under the clock model (I6): at most
# retire_width instructions/uops, one branch; other classes (FP uops of microcoded
# instructions, loads/stores of REP strings, execution tagging) up to the 15 cap.
_W = CM.PARAMS["retire_width"]


def _class_max() -> np.ndarray:
    """The most a class's line adds in one clock under the clock model (0: no model feeds
    it, it never counts: clockmodel.modelled_classes)."""
    m = np.full(EV.NUM_CLASSES, 15.0)
    fed = CM.modelled_classes()
    for c in EV.CLASSES:
        if c.id not in fed:
            m[c.id] = 0.0
        elif c.event in ("instr_retired", "uops_retired"):
            m[c.id] = _W
        elif c.event in ("branch_retired", "mispred_branch_retired", "retired_branch_type",
                         "retired_mispred_branch_type", "global_power_events"):
            m[c.id] = 1.0
    return m


LINE_MAX = np.repeat(_class_max(), 4)  # line id = class * 4 + lp * 2 + priv
LINE_FED = LINE_MAX > 0  # the lines the clock model can feed
# the lines of logical processor 0 and 1 (only its own batches feed them)
LP_LINES = tuple((np.arange(LINE_MAX.size) // 2) % 2 == lp for lp in (0, 1))


@dataclass
class _MirrorView:
    """numpy views of one vCPU's `struct p4c_mirror` (plugin/mirror.c)."""
    m: object
    ctr: np.ndarray
    cccr: np.ndarray
    ovf: np.ndarray
    armed: np.ndarray
    run: np.ndarray
    pmi: np.ndarray
    rate_b: np.ndarray
    tmax: np.ndarray
    ctr_fault: np.ndarray
    cccr_fault: np.ndarray
    escr: np.ndarray = None  # the ESCRs C may write (m.escr)
    key: object = None  # what the static part (run ... cccr_fault) was written for
    changes_seen: int = 0  # m.state_changes when the fast path was enabled
    prog_seen: int = 0  # m.prog_changes when the fast path was enabled
    cccr_decoded: np.ndarray = None  # the CCCRs (without OVF) the Python model decoded


_BIT = np.left_shift(np.int64(1), np.arange(T.NUM_COUNTERS, dtype=np.int64))


def _bits(mask) -> int:
    """A boolean array over the counters as a bit mask (bit n: counter n)."""
    return int(_BIT[np.asarray(mask, dtype=bool)].sum())


def _chain(K: int) -> np.ndarray:
    """Adjacent-pair counts of K clocks of kinds 0, 1, ..., K-1 in that order."""
    t = np.zeros((K, K))
    t[np.arange(K - 1), np.arange(1, K)] = 1.0
    return t


class Feeder:
    def __init__(self, bridge, ffi, lib):
        self.bridge = bridge
        self.ffi = ffi
        self.lib = lib
        self.threads = bridge.threads
        self.ht = self.threads == 2
        self.mode = bridge.options.count
        self.tight = bool(bridge.options.tight)  # the tight deadline bounds (wfree, edge_fail)
        # timing=memory: loads' misses cost clocks, so the memory model is fed while any
        # counter may count (docs/timing.md)
        self.memory_timing = bridge.memory_timing
        self._F = np.zeros((0, CM.NFEAT))  # features per kind id
        self._tag_cache = {}
        self.n_batches = self.n_clocks = self.n_bad = 0
        self.n_deadline_calls = 0
        self.started = self.mode == "on"
        self._bad_noted = False
        self._outs = {}
        self._inc_cache = {}
        self._winc = {}
        self._wgen = {}  # vcpu -> generation of the table in self._winc (the mirror keys on it)
        self._winc_key = {}
        self._table_nk = {}
        self._st_cache = {}
        self._prog_cache = {}
        self._wkey = {}
        self._whead, self._wrate, self._widx = {}, {}, {}
        self.n_fast = 0
        self._idle_key = {}  # vcpu -> (config, state) version for which nothing needs doing
        # the C-side register mirror (plugin/mirror.c): one LP per core only
        self.mirror_on = bool(getattr(bridge.options, "mirror", False)) and not self.ht
        self._mv: dict[int, _MirrorView] = {}
        self._mrule: dict[int, tuple] = {}
        self._mstatic: dict[int, tuple] = {}
        self.n_fast_on = self.n_fast_off = 0
        from p4pmu.plugin.programs import Programs
        self._programs = Programs(self)

    # -- kinds -----------------------------------------------------------------------------

    def _features(self, need: int) -> np.ndarray:
        if need > self._F.shape[0]:
            n = self.ffi.new("uint32_t *")
            ptr = self.lib.p4c_kinds(n)
            k = int(n[0])
            raw = np.frombuffer(self.ffi.buffer(ptr, k * CM.NF), dtype=np.uint8).reshape(k, CM.NF)
            self._F = CM.features(raw)
        return self._F

    # -- tagging (front-end: uop_type on RAT_ESCR0/1; execution: FIRM_ESCR0/1) ------------------

    def _tagging(self, pmu, lp: int, os: bool) -> CM.Tagging:
        key = (pmu.config_version, lp, os)
        t = self._tag_cache.get(key)
        if t is not None:
            return t
        tl = ts = False
        tags: dict[str, int] = {}
        tbit = (pmu.t0_os, pmu.t0_usr) if lp == 0 else (pmu.t1_os, pmu.t1_usr)
        qual = tbit[0] if os else tbit[1]
        for slot, escr in enumerate(pmu.escrs):
            if not qual[slot]:
                continue
            ev = EV.event_for(escr.name, int(pmu.event_select[slot]), pmu.model.model)
            if ev is None:
                continue
            mask = int(pmu.event_mask[slot])
            if ev.name == "uop_type":
                tl = tl or bool(mask >> 1 & 1)
                ts = ts or bool(mask >> 2 & 1)
            elif pmu.tag_enable[slot]:
                for bit in ev.mask:
                    feat = CM.UOP_EVENT_FEATURES.get((ev.name, bit))
                    if feat and mask >> bit & 1:
                        tags[feat] = tags.get(feat, 0) | int(pmu.tag_value[slot])
        t = CM.Tagging(tl, ts, tuple(sorted(tags.items())),
                       CM.replay_tagging(pmu.pebs_enable, pmu.pebs_matrix_vert))
        if len(self._tag_cache) > 64:
            self._tag_cache.clear()
        self._tag_cache[key] = t
        return t

    # -- a batch -> the PMU ------------------------------------------------------------------

    def _out(self, vcpu: int):
        o = self._outs.get(vcpu)
        if o is None:
            o = self._outs[vcpu] = self.lib.p4c_out(vcpu)
            ffi = self.ffi
            self._whead[vcpu] = np.frombuffer(ffi.buffer(o.whead), dtype=np.int64)
            self._wrate[vcpu] = np.frombuffer(ffi.buffer(o.wrate), dtype=np.int32)
            self._widx[vcpu] = np.frombuffer(ffi.buffer(o.widx), dtype=np.int32)
        return o

    def consume(self, vcpu: int, pmu) -> None:
        o = self._outs.get(vcpu) or self._out(vcpu)
        n = o.n
        if not n:
            return
        n = int(n)
        clocks = int(o.clocks)
        if clocks == 0:
            o.n = 0
            return
        o.n = 0  # consumed (a second call before the next fold sees nothing)
        self.n_batches += 1
        self.n_clocks += clocks
        if o.bad:
            self.n_bad += 1
            if not self._bad_noted:
                self._bad_noted = True
                self.bridge.note(vcpu, f"feeder: batch bookkeeping repaired ({int(o.bad)} "
                                       "inconsistencies); edge counts of that batch may be off")
        eng = pmu.engine
        run = eng.running()
        if not run.any() and not (pmu.edge & pmu.compare).any():
            return  # nothing counts, no edge detector to keep up to date
        shared = int(o.shared) if self.ht else 0  # clocks the sibling ran in too (I8)
        if o.tot_ok == 1 and self._fast_add(vcpu, pmu, o, run, clocks, shared):
            return
        ffi = self.ffi
        ext = np.frombuffer(ffi.buffer(o.ext, 4 * n), dtype=np.uint32).astype(np.int64)
        cnt = np.frombuffer(ffi.buffer(o.cnt, 8 * n), dtype=np.int64).astype(np.float64)
        kid = ext >> 1
        osf = (ext & 1).astype(bool)
        F = self._features(int(kid.max()) + 1)[kid]
        lp = vcpu % self.threads
        pair = (lp, bool(o.other_active) if self.ht else False)
        cols, blocks = [], []
        for priv, sel in ((EV.OS, osf), (EV.USR, ~osf)):
            if not sel.any():
                continue
            ids, M = CM.line_matrix(self._tagging(pmu, lp, priv == EV.OS), pair)
            cols.append(ids * 4 + lp * 2 + priv)
            v = np.zeros((n, ids.shape[0]))
            v[sel] = F[sel] @ M
            blocks.append(v)
        colv = np.concatenate(cols)
        vals = np.concatenate(blocks, axis=1)
        active = np.zeros((n, 2), dtype=bool)
        os_ = np.zeros((n, 2), dtype=bool)
        active[:, lp] = True
        os_[:, lp] = osf
        if self.ht:
            active[:, 1 - lp] = bool(o.other_active)
            os_[:, 1 - lp] = bool(o.other_os)
        # adjacent pairs
        order = np.argsort(ext, kind="stable")
        sext = ext[order]

        def index(e):
            i = np.searchsorted(sext, e)
            return order[np.minimum(i, n - 1)]

        first = int(index(np.array([int(o.first)]))[0])
        last = int(index(np.array([int(o.last)]))[0])
        trans = self._pairs(o, n, index, first, last, clocks) if eng.edge_eff.any() else None
        nseq = int(o.nseq)
        if nseq and clocks >= pmu.horizon():
            # one block execution (or its rest) that may overflow a counter: step it in clock
            # order, one clock at a time while an OVF flag may go 0 -> 1 (exact cascades,
            # docs/emulator.md "Exactness"), the rest as one exact batch
            seq = index(np.frombuffer(ffi.buffer(o.seq, 4 * nseq), dtype=np.uint32)
                        .astype(np.int64))
            i = 0
            while i < nseq:
                h = pmu.horizon()
                m = 1 if h <= 1 else int(min(nseq - i, h - 1))
                part = seq[i:i + m]
                pmu.advance(self._sub(part, active, os_, colv, vals,
                                      max(0, min(shared, i + m) - i)))
                i += m
            return
        act = Activity.from_arrays(cnt, active, os_, colv, vals, trans, first, last, shared)
        pmu.advance(act)

    def _pairs(self, o, n: int, index, first: int, last: int, clocks: int) -> np.ndarray:
        """The batch's adjacent-pair counts (n x n), for an effective EDGE counter only (C
        collects them only then, and the dense matrix costs O(n^2) for n kinds)."""
        ffi = self.ffi
        trans = np.zeros((n, n))
        np_ = int(o.np)
        if np_:
            pa = np.frombuffer(ffi.buffer(o.pa, 4 * np_), dtype=np.uint32).astype(np.int64)
            pb = np.frombuffer(ffi.buffer(o.pb, 4 * np_), dtype=np.uint32).astype(np.int64)
            pn = np.frombuffer(ffi.buffer(o.pn, 8 * np_), dtype=np.int64).astype(np.float64)
            np.add.at(trans, (index(pa), index(pb)), pn)
        if int(trans.sum()) != clocks - 1:
            # a bookkeeping error (o.bad, should not happen): keep totals exact, put the
            # difference on the last kind's self-transition so the batch is consistent
            d = clocks - 1 - int(trans.sum())
            trans[last, last] = max(0.0, trans[last, last] + d)
            if int(trans.sum()) != clocks - 1:
                trans[:] = 0
                trans[last, last] = clocks - 1
        return trans

    def _fast_add(self, vcpu: int, pmu, o, run, clocks: int, shared: int) -> bool:
        """The batch's per-counter totals computed by C from our per-kind table, when the step
        would be the engine's plain case anyway: no EDGE counter (table exact), no OVF
        0 -> 1, no PMI arming, no FORCE_OVF.  Shared clocks reduce COMPARE + COMPLEMENT
        counters as the engine does (Engine.drop_shared_clocks).  Returns False to take the
        full step."""
        if self._winc_key.get(vcpu) != self._table_key(vcpu, pmu, o):
            return False
        if _bits(run) & ~int(o.tmask):
            return False  # a running counter's total was not computed
        tot = np.frombuffer(self.ffi.buffer(o.tot), dtype=np.int64)
        add = np.where(run, tot, 0)
        eng = pmu.engine
        if shared:
            eng.drop_shared_clocks(add, shared, clocks)
        if (add < 0).any():
            return False
        eng.update_derived()
        pos = add > 0
        if (pos & (eng.arm_cand | eng.force_cand)).any():
            return False
        new = pmu.counter + add.astype(np.uint64)
        if (new >= np.uint64(1 << 40)).any():
            return False
        pmu.counter[:] = new
        self.n_fast += 1
        return True

    @staticmethod
    def _sub(part, active, os_, colv, vals, shared: int = 0) -> Activity:
        """The activity of the clocks `part` (kind indices in clock order), the first `shared`
        of them shared with the sibling LP."""
        u, inv = np.unique(part, return_inverse=True)
        K = u.shape[0]
        count = np.bincount(inv, minlength=K).astype(np.float64)
        trans = np.zeros((K, K))
        if part.shape[0] > 1:
            np.add.at(trans, (inv[:-1], inv[1:]), 1.0)
        return Activity.from_arrays(count, active[u], os_[u], colv, vals[u], trans,
                                    int(inv[0]), int(inv[-1]), shared)

    # -- after an access or a deadline: next deadline, PMI, start ------------------------------

    def after(self, vcpu: int, pmu) -> None:
        eng = pmu.engine
        key = (pmu.config_version, eng.state_version)
        if self._idle_key.get(vcpu) == key:
            return  # nothing runs, no request: the values written last time still hold
        o = self._outs.get(vcpu) or self._out(vcpu)
        st = self._state(vcpu, pmu, key)
        # the next batch: its adjacent pairs only for an edge detector (C collects none
        # otherwise, threads=1), its totals only for the running counters
        o.nopairs = st["nopairs"]
        o.tmask = st["tmask"]
        o.lite = st["lite"]
        o.mem = st["mem"]
        o.wmem = st["wmem"]
        o.wfree = st["wfree"]
        if not self.started and st["any_run"]:
            self.started = True
            o.start = 1
        for t in range(self.threads):
            o.pmi[t] = st["levels"][t]
        if self.ht:  # the sibling drops a request from us that is no longer asserted (I8)
            so = self._out(vcpu ^ 1)
            for t in range(2):
                so.pmi[t] = st["levels"][t]
        if not st["any_run"]:
            o.budget = 0
            o.nwatch = 0
            o.tot_ok = -1
            if not any(st["levels"]):
                self._idle_key[vcpu] = key
            return
        self._idle_key.pop(vcpu, None)
        # the counter-dependent part: headrooms
        idx = st["idx"]
        b = 0
        if self.started and idx.size:
            head = np.where(st["arm_w"], 1.0, LIMIT - pmu.counter[idx].astype(np.float64))
            # an EDGE counter watched in its failing clocks: edges <= failing clocks + one
            # when the clock before the batch failed (_edge_by_failing)
            head -= st["edge_fail"] & ~pmu.edge_prev[idx]
            need = np.ceil(head / st["rate_b"])
            best = float(need.min())
            if self.ht:
                best = math.ceil(best / 2)
                head = np.ceil(head / 2)
            b = int(max(1, min(best, MAX_BUDGET)))
            if st["watch_ok"]:
                self._whead[vcpu][:idx.size] = head
        o.budget = b
        self._table(vcpu, pmu, o, st)
        o.nwatch = int(idx.size) if (b and st["watch_ok"]) else (-1 if b else 0)

    def _state(self, vcpu: int, pmu, key) -> dict:
        """Everything after() needs that depends only on the programming and OVF/arming."""
        hit = self._st_cache.get(vcpu)
        if hit is not None and hit[0] == key:
            return hit[1]
        eng = pmu.engine
        eng.update_derived()
        run = eng.running()
        ovf = pmu.ovf
        arm = run & ovf & eng.pmi_any & ~pmu.pmi_armed
        cand = run & ~ovf
        # a FORCE_OVF counter is watched event by event only while its next event changes
        # something: OVF 0 -> 1 (a candidate) or the PMI arming; with OVF set and the
        # request armed (or no OVF_PMI) it just counts (SDM 18.15.5.8).  A counter that no
        # line feeds (its ESCR selects nothing modelled) never counts, unless COMPARE with
        # COMPLEMENT passes its empty input every clock (SDM 18.15.5.2): no deadline for it.
        # With threads=2, only the lines of this vCPU's logical processor: a counter whose
        # ESCR selects the other LP's events only (T1 bits where this is LP 0) is the
        # sibling's to watch, its steps alone add to it
        fed = LINE_FED & LP_LINES[vcpu % 2] if self.ht else LINE_FED
        can_count = (eng.W[fed] > 0).any(axis=0) | (pmu.compare & pmu.complement)
        idx = np.flatnonzero((cand | arm) & can_count)
        # the most a counter can receive per clock under the clock model (feeder budget)
        W = eng.W[:, idx]
        rate = np.minimum(15.0, LINE_MAX @ (W > 0)) if idx.size else np.zeros(0)
        rate = np.where(pmu.compare[idx] | pmu.force_ovf[idx] | arm[idx], 1.0,
                        np.maximum(rate, 1.0))
        head1 = arm[idx] | pmu.force_ovf[idx]
        fail = self._edge_by_failing(pmu)
        st = {"any_run": bool(run.any()), "idx": idx, "arm_w": head1, "rate_b": rate,
              "levels": tuple(1 if pmu.pmi_request(t) else 0 for t in range(self.threads)),
              "watch_ok": 0 < idx.size <= self.lib.P4_NCOUNTERS,
              "exact": not bool(eng.edge_eff.any()),
              "wfree": _bits(self._order_free(pmu, run, arm, can_count) & can_count)
              if self.tight else 0,
              "edge_fail": fail[idx],
              "nopairs": 0 if (pmu.edge & pmu.compare).any() else 1,
              "tmask": _bits(run),
              "lite": self._level_wanted(pmu)}
        data = self._memory_counters(pmu, CM.DATA_FEATURES)
        fetch = self._memory_counters(pmu, CM.FETCH_FEATURES)
        code = self._memory_counters(pmu, CM.CODE_FEATURES)
        stores = self._memory_counters(pmu, CM.STORE_FEATURES)
        operands = self._memory_counters(pmu, CM.OPERAND_FEATURES)
        st["wmem"] = _bits(data | fetch | operands)
        st["mem"] = self._memory_wanted(pmu, data, fetch, code, stores, operands)
        self._st_cache[vcpu] = (key, st)
        return st

    @staticmethod
    def _order_free(pmu, run: np.ndarray, arm: np.ndarray, can_count: np.ndarray) -> np.ndarray:
        """The counters whose next state change a batch of any length steps exactly,
        wherever in it the change happens (docs/emulator.md, "Exactness"): a PMI arming
        (OVF already set), and the OVF 0 -> 1 of a FORCE_OVF counter (its arming is exact,
        SDM 18.15.5.8) that no stopped counter able to count waits on with CASCADE or the
        extended-cascade bit (a started counter's share would depend on the clock, SDM
        18.15.5.6)."""
        waits = np.zeros(T.NUM_COUNTERS, dtype=bool)
        stopped = ~run & can_count
        waits[pmu.alt[stopped & pmu.cascade]] = True
        waits[pmu.ext_src[stopped & pmu.ext_cascade]] = True
        return arm | (pmu.force_ovf & ~pmu.ovf & run & ~waits)

    def _edge_by_failing(self, pmu) -> np.ndarray:
        """The EDGE counters whose per-kind table column gives failing clocks, not passing
        ones: a rising edge (SDM 18.15.5.2, Fig. 18-46) needs a failing clock before it, so
        edges <= the batch's failing clocks + 1 if the clock before it failed.  Chosen for
        COMPLEMENT counters, whose idle clock (no event) passes: most clocks pass and few
        fail, where the passing-clock bound would send every block to Python.  One logical
        processor per core only (the sibling's clocks are not in the batch)."""
        if self.ht or not self.tight:
            return np.zeros(T.NUM_COUNTERS, dtype=bool)
        return pmu.engine.edge_eff & pmu.complement

    def _memory_counters(self, pmu, features=CM.MEMORY_FEATURES) -> np.ndarray:
        """The counters whose input reads one of the memory-side `features`
        (clockmodel.MEMORY_FEATURES, DATA_FEATURES or FETCH_FEATURES) under the tagging of
        either logical processor and CPL: memory outcomes change their increments
        (docs/memory-model.md)."""
        cls = set()
        for lp in range(self.threads):
            for os_ in (True, False):
                cls |= CM.memory_classes(self._tagging(pmu, lp, os_), features)
        if not cls:
            return np.zeros(T.NUM_COUNTERS, dtype=bool)
        c = np.fromiter(cls, dtype=np.int64)
        lines = (c[:, None] * 4 + np.arange(4)).ravel()
        return (pmu.engine.W[lines, :] != 0).any(axis=0)

    def _memory_wanted(self, pmu, data: np.ndarray, fetch: np.ndarray, code: np.ndarray,
                       stores: np.ndarray, operands: np.ndarray) -> int:
        """p4c_out.mem: P4_MEM_DATA if a counter that may count (enabled, or started by a
        cascade) reads a data-access event, | P4_MEM_FETCH if one reads an instruction-fetch
        (ITLB) event, | P4_MEM_CODE if one reads self-modifying-code clears or trace-cache
        misses (the code fetched looked up and recorded), | P4_MEM_SB if one reads the
        store buffers' replays (`code` and `stores` counters are among the `data` ones),
        | P4_MEM_FP if one reads the SSE input assists (the operands' values):
        what the plugin's memory level must feed the model; 0 nothing; P4_LITE_EITHER no
        counter may count (the level in force is kept).  With timing=memory every counter
        that may count wants the data part (its clocks depend on the loads' outcomes)."""
        en = pmu.enable | pmu.cascade | pmu.ext_cascade
        if not en.any():
            return int(self.lib.P4_LITE_EITHER)
        return (int(self.lib.P4_MEM_DATA) if (en & data).any() or self.memory_timing
                else 0) | \
            (int(self.lib.P4_MEM_FETCH) if (en & fetch).any() else 0) | \
            (int(self.lib.P4_MEM_CODE) if (en & code).any() else 0) | \
            (int(self.lib.P4_MEM_SB) if (en & stores).any() else 0) | \
            (int(self.lib.P4_MEM_FP) if (en & operands).any() else 0)

    def _level_wanted(self, pmu) -> int:
        """p4c_out.lite: 1 the outcome-free level may be installed, 0 the full level is
        needed, P4_LITE_EITHER no counter may count (the level in force is kept)."""
        if not self.ht and not (pmu.enable | pmu.cascade | pmu.ext_cascade).any():
            return int(self.lib.P4_LITE_EITHER)
        return 1 if self._outcome_free(pmu) else 0

    def _outcome_free(self, pmu) -> bool:
        """Do the enabled counters count the same whatever the branch outcomes are?  (No
        enabled counter selects a line that reads CM.OUTCOME_FEATURES, under either CPL's
        tagging, and none compares per clock.)  Every counter that may count without
        another MSR write is looked at: enabled ones (running or not) and those a CASCADE or
        extended-cascade bit starts when another overflows (SDM 18.15.5.5-6).  One logical
        processor per core only.  The plugin then may translate at its outcome-free level
        (plugin/flush.c)."""
        if self.ht:
            return False
        en = pmu.enable | pmu.cascade | pmu.ext_cascade
        if not en.any():
            return True
        if (pmu.compare & en).any():
            return False
        dep = set()
        for os_ in (True, False):
            dep |= CM.outcome_classes(self._tagging(pmu, 0, os_))
        if not dep:
            return True
        cls = np.fromiter(dep, dtype=np.int64)
        lines = (cls[:, None] * 4 + np.arange(4)).ravel()
        return not bool(np.count_nonzero(pmu.engine.W[np.ix_(lines, np.flatnonzero(en))]))

    def _table(self, vcpu: int, pmu, o, st) -> None:
        """The per-kind increment table for C (fold totals, fast_check), its watched-counter
        map and rates; rewritten only when it changes."""
        tkey, table = self._kind_incs(vcpu, pmu, o)
        o.tot_ok = 0 if st["exact"] else -1
        if self._winc.get(vcpu) is not table or \
                int(self.ffi.cast("uintptr_t", o.winc)) != table.ctypes.data:  # C switched it
            self._winc[vcpu] = table  # keep it alive: C reads it until the next Python call
            self._wgen[vcpu] = self._wgen.get(vcpu, 0) + 1
            o.winc = self.ffi.cast("int32_t *", table.ctypes.data)
            o.nkext = table.shape[0]
        self._winc_key[vcpu] = tkey
        self._table_nk[vcpu] = tkey[1]
        idx = st["idx"]
        # the rate of an arming counter is 1, of the others the table's largest increment:
        # keyed on the arming state too (an arming counter becomes a counting one again
        # with the same watched set when software clears OVF), and rewritten after the C
        # mirror wrote these fields
        wkey = (tkey, idx.tobytes(), st["arm_w"].tobytes())
        if st["watch_ok"] and self._wkey.get(vcpu) != wkey:
            self._wkey[vcpu] = wkey
            rate = np.maximum(1, table[:, idx].max(axis=0)) if table.shape[0] else \
                np.ones(idx.size, dtype=np.int64)
            rate = np.where(self._memory_counters(pmu)[idx],
                            np.where(pmu.compare[idx], 1, 15), rate)  # (any kind: a bound)
            rate = np.where(st["arm_w"], 1, rate)
            self._wrate[vcpu][:idx.size] = rate
            self._widx[vcpu][:idx.size] = idx

    # -- the C-side deadline check (deadline.c fast_check) -------------------------------------

    def _table_key(self, vcpu: int, pmu, o, nk: int | None = None):
        """What the per-kind increment table depends on: the programming (CCCR writes that
        only change OVF keep it), the kinds known, the LP and the other LP's state."""
        if nk is None:
            nk = self._table_nk.get(vcpu, -1)
        oth = (bool(o.other_active), bool(o.other_os)) if self.ht else (False, False)
        prog = self._prog_cache.get(id(pmu))
        if prog is None or prog[0] != pmu.config_version:
            prog = (pmu.config_version, (pmu.cccr_raw & ~np.uint64(1 << 31)).tobytes() +
                    pmu.escr_raw.tobytes() + self.pebs_key(pmu))
            self._prog_cache[id(pmu)] = prog
        return (prog[1], nk, vcpu % self.threads, oth)

    @staticmethod
    def pebs_key(pmu) -> bytes:
        """The replay-tagging MSRs, part of every programming (Tagging.replay)."""
        return np.array([pmu.pebs_enable, pmu.pebs_matrix_vert], dtype=np.uint64).tobytes()

    def programming_key(self, vcpu: int, pmu, o) -> bytes:
        """The programming a per-kind table is made for: the CCCRs without OVF and the ESCRs
        (plugin/programs.py registers programmings under it)."""
        return self._table_key(vcpu, pmu, o)[0]

    def current_table(self, vcpu: int) -> tuple[tuple, np.ndarray]:
        """(key, table) of the per-kind table handed to C last (p4c_out.winc)."""
        return self._winc_key[vcpu], self._winc[vcpu]

    def adopt_table(self, vcpu: int, key: tuple | None, table: np.ndarray | None) -> None:
        """C switched p4c_out.winc to `table` (made for `key`) while it served programming
        writes (plugin/programs.c); None: the table C uses is not known to be current, so the
        next batch's C totals are not trusted (Feeder._fast_add)."""
        if table is None:
            self._winc_key.pop(vcpu, None)
            return
        self._winc[vcpu] = table
        self._winc_key[vcpu] = key
        self._table_nk[vcpu] = key[1]

    def _kind_incs(self, vcpu: int, pmu, o) -> tuple[tuple, np.ndarray]:
        """(its key, the (2 * n_kinds, 18) per-clock increments of every known (kind, CPL)
        on this LP with the current programming): exact for counters without EDGE, the
        passing clocks (an upper bound of the edges) for EDGE counters, or their failing
        clocks (_edge_by_failing; the other bound).  Tables are kept
        per programming (a driver that multiplexes keeps coming back to the same few), and
        kinds keep appearing while a guest runs: when only new kinds came since a
        programming's table, and no EDGE counter makes rows depend on their neighbours, only
        their rows are computed and appended."""
        n = self.ffi.new("uint32_t *")
        self.lib.p4c_kinds(n)
        nk = int(n[0])
        key = self._table_key(vcpu, pmu, o, nk)
        cache = self._inc_cache.setdefault(vcpu, {})
        ck = (key[0],) + key[2:]
        hit = cache.pop(ck, None)
        if hit is not None and hit[0] == nk:
            table = hit[1]
        else:
            edge = bool(pmu.engine.edge_eff.any())
            start = hit[0] if hit is not None and not edge and hit[0] < nk else 0
            rows = self._increment_rows(vcpu, pmu, o, start, nk, edge)
            table = rows if start == 0 else np.concatenate((hit[1], rows))
        cache[ck] = (nk, table)  # the most recently used last
        if len(cache) > _TABLES_KEPT:
            del cache[next(iter(cache))]
        return key, table

    def _increment_rows(self, vcpu: int, pmu, o, k0: int, k1: int, edge: bool) -> np.ndarray:
        """The table's rows of kinds k0..k1-1 (both CPLs each: rows 2 k0 .. 2 k1 - 1)."""
        lp = vcpu % self.threads
        oth = (bool(o.other_active), bool(o.other_os)) if self.ht else (False, False)
        F = self._features(k1)[:k1]
        ext = np.arange(2 * k0, 2 * k1)
        K = ext.shape[0]
        kid, osf = ext >> 1, (ext & 1).astype(bool)
        cols, blocks = [], []
        for priv, sel in ((EV.OS, osf), (EV.USR, ~osf)):
            ids, M = CM.line_matrix(self._tagging(pmu, lp, priv == EV.OS), (lp, oth[0]))
            cols.append(ids * 4 + lp * 2 + priv)
            v = np.zeros((K, ids.shape[0]))
            v[sel] = F[kid[sel]] @ M
            blocks.append(v)
        active = np.zeros((K, 2), dtype=bool)
        os_ = np.zeros((K, 2), dtype=bool)
        active[:, lp] = True
        os_[:, lp] = osf
        if self.ht:
            active[:, 1 - lp], os_[:, 1 - lp] = oth
        # adjacent pairs only for an effective EDGE counter (a K x K matrix)
        chain = None
        if edge:
            chain = np.zeros((K, K)) if K < 2 else _chain(K)
        act = Activity.from_arrays(np.ones(K), active, os_, np.concatenate(cols),
                                   np.concatenate(blocks, axis=1), chain, 0, K - 1)
        pas, inc, _, _ = pmu.engine.increments(act)
        fail = self._edge_by_failing(pmu)
        if fail.any():
            inc[:, fail] = ~pas[:, fail]
        return np.ascontiguousarray(np.rint(inc), dtype=np.int32)

    # -- the C-side register mirror (plugin/mirror.c; docs/bridge.md "The register mirror") ---

    @staticmethod
    def mirror_rule(pmu) -> bool:
        """The programmings whose counting the C mirror does exactly (docs/bridge.md):
        one logical processor per core (no Hyper-Threading: nothing is shared with a sibling);
        no counter with CASCADE or the extended-cascade bit (a counter started by another's
        overflow, and the cascade-PMI erratum, need the engine's overflow ordering: SDM
        18.15.5.6/7); no FORCE_OVF; no EDGE with COMPARE (the edge detector depends on
        adjacent clocks, so the per-kind table is only an upper bound: SDM 18.15.5.2).
        COMPARE, THRESHOLD and COMPLEMENT without EDGE are per-clock functions of the clock
        kind and are exact in the per-kind table."""
        return not pmu.ht and not (pmu.cascade | pmu.ext_cascade | pmu.force_ovf |
                                   (pmu.edge & pmu.compare)).any()

    def _simple(self, vcpu: int, pmu) -> bool:
        hit = self._mrule.get(vcpu)
        if hit is None or hit[0] != pmu.config_version:
            hit = self._mrule[vcpu] = (pmu.config_version, self.mirror_rule(pmu))
        return hit[1]

    def _mview(self, vcpu: int) -> _MirrorView:
        mv = self._mv.get(vcpu)
        if mv is None:
            ffi = self.ffi
            m = self.lib.p4c_mirror(vcpu)

            def view(field, dtype):
                return np.frombuffer(ffi.buffer(getattr(m, field)), dtype=dtype)

            assert T.NUM_COUNTERS == self.lib.P4_NCOUNTERS == view("ctr", np.uint64).size
            m.ctr_limit = 1 << T.COUNTER_BITS
            m.ovf_mask = T.CCCR_FIELD["OVF"].mask
            view("ctr_msr", np.uint32)[:] = [c.counter_msr for c in T.COUNTERS]
            view("cccr_msr", np.uint32)[:] = [c.cccr_msr for c in T.COUNTERS]
            m.escr_event_bits = (T.ESCR_FIELD["EVENT_SELECT"].mask |
                                 T.ESCR_FIELD["EVENT_MASK"].mask)
            m.cccr_enable_bit = T.CCCR_FIELD["ENABLE"].mask
            m.cur = -1
            mv = self._mv[vcpu] = _MirrorView(
                m, view("ctr", np.uint64), view("cccr", np.uint64), view("ovf", np.uint8),
                view("armed", np.uint8), view("run", np.uint8), view("pmi", np.uint8),
                view("rate_b", np.int32), view("tmax", np.int32), view("ctr_fault", np.uint64),
                view("cccr_fault", np.uint64), view("escr", np.uint64))
        return mv

    def storage(self, core: int) -> dict[str, np.ndarray]:
        """The counter state of one core's PMU: numpy views of the C register file of the
        core's first vCPU (`struct p4c_mirror` ctr, cccr, ovf, armed), for
        `PMU(storage=...)`.  One copy of the state, seen by both languages; the mirror's
        `active` flag says which side may change it (docs/bridge.md)."""
        mv = self._mview(core * self.threads)
        return {"counter": mv.ctr, "cccr_raw": mv.cccr, "ovf": mv.ovf.view(np.bool_),
                "pmi_armed": mv.armed.view(np.bool_)}

    def enable_fast_path(self, vcpu: int, pmu) -> None:
        """After a Python call: let the C mirror serve this vCPU's accesses when the
        programming is simple (until `disable_fast_path`).  The counter state is shared
        already; what is written here is what C needs besides it (run set, rates, fault
        masks, the programming registered for programs.c)."""
        if not self.mirror_on or not self._simple(vcpu, pmu):
            return
        mv = self._mview(vcpu)
        if mv.ctr.ctypes.data != pmu.counter.ctypes.data:
            raise RuntimeError(f"vCPU {vcpu}: the PMU does not use the C register file's "
                               "storage (Bridge must build it with Feeder.storage)")
        m = mv.m
        table = self._winc.get(vcpu)
        o = self._outs.get(vcpu) or self._out(vcpu)
        key = (pmu.config_version, id(pmu), self._wgen.get(vcpu, 0))
        if mv.key != key:
            eng = pmu.engine
            eng.update_derived()
            run = eng.running()
            # Feeder._state's budget rate of a counter that is not arming
            rate = np.minimum(15.0, LINE_MAX @ (eng.W > 0))
            mv.rate_b[:] = np.where(pmu.compare | pmu.force_ovf, 1.0, np.maximum(rate, 1.0))
            # Feeder._table's wrate of a counting counter
            if table is not None and table.shape[0]:
                mv.tmax[:] = np.maximum(1, table.max(axis=0))
            else:
                mv.tmax[:] = 1
            mv.tmax[:] = np.where(self._memory_counters(pmu),
                                  np.where(pmu.compare, 1, 15), mv.tmax)
            mv.run[:] = run
            mv.pmi[:] = pmu.pmi_t0 if vcpu % self.threads == 0 else pmu.pmi_t1
            for n, c in enumerate(T.COUNTERS):
                mv.ctr_fault[n] = pmu.registers[c.counter_msr].fault_mask
                mv.cccr_fault[n] = pmu.registers[c.cccr_msr].fault_mask
            m.any_run = 1 if run.any() else 0
            mv.key = key
        m.nkext = o.nkext
        mv.changes_seen = int(m.state_changes)
        self._programs.hand_over(vcpu, pmu, mv, o)
        m.active = 1
        self.n_fast_on += 1

    def disable_fast_path(self, vcpu: int, pmu) -> None:
        """Before a Python call: the C mirror stops serving this vCPU.  The values it wrote
        are the PMU's already; if it changed OVF or the arming, the engine's derived vectors
        are rebuilt."""
        mv = self._mv.get(vcpu)
        if mv is None or not mv.m.active:
            return
        mv.m.active = 0
        self.n_fast_off += 1
        if int(mv.m.prog_changes) != mv.prog_seen:
            self._programs.take_back(vcpu, pmu, mv)
        if int(mv.m.state_changes) != mv.changes_seen:
            pmu.engine.note_state_change()
        # fast_check's rates were (re)written by C: write ours again at the next after()
        self._wkey.pop(vcpu, None)

    def mirror_vcpus(self) -> list[int]:
        return sorted(self._mv)

    def mirror_counts(self) -> tuple[int, int, int, int, int, int, int, int]:
        """(RDMSR, WRMSR, RDPMC, deadlines, overflow walks, declined, programming switches,
        declined for an overflow in a batch not in clock order) served by C."""
        t = [0] * 8
        for mv in self._mv.values():
            m = mv.m
            for i, x in enumerate((m.n_rdmsr, m.n_wrmsr, m.n_rdpmc, m.n_deadline, m.n_walks,
                                   m.n_declined, m.n_switches, m.n_unordered)):
                t[i] += int(x)
        return tuple(t)

    def mirror_discarded(self, vcpu: int) -> np.ndarray:
        """Per counter: the PMIs the C mirror's CCCR writes discarded (p4c_mirror.discarded)."""
        mv = self._mv.get(vcpu)
        if mv is None:
            return np.zeros(T.NUM_COUNTERS, dtype=np.int64)
        return np.frombuffer(self.ffi.buffer(mv.m.discarded), dtype=np.uint64).astype(np.int64)

    def summary(self) -> str:
        s = (f"# feeder: {self.n_batches} batches ({self.n_fast} added up in C), "
             f"{self.n_clocks} clocks, {self.n_bad} repaired")
        if self.mirror_on:
            r, w, p, d, k, x, sw, u = self.mirror_counts()
            s += (f"\n# mirror: {r} RDMSR, {w} WRMSR, {p} RDPMC, {d} deadlines served in C "
                  f"({k} overflow walks); {x} declined; fast path on {self.n_fast_on} "
                  f"times, off {self.n_fast_off} times; {sw} programming switches in C "
                  f"({self._programs.registered} programmings registered); {u} declined "
                  "for an overflow in a batch not in clock order")
        else:
            s += "\n# mirror: off"
        return s
