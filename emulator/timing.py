"""The timing model's tables, one per core: the pipeline and its misprediction penalty, the
load-to-use latency per memory level, page walks, and the latency and issue cost of the
instructions that take long (docs/timing.md; sources in docs/silicon-sources.md).

Pure data and small functions over it.  `insn_classes` puts each instruction's numbers into
its `Insn` (`latency`, `stall`, `reads`, `writes`), `clockmodel.schedule` turns them into
clocks, and plugin/build.py generates the C side's copy: one table, one truth.

Rules (docs/timing.md):

* **Result latency** (`latency`): a later instruction of the same block that reads a
  register the instruction writes retires no earlier than `latency` clocks after the clock
  the instruction started in (before its own stall).  A latency below 2 constrains nothing
  (NetBurst's double-speed ALUs give dependent simple operations back to back).  A load's
  written registers get the core's L1 load-to-use latency plus the operation's own.
* **Stall** (`stall`): empty clocks before the instruction, whatever it depends on: the
  occupancy of an unpipelined unit (a divider, the microcode of CPUID, RDTSC, fences) or a
  LOCKed read-modify-write, from the reciprocal throughput: ceil(throughput) - 1 (its own
  retirement clock is the last).
* **Loops**: a block that jumps back to its own first instruction is scheduled with what its
  previous iteration left outstanding (its loop-carried dependencies: a pointer chase).
* **Registers**: the general registers (by their 64-bit name), the flags, XMM, MMX and the
  x87 stack as one register (Capstone does not report x87 stack operands); RSP, RIP, the
  segment, control and debug registers and MXCSR are not tracked.

Numbers: Agner Fog, "Instruction tables" (2021-08-17), "Intel Pentium 4" (a model 2,
Northwood) and "Intel Pentium 4 w. EM64T (Prescott)" sections: latency and reciprocal
throughput of the row named in each comment (the 32-bit register form).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

CORES = ("northwood", "prescott")  # insn_classes.CORES, models.CpuModel.core
DEFAULT_CORE = "prescott"  # the core of models.DEFAULT_MODEL


@dataclass(frozen=True)
class CoreTiming:
    """One core's pipeline and memory latencies (core clocks)."""
    pipeline_stages: int
    bp_penalty: int  # clocks without retirement after a mispredicted branch
    l1_load: int  # load-to-use latency of a load that hits the L1 data cache
    l2_load: int  # ... that misses L1 and hits L2
    mem_load: int  # ... that misses L2
    dtlb_walk: int  # clocks a DTLB miss adds (page-table entries in the caches)
    lock: int  # issue cost of a LOCKed read-modify-write (XCHG with memory included)
    sources: str
    # clocks between two updates of the bus queues' active-entry counts (SDM Vol. 3B Table
    # 19-28, bsq_active_entries: every clock before model 3, every other clock on models 3
    # and 4; model 6 is the same core as 4): 1 Northwood, 2 Prescott
    queue_update: int = 1


CORE_TIMING = {
    # Willamette / Northwood (CPUID models 0-2): 20-stage pipeline (Intel Technology Journal
    # Q1 2001; Agner, microarchitecture, ch. 5); AIDA's dependent-load chains on a 2.8 GHz
    # Northwood: L1 2, L2 18-19 within 256 KB, memory 262-316 (its chipset's); XCHG r,m
    # "> 100" (Agner P4).  The DTLB walk is the Prescott-2M figure (no Northwood source).
    "northwood": CoreTiming(pipeline_stages=20, bp_penalty=20, l1_load=2, l2_load=19,
                            mem_load=290, dtlb_walk=36, lock=100,
                            sources="ITJ Q1 2001; Agner P4; AIDA F24/F29 MemLatX86"),
    # Prescott (models 3, 4, 6): 31 stages (Intel Technology Journal 8(1), 2004); AIDA on
    # Prescott-2M, Smithfield and Presler: L1 4, L2 26-28, memory 279-301; a DTLB miss with
    # cached page-table entries about 36 more (derived from AIDA F43 NewMemLat); XCHG r,m
    # "about 100" (Agner P4E).
    "prescott": CoreTiming(pipeline_stages=31, bp_penalty=31, l1_load=4, l2_load=27,
                           mem_load=290, dtlb_walk=36, lock=100,
                           sources="ITJ 8(1) 2004; Agner P4E; AIDA F43/F44/F62 MemLatX86",
                           queue_update=2),
}


def core_timing(core: str) -> CoreTiming:
    return CORE_TIMING[core]


# (latency, reciprocal throughput) per core, (northwood, prescott); None: Agner prints none
# (no constraint from it).  Keys are Capstone 5 instruction names.
_T = dict[str, tuple]
INSN_TIMING: _T = {}


def _rows(names: str, nw, p) -> None:
    for n in names.split():
        INSN_TIMING[n] = (nw, p)


_CC = "o no b ae e ne be a s ns p np l ge le g".split()
# ---- integer ----------------------------------------------------------------------------
_rows("imul", (14, 4.5), (10, 2.5))  # IMUL r32,r
_rows("mul", (16, 8), (11, None))  # MUL r32
_rows("div", (50, 23), (76, 34))  # DIV r32
_rows("idiv", (50, 23), (79, 34))  # IDIV r32
_rows("shl sal shr sar rol ror", (4, 1), (1, 0.5))  # SHL r,i; ROL r,i
_rows("rcl", (16, 15), (31, 31))  # RCL r,i
_rows("rcr", (16, 15), (25, 25))  # RCR r,i
_rows("shld shrd", (14, 14), (8, 7))  # SHLD r,r,i
_rows("adc sbb", (6, 6), (10, 10))  # ADC r,r
_rows("bt", (4, 1), (9, 9))  # BT r,r
_rows("btr bts btc", (6, 4), (9, 9))  # BTR r,r
_rows("bsf bsr", (4, 2), (16, 4))  # BSF r,r
_rows(" ".join("set" + c for c in _CC), (5, 1), (9, 1))  # SETcc r
_rows(" ".join("cmov" + c for c in _CC), (6, 3), (9.5, 3))  # CMOVcc r,r
_rows("bswap", (7, 2), (1, 1))  # BSWAP r
_rows("lahf", (4, 4), (4, None))
_rows("sahf", (None, None), (5, None))
_rows("cld", (52, 52), (None, 53))
_rows("std", (48, 48), (None, 53))
_rows("cli", (35, 35), (None, 52))
_rows("sti", (43, 43), (None, 64))
_rows("popf popfd popfq", (None, 52), (None, 70))
_rows("pushf pushfd pushfq", (None, 10), (None, 9))
# serialising: the microcode's whole cost is the stall.  CPUID: Agner gives 200-500 (P4) and
# 300-500 (P4E) clocks; the lower bound is taken.
_rows("cpuid", (None, 200), (None, 300))
_rows("rdtsc", (None, 80), (None, 100))
_rows("mfence", (None, 100), (None, 124))
_rows("lfence", (None, 38), (None, 50))
_rows("sfence", (None, 40), (None, 50))
_rows("pause", (None, None), (None, 50))
_rows("ldmxcsr", (98, 100), (None, 13))
_rows("fldcw", (None, 8), (None, 10))
# ---- x87 --------------------------------------------------------------------------------
_rows("fadd faddp fsub fsubp fsubr fsubrp", (5, 1), (6, 1))  # FADD r
_rows("fiadd fisub fisubr", (5, 2), (6, 2))  # FIADD m32
_rows("fmul fmulp", (7, 2), (8, 2))  # FMUL r
_rows("fimul", (7, 2), (8, 3))  # FIMUL m32
_rows("fdiv fdivp fdivr fdivrp fidiv fidivr fsqrt", (43, 43), (45, 45))  # FDIV r, FSQRT
_rows("fld fst fstp", (6, 1), (7, 1))  # FLD r, FST r
_rows("fild", (10, 1), (None, 2))  # FILD m32
_rows("fist fistp fisttp", (10, 2), (None, 2.5))  # FIST m32
_rows("fcom fcomp fcompp fucom fucomp fucompp", (None, None), (3, 1))
_rows("fcomi fcomip fucomi fucompi", (10, 3), (None, 3))  # FCOMI r
_rows("fnstsw", (11, 3), (None, 3))  # FNSTSW AX
_rows("frndint", (23, 15), (28, 16))
_rows("fprem fprem1", (212, 212), (220, 220))
_rows("fscale", (57, 66), (96, 96))
_rows("fxtract", (20, 20), (27, 27))
_rows("fsin", (180, 170), (200, 200))
_rows("fcos", (207, 207), (200, 200))
_rows("fsincos", (216, 211), (200, 200))
_rows("fptan", (230, 200), (270, 270))
_rows("fpatan", (187, 153), (250, 250))
_rows("f2xm1", (165, 63), (270, 270))
_rows("fyl2x", (200, 90), (170, 170))
_rows("fyl2xp1", (242, 220), (170, 170))
_rows("fnsave", (456, 420), (500, 500))
_rows("frstor", (528, 532), (570, 570))
_rows("fxsave fxsave64", (132, 96), (None, 160))
_rows("fxrstor fxrstor64", (208, 208), (None, 244))
_rows("fninit", (None, 172), (None, 200))
_rows("fnclex", (None, 96), (None, 120))
_rows("emms", (12, 12), (None, 12))
# ---- SSE / SSE2 -------------------------------------------------------------------------
_rows("addps addpd addss addsd subps subpd subss subsd maxps maxpd maxss maxsd minps minpd "
      "minss minsd cmpps cmppd cmpss cmpsd", (4, 2), (5, 2))  # ADDPS r,r; CMPccPS
_rows("mulps mulpd mulss mulsd", (6, 2), (7, 2))  # MULPS r,r
_rows("divss", (23, 23), (32, 23))
_rows("divps", (39, 39), (41, 41))
_rows("divsd", (38, 38), (40, 40))
_rows("divpd", (69, 69), (71, 71))
_rows("sqrtss", (23, 23), (32, 32))
_rows("sqrtps", (39, 39), (41, 41))
_rows("sqrtsd", (38, 38), (40, 40))
_rows("sqrtpd", (69, 69), (71, 71))
_rows("comiss comisd ucomiss ucomisd", (6, 3), (6, 3))
_rows("andps andpd andnps andnpd orps orpd xorps xorpd", (2, 2), (2, 2))
_rows("movaps movapd movups movupd movdqa", (6, 1), (7, 1))  # MOVAPS r,r
_rows("cvtsi2sd", (15, 6), (20, 5))
_rows("cvtsi2ss", (10, 3), (20, 4))
_rows("cvtsd2si cvttsd2si", (8, 2.5), (12, 4))
_rows("cvtss2si cvttss2si", (8, 2.5), (17, 4))
_rows("cvtsd2ss", (14, 6), (14, 6))
_rows("cvtss2sd", (10, 6), (8, 6))
_rows("cvtps2pd", (7, 4), (4, 4))
_rows("cvtpd2ps", (10, 2), (10, 2))
_rows("cvtdq2ps cvtps2dq cvttps2dq", (4, 2), (5, 2))
_rows("cvtdq2pd", (9, 4), (10, 4))
_rows("cvtpd2dq cvttpd2dq", (9, 2), (11, 2))
_rows("pmullw pmulhw pmulhuw pmaddwd pmuludq", (6, 1), (7, 1))
_rows("paddq psubq", (4, 2), (5, 2))
_rows("pshufd", (4, 2), (4, 2))
_rows("pmovmskb", (7, 3), (7, 3))


def _clocks(v) -> int:
    return 0 if v is None else int(math.ceil(v))


def table_timing(name: str, core: str) -> tuple[int, int]:
    """(latency, stall) in clocks of the operation `name` on `core`, from INSN_TIMING alone."""
    lat, tp = INSN_TIMING.get(name, ((None, None), (None, None)))[CORES.index(core)]
    return _clocks(lat), max(0, _clocks(tp) - 1)


def insn_timing(name: str, core: str, loads: int = 0, locked: bool = False) -> tuple[int, int]:
    """(result latency, stall) in clocks of instruction `name` on `core` with `loads` memory
    reads, LOCKed or not (the rules of this module's docstring)."""
    t = CORE_TIMING[core]
    latency, stall = table_timing(name, core)
    if loads:
        latency += t.l1_load
    if locked:
        stall = max(stall, t.lock - 1)
    return latency, stall


# ---- registers ----------------------------------------------------------------------------
GPRS = ("rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "r8", "r9", "r10", "r11", "r12",
        "r13", "r14", "r15")
_GPR_ALIASES = {
    "rax": "al ah ax eax", "rbx": "bl bh bx ebx", "rcx": "cl ch cx ecx",
    "rdx": "dl dh dx edx", "rsi": "sil si esi", "rdi": "dil di edi", "rbp": "bpl bp ebp",
}
REG_FLAGS = len(GPRS)  # the register bits: GPRS, then flags, XMM0-15, MM0-7, the x87 stack
REG_XMM = REG_FLAGS + 1
REG_MM = REG_XMM + 16
REG_X87 = REG_MM + 8
NREGS = REG_X87 + 1
X87_MASK = 1 << REG_X87


def reg_bit(name: str) -> int | None:
    """The tracked register a Capstone register name belongs to (its bit), or None."""
    n = name.lower()
    for i, g in enumerate(GPRS):
        if n == g or n in _GPR_ALIASES.get(g, "").split():
            return i
        if g.startswith("r") and g[1:].isdigit() and n in (g + "d", g + "w", g + "b"):
            return i
    if n in ("eflags", "rflags", "flags"):
        return REG_FLAGS
    for prefix, base, count in (("xmm", REG_XMM, 16), ("ymm", REG_XMM, 16),
                                ("zmm", REG_XMM, 16), ("mm", REG_MM, 8)):
        if n.startswith(prefix) and n[len(prefix):].isdigit():
            return base + int(n[len(prefix):]) % count
    if n.startswith("st(") or n in ("st0", "fpsw"):
        return REG_X87
    return None


def reg_mask(names) -> int:
    """The bit mask of the tracked registers among Capstone register names."""
    m = 0
    for n in names:
        b = reg_bit(n)
        if b is not None:
            m |= 1 << b
    return m


def x87_masks(cls: str, name: str, loads: int, stores: int) -> tuple[int, int]:
    """(reads, writes) of the x87 stack register by an x87 instruction of class `cls`:
    arithmetic reads and writes it; a load (FLD m) writes it; a store (FST m) reads it; a
    register move (FLD st, FCMOV) both; FXCH neither (renamed, no latency)."""
    if name == "fxch":
        return 0, 0
    if cls == "x87":
        return X87_MASK, X87_MASK
    if cls == "x87move":
        if stores:
            return X87_MASK, 0
        if loads:
            return 0, X87_MASK
        return X87_MASK, X87_MASK
    return 0, 0


def c_tables() -> str:
    """The C declarations of the per-core constants (plugin/build.py)."""
    rows = ",\n".join("    {%d, %d, %d, %d, %d, %d, %d} /* %s */" % (
        t.bp_penalty, t.l1_load, t.l2_load, t.mem_load, t.dtlb_walk, t.lock, t.queue_update, c)
        for c, t in CORE_TIMING.items())
    return ("/* per core: bp_penalty, l1_load, l2_load, mem_load, dtlb_walk, lock, "
            "queue_update (p4pmu.emulator.timing) */\n"
            f"static const unsigned short p4_core_timing[{len(CORE_TIMING)}][7] = {{\n"
            f"{rows}\n}};\n#define P4_NREGS {NREGS}\n#define P4_REG_X87 {REG_X87}\n")


def c_reg_table(names) -> str:
    """The C table of the tracked Capstone register names (sorted) and their bits."""
    rows = sorted((n, reg_bit(n)) for n in set(names) if n and reg_bit(n) is not None)
    cells = ",\n".join(f'    {{"{n}", {b}}}' for n, b in rows)
    return ("struct p4_reg_bit { const char *name; unsigned char bit; };\n"
            f"#define P4_REG_NAMES {len(rows)}\n"
            f"static const struct p4_reg_bit p4_reg_bits[P4_REG_NAMES] = {{\n{cells}\n}};\n")
