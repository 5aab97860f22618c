"""Expected counts for the events guests' loops, from the documented models only
(docs/guest-events.md I2-I6: `p4pmu.emulator.insn_classes`, `p4pmu.emulator.clockmodel`,
the emulator's PMU).  Nothing here is a number taken from a run.

Two levels:

* `LoopModel.lines(trace)`: per-instruction sums (I3) -- instructions, uops, branch kinds, FP
  classes, tagged instructions; and, with the predictor replayed (I5), taken/not taken x
  predicted/mispredicted and the bogus instructions.
* `LoopModel.pmu_counts(setup, trace, ring)`: the exact clock schedule (I6,
  `CM.block_clocks`) turned into an `Activity` and fed to a `PMU` programmed like the guest
  -- which also gives filtered counts (threshold, complement, edge), clocks and
  global_power_events.

Differences of two loop lengths cancel everything outside the loop; `delta_*` compute them.
The predictor's state when a measured loop starts is not known (other code ran before, and
entries alias mod 4096), so every expectation that depends on it is computed from several
different starting states; if those disagree the measurement is ill-posed and the test says
so instead of guessing (`StateDependent`).
"""
from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass

import numpy as np

from . import loops as L

BRANCH_TYPE_BITS = {  # docs/guest-events.md I3, retired_branch_type / retired_mispred_...
    "cond": ("CONDITIONAL",),
    "jmp": ("UNCONDITIONAL",),
    "call": ("CALL",),
    "call_ind": ("CALL", "INDIRECT"),
    "ret": ("RETURN", "INDIRECT"),
    "jmp_ind": ("INDIRECT",),
}


class StateDependent(AssertionError):
    """The expected value depends on predictor state the test cannot know."""


def _models():
    try:
        from p4pmu.emulator import clockmodel as CM
        from p4pmu.emulator import insn_classes as IC
    except ImportError as e:  # a missing delivery stage: fail, never skip
        raise AssertionError(
            "the guest-activity model is not there yet (docs/guest-events.md I2: "
            f"p4pmu.emulator.clockmodel / insn_classes): {e}") from None
    return CM, IC


@dataclass(frozen=True)
class Outcome:
    step: L.Step
    predicted: bool


class LoopModel:
    def __init__(self, elf: str, bits: int, core: str | None = None):
        """core: the timing core whose latencies classify the instructions (timing.py;
        None: the default model's)."""
        self.img = L.image(str(elf))
        self.bits = bits
        self.core = core
        self._ic: dict[int, object] = {}
        self._traces: dict = {}
        self._memo: dict = {}

    # -- per instruction -------------------------------------------------------------------

    def ic(self, insn: L.Insn):
        """The model's classification of one instruction (I4)."""
        got = self._ic.get(insn.addr)
        if got is None:
            CM, IC = _models()
            res = IC.classify(insn.raw, insn.addr, self.bits, *(() if self.core is None
                                                                 else (self.core,)))
            if len(res) != 1:
                raise AssertionError(f"insn_classes.classify split {insn.text} at "
                                     f"0x{insn.addr:x} into {len(res)} instructions")
            got = self._ic[insn.addr] = res[0]
        return got

    def trace(self, loop: str, n: int) -> list[L.Step]:
        key = (loop, n)
        t = self._traces.get(key)
        if t is None:
            t = self._traces[key] = self.img.trace(loop, n)
        return t

    def cached(self, key, fn):
        """Memoise fn() under key (traces are immutable, so are their sums)."""
        if key not in self._memo:
            self._memo[key] = fn()
        return self._memo[key]

    def lines(self, trace: list[L.Step]) -> Counter:
        """Predictor-independent per-instruction sums, keyed 'event.BIT' (I3)."""
        c: Counter = Counter()
        for s in trace:
            i = self.ic(s.insn)
            # tagging: see lines_tagged; an instruction silicon counts twice is counted
            # again untagged (insn_classes.OVERCOUNTED)
            c["instr_retired.NBOGUSNTAG"] += 1 + i.extra_retired
            c["instr_completed.NBOGUS"] += 1
            c["uops_retired.NBOGUS"] += i.uops
            ms = int(_models()[0].microcoded(i))
            c["tc_ms_xfer.CISC"] += ms
            c["uop_queue_writes.FROM_ROM" if ms else "uop_queue_writes.FROM_TC_DELIVER"] += \
                i.uops
            if s.branch:
                c["branch_retired.ANY"] += 1
                c["branch_retired.TAKEN" if s.taken else "branch_retired.NOTTAKEN"] += 1
                for b in BRANCH_TYPE_BITS[s.branch]:
                    c[f"retired_branch_type.{b}"] += 1
            c.update(fp_lines(i))
        return c

    # -- predictor -------------------------------------------------------------------------

    def outcomes(self, trace: list[L.Step], predictor) -> list[Outcome]:
        """Replay the reference predictor (I5) over the trace's branches."""
        out = []
        for s in trace:
            if not s.branch:
                continue
            a, nxt = s.addr, s.addr + s.insn.size
            if s.branch == "cond":
                p = predictor.cond(a, s.target, s.taken)
            elif s.branch in ("jmp", "far"):
                p = True
            elif s.branch == "call":
                predictor.call(nxt)
                p = True
            elif s.branch == "call_ind":
                p = predictor.indirect(a, s.target)
                predictor.call(nxt)
            elif s.branch == "jmp_ind":
                p = predictor.indirect(a, s.target)
            elif s.branch == "ret":
                # the loop function's own final RET goes back to the caller: target unknown
                # (the same in every run of the loop, so a constant stands for it)
                p = predictor.ret(s.target if s.target is not None else 0)
            else:
                raise AssertionError(f"branch kind {s.branch}")
            out.append(Outcome(s, bool(p)))
        return out

    def random_predictor(self, trace: list[L.Step], seed: int):
        """A reference predictor whose entries for this trace's branches were trained with
        random outcomes first (seed 0: the reset state)."""
        CM, _ = _models()
        p = CM.Predictor()
        if seed == 0:
            return p
        rng = random.Random(seed)
        # the loop's distinct branches (the same set for every length of the same loop)
        sites = sorted({(s.addr, s.branch, s.target or 0) for s in trace if s.branch})
        for _ in range(rng.randrange(1, 6)):
            for addr, kind, target in sites:
                if kind == "cond":
                    p.cond(addr, target, rng.random() < 0.5)
                elif kind in ("jmp_ind", "call_ind"):
                    p.indirect(addr, rng.randrange(1 << 20))
        for _ in range(rng.randrange(0, 20)):
            p.call(rng.randrange(1 << 20))
        return p

    def branch_lines(self, trace: list[L.Step], predictor) -> Counter:
        """branch_retired MMNP/MMNM/MMTP/MMTM, mispred_branch_retired, retired_mispred_
        branch_type, bogus instructions/uops (I3, I5) for one start state."""
        CM, _ = _models()
        c: Counter = Counter()
        for o in self.outcomes(trace, predictor):
            s = o.step
            bit = ("MMT" if s.taken else "MMN") + ("P" if o.predicted else "M")
            c[f"branch_retired.{bit}"] += 1
            if not o.predicted:
                c["mispred_branch_retired.NBOGUS"] += 1
                for b in BRANCH_TYPE_BITS[s.branch]:
                    c[f"retired_mispred_branch_type.{b}"] += 1
                c["instr_retired.BOGUSNTAG"] += CM.PARAMS["bogus_insns"]
                c["uops_retired.BOGUS"] += CM.PARAMS["bogus_insns"]
        return c

    def delta_branch_lines(self, loop: str, n1: int, n2: int, seeds=range(8)) -> Counter:
        """branch_lines(trace n2) - branch_lines(trace n1), from the same start state; the
        same for every start state tried, or StateDependent."""
        t1, t2 = self.trace(loop, n1), self.trace(loop, n2)
        got = None
        for seed in seeds:
            d = Counter(self.branch_lines(t2, self.random_predictor(t2, seed)))
            d.subtract(self.branch_lines(t1, self.random_predictor(t1, seed)))
            d = Counter({k: v for k, v in d.items() if v})
            if got is None:
                got = d
            elif got != d:
                raise StateDependent(f"loop {loop}: the expected branch outcomes of "
                                     f"{n2} - {n1} iterations depend on the predictor's "
                                     f"start state ({dict(got)} vs {dict(d)} with seed {seed})")
        return got

    def delta_lines(self, loop: str, n1: int, n2: int) -> Counter:
        d = Counter(self.lines(self.trace(loop, n2)))
        d.subtract(self.lines(self.trace(loop, n1)))
        return d


# --------------------------------------------------------------------------------------------
# expected value of one counter of a Plan setup


def _escr_fields(value: int) -> dict:
    from p4pmu.emulator import tables as T
    return {name: f.get(value) for name, f in T.ESCR_FIELD.items()}


def _t_ok(fields: dict, ring: int, lp: int = 0) -> bool:
    if lp == 0:
        return bool(fields["T0_OS"] if ring == 0 else fields["T0_USR"])
    return bool(fields["T1_OS"] if ring == 0 else fields["T1_USR"])


class Tagging:
    """Front-end (uop_type on RAT_ESCR0/1) and execution (FIRM_ESCR0/1 tag enable) tagging
    of a setup's ESCR images, for instructions of LP `lp` at `ring` (I3)."""

    def __init__(self, escr_images: dict[str, int], ring: int, lp: int = 0):
        from p4pmu.emulator import events as E
        self.loads = self.stores = False
        self.exec_tags: dict[str, int] = {}  # "event.ALL" class -> tag value bits
        for name, v in escr_images.items():
            f = _escr_fields(v)
            if name in ("MSR_RAT_ESCR0", "MSR_RAT_ESCR1") and f["EVENT_SELECT"] == 0x02:
                if _t_ok(f, ring, lp):
                    ev = E.EVENT_BY_NAME["uop_type"]
                    if f["EVENT_MASK"] & (1 << ev.bit("TAGLOADS")):
                        self.loads = True
                    if f["EVENT_MASK"] & (1 << ev.bit("TAGSTORES")):
                        self.stores = True
            if name in ("MSR_FIRM_ESCR0", "MSR_FIRM_ESCR1") and f["TAG_ENABLE"]:
                ev = E.event_for(name, f["EVENT_SELECT"])
                if ev is not None and _t_ok(f, ring, lp):
                    for k, bit in ev.mask.items():
                        if f["EVENT_MASK"] & (1 << k):
                            key = f"{ev.name}.{bit}"
                            self.exec_tags[key] = self.exec_tags.get(key, 0) | f["TAG_VALUE"]


# insn_classes.Insn.fp keys (clock fields) -> the event mask bit each one drives (I3 table)
FP_EVENT = {"x87": "x87_FP_uop.ALL", "psp": "packed_SP_uop.ALL", "pdp": "packed_DP_uop.ALL",
            "ssp": "scalar_SP_uop.ALL", "sdp": "scalar_DP_uop.ALL",
            "mmx64": "64bit_MMX_uop.ALL", "mmx128": "128bit_MMX_uop.ALL",
            "movst": "x87_SIMD_moves_uop.ALLP0", "movld": "x87_SIMD_moves_uop.ALLP2"}


def fp_lines(ic_insn) -> dict[str, int]:
    """The FP/SIMD class uops of one classified instruction, keyed 'event.BIT' (I3/I4)."""
    out: dict[str, int] = {}
    for k, v in (ic_insn.fp or {}).items():
        key = FP_EVENT[k]
        out[key] = out.get(key, 0) + v
    return out


def tagged_lines(model: LoopModel, trace, tg: Tagging) -> Counter:
    c: Counter = Counter()
    for s in trace:
        i = model.ic(s.insn)
        tagged_uops = (i.loads if tg.loads else 0) + (i.stores if tg.stores else 0)
        if tagged_uops:
            c["instr_retired.NBOGUSTAG"] += 1
            c["front_end_event.NBOGUS"] += tagged_uops
        for cls, k in fp_lines(i).items():
            tv = tg.exec_tags.get(cls, 0)
            for b in range(4):
                if tv & (1 << b):
                    c[f"execution_event.NBOGUS{b}"] += k
    return c


def _sum_over(model: LoopModel, trace, fn) -> Counter:
    c: Counter = Counter()
    for s in trace:
        c.update(fn(model.ic(s.insn)))
    return c


def _diff(a: Counter, b: Counter) -> Counter:
    d = Counter(a)
    d.subtract(b)
    return d


_ALL_BRANCH_BITS = {"MMNP", "MMNM", "MMTP", "MMTM"}


def _replay_mispred(setup) -> bool:
    """Does the setup's MSR_PEBS_ENABLE / MSR_PEBS_MATRIX_VERT select the tagged
    mispredicted-branch metric (PEBS_ENABLE bits 15, 16 and 24, MATRIX_VERT bit 4)?"""
    w = dict(setup.msr_writes)
    pebs, vert = w.get(0x3F1, 0), w.get(0x3F2, 0)
    return pebs & 0x0101_8000 == 0x0101_8000 and bool(vert & 0x10)


def expect_delta(model: LoopModel, setup, ctr, loop: str, ring: int, n1: int, n2: int,
                 lp: int = 0) -> int:
    """Expected difference of counter `ctr` of Plan setup `setup` between loop lengths n2 and
    n1 run at `ring` by logical processor `lp`.  Uses the predictor only when the counter's
    bits need it (mispredicted/predicted splits, bogus instructions)."""
    from p4pmu.emulator import events as E
    ev = E.EVENT_BY_NAME[ctr.event]
    if ev.thread == "TI":
        # thread independent: OSen/USRen over both T-bit pairs (docs/guest-events.md I3)
        ok = (ctr.os or ctr.t1_os) if ring == 0 else (ctr.usr or ctr.t1_usr)
    else:
        ok = ctr.qualified(ring, lp)
    if not ok:
        return 0
    t1, t2 = model.trace(loop, n1), model.trace(loop, n2)
    tg = Tagging(setup.escr_images(), ring, lp)
    tkey = (tg.loads, tg.stores, tuple(sorted(tg.exec_tags.items())))
    lines = model.cached(("lines", loop, n1, n2),
                         lambda: _diff(model.lines(t2), model.lines(t1)))
    tl = model.cached(("tagged", loop, n1, n2, tkey),
                      lambda: _diff(tagged_lines(model, t2, tg), tagged_lines(model, t1, tg)))
    fp = model.cached(("fp", loop, n1, n2), lambda: _diff(_sum_over(model, t2, fp_lines),
                                                          _sum_over(model, t1, fp_lines)))
    bits = set(ctr.bits)
    ev_name = ctr.event
    if ev_name == "branch_retired":
        taken, nottaken = {"MMTP", "MMTM"}, {"MMNP", "MMNM"}
        if all(bits >= half or not (bits & half) for half in (taken, nottaken)):
            # whole taken / not-taken halves: no predictor needed
            return (lines["branch_retired.TAKEN"] if bits >= taken else 0) + \
                (lines["branch_retired.NOTTAKEN"] if bits >= nottaken else 0)
    need_pred = ev_name in ("branch_retired", "mispred_branch_retired",
                            "retired_mispred_branch_type") or \
        (ev_name == "instr_retired" and "BOGUSNTAG" in bits) or \
        (ev_name == "instr_completed" and "BOGUS" in bits) or \
        ev_name == "replay_event" or \
        (ev_name == "uops_retired" and "BOGUS" in bits)
    bl = model.cached(("branch", loop, n1, n2),
                      lambda: model.delta_branch_lines(loop, n1, n2)) if need_pred else Counter()
    total = 0
    for b in bits:
        key = f"{ev_name}.{b}"
        if key == "instr_retired.NBOGUSNTAG":
            total += lines[key] - tl["instr_retired.NBOGUSTAG"]
        elif key in ("instr_retired.NBOGUSTAG", "front_end_event.NBOGUS") or \
                ev_name == "execution_event":
            total += tl[key]
        elif key in ("instr_retired.BOGUSTAG", "front_end_event.BOGUS"):
            total += 0  # I3: wrong-path instructions are untagged
        elif ev_name.endswith("_uop"):
            total += fp[key]
        elif ev_name in ("branch_retired", "mispred_branch_retired",
                         "retired_mispred_branch_type") or \
                key in ("instr_retired.BOGUSNTAG", "uops_retired.BOGUS"):
            total += bl[key]
        elif key == "replay_event.NBOGUS":
            # replay tagging (SDM Table 19-33): of its metrics only Tagged_mispred_branch
            # has a model here, tagging the mispredicted branches
            total += bl["mispred_branch_retired.NBOGUS"] if _replay_mispred(setup) else 0
        elif key == "replay_event.BOGUS":
            total += 0  # wrong-path uops are not tagged in this model
        elif key == "instr_completed.BOGUS":
            total += bl["instr_retired.BOGUSNTAG"]  # no re-started instructions: the same
        elif ev_name in ("instr_retired", "uops_retired", "retired_branch_type",
                         "instr_completed", "tc_ms_xfer", "uop_queue_writes"):
            # (uop_queue_writes.FROM_TC_BUILD: 0, these loops fit in the trace cache)
            total += lines[key]
        else:
            raise AssertionError(f"no expectation rule for {key}")
    return total


# --------------------------------------------------------------------------------------------
# the full model: clock schedule -> Activity -> PMU (I6)


def blocks_of(trace: list[L.Step]) -> list[list[L.Step]]:
    """The translated blocks the trace executes: QEMU ends a block after every branch (I6);
    the loops have no other block end inside them (no page crossing: checked by a test)."""
    out, cur = [], []
    for s in trace:
        cur.append(s)
        if s.branch:
            out.append(cur)
            cur = []
    if cur:
        out.append(cur)
    return out


def _cm_tagging(tg: Tagging):
    CM, _ = _models()
    inv = {v: k for k, v in FP_EVENT.items()}
    return CM.Tagging(tag_loads=tg.loads, tag_stores=tg.stores,
                      exec_tags=tuple(sorted((inv[k], v) for k, v in tg.exec_tags.items()
                                             if k in inv)))


def program_pmu(setup, model_key: str = "0F_04", ht: bool = False):
    """A fresh emulator PMU programmed like the guest programs `setup` (counters 0,
    enabled)."""
    from p4pmu.emulator.models import get_model
    from p4pmu.emulator.pmu import PMU

    from . import evscript as S
    pmu = PMU(get_model(model_key), ht=ht)
    for name, v in setup.escr_images().items():
        pmu.wrmsr(0, S.escr_msr(name), v)
    for c in setup.counters:
        pmu.wrmsr(0, S.counter_msr(c.n), 0)
        pmu.wrmsr(0, S.cccr_msr(c.n), c.cccr_value(True))
    return pmu


class ClockOracle:
    """Counts of a setup's counters over one loop trace, through the documented clock model
    and the emulator's PMU."""

    def __init__(self, model: LoopModel, params: dict | None = None, mem=None,
                 fetch_hits: bool = False):
        """mem: {instruction address: {clock field: n}}, the memory-model outcomes every
        execution of that instruction has (clockmodel.MEMORY_FIELDS; loops whose outcomes do
        not depend on the memory model's state, e.g. split accesses).  fetch_hits: every
        block execution's fetch is one ITLB look-up that hits (a loop within one page, whose
        page is in the ITLB), in its first instruction's clock."""
        self.m = model
        CM, _ = _models()
        self.params = CM.with_params(**(params or {}))
        self.mem = mem or {}
        self.fetch = CM.fetch_fields(0, 1) if fetch_hits else {}
        self._kinds: dict = {}
        self._blocks: dict = {}
        self._rows: dict = {}

    def block_clocks(self, trace: list[L.Step], predictor) -> list[tuple[list, list]]:
        """[(the steps of a block, its clocks)] for the blocks of the trace (I6)."""
        CM, _ = _models()
        out = []
        for blk in blocks_of(trace):
            insns = [self.m.ic(s.insn) for s in blk]
            last = blk[-1]
            outcome = None
            if last.branch:
                (o,) = self.m.outcomes([last], predictor)
                outcome = (last.taken, o.predicted)
            # the same block with the same outcome has the same clocks (its memory fields
            # are per address): scheduled once (the clocks are not modified by callers)
            key = (blk[0].addr, len(blk), outcome)
            cl = self._blocks.get(key)
            if cl is None:
                mem = {i: dict(self.mem[s.addr]) for i, s in enumerate(blk)
                       if s.addr in self.mem}
                for k, v in self.fetch.items():
                    mem.setdefault(0, {})[k] = mem.get(0, {}).get(k, 0) + v
                cl = self._blocks[key] = CM.block_clocks(insns, outcome, self.params, mem)
            out.append((blk, cl))
        return out

    def clocks(self, trace: list[L.Step], predictor) -> list:
        return [c for _, cl in self.block_clocks(trace, predictor) for c in cl]

    def kind_sequence(self, blocks, ring: int, lp: int, tagging):
        """(distinct clock kinds, the row of each clock in order) of block_clocks' output: a
        block's clock list is one object for all its executions (block_clocks), so each is
        turned into rows once and the sequence is put together with numpy."""
        CM, _ = _models()
        # per (ring, lp, tagging), kept across calls: the kinds met so far, their rows, and
        # id(clock list) -> (the list, kept alive; its rows)
        kinds, index, rows_of = self._rows.setdefault((ring, lp, tagging), ([], {}, {}))

        def row(c) -> int:
            key = (c.key(), ring, lp, tagging)
            k = self._kinds.get(key)
            if k is None:
                k = self._kinds[key] = CM.clock_kind(c, lp=lp, os=ring == 0, tagging=tagging)
            kk = k.key()
            if kk not in index:
                index[kk] = len(kinds)
                kinds.append(k)
            return index[kk]

        parts = []
        for _blk, cl in blocks:
            hit = rows_of.get(id(cl))
            if hit is None or hit[0] is not cl:
                hit = rows_of[id(cl)] = (cl, np.array([row(c) for c in cl], dtype=np.int64))
            parts.append(hit[1])
        return list(kinds), (np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64))

    def counts(self, setup, trace, ring: int, predictor, lp: int = 0,
               model_key: str = "0F_04") -> dict[int, int]:
        from p4pmu.emulator.activity import Activity

        from . import evscript as S
        tagging = _cm_tagging(Tagging(setup.escr_images(), ring, lp))
        w = dict(setup.msr_writes)  # replay tagging (MSR_PEBS_ENABLE, MSR_PEBS_MATRIX_VERT)
        CM, _ = _models()
        tagging = CM.replace(tagging, replay=CM.replay_tagging(w.get(0x3F1, 0), w.get(0x3F2, 0)))
        kinds, seq = self.kind_sequence(self.block_clocks(trace, predictor), ring, lp, tagging)
        pmu = program_pmu(setup, model_key, ht=lp == 1)
        pmu.advance(Activity.from_sequence(kinds, seq))
        return {c.n: pmu.rdmsr(0, S.counter_msr(c.n)) for c in setup.counters}

    def delta(self, setup, loop: str, ring: int, n1: int, n2: int, seeds=range(6),
              lp: int = 0, model_key: str = "0F_04") -> dict[int, int]:
        """counts(n2) - counts(n1) from the same predictor start state; the same for every
        start state tried, or StateDependent."""
        t1, t2 = self.m.trace(loop, n1), self.m.trace(loop, n2)
        got = None
        for seed in seeds:
            a = self.counts(setup, t2, ring, self.m.random_predictor(t2, seed), lp, model_key)
            b = self.counts(setup, t1, ring, self.m.random_predictor(t1, seed), lp, model_key)
            d = {k: a[k] - b[k] for k in a}
            if got is None:
                got = d
            elif d != got:
                raise StateDependent(f"loop {loop}: expected counts of {n2} - {n1} iterations "
                                     f"depend on the predictor's start state: {got} vs {d}")
        return got


def oracle_mismatches(plan, setups, out, oracle: ClockOracle, loop: str) -> tuple[list, list]:
    """(the rows that differ, all rows): every counter of `setups` at every ring of `plan`,
    the guest's count (plan.delta of its output `out`) against the clock oracle's, for
    `loop`'s n2 - n1 iterations."""
    n1, n2 = plan.ns
    bad, rows = [], []
    for st in setups:
        for ring in plan.rings:
            want = oracle.delta(st, loop, ring, n1, n2, seeds=range(4))
            for c in st.counters:
                got = plan.delta(out, st.name, loop, ring, c.n)
                row = (f"  {st.name} ring {ring} counter {c.n:>2} {c.event}/"
                       f"{'/'.join(c.bits)} cmp={int(c.compare)} cpl={int(c.complement)} "
                       f"thr={c.threshold} edge={int(c.edge)}: guest {got}, model {want[c.n]}")
                rows.append(row)
                if got != want[c.n]:
                    bad.append(row)
    return bad, rows


# --------------------------------------------------------------------------------------------
# ring-3 instruction stream and where a PMI lands (I7)


def user_stream(model: LoopModel, loop: str, n: int) -> list[L.Step]:
    """Every instruction executed at CPL 3 by `loop NAME n u` (rt_call_user): the ring-3
    trampoline up to its indirect CALL of the loop, the loop, the trampoline's INT 80h."""
    img = model.img
    a = img.sym("user_call_tramp")
    pre = []
    while True:
        i = img.insn(a)
        if i.mnemonic == "call":
            pre.append(L.Step(i, "call_ind", True, img.sym(f"loop_{loop}")))
            break
        pre.append(L.Step(i))
        a += i.size
    int80 = img.insn(a + i.size)
    assert int80.mnemonic == "int", int80
    return pre + model.trace(loop, n) + [L.Step(int80, "far", True, None)]


def pmi_landings(model: LoopModel, stream: list[L.Step], first: int,
                 period: int | None = None) -> list[tuple[int, int]]:
    """Where the PMIs of a counter that counts every instruction of `stream` land (I7):
    [(IP of the interrupted instruction, counter value in the handler)].

    The counter starts at -(first - 1): it wraps (OVF) in the clock of the (first-1)th event;
    the request rises in the next clock that counts (clock granularity: events of the wrap
    clock are simultaneous with it); the interrupt is taken at the entry of the block after
    the one in which the request rose, before that block runs.  With `period`, the handler
    (another CPL: not counted) clears OVF and reloads -(period - 1), and counting goes on at
    that block; without, only the first interrupt is given."""
    out: list[tuple[int, int]] = []
    cnt, ovf, armed = -(first - 1), False, False
    for blk, clocks in stream_blocks(model, stream):
        if armed:
            out.append((blk[0].addr, cnt))
            if period is None:
                return out
            cnt, ovf, armed = -(period - 1), False, False
        for c in clocks:
            inc = c["instr"]
            if not inc:
                continue
            if ovf:
                armed = True
            if cnt < 0 <= cnt + inc:
                ovf = True
            cnt += inc
    if period is None:
        raise AssertionError(f"no interrupt within the stream for the {first}th event")
    return out


def pmi_landing(model: LoopModel, stream: list[L.Step], nth: int) -> tuple[int, int]:
    """The first interrupt of a counter preset to -(nth - 1): see pmi_landings."""
    return pmi_landings(model, stream, nth)[0]


def overflow_split(model: LoopModel, streams: list[list[L.Step]], nth: int,
                   what: str = "instr") -> tuple[int, int]:
    """For counters that see the instructions of `streams` (run one after the other, e.g.
    ring-3 loops, each its own blocks), with a counter X overflowing on the nth instruction:
    (instructions in clocks up to and including X's overflow clock, `what` -- 'instr' or
    'br' -- in the clocks after it).  A counter started by that overflow counts from the
    next clock (emulator D6), so these are what it misses and what it sees."""
    CM, _ = _models()
    oracle = ClockOracle(model)
    clocks = []
    for st in streams:
        clocks += oracle.clocks(st, model.random_predictor(st, 0))
    cum = 0
    for i, c in enumerate(clocks):
        cum += c["instr"]
        if cum >= nth:
            after = sum((c2["instr"] if what == "instr" else int(c2["br"] != CM.BR_NONE))
                        for c2 in clocks[i + 1:])
            return cum, after
    raise AssertionError(f"fewer than {nth} instructions in the streams")


def stream_blocks(model: LoopModel, stream: list[L.Step]) -> list[tuple[list, list]]:
    """The blocks of an instruction stream with their clocks (predictor from its reset
    state: only misprediction penalty clocks depend on it, and they retire nothing)."""
    return ClockOracle(model).block_clocks(stream, model.random_predictor(stream, 0))
