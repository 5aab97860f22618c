"""Instruction classes for the feeder: uops, event classes, latency, branch kind, per
instruction (docs/guest-events.md, I3/I4).

One declarative table keyed by Capstone 5 instruction names (`cs_insn_name`).  plugin/build.py
turns it into the C header the plugin classifies with at translation time (every Capstone x86
instruction id gets a row); `classify()` below applies the same per-encoding rules with
Capstone's Python binding, for tests and tools.  The C rules in plugin/classify.c
(`classify_insn`) mirror `_classify_one` line by line.

Model of a NetBurst instruction (sources: Intel's optimisation manual for the Pentium 4,
"trace cache delivers up to 3 uops per clock, instructions of more than 4 uops come from the
microcode ROM"; store = store-address + store-data uop; numbers are this model's, documented
here, not measurements):

    uops = the measured total of the instruction's form on the model's core (uop_table:
           Agner Fog's instruction tables, "northwood" or "prescott", CpuModel.core); the
           form is what its explicit memory operand does: none, read, written, both;
    otherwise the generic rule
    uops = op_uops + loads + 2 * stores
      op_uops   from the table (MOVE rows: only when no memory operand is involved: a load is
                1 uop, a store 2, a register move op_uops);
      loads     memory operands read (+1 for implicit loads: POP, RET, LEAVE, ...);
      stores    memory operands written (+1 for implicit stores: PUSH, CALL, ...).
    REP string instructions: uop_table.REP_UOPS's base once + its per-iteration uops (in
    tenths, rounded per execution) x iterations, else 2 + (1 + loads + 2 * stores) per
    iteration; iterations are dynamic (counted by the plugin).

Classes (Capstone's access flags are used for memory operands, with the table's overrides
where Capstone marks x87 stores as reads):

    x87       x87 arithmetic (x87_FP_uop: "excludes loads, stores and register moves")
    x87move   FLD/FST/FILD/FXCH/...: loads -> x87_SIMD_moves ALLP2, stores and register
              moves -> ALLP0
    psp pdp ssp sdp   SSE/SSE2 FP arithmetic by suffix (ps/pd/ss/sd); their loads -> ALLP2
    simdint   integer SIMD: 64bit_MMX_uop on MMX registers, 128bit_MMX_uop on XMM registers
    simdmove  MOVAPS/MOVDQA/MOVQ/...: like x87move
"""
from __future__ import annotations

from dataclasses import dataclass, field

from . import timing as TM
from . import uop_table as UT
from .clockmodel import (
    BR_CALL,
    BR_CALL_IND,
    BR_CODE,
    BR_COND,
    BR_FAR,
    BR_JMP,
    BR_JMP_IND,
    BR_NONE,
    BR_RET,
)

# Row flags
MOVE = 1  # op_uops only when no memory operand
ALIGN = 2  # starts a new clock and ends its clock (serialising, microcoded, PMU access)
NOMEM = 4  # memory operand is only an address (LEA, NOP m, ...)
STORE = 8  # every memory operand is written (Capstone marks some x87 stores as read)
ILOAD = 16  # one implicit load (POP, RET, LEAVE, IRET...)
ISTORE = 32  # one implicit store (PUSH, CALL, ENTER...)
STRING = 64  # string instruction (REP-able)
HLT = 128  # halts the logical processor
LOAD = 256  # every memory operand is read only (Capstone marks FRSTOR's as written)

CLASSES = ("none", "x87", "x87move", "psp", "pdp", "ssp", "sdp", "simdint", "simdmove")
CL = {n: i for i, n in enumerate(CLASSES)}


@dataclass(frozen=True)
class Row:
    op_uops: int = 1
    cls: str = "none"
    flags: int = 0
    branch: str = "none"  # none, cond, jmp (direct or indirect by operand), call, ret, far


def _rows(names, row):
    return {n: row for n in names.split()}


# ---- integer -------------------------------------------------------------------------------
TABLE: dict[str, Row] = {}
TABLE.update(_rows("mov movzx movsx movsxd movabs xchg", Row(1, flags=MOVE)))
TABLE.update(_rows("lea", Row(1, flags=NOMEM)))
TABLE.update(_rows("nop", Row(1, flags=NOMEM)))
TABLE.update(_rows("prefetchnta prefetcht0 prefetcht1 prefetcht2 prefetch prefetchw",
                   Row(0)))
TABLE.update(_rows("push", Row(1, flags=ISTORE)))
TABLE.update(_rows("pop", Row(1, flags=ILOAD)))
TABLE.update(_rows("pushal pushaw", Row(2, flags=ISTORE | ALIGN)))
TABLE.update(_rows("popal popaw", Row(2, flags=ILOAD | ALIGN)))
TABLE.update(_rows("pushf pushfd pushfq", Row(2, flags=ISTORE)))
TABLE.update(_rows("popf popfd popfq", Row(6, flags=ILOAD | ALIGN)))
TABLE.update(_rows("leave", Row(1, flags=ILOAD)))
TABLE.update(_rows("enter", Row(10, flags=ISTORE | ALIGN)))
TABLE.update(_rows("mul imul", Row(1)))
TABLE.update(_rows("div idiv", Row(4)))
TABLE.update(_rows("cmpxchg xadd", Row(3)))
TABLE.update(_rows("cmpxchg8b cmpxchg16b", Row(10, flags=ALIGN)))
TABLE.update(_rows("bswap cwd cdq cqo cbw cwde cdqe", Row(1)))
TABLE.update(_rows("daa das aaa aas aam aad xlatb bound", Row(4, flags=ALIGN)))
TABLE.update(_rows("rdtsc rdtscp", Row(8, flags=ALIGN)))
TABLE.update(_rows("cpuid", Row(30, flags=ALIGN)))
TABLE.update(_rows("rdmsr wrmsr rdpmc", Row(10, flags=ALIGN)))
TABLE.update(_rows("in insb insw insd out outsb outsw outsd", Row(3, flags=ALIGN)))
TABLE.update(_rows("cli sti clts lgdt lidt lldt ltr sgdt sidt sldt str lmsw smsw invlpg "
                   "invd wbinvd lar lsl verr verw swapgs", Row(6, flags=ALIGN)))
TABLE.update(_rows("lfence mfence sfence clflush", Row(2, flags=ALIGN)))
TABLE.update(_rows("hlt", Row(1, flags=ALIGN | HLT)))
TABLE.update(_rows("pause", Row(1)))
TABLE.update(_rows("ud2 ud1 ud0", Row(1, flags=ALIGN)))
# MOV to/from CR/DR: Capstone names them mov; the ALIGN is applied by register class in the
# rules (control/debug register operand).
# ---- strings ---------------------------------------------------------------------------------
TABLE.update(_rows("movsb movsw movsd movsq stosb stosw stosd stosq lodsb lodsw lodsd lodsq "
                   "cmpsb cmpsw cmpsd cmpsq scasb scasw scasd scasq", Row(1, flags=STRING)))
# ---- branches --------------------------------------------------------------------------------
TABLE.update(_rows("jo jno jb jae je jne jbe ja js jns jp jnp jl jge jle jg jcxz jecxz jrcxz "
                   "loop loope loopne", Row(1, branch="cond")))
TABLE.update(_rows("jmp", Row(1, branch="jmp")))
TABLE.update(_rows("call", Row(2, flags=ISTORE, branch="call")))
TABLE.update(_rows("ret", Row(2, flags=ILOAD, branch="ret")))
TABLE.update(_rows("ljmp", Row(8, flags=ALIGN, branch="far")))
TABLE.update(_rows("lcall", Row(10, flags=ALIGN | ISTORE, branch="far")))
TABLE.update(_rows("retf retfq", Row(10, flags=ALIGN | ILOAD, branch="far")))
TABLE.update(_rows("int int1 int3 into syscall sysenter", Row(20, flags=ALIGN, branch="far")))
TABLE.update(_rows("iret iretd iretq sysret sysexit", Row(20, flags=ALIGN | ILOAD,
                                                          branch="far")))
# ---- x87 -------------------------------------------------------------------------------------
TABLE.update(_rows("fadd faddp fiadd fsub fsubp fsubr fsubrp fisub fisubr fmul fmulp fimul "
                   "fchs fabs fcom fcomp fcompp fucom fucomp fucompp ficom ficomp fcomi fcomip "
                   "fucomi fucompi ftst fxam frndint", Row(1, "x87")))
TABLE.update(_rows("fdiv fdivp fdivr fdivrp fidiv fidivr fsqrt", Row(1, "x87")))
TABLE.update(_rows("fsin fcos fsincos fptan fpatan f2xm1 fyl2x fyl2xp1 fprem fprem1 fscale "
                   "fxtract", Row(20, "x87", flags=ALIGN)))
TABLE.update(_rows("fld fild fbld fxch fld1 fldz fldpi fldl2e fldl2t fldlg2 fldln2 "
                   "fcmovb fcmove fcmovbe fcmovu fcmovnb fcmovne fcmovnbe fcmovnu",
                   Row(1, "x87move", flags=MOVE)))
TABLE.update(_rows("fst fstp fist fistp fisttp fbstp", Row(1, "x87move", flags=MOVE | STORE)))
TABLE.update(_rows("fnstsw fnstcw fnstenv fnsave fxsave fxsave64", Row(4, flags=STORE | ALIGN)))
TABLE.update(_rows("fldcw fldenv frstor fxrstor fxrstor64", Row(4, flags=ALIGN | LOAD)))
TABLE.update(_rows("fninit fnclex fwait wait ffree fincstp fdecstp fnop emms femms",
                   Row(4, flags=ALIGN)))
# ---- SIMD moves (MMX/SSE/SSE2) ---------------------------------------------------------------
TABLE.update(_rows("movaps movups movapd movupd movss movhps movlps movhpd movlpd movhlps "
                   "movlhps movdqa movdqu movq movd movq2dq movdq2q "
                   "lddqu movddup movshdup movsldup maskmovq maskmovdqu",
                   Row(1, "simdmove", flags=MOVE)))
# movsd is both the string instruction and the SSE2 move: decided by its operands (rules)
TABLE.update(_rows("movmskps movmskpd pmovmskb", Row(1, "simdmove")))
# the non-temporal stores: Capstone marks their memory operand as read
TABLE.update(_rows("movntps movntpd movntdq movntq", Row(1, "simdmove", flags=MOVE | STORE)))
TABLE.update(_rows("movnti", Row(1, flags=MOVE | STORE)))
TABLE.update(_rows("ldmxcsr", Row(4, flags=ALIGN | LOAD)))
TABLE.update(_rows("stmxcsr", Row(4, flags=ALIGN | STORE)))  # Capstone: read

# ---- instructions silicon counts twice -----------------------------------------------------
# instr_retired (NBOGUSNTAG) counts these instructions twice on NetBurst; instr_completed and
# branch_retired count them once.  Measured on a Pentium D / Xeon, CPUID 0F_06 (Weaver,
# Terpstra, Moore, "Non-Determinism and Overcount on Modern Hardware Performance Counter
# Implementations", ISPASS 2013, section IV "Total Retired Instruction Overcount"); the
# benchmark's own notes say the same of the Pentium 4 in general, so the rule applies to every
# model (docs/fidelity.md, "Counting rules").  "mem": only the form with a memory operand.
ALWAYS, WITH_MEMORY = 1, 2
OVERCOUNTED = {
    "fldcw": ALWAYS, "fldenv": ALWAYS, "frstor": ALWAYS, "emms": ALWAYS, "maskmovq": ALWAYS,
    "sfence": ALWAYS, "mfence": ALWAYS, "cvtpd2pi": WITH_MEMORY, "cvttpd2pi": WITH_MEMORY,
}


def extra_retired(name: str, loads: int) -> int:
    """The extra instr_retired counts of one execution of `name` with `loads` memory reads."""
    rule = OVERCOUNTED.get(name, 0)
    return int(rule == ALWAYS or (rule == WITH_MEMORY and loads > 0))


# Capstone groups that make an unlisted instruction SIMD (checked in this order)
_SUFFIX_CLASS = (("ps", "psp"), ("pd", "pdp"), ("ss", "ssp"), ("sd", "sdp"))


# ---- measured uops per core (uop_table) ------------------------------------------------------
CORES = TM.CORES  # the order of uop_table's pairs (models.CpuModel.core)
DEFAULT_CORE = TM.DEFAULT_CORE  # the core of models.DEFAULT_MODEL
FORMS = UT.FORMS  # r, ld, st, rmw
NO_UOPS = 0  # "no measured value" in the generated C table


def form_of(loads: int, stores: int) -> str:
    """The form of an instruction by what its explicit memory operand does (uop_table)."""
    return "rmw" if loads and stores else "ld" if loads else "st" if stores else "r"


def measured_uops(name: str, form: str, core: str) -> int | None:
    """uop_table's total uops of `name` in `form` on `core`, or None."""
    pair = UT.UOPS.get((name, form))
    return None if pair is None else pair[CORES.index(core)]


def rep_key(name: str) -> str:
    """uop_table.REP_UOPS's key of a string instruction (movsb .. movsq by size where the
    table has them, else the operation: lods, stos, scas, cmps, movs)."""
    return name if name in UT.REP_UOPS else name[:4]


def measured_rep(name: str, core: str) -> tuple[int, int] | None:
    """(base uops, uops per iteration in tenths) of REP `name` (a string instruction) on
    `core`, or None."""
    if not TABLE.get(name, Row()).flags & STRING:
        return None
    pair = UT.REP_UOPS.get(rep_key(name))
    v = None if pair is None else pair[CORES.index(core)]
    return None if v is None else (int(round(v[0])), int(round(v[1] * 10)))


def sse_compare_name(mnemonic: str) -> str:
    """CMPccPS/PD/SS/SD (opcode 0F C2): Capstone 5's insn_name() is wrong for them (cmpeqps
    is named cmppd, cmpless cmpsb, ...); the name follows the mnemonic's suffix."""
    return "cmp" + mnemonic[-2:]


def row_for(name: str, sse: bool) -> Row:
    """The row of a Capstone instruction name; `sse` says whether Capstone puts it in an
    SSE/MMX group (used only for names not in TABLE: suffix and p-prefix rules)."""
    r = TABLE.get(name)
    if r is not None:
        return r
    if sse:
        for suf, cls in _SUFFIX_CLASS:
            if name.endswith(suf):
                return Row(1, cls)
        if name.startswith("p") or name.startswith("pack"):
            return Row(1, "simdint")
        return Row(1, "simdint")
    return Row(1)


# --------------------------------------------------------------------------------------------
# The classified instruction
# --------------------------------------------------------------------------------------------


@dataclass
class Insn:
    addr: int = 0
    length: int = 1
    mnemonic: str = "nop"
    uops: int = 1
    loads: int = 0
    stores: int = 0
    branch: int = BR_NONE
    target: int | None = None  # direct branch target (linear)
    latency: int = 0  # result latency in clocks (timing.insn_timing; < 2: no constraint)
    stall: int = 0  # empty clocks before it, whatever it depends on (timing.insn_timing)
    reads: int = 0  # tracked registers read / written (timing.reg_mask)
    writes: int = 0
    align: bool = False
    rep: bool = False
    halts: bool = False
    fp: dict = field(default_factory=dict)  # clock field name -> uops of that class
    rep_iter10: int = 0  # uops per REP iteration, in tenths (rep only; rep_uops)
    extra_retired: int = 0  # instr_retired counts it this many more times (OVERCOUNTED)

    @property
    def next(self) -> int:
        return self.addr + self.length

    def rep_uops(self, iterations: int) -> int:
        """The uops of one execution of a REP instruction of `iterations` iterations."""
        return self.uops + (self.rep_iter10 * iterations + 5) // 10


def make(mnemonic: str, *, loads: int = 0, stores: int = 0, xmm: bool = False,
         mm: bool = False, rep: bool = False, addr: int = 0, length: int = 1,
         target: int | None = None, indirect: bool = False, sse: bool = True,
         core: str = DEFAULT_CORE, reads: int = 0, writes: int = 0,
         locked: bool = False) -> Insn:
    """Build an Insn from a mnemonic and its (explicit) memory operands, with the same rules
    as `classify` (for tests that write expectations without machine code); `reads` and
    `writes` are the registers' masks Capstone would report (timing.reg_mask)."""
    return _build(mnemonic, TABLE.get(mnemonic) or row_for(mnemonic, sse), loads, stores,
                  xmm, mm, rep, addr, length, target, indirect, False, core,
                  (reads, writes), locked)


def _build(name, row, loads, stores, xmm, mm, rep, addr, length, target, indirect, ctl,
           core=DEFAULT_CORE, regs=(0, 0), locked=False):
    flags = row.flags
    cls = row.cls
    op = row.op_uops
    if name == "movsd" and xmm:  # SSE2 move, not the string instruction
        cls, flags = "simdmove", MOVE
    if name == "cmpsd" and xmm:  # SSE2 compare (CMPccSD), not the string instruction
        cls, flags = "sdp", 0
    if flags & NOMEM:
        loads = stores = 0
    measured = measured_uops(name, form_of(loads, stores), core)
    if flags & ILOAD:
        loads += 1
    if flags & ISTORE:
        stores += 1
    if flags & MOVE and (loads or stores):
        op = 0
    insn = Insn(addr=addr, length=length, mnemonic=name,
                align=bool(flags & ALIGN) or ctl, halts=bool(flags & HLT),
                extra_retired=extra_retired(name, loads))
    insn.latency, insn.stall = TM.insn_timing(name, core, loads, locked)
    xr, xw = TM.x87_masks(cls, name, loads, stores)
    insn.reads, insn.writes = regs[0] | xr, regs[1] | xw
    if name == "fxch":  # renamed: no latency through the stack
        insn.reads &= ~TM.X87_MASK
        insn.writes &= ~TM.X87_MASK
    insn.rep = bool(rep and flags & STRING)
    if insn.rep:
        base, per10 = measured_rep(name, core) or (2, 10 * (1 + loads + 2 * stores))
        insn.uops, insn.rep_iter10 = base, per10  # + iterations, added at run time
        insn.loads, insn.stores = 0, 0
        insn.align = True
        insn.latency = 0  # its registers are final when its last iteration retires
    else:
        insn.uops = measured or max(1, op + loads + 2 * stores)
        insn.loads, insn.stores = loads, stores
    if ctl:
        insn.uops = max(insn.uops, 6)
    fp = {}
    if cls == "x87":
        fp["x87"] = max(1, op)
        if loads:
            fp["movld"] = loads
    elif cls in ("x87move", "simdmove"):
        if loads:
            fp["movld"] = loads
        if stores:
            fp["movst"] = stores
        if not loads and not stores:
            fp["movst"] = max(1, op)
    elif cls in ("psp", "pdp", "ssp", "sdp"):
        fp[cls] = max(1, op)
        if loads:
            fp["movld"] = loads
        if stores:
            fp["movst"] = stores
    elif cls == "simdint":
        fp["mmx128" if xmm else "mmx64"] = max(1, op)
        if loads:
            fp["movld"] = loads
    insn.fp = fp
    br = row.branch
    if br == "cond":
        insn.branch, insn.target = BR_COND, target
    elif br == "jmp":
        insn.branch, insn.target = (BR_JMP_IND, None) if indirect else (BR_JMP, target)
    elif br == "call":
        insn.branch, insn.target = (BR_CALL_IND, None) if indirect else (BR_CALL, target)
    elif br == "ret":
        insn.branch = BR_RET
    elif br == "far":
        insn.branch = BR_FAR
    return insn


# --------------------------------------------------------------------------------------------
# Classification with Capstone (Python binding); the C side mirrors this
# --------------------------------------------------------------------------------------------

_MD = {}


def _md(mode: int):
    import capstone as C
    m = _MD.get(mode)
    if m is None:
        cm = {16: C.CS_MODE_16, 32: C.CS_MODE_32, 64: C.CS_MODE_64}[mode]
        m = C.Cs(C.CS_ARCH_X86, cm)
        m.detail = True
        _MD[mode] = m
    return m


def _classify_one(ci, core: str = DEFAULT_CORE) -> Insn:
    import capstone as C
    from capstone import x86 as X
    name = ci.insn_name()
    if ci.opcode[0] == 0x0F and ci.opcode[1] == 0xC2:
        name = sse_compare_name(ci.mnemonic)
    groups = set(ci.groups)
    sse = bool(groups & {X.X86_GRP_MMX, X.X86_GRP_SSE1, X.X86_GRP_SSE2, X.X86_GRP_SSE3,
                         X.X86_GRP_SSSE3, X.X86_GRP_SSE41, X.X86_GRP_SSE42, X.X86_GRP_3DNOW})
    row = TABLE.get(name) or row_for(name, sse)
    loads = stores = 0
    xmm = mm = ctl = False
    target = None
    indirect = False
    for op in ci.operands:
        if op.type == X.X86_OP_MEM:
            if row.flags & STORE:
                stores += 1
            elif row.flags & LOAD:
                loads += 1
            else:
                if op.access & C.CS_AC_READ:
                    loads += 1
                if op.access & C.CS_AC_WRITE:
                    stores += 1
            indirect = True
        elif op.type == X.X86_OP_REG:
            r = op.reg
            if X.X86_REG_XMM0 <= r <= X.X86_REG_XMM31:
                xmm = True
            elif X.X86_REG_MM0 <= r <= X.X86_REG_MM7:
                mm = True
            elif X.X86_REG_CR0 <= r <= X.X86_REG_CR15 or X.X86_REG_DR0 <= r <= X.X86_REG_DR15:
                ctl = True
            indirect = True
        elif op.type == X.X86_OP_IMM:
            target = op.imm
    if row.branch in ("cond", "jmp", "call") and target is not None:
        indirect = False
    rep = bool(ci.prefix[0] in (0xF2, 0xF3))
    rd, wr = ci.regs_access()
    regs = (TM.reg_mask(ci.reg_name(r) for r in rd), TM.reg_mask(ci.reg_name(r) for r in wr))
    locked = ci.prefix[0] == 0xF0 or (name == "xchg" and (loads or stores) > 0)
    return _build(name, row, loads, stores, xmm, mm, rep, ci.address, ci.size, target,
                  indirect, ctl, core, regs, locked)


def classify(code: bytes, addr: int = 0, mode: int = 32, core: str = DEFAULT_CORE) -> list[Insn]:
    """Classify the machine code `code` at linear address `addr` in `mode` (16, 32 or 64),
    with the uop counts of `core` (CpuModel.core)."""
    return [_classify_one(ci, core) for ci in _md(mode).disasm(bytes(code), addr)]


def c_header() -> str:
    """The generated C header (plugin/build.py writes it as build/.../p4_tables.h): the model
    parameters, the clock fields, and one row per Capstone x86 instruction *name* (sorted, so
    the plugin maps Capstone ids to rows by name at start-up, whatever the library's minor
    version).  Each row has two variants: index 0 = not in an SSE/MMX group, 1 = in one."""
    from capstone import x86 as X

    from . import clockmodel as CM
    md = _md(32)
    lines = ["/* Generated by plugin/build.py from p4pmu.emulator.insn_classes and clockmodel;",
             " * do not edit. */", "#ifndef P4_TABLES_H", "#define P4_TABLES_H", ""]
    for k, v in CM.PARAMS.items():
        lines.append(f"#define P4P_{k.upper()} {int(v)}")
    for i, n in enumerate(CM.FIELDS):
        lines.append(f"#define KF_{n.upper()} {i}")
    lines.append(f"#define KF_N {CM.NF}")
    lines.append(f"#define KF_MEM_MAX {CM.MEMORY_FIELD_MAX}")
    for i, n in enumerate(CM.FP_FIELDS):
        lines.append(f"#define FPI_{n.upper()} {i}")
    lines.append(f"#define FPI_N {len(CM.FP_FIELDS)}")
    for i, n in enumerate(CM.BR_NAMES):
        lines.append(f"#define BRK_{n.upper()} {i}")
    for i, n in enumerate(CLASSES):
        lines.append(f"#define CLS_{n.upper()} {i}")
    for n in ("MOVE", "ALIGN", "NOMEM", "STORE", "ILOAD", "ISTORE", "STRING", "HLT", "LOAD"):
        lines.append(f"#define RF_{n} {globals()[n]}")
    lines.append(f"#define P4_OVERCOUNT_ALWAYS {ALWAYS}")
    lines.append(f"#define P4_OVERCOUNT_WITH_MEMORY {WITH_MEMORY}")
    lines.append(f"#define P4_NCORES {len(CORES)}")
    lines.append(f"#define P4_NFORMS {len(FORMS)}")
    lines.append("struct p4_row { unsigned char op, cls, br; unsigned short flags; "
                 "unsigned char dup; };")
    lines.append("/* u: measured uops per core and form (0: none, the generic rule); rep: REP "
                 "base uops and uops per iteration in tenths per core (0, 0: none); t: result "
                 "latency and stall per core (timing.table_timing) */")
    lines.append("struct p4_named_row { const char *name; struct p4_row r[2]; "
                 "unsigned short u[P4_NCORES][P4_NFORMS]; unsigned short rep[P4_NCORES][2]; "
                 "unsigned short t[P4_NCORES][2]; };")
    names = sorted({md.insn_name(i) for i in range(1, X.X86_INS_ENDING)} - {None, ""})
    lines.append(f"#define P4_NAMED_ROWS {len(names)}")
    lines.append("static const struct p4_named_row p4_named_rows[P4_NAMED_ROWS] = {")
    for name in names:
        cells = []
        for sse in (False, True):
            r = TABLE.get(name) or row_for(name, sse)
            cells.append("{%d,%d,%d,%d,%d}" % (r.op_uops, CL[r.cls], BR_CODE[r.branch],
                                                r.flags, OVERCOUNTED.get(name, 0)))
        u = ",".join("{%s}" % ",".join(str(measured_uops(name, f, c) or NO_UOPS)
                                       for f in FORMS) for c in CORES)
        rep = ",".join("{%d,%d}" % (measured_rep(name, c) or (0, 0)) for c in CORES)
        t = ",".join("{%d,%d}" % TM.table_timing(name, c) for c in CORES)
        lines.append(f'  {{"{name}", {{{cells[0]}, {cells[1]}}}, {{{u}}}, {{{rep}}}, {{{t}}}}},')
    lines.append("};")
    lines.append(TM.c_tables())
    lines.append(TM.c_reg_table(md.reg_name(i) for i in range(1, X.X86_REG_ENDING)))
    lines.append("#endif")
    return "\n".join(lines) + "\n"
