"""The feeder's timing model: branch predictor, clock schedule of a translated block, and the
mapping from a clock to the PMU's event lines (docs/guest-events.md, I3, I5, I6).

Pure Python, no QEMU import.  The C plugin implements the same predictor and schedule
(plugin/kinds.c, classify.c) from a header generated out of `PARAMS` and `insn_classes.TABLE` at
build
time (plugin/build.py): one table, one truth.  This module is the reference the tests replay.

Model (documented in docs/guest-events.md):

* A translated block execution costs one *bubble* clock (no retirement), then its
  instructions' uops retire in order, at most `retire_width` per clock; an instruction
  retires in the clock of its last uop; an instruction with latency L > 0 is preceded by L
  empty clocks; an *aligned* instruction (serialising, PMU access, ...) starts a new clock and
  the next instruction starts a new clock.
* A clock's lines are the sums over the instructions retiring in it (instructions, branch
  outcome, uop classes, loads/stores); uops_retired counts the uops retiring in that clock.
* A microcoded instruction (more than `ms_rom_above` uops, or a REP string instruction)
  counts one transfer to the microcode ROM in the clock it retires in, and its uops as ROM
  uops in the clocks they retire in; every other uop came from the trace cache: delivered
  from it, or, in a block execution whose fetch missed it (`tc_miss`), built into it: every
  clock of that execution after the bubble is in build mode (`tc_build`).
* A mispredicted branch is followed by `bp_penalty` clocks without non-bogus retirement; the
  first of them retire `bogus_insns` one-uop bogus instructions, `retire_width` per clock.
* Halted logical processors produce no clocks.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace

import numpy as np

from . import bus_requests as BR
from . import events as EV
from . import timing as TM

# --------------------------------------------------------------------------------------------
# Parameters (one table; the C header is generated from it)
# --------------------------------------------------------------------------------------------

PARAMS = {
    "retire_width": 3,  # NetBurst retires up to 3 uops per clock (SDM Vol. 1 2.2.2)
    "bubble": 1,  # clocks at the start of each translated block (fetch redirect)
    # clocks lost per mispredicted branch: the default core's (timing.CoreTiming; each
    # core's own through core_params)
    "bp_penalty": TM.CORE_TIMING[TM.DEFAULT_CORE].bp_penalty,
    "bogus_insns": 3,  # wrong-path 1-uop instructions retired as bogus per misprediction
    # Predictor tables: 0 = one entry per branch address (no capacity limit, no aliasing:
    # a branch's prediction depends only on its own history, which keeps counts of the same
    # code independent of unrelated code); N > 0 = N direct-mapped entries indexed by the
    # address mod N, without tags (aliasing, like a real 4096-entry BTB).
    "cond_entries": 0,  # conditional-branch 2-bit counters
    "btb_entries": 0,  # indirect-branch targets
    "rsb_depth": 16,  # return stack buffer depth
    # an instruction of more uops than this, and every REP string instruction, is delivered
    # by the microcode ROM, not the trace cache (Intel's Pentium 4 optimisation manual:
    # "instructions of more than 4 uops come from the microcode ROM")
    "ms_rom_above": 4,
    # timing=memory (docs/timing.md): 1 = a load's L2 hit, memory access and DTLB walk add
    # these clocks (the default core's; each core's own through core_params)
    "memory_timing": 0,
    "stall_l2": TM.CORE_TIMING[TM.DEFAULT_CORE].l2_load - TM.CORE_TIMING[TM.DEFAULT_CORE].l1_load,
    "stall_mem": TM.CORE_TIMING[TM.DEFAULT_CORE].mem_load - TM.CORE_TIMING[TM.DEFAULT_CORE].l1_load,
    "stall_walk": TM.CORE_TIMING[TM.DEFAULT_CORE].dtlb_walk,
    # ... and the bus queues hold a load's line read while it waits for memory: one active
    # entry in one of every `queue_update` of its stall clocks (timing.CoreTiming)
    "queue_update": TM.CORE_TIMING[TM.DEFAULT_CORE].queue_update,
}

# Branch kinds (IC.Insn.branch and the BR field of a clock)
BR_NONE, BR_COND, BR_JMP, BR_CALL, BR_CALL_IND, BR_JMP_IND, BR_RET, BR_FAR = range(8)
BR_NAMES = ("none", "cond", "jmp", "call", "call_ind", "jmp_ind", "ret", "far")
BR_CODE = {n: i for i, n in enumerate(BR_NAMES)}

# Fields of a clock (the C kind struct has the same order; all 0..255, lines cap at 15)
# What the memory model (memmodel.MemorySystem) says of the accesses of the instructions
# retiring in a clock: split loads / stores, DTLB misses (page walks) of loads / stores, L1
# load misses (lines), L2 reads of loads by result (lines: hit Exclusive, hit Modified,
# miss), L2 misses of stores' reads for ownership (lines), and the load / store accesses
# (uops) that missed L1, L2 or the DTLB (what replay tagging tags), self-modifying-code
# machine clears of stores into fetched code (smc), loads a buffered store could not forward
# to (partial overlap, another start) or that alias one modulo 64 KB, the modified lines
# written back to memory (wb, the bus model's writes), a bus read the bus queues hold in this
# clock (rd_active: a stall clock of a load's L2 miss, timing=memory); and the ITLB look-ups of
# the block's instruction fetch that hit and missed and its code lines that missed the trace
# cache (the code-line record), in the clock of its first instruction; and the clocks of a
# block execution whose fetch missed it: built, not delivered (tc_build, each of them).
# 0 in every clock of a block's schedule; a block execution's memory outcomes change the
# clocks they happen in (block_clocks's `mem`; the plugin's per-execution corrections,
# docs/memory-model.md).
DATA_FIELDS = ("split_ld", "split_st", "dtlb_ld", "dtlb_st", "l1_ld", "l2_hite", "l2_hitm",
               "l2_ld", "l2_rfo", "ld_l1miss", "ld_l2miss", "ld_dtlb", "st_dtlb", "smc",
               "ld_partial", "ld_unalgn", "ld_64k", "wb", "rd_active")
FETCH_FIELDS = ("itlb_hit", "itlb_miss", "tc_miss", "tc_build")
# ... and what an instruction's operand values make it request: an SSE input assist, an x87
# input assist (a denormal input), an x87 output assist (a denormal stored; fp_assist.py), in
# the clock it retires in
OPERAND_FIELDS = ("sse_assist", "x87_prea", "x87_poau")
MEMORY_FIELDS = DATA_FIELDS + FETCH_FIELDS + OPERAND_FIELDS
# A clock's memory fields saturate at 15: every line that reads them is a sum of them, capped
# at 15 per clock (four input lines, SDM Vol. 3B 18.15.5.2), so a larger value counts the same,
# and capping keeps the number of distinct clock kinds small (a REP string instruction's final
# clock adds up the outcomes of all its iterations)
MEMORY_FIELD_MAX = 15
# What silicon counts beyond the instructions themselves (docs/fidelity.md, "Counting rules"):
# instr_x, the extra counts of instr_retired (instructions it counts twice,
# insn_classes.OVERCOUNTED, and the return tails below); instr_cx and br_x, the extra counts
# of instr_completed and branch_retired (taken, predicted) of the return tails.
FIELDS = ("instr", "instr_ld", "instr_st", "instr_ldst", "uops", "ld", "st", "br", "taken",
          "misp", "x87", "psp", "pdp", "ssp", "sdp", "mmx64", "mmx128", "movst", "movld",
          "bogus_instr", "bogus_uops", "ms", "ms_uops", "instr_x", "instr_cx",
          "br_x") + MEMORY_FIELDS
NF = len(FIELDS)
FI = {n: i for i, n in enumerate(FIELDS)}
FP_FIELDS = ("x87", "psp", "pdp", "ssp", "sdp", "mmx64", "mmx128", "movst", "movld")


@dataclass
class Clock:
    """One clock of the schedule: field -> value (see FIELDS)."""
    f: list = field(default_factory=lambda: [0] * NF)

    def __getitem__(self, name):
        return self.f[FI[name]]

    def key(self):
        return tuple(self.f)

    def __repr__(self):
        return "Clock(" + ", ".join(f"{n}={v}" for n, v in zip(FIELDS, self.f) if v) + ")"


def memory_fields(outcome, store: bool) -> dict:
    """The clock fields (MEMORY_FIELDS) one access adds: `outcome` is a
    memmodel.Outcome of a load (store=False) or a store."""
    o = outcome
    if store:
        f = {"split_st": o.split, "dtlb_st": o.dtlb_miss, "l2_rfo": o.l2_miss,
             "st_dtlb": int(o.dtlb_miss > 0), "smc": o.smc, "wb": o.writeback}
    else:
        f = {"split_ld": o.split, "dtlb_ld": o.dtlb_miss, "l1_ld": o.l1_miss,
             "l2_hite": o.l2_hite, "l2_hitm": o.l2_hitm, "l2_ld": o.l2_miss,
             "ld_l1miss": int(o.l1_miss > 0), "ld_l2miss": int(o.l2_miss > 0),
             "ld_dtlb": int(o.dtlb_miss > 0), "ld_partial": o.partial,
             "ld_unalgn": o.unaligned, "ld_64k": o.alias64k, "wb": o.writeback}
    return {k: v for k, v in f.items() if v}


def fetch_fields(misses: int, lookups: int, tc_misses: int = 0) -> dict:
    """The clock fields (FETCH_FIELDS) of a block's instruction fetch: `lookups` ITLB
    look-ups (one per page its instructions span), `misses` of them missed
    (memmodel.MemorySystem.fetch); `tc_misses` code lines that missed the trace cache
    (memmodel.MemorySystem.fetch_code)."""
    return {k: v for k, v in (("itlb_hit", lookups - misses), ("itlb_miss", misses),
                              ("tc_miss", tc_misses)) if v}


# The return to user code after an exception taken from it (a page fault, #GP, #UD, #NM ...;
# not INT n, SYSCALL or SYSENTER, which retire): silicon counts one more instruction
# (instr_retired and instr_completed) and one more branch (branch_retired) at the user level.
# Weaver, Terpstra, Moore, ISPASS 2013, section IV: "the first time a page of memory is
# accessed it causes a page fault that counts as an extra instruction", and as an extra
# branch (Table V); their explanation: IRET's last uops retire after the return to CPL 3.
# The model gives the return one user-level clock of its own (those uops retire at CPL 3),
# right after the last clock of the user code the exception stopped -- or, for a fault before
# any instruction of its block ran (an instruction fetch's), after the execution before it.
RETURN_TAIL = {"instr_x": 1, "instr_cx": 1, "br_x": 1}


def return_tail_clock() -> Clock:
    """The clock of a return to user code after an exception (RETURN_TAIL)."""
    d = Clock()
    for name, v in RETURN_TAIL.items():
        d.f[FI[name]] = v
    return d


# --------------------------------------------------------------------------------------------
# Branch predictor (I5) -- the plugin's C implementation follows this code line by line
# --------------------------------------------------------------------------------------------


class Predictor:
    """Per-logical-processor predictor.  Addresses are linear addresses."""

    def __init__(self, params=None):
        p = dict(PARAMS, **(params or {}))
        self.ncond = p["cond_entries"]
        self.nbtb = p["btb_entries"]
        self.depth = p["rsb_depth"]
        self.cond_ctr: dict[int, int] = {}  # entry -> 2-bit counter (absent = invalid)
        self.btb_target: dict[int, int] = {}  # entry -> last target (absent = invalid)
        self.rsb: list[int] = []

    def _ci(self, addr: int) -> int:
        return addr % self.ncond if self.ncond else addr

    def _bi(self, addr: int) -> int:
        return addr % self.nbtb if self.nbtb else addr

    def cond(self, addr: int, target: int, taken: bool) -> bool:
        """A conditional branch at `addr` with taken-target `target` resolved `taken`:
        returns True if it was predicted correctly, and updates the entry."""
        i = self._ci(addr)
        ctr = self.cond_ctr.get(i)
        if ctr is None:
            pred = target < addr  # static: backward taken, forward not taken
            self.cond_ctr[i] = 2 if taken else 1
            return pred == taken
        pred = ctr >= 2
        self.cond_ctr[i] = min(3, ctr + 1) if taken else max(0, ctr - 1)
        return pred == taken

    def call(self, return_address: int) -> None:
        """Every near CALL (direct or indirect) pushes its return address."""
        if len(self.rsb) == self.depth:
            self.rsb.pop(0)
        self.rsb.append(return_address)

    def ret(self, target: int) -> bool:
        """A near RET to `target`: predicted iff the popped entry equals it."""
        if not self.rsb:
            return False
        return self.rsb.pop() == target

    def indirect(self, addr: int, target: int) -> bool:
        """An indirect near JMP/CALL at `addr` going to `target`."""
        i = self._bi(addr)
        ok = self.btb_target.get(i) == target
        self.btb_target[i] = target
        return ok

    def resolve(self, insn, target: int) -> tuple[bool, bool]:
        """(taken, predicted) for the branch `insn` (insn_classes.Insn) whose successor
        instruction is at `target` (linear).  Calls push their return address."""
        k = insn.branch
        if k == BR_COND:
            taken = target == insn.target and target != insn.next
            if insn.target == insn.next:
                taken = True  # a jump to the next instruction: taken either way
            return taken, self.cond(insn.addr, insn.target, taken)
        if k == BR_CALL:
            self.call(insn.next)
            return True, True
        if k == BR_CALL_IND:
            ok = self.indirect(insn.addr, target)
            self.call(insn.next)
            return True, ok
        if k == BR_JMP_IND:
            return True, self.indirect(insn.addr, target)
        if k == BR_RET:
            return True, self.ret(target)
        return True, True  # direct JMP, far transfers


# --------------------------------------------------------------------------------------------
# Clock schedule of one block (I6)
# --------------------------------------------------------------------------------------------


def microcoded(insn, params=None) -> bool:
    """Does the microcode ROM deliver this instruction's uops (PARAMS["ms_rom_above"])?"""
    p = dict(PARAMS, **(params or {}))
    return insn.rep or insn.uops > p["ms_rom_above"]


def _attrs(c: Clock, insn, ms: bool) -> None:
    f = c.f
    f[FI["instr"]] += 1
    f[FI["instr_x"]] += insn.extra_retired
    f[FI["ms"]] += ms
    ld, st = insn.loads > 0, insn.stores > 0
    f[FI["instr_ld"]] += ld
    f[FI["instr_st"]] += st
    f[FI["instr_ldst"]] += ld and st
    f[FI["ld"]] += insn.loads
    f[FI["st"]] += insn.stores
    for name in FP_FIELDS:
        f[FI[name]] += insn.fp.get(name, 0)


def schedule(insns, params=None) -> list[Clock]:
    """Clocks of the instructions `insns` (no bubble, no branch outcome, no penalty): the
    static part of a block's schedule.  The last instruction's clock is the last clock."""
    return schedule_retiring(insns, params)[0]


@functools.lru_cache(maxsize=4096)
def _bits(mask: int) -> tuple:
    """The set bits of a register mask (timing.reg_mask), lowest first."""
    out = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return tuple(out)


def self_loop(insns) -> bool:
    """Does this block end in a direct branch back to its own first instruction?"""
    return bool(insns) and insns[-1].branch in (BR_COND, BR_JMP) and \
        insns[-1].target == insns[0].addr


def schedule_retiring(insns, params=None) -> tuple[list[Clock], list[int]]:
    """schedule() and, per instruction, the index of the clock it retires in.  A block that
    loops on itself (self_loop) is scheduled with what its previous iteration left
    outstanding: its loop-carried dependencies (docs/timing.md)."""
    p = dict(PARAMS, **(params or {}))
    out, at, ready = _schedule(insns, p, {})
    if self_loop(insns):
        shift = len(out) + p["bubble"]
        carried = {r: c - shift for r, c in ready.items() if c > shift}
        if carried:
            out, at, _ = _schedule(insns, p, carried)
    return out, at


def _schedule(insns, p, ready: dict) -> tuple[list[Clock], list[int], dict]:
    """One pass: the clocks, the retirement clock per instruction, and the clock from which
    each tracked register's last value may be read (`ready`: register bit -> clock index,
    updated)."""
    width = p["retire_width"]
    ready = dict(ready)
    out: list[Clock] = []
    at: list[int] = []
    cur = None
    ms_above = p["ms_rom_above"]
    for insn in insns:
        ms = insn.rep or insn.uops > ms_above  # microcoded()
        need = max((ready.get(r, 0) for r in _bits(insn.reads)), default=0)
        if (insn.align or insn.stall or need > len(out)) and cur is not None:
            out.append(cur)
            cur = None
        issue = max(len(out), need)  # when its inputs are ready (its stall runs meanwhile)
        delay = max(insn.stall, issue - len(out))
        out.extend(Clock() for _ in range(delay))
        u = insn.uops
        while True:
            if cur is None:
                cur = Clock()
            take = min(width - cur.f[FI["uops"]], u)
            cur.f[FI["uops"]] += take
            if ms:
                cur.f[FI["ms_uops"]] += take
            u -= take
            if u == 0:
                break
            out.append(cur)
            cur = None
        _attrs(cur, insn, ms)
        at.append(len(out))
        for r in _bits(insn.writes):
            if insn.latency >= 2:
                ready[r] = issue + insn.latency
            else:
                ready.pop(r, None)
        if cur.f[FI["uops"]] == width or insn.align:
            out.append(cur)
            cur = None
    if cur is not None:
        out.append(cur)
    return out, at, ready


def branch_clock(c: Clock, br: int, taken: bool, predicted: bool) -> Clock:
    """The clock `c` in which a branch of kind `br` retires, with its outcome."""
    d = Clock(list(c.f))
    d.f[FI["br"]] = br
    d.f[FI["taken"]] = int(taken)
    d.f[FI["misp"]] = int(not predicted)
    return d


def penalty_clocks(params=None) -> list[Clock]:
    """The clocks after a mispredicted branch."""
    p = dict(PARAMS, **(params or {}))
    out = []
    b = p["bogus_insns"]
    for _ in range(p["bp_penalty"]):
        c = Clock()
        n = min(p["retire_width"], b)
        c.f[FI["bogus_instr"]] = n
        c.f[FI["bogus_uops"]] = n
        b -= n
        out.append(c)
    return out


def block_clocks(insns, outcome=None, params=None, mem=None) -> list[Clock]:
    """The complete clock sequence of one execution of a block whose instructions are
    `insns` (a list of insn_classes.Insn, in order).  `outcome` = (taken, predicted) for a
    block ending in a branch (Predictor.resolve gives it); None for a block that does not
    end in a branch (or to use "taken, predicted").  `mem`: {instruction index: {memory
    field: n}}, what this execution's accesses added (memory_fields), in the clock each
    instruction retires in."""
    p = dict(PARAMS, **(params or {}))
    stall = sum(memory_stall(fields, p) for fields in (mem or {}).values())
    active = sum(queue_active(fields, p) for fields in (mem or {}).values())
    # timing=memory: the stalls after the bubble, those in which the bus queues hold a read last
    clocks = [Clock() for _ in range(p["bubble"] + stall - active)] + \
        [active_clock() for _ in range(active)]
    body, at = schedule_retiring(insns, p)
    for i, fields in (mem or {}).items():
        c = body[at[i]]
        for name, v in fields.items():
            c.f[FI[name]] = min(MEMORY_FIELD_MAX, c.f[FI[name]] + v)
    if any(fields.get("tc_miss") for fields in (mem or {}).values()):
        for c in body:  # a trace-cache miss: the execution is built (its bubble is not)
            c.f[FI["tc_build"]] = 1
    last = insns[-1] if insns else None
    if last is not None and last.branch != BR_NONE:
        taken, predicted = outcome if outcome is not None else (True, True)
        body[-1] = branch_clock(body[-1], last.branch, taken, predicted)
        clocks += body
        if not predicted:
            clocks += penalty_clocks(p)
        return clocks
    return clocks + body


# --------------------------------------------------------------------------------------------
# From clocks to event lines (I3)
# --------------------------------------------------------------------------------------------

# Derived per-clock features (CPL/LP independent); lines are a linear map of these whose
# matrix depends on the tagging programming (front-end and execution tagging).
FEATURES = ("instr", "instr_ld", "instr_st", "instr_ldst", "uops", "ld", "st", "bogus_instr",
            "bogus_uops", "MMNP", "MMNM", "MMTP", "MMTM", "misp",
            "rbt_uncond", "rbt_cond", "rbt_call", "rbt_ret", "rbt_ind",
            "rmbt_uncond", "rmbt_cond", "rmbt_call", "rmbt_ret", "rmbt_ind",
            "running", "ms", "ms_uops", "tc_uops", "instr_x", "instr_cx", "br_x") + FP_FIELDS + \
    MEMORY_FIELDS + \
    ("dtlb_walks", "l2_rd_miss", "ld_mob", "tc_build_uops", "mode_d", "mode_b", "mode_i")
NFEAT = len(FEATURES)
FE = {n: i for i, n in enumerate(FEATURES)}


def features(fields: np.ndarray) -> np.ndarray:
    """(K, NF) clock fields -> (K, NFEAT) features."""
    f = np.asarray(fields, dtype=np.float64).reshape(-1, NF)
    K = f.shape[0]
    out = np.zeros((K, NFEAT))
    for n in ("instr", "instr_ld", "instr_st", "instr_ldst", "uops", "ld", "st", "bogus_instr",
              "bogus_uops", "ms", "ms_uops", "instr_x", "instr_cx", "br_x") + FP_FIELDS + \
            MEMORY_FIELDS:
        out[:, FE[n]] = f[:, FI[n]]
    out[:, FE["dtlb_walks"]] = f[:, FI["dtlb_ld"]] + f[:, FI["dtlb_st"]]
    out[:, FE["l2_rd_miss"]] = f[:, FI["l2_ld"]] + f[:, FI["l2_rfo"]]
    out[:, FE["ld_mob"]] = f[:, FI["ld_partial"]] + f[:, FI["ld_unalgn"]]
    # the trace cache's uops, delivered or built; the trace cache's mode in the clock: I
    # (inactive) while the microcode ROM delivers, else B in a built execution, else D
    build = f[:, FI["tc_build"]] > 0
    rom = f[:, FI["ms_uops"]] > 0
    tc = f[:, FI["uops"]] - f[:, FI["ms_uops"]]
    out[:, FE["tc_uops"]] = tc * ~build
    out[:, FE["tc_build_uops"]] = tc * build
    out[:, FE["mode_i"]] = rom
    out[:, FE["mode_b"]] = ~rom & build
    out[:, FE["mode_d"]] = ~rom & ~build
    br = f[:, FI["br"]]
    isbr = br != BR_NONE
    t = f[:, FI["taken"]] > 0
    m = f[:, FI["misp"]] > 0
    out[:, FE["MMNP"]] = isbr & ~t & ~m
    out[:, FE["MMNM"]] = isbr & ~t & m
    out[:, FE["MMTP"]] = isbr & t & ~m
    out[:, FE["MMTM"]] = isbr & t & m
    out[:, FE["misp"]] = isbr & m
    types = {"uncond": br == BR_JMP, "cond": br == BR_COND,
             "call": (br == BR_CALL) | (br == BR_CALL_IND), "ret": br == BR_RET,
             "ind": (br == BR_RET) | (br == BR_CALL_IND) | (br == BR_JMP_IND)}
    for k, sel in types.items():
        out[:, FE["rbt_" + k]] = sel
        out[:, FE["rmbt_" + k]] = sel & m
    out[:, FE["running"]] = 1.0
    return out


# FIRM-ESCR uop events that can be execution-tagged, and the feature each mask bit counts
UOP_EVENT_FEATURES = {
    ("x87_FP_uop", 15): "x87", ("packed_SP_uop", 15): "psp", ("packed_DP_uop", 15): "pdp",
    ("scalar_SP_uop", 15): "ssp", ("scalar_DP_uop", 15): "sdp", ("64bit_MMX_uop", 15): "mmx64",
    ("128bit_MMX_uop", 15): "mmx128", ("x87_SIMD_moves_uop", 3): "movst",
    ("x87_SIMD_moves_uop", 4): "movld",
}

# the bus queues' occupancy events (one count per active entry per clock) and the allocation
# event of the same queue and mask (SDM Table 19-28: "must be used together with")
ALLOCATION_OF = {"bsq_active_entries": "BSQ_allocation", "IOQ_active_entries": "IOQ_allocation"}
ACTIVE_EVENTS = tuple(ALLOCATION_OF)
# (event, mask bit name) -> feature, for the lines that do not depend on tagging
_DIRECT = {
    ("uops_retired", "NBOGUS"): "uops", ("uops_retired", "BOGUS"): "bogus_uops",
    ("instr_retired", "BOGUSNTAG"): "bogus_instr",
    ("branch_retired", "MMNP"): "MMNP", ("branch_retired", "MMNM"): "MMNM",
    ("branch_retired", "MMTP"): "MMTP", ("branch_retired", "MMTM"): "MMTM",
    ("mispred_branch_retired", "NBOGUS"): "misp",
    ("retired_branch_type", "UNCONDITIONAL"): "rbt_uncond",
    ("retired_branch_type", "CONDITIONAL"): "rbt_cond",
    ("retired_branch_type", "CALL"): "rbt_call", ("retired_branch_type", "RETURN"): "rbt_ret",
    ("retired_branch_type", "INDIRECT"): "rbt_ind",
    ("retired_mispred_branch_type", "UNCONDITIONAL"): "rmbt_uncond",
    ("retired_mispred_branch_type", "CONDITIONAL"): "rmbt_cond",
    ("retired_mispred_branch_type", "CALL"): "rmbt_call",
    ("retired_mispred_branch_type", "RETURN"): "rmbt_ret",
    ("retired_mispred_branch_type", "INDIRECT"): "rmbt_ind",
    ("global_power_events", "RUNNING"): "running",
    ("x87_FP_uop", "ALL"): "x87", ("packed_SP_uop", "ALL"): "psp",
    ("packed_DP_uop", "ALL"): "pdp", ("scalar_SP_uop", "ALL"): "ssp",
    ("scalar_DP_uop", "ALL"): "sdp", ("64bit_MMX_uop", "ALL"): "mmx64",
    ("128bit_MMX_uop", "ALL"): "mmx128", ("x87_SIMD_moves_uop", "ALLP0"): "movst",
    ("x87_SIMD_moves_uop", "ALLP2"): "movld",
    # instructions completed: this model has no re-started instructions, so they are the
    # instructions retired (models 0F_03, 0F_04, 0F_06 have the event)
    ("instr_completed", "NBOGUS"): "instr", ("instr_completed", "BOGUS"): "bogus_instr",
    # the front end: transfers to the microcode ROM, and the uops it writes into the uop
    # queue by source (at retirement, non-bogus only: the wrong path's uops are not
    # delivered in this model), from the trace cache as it delivers or builds
    ("tc_ms_xfer", "CISC"): "ms",
    # the trace cache's look-ups (the memory model's code-line record): a code line a block
    # fetch does not find is one fetch request of the branch-prediction unit that missed
    ("BPU_fetch_request", "TCMISS"): "tc_miss",
    ("uop_queue_writes", "FROM_TC_DELIVER"): "tc_uops",
    ("uop_queue_writes", "FROM_TC_BUILD"): "tc_build_uops",
    ("uop_queue_writes", "FROM_ROM"): "ms_uops",
    # the memory side (memmodel.MemorySystem, docs/memory-model.md), in the clock the
    # instruction retires in: split accesses, page walks, L2 reads by result ("read"
    # includes stores' reads for ownership)
    ("memory_complete", "LSC"): "split_ld", ("memory_complete", "SSC"): "split_st",
    ("load_port_replay", "SPLIT_LD"): "split_ld", ("store_port_replay", "SPLIT_ST"): "split_st",
    ("page_walk_type", "DTMISS"): "dtlb_walks", ("page_walk_type", "ITMISS"): "itlb_miss",
    ("ITLB_reference", "HIT"): "itlb_hit", ("ITLB_reference", "MISS"): "itlb_miss",
    ("BSQ_cache_reference", "RD_2ndL_HITE"): "l2_hite",
    ("BSQ_cache_reference", "RD_2ndL_HITM"): "l2_hitm",
    ("BSQ_cache_reference", "RD_2ndL_MISS"): "l2_rd_miss",
    # machine clears (SDM Table 19-30): self-modifying code only; a clear is modelled as one
    # clock (the storing instruction's), so CLEAR's clocks equal SMCLEAR's clears
    ("machine_clear", "CLEAR"): "smc", ("machine_clear", "SMCLEAR"): "smc",
    # the assists an instruction's operand values request (fp_assist.py)
    ("SSE_input_assist", "ALL"): "sse_assist", ("x87_assist", "PREA"): "x87_prea",
    ("x87_assist", "POAU"): "x87_poau",
    # the store buffers: loads replayed by the memory order buffer, 64 K aliasing cancels
    ("MOB_load_replay", "PARTIAL_DATA"): "ld_partial",
    ("MOB_load_replay", "UNALGN_ADDR"): "ld_unalgn",
    ("memory_cancel", "64K_CONF"): "ld_64k",
    # the bus model: a line read (a load's or a store's L2 miss) is data this processor
    # samples, a write-back data it drives; DRDY and DBSY each once per line transferred
    ("FSB_data_activity", "DRDY_OWN"): "l2_rd_miss",
    ("FSB_data_activity", "DBSY_OWN"): "l2_rd_miss",
    ("FSB_data_activity", "DRDY_DRV"): "wb", ("FSB_data_activity", "DBSY_DRV"): "wb",
    # the bus queues' allocations: one per request (bus_requests.REQUESTS), by its kind; the
    # mask selects requests by their attributes (engine: events.selected_classes) ...
    **{(event, r.name): r.feature for event in ("BSQ_allocation", "IOQ_allocation")
       for r in BR.REQUESTS},
    # ... and their occupancy per clock: the requests a load waits for (queue_active)
    **{(event, r.name): r.active for event in ACTIVE_EVENTS for r in BR.REQUESTS if r.active},
}


@dataclass(frozen=True)
class Tagging:
    """Tagging programming seen by one LP at one privilege level.

    tag_loads / tag_stores: front-end tagging (uop_type TAGLOADS / TAGSTORES on RAT_ESCR0/1
    with this LP's T-bit for this CPL).  exec_tags: feature name -> 4-bit tag value (the OR
    over the FIRM ESCRs that select that uop event with TAG_ENABLE and qualify this LP/CPL).
    replay: the features whose uops replay tagging tags (the metrics MSR_PEBS_ENABLE and
    MSR_PEBS_MATRIX_VERT select that this model drives: REPLAY_FEATURES)."""
    tag_loads: bool = False
    tag_stores: bool = False
    exec_tags: tuple = ()  # ((feature, tagbits), ...)
    replay: tuple = ()  # (feature, ...), sorted


NO_TAGGING = Tagging()

# Replay-tagging metrics (events.REPLAY_METRICS) the clock model drives, and the features
# whose uops they tag (SDM Table 19-33): a mispredicted branch's uop, loads that miss L1 or
# L2, loads and stores that miss the DTLB or split, loads the memory order buffer replays
# (the memory model's store buffers).
REPLAY_FEATURES = {
    "Tagged_mispred_branch": ("misp",),
    "1stL_cache_load_miss_retired": ("ld_l1miss",),
    "2ndL_cache_load_miss_retired": ("ld_l2miss",),
    "DTLB_load_miss_retired": ("ld_dtlb",),
    "DTLB_store_miss_retired": ("st_dtlb",),
    "DTLB_all_miss_retired": ("ld_dtlb", "st_dtlb"),
    "split_load_retired": ("split_ld",),
    "split_store_retired": ("split_st",),
    "MOB_load_replay_retired": ("ld_mob",),
}


def replay_tagging(pebs_enable: int, matrix_vert: int) -> tuple:
    """Tagging.replay for these MSR values (several metrics at once: the union of the
    features they tag; a uop two of them tag is counted once per feature)."""
    return tuple(sorted({f for m in EV.replay_metrics(pebs_enable, matrix_vert)
                         for f in REPLAY_FEATURES.get(m.name, ())}))


# TC_deliver_mode (SDM Table 19-28): each clock counts in the bit of the pair of the two logical
# processors' modes, LP 0's first: D deliver, B build, I inactive (halted, or the microcode ROM
# delivering).  A clock is fed in its own LP's batch, in which the other LP is shown inactive
# (no second LP, or halted) or active with no events: then delivering, the mode in which it
# adds nothing (guest-events I8).  PAIR = (own LP, other LP active).
SINGLE = (0, False)
PAIRS = ((0, False), (0, True), (1, False), (1, True))


def deliver_mode_bits(pair: tuple) -> dict:
    """{mode feature: TC_deliver_mode bit} for clocks of `pair` (none for I with I)."""
    lp, other = pair
    o = "D" if other else "I"
    out = {}
    for feat, m in (("mode_d", "D"), ("mode_b", "B"), ("mode_i", "I")):
        name = m + o if lp == 0 else o + m
        if name != "II":
            out[feat] = name
    return out


@functools.lru_cache(maxsize=256)
def line_matrix(tagging: Tagging = NO_TAGGING, pair: tuple = SINGLE
                ) -> tuple[np.ndarray, np.ndarray]:
    """(class ids[L], M[NFEAT, L]): the event-class lines of a clock are features @ M, for a
    clock of logical processor pair[0] with the other LP active (pair[1]) or not.  Cached per
    tagging state: treat the arrays as read-only."""
    cols: dict[int, np.ndarray] = {}

    def add(event, bit, feat, w=1.0):
        cid = EV.class_id(event, bit)
        v = cols.setdefault(cid, np.zeros(NFEAT))
        v[FE[feat]] += w

    for (event, bit), feat in _DIRECT.items():
        add(event, bit, feat)
    for feat, bit in deliver_mode_bits(pair).items():
        add("TC_deliver_mode", bit, feat)
    tl, ts = float(tagging.tag_loads), float(tagging.tag_stores)
    # tagged instructions = TL*instr_ld + TS*instr_st - TL*TS*instr_ldst
    add("instr_retired", "NBOGUSNTAG", "instr")
    add("instr_retired", "NBOGUSNTAG", "instr_x")  # counted twice, untagged (OVERCOUNTED)
    add("instr_completed", "NBOGUS", "instr_cx")  # return tails (RETURN_TAIL)
    add("branch_retired", "MMTP", "br_x")
    for feat, w in (("instr_ld", tl), ("instr_st", ts), ("instr_ldst", -tl * ts)):
        if w:
            add("instr_retired", "NBOGUSTAG", feat, w)
            add("instr_retired", "NBOGUSNTAG", feat, -w)
    if tl:
        add("front_end_event", "NBOGUS", "ld")
    if ts:
        add("front_end_event", "NBOGUS", "st")
    for feat, bits in tagging.exec_tags:
        for k in range(4):
            if bits >> k & 1:
                add("execution_event", f"NBOGUS{k}", feat)
    for feat in tagging.replay:  # replay-tagged uops at retirement (SDM 18.15.7)
        add("replay_event", "NBOGUS", feat)
    ids = np.array(sorted(cols), dtype=np.int64)
    M = np.stack([cols[i] for i in ids], axis=1) if len(ids) else np.zeros((NFEAT, 0))
    keep = np.abs(M).sum(axis=0) > 0
    ids, M = ids[keep], M[:, keep]
    ids.setflags(write=False)
    M.setflags(write=False)
    return ids, M


# Features that depend on a branch's outcome (taken, predicted) or on the clocks a
# misprediction adds (bogus retirement, then stalls: penalty_clocks): the direction bits,
# the misprediction flags, wrong-path retirement and the clock itself ("running").  A
# programming whose enabled counters read none of them counts the same whatever the outcomes
# are: the plugin may then translate without outcome callbacks (docs/guest-events.md, "The
# outcome-free level").
OUTCOME_FEATURES = ("bogus_instr", "bogus_uops", "MMNP", "MMNM", "MMTP", "MMTM", "misp",
                    "rmbt_uncond", "rmbt_cond", "rmbt_call", "rmbt_ret", "rmbt_ind", "running",
                    "mode_d")


@functools.lru_cache(maxsize=256)
def outcome_classes(tagging: Tagging = NO_TAGGING) -> frozenset:
    """The event-class ids whose line reads an outcome feature (OUTCOME_FEATURES) under
    this tagging (for a clock of any LP pair)."""
    return _reading(tagging, OUTCOME_FEATURES)


def _reading(tagging: Tagging, feats: tuple) -> frozenset:
    """The event-class ids whose line reads one of `feats` under `tagging`, for any PAIRS."""
    out = set()
    rows = [FE[f] for f in feats]
    for pair in PAIRS:
        ids, M = line_matrix(tagging, pair)
        out.update(int(i) for i in ids[(M[rows, :] != 0).any(axis=0)])
    return frozenset(out)


# Features that depend on the memory model's outcomes: a programming whose counters read
# none of them needs no memory instrumentation (the plugin's memory level,
# docs/memory-model.md)
MEMORY_FEATURES = MEMORY_FIELDS + ("dtlb_walks", "l2_rd_miss", "ld_mob", "tc_uops",
                                   "tc_build_uops", "mode_d", "mode_b")
# the features of data accesses and of instruction fetches' ITLB look-ups (the plugin feeds
# the model each kind only while a counter reads it)
DATA_FEATURES = DATA_FIELDS + ("dtlb_walks", "l2_rd_miss", "ld_mob", "tc_miss", "tc_build",
                               "tc_uops", "tc_build_uops", "mode_d", "mode_b")
FETCH_FEATURES = ("itlb_hit", "itlb_miss")
# ... and of the code-line record (the trace cache): stores into fetched code, and fetches
# that miss it; the model must record the code fetched, and see the stores (a store into
# recorded code drops its lines: they miss again), so these are also DATA_FEATURES
CODE_FEATURES = ("smc", "tc_miss", "tc_build", "tc_uops", "tc_build_uops", "mode_d", "mode_b")
# ... and of loads against the store buffers: the model must also record the stores
STORE_FEATURES = ("ld_partial", "ld_unalgn", "ld_64k", "ld_mob")
# ... and of the operands' values: the plugin reads the inputs of the SSE instructions
OPERAND_FEATURES = OPERAND_FIELDS
# ... and of the memory's time: what only timing=memory makes (its stall clocks)
TIMING_FEATURES = ("rd_active",)


@functools.lru_cache(maxsize=256)
def memory_classes(tagging: Tagging = NO_TAGGING,
                   features: tuple = MEMORY_FEATURES) -> frozenset:
    """The event-class ids whose line reads one of `features` (memory features: all of
    them, DATA_FEATURES or FETCH_FEATURES) under this tagging."""
    return _reading(tagging, features)


@functools.lru_cache(maxsize=1)
def modelled_classes() -> frozenset:
    """The event-class ids the clock model can ever drive: the lines of `line_matrix` under
    no tagging and under every tagging (tagged instructions, tagged loads/stores for
    front_end_event, execution_event's tag bits, replay tagging's metrics).  Every other
    class (bus, trace cache, memory ordering, assists) reads 0 in this emulator whatever the
    guest does."""
    every_tag = Tagging(True, True, tuple((f, 0xF) for f in sorted(
        set(UOP_EVENT_FEATURES.values()))),
        tuple(sorted({f for fs in REPLAY_FEATURES.values() for f in fs})))
    return frozenset(int(i) for t in (NO_TAGGING, every_tag) for pair in PAIRS
                     for i in line_matrix(t, pair)[0])


def modelled_requests(event: str) -> tuple:
    """The bus requests (bus_requests.REQUESTS) a bus-queue event can count here."""
    fed = modelled_classes()
    return tuple(r for r in BR.REQUESTS
                 if EV.CLASS_ID.get((event, EV.EVENT_BY_NAME[event].bit(r.name))) in fed)


def is_modelled(event: str, bit) -> bool:
    """Whether mask bit `bit` (name or number) of `event` can count in this emulator; a
    bus-queue event's mask bit, when it is part of the mask that selects a request the model
    makes (bus_requests.canonical_mask)."""
    e = EV.EVENT_BY_NAME[event]
    if not e.counts:
        return False
    b = e.bit(bit)
    if e.selects_requests and b < EV.REQUEST_BIT0:
        return any(BR.canonical_mask(event, r) >> b & 1 for r in modelled_requests(event))
    return EV.CLASS_ID[(e.name, b)] in modelled_classes()


def clock_lines(clock: Clock, tagging: Tagging = NO_TAGGING, pair: tuple = SINGLE) -> dict:
    """{(event, mask bit name): value} of one clock of LP pair[0] with the other LP active or
    not (pair[1]) (values capped at 15 by the engine)."""
    ids, M = line_matrix(tagging, pair)
    v = features(np.array([clock.f])) @ M
    out = {}
    for j, cid in enumerate(ids):
        if v[0, j]:
            c = EV.CLASSES[cid]
            out[(c.event, c.bit_name)] = int(round(v[0, j]))
    return out


def clock_kind(clock: Clock, lp: int = 0, os: bool = False, tagging: Tagging = NO_TAGGING,
               other_active: bool = False, other_os: bool = False):
    """The activity.ClockKind of one clock executed by logical processor `lp` at CPL 0 (`os`)
    or CPL 1-3; the other LP (HT only) is shown active/at CPL 0 as given, with no events."""
    from .activity import ClockKind
    lines = {(e, b, lp): min(15, v) for (e, b), v in
             clock_lines(clock, tagging, (lp, bool(other_active))).items() if v > 0}
    active = [False, False]
    osf = [False, False]
    active[lp], osf[lp] = True, bool(os)
    active[1 - lp], osf[1 - lp] = bool(other_active), bool(other_os)
    return ClockKind(active=tuple(active), os=tuple(osf), lines=lines)


def core_params(core: str, **kw) -> dict:
    """PARAMS for a CPU model's core (models.CpuModel.core): its misprediction penalty and
    memory stalls (timing.CORE_TIMING), with some entries replaced."""
    t = TM.CORE_TIMING[core]
    return with_params(**dict({"bp_penalty": t.bp_penalty, "stall_l2": t.l2_load - t.l1_load,
                               "stall_mem": t.mem_load - t.l1_load,
                               "stall_walk": t.dtlb_walk,
                               "queue_update": t.queue_update}, **kw))


def memory_stall(fields: dict, params=None) -> int:
    """timing=memory: the clocks the loads of one instruction add, from their memory fields
    (memory_fields): per L2 read that hit, per L2 miss, per DTLB walk.  Stores add none (they
    retire into the store buffer)."""
    p = dict(PARAMS, **(params or {}))
    if not p["memory_timing"]:
        return 0
    return (fields.get("l2_hite", 0) + fields.get("l2_hitm", 0)) * p["stall_l2"] + \
        fields.get("l2_ld", 0) * p["stall_mem"] + fields.get("dtlb_ld", 0) * p["stall_walk"]


def queue_active(fields: dict, params=None) -> int:
    """timing=memory: how many of the clocks a load's memory fields add (memory_stall) see a
    bus read active in the bus queues (bsq_active_entries, IOQ_active_entries): its L2 misses'
    memory latency, one update of the queues' counts every `queue_update` clocks."""
    p = dict(PARAMS, **(params or {}))
    if not p["memory_timing"]:
        return 0
    return fields.get("l2_ld", 0) * p["stall_mem"] // p["queue_update"]


def active_clock() -> Clock:
    """A stall clock in which the bus queues hold one read (queue_active)."""
    c = Clock()
    c.f[FI["rd_active"]] = 1
    return c


def with_params(**kw) -> dict:
    """PARAMS with some entries replaced (e.g. the plugin's bp_penalty option)."""
    unknown = set(kw) - set(PARAMS)
    if unknown:
        raise KeyError(f"unknown clock-model parameter(s): {', '.join(sorted(unknown))}")
    return dict(PARAMS, **kw)


__all__ = ["PARAMS", "Predictor", "Clock", "schedule", "block_clocks", "branch_clock",
           "penalty_clocks", "features", "line_matrix", "OUTCOME_FEATURES", "outcome_classes",
           "clock_lines", "clock_kind", "Tagging", "with_params", "replace", "modelled_classes",
           "is_modelled", "microcoded", "REPLAY_FEATURES", "replay_tagging", "MEMORY_FIELDS",
           "MEMORY_FEATURES", "memory_classes", "memory_fields", "schedule_retiring",
           "DATA_FIELDS", "FETCH_FIELDS", "DATA_FEATURES", "FETCH_FEATURES", "fetch_fields",
           "CODE_FEATURES", "STORE_FEATURES", "RETURN_TAIL", "return_tail_clock", "core_params",
           "self_loop", "memory_stall", "queue_active", "active_clock", "modelled_requests",
           "TIMING_FEATURES"]
