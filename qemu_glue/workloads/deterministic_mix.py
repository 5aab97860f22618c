"""The dynamic instruction mix of Weaver's "deterministic" x86-64 benchmark, as data.

V.M. Weaver, D. Terpstra, S. Moore, "Non-Determinism and Overcount on Modern Hardware
Performance Counter Implementations", ISPASS 2013, measured a hand-written x86-64 program
(``retired_instr``, github.com/deater/deterministic, static/) whose every retired instruction
and branch is known, on real processors including a Pentium D / Xeon of family 15 model 6
(static/results/pentiumd).  Its repository carries no licence, so this project ships neither
its source nor its binaries.  This module describes instead, as facts, *what* that program
executes and how often; `deterministic_gen` writes from these facts -- not from the original's
text -- an **equivalent program**: the same instruction forms with the same counts, the same
branches, system calls and first-touched pages, so that the published silicon counts apply to
it.  (Checked against the original's four builds, both run under QEMU: per section the executed
mnemonic/operand-form histogram and encodings (prefixes, opcodes), REP iteration totals,
instruction and branch totals; natively under gdb: the x87/SSE exception flags each step of
two iterations raises, and the pages present at exit -- all equal.)

Notation.  A *form* is a mnemonic and its operand kinds in Intel order: ``r64 r32 r16 r8``
(general registers), ``r8h`` (AH, BH, CH, DH), ``m8 .. m128`` (memory of that width, ``@a32``:
with a 32-bit address size), ``i8 i16 i32 i64`` (immediate, by encoded size), ``one`` (the
shift-by-one encoding), ``cl``; a register name stands for itself where the encoding depends
on it (``add eax,i32`` is the accumulator short form).  ``3 inc r64`` means three such
instructions per iteration.  Sections whose values matter (x87, SSE, SSE2, SSE3: the exception
flags their operations raise) list their *steps* in execution order with concrete operands:
registers by name, ``m32:F32`` for the 32-bit cell F32 of `DATA`, ``m128:T@ix`` for cell T
addressed as base + index*2 with the section's zero base and index registers, ``m16@a32:eax+32``
for a 32-bit address, ``i:5`` / ``off:CW`` for immediates (a value, a cell's address).

Every section runs as a loop: ``iterations`` times the body, then a DEC of the counter
(``counter`` width) and a JNZ (``loop_branch`` displacement).  ``instructions``, ``branches``
and ``cond_branches`` are the per-iteration figures the original's own comments give, loop
included; the generator checks what it writes against them.
"""
from __future__ import annotations

from dataclasses import dataclass, field

# ---------------------------------------------------------------------------------------------
# Data the program reads and writes.  The layout (order, sizes, initial values) is a fact the
# x87 and SSE sections depend on: some operations read 16 bytes across neighbouring cells.
# (name, size in bytes, initial value: bytes, a number, or a tuple of numbers of `kind`)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    name: str
    size: int
    kind: str = "zero"      # zero | bytes | int32 | float32 | float64 | float80 | ascii
    value: tuple = ()


PI = 3.14159265358979323846264
DATA = (
    Cell("T", 16),                                        # the 16-byte SIMD scratch line
    Cell("T2", 16),                                       # its neighbour (read across by LDDQU)
    Cell("ZEROS", 16),
    Cell("ONES", 16, "int32", (0xFFFFFFFF,) * 4),
    Cell("LARGE", 16, "int32", (0xFFFFFFFA, 0x00000002, 0x00000064, 0xFFFF15A0)),
    Cell("Q", 8),                                         # the 8-byte integer scratch cell
    Cell("F32", 4, "float32", (PI,)),
    Cell("F64", 8, "float64", (PI,)),
    Cell("F80", 10, "float80", (PI,)),
    Cell("CF32", 4, "float32", (PI,)),
    Cell("CF64", 8, "float64", (PI,)),
    Cell("CF80", 10, "float80", (PI,)),
    Cell("C8S", 32, "float32", (3.14, 3.14, 3.14, 3.14, 3.14, 1.14, 2.14, 100.14)),  # 16-aligned
    Cell("C4D", 32, "float64", (3.14, 6.28, 1.57, 2.78)),
    Cell("RES", 10, "float80", (0.0,)),
    Cell("TF", 8, "float64", (0.0,)),
    Cell("SCW", 4),                                       # saved x87 control word
    Cell("CW", 4),                                        # x87 control word being loaded
    Cell("MSG", 17, "ascii", (b"p4pmu det: os! \n\0",)),  # what the OS section writes: 16 bytes
    Cell("DIV", 8),   # divisor cell of the arithmetic section (equivalent program's own)
)
ALIGN16 = ("C8S",)  # cells that start on a 16-byte boundary (padding before them)
BUFFER_BYTES = 16384  # two zeroed buffers B1, B2 (.bss, 16-aligned, one after the other)
MSG_BYTES = 16

# ---------------------------------------------------------------------------------------------
# The sections
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Section:
    name: str
    summary: str
    iterations: int
    instructions: int           # per iteration, loop DEC and JNZ included
    branches: int               # retired branches per iteration (loop JNZ included)
    cond_branches: int
    counter: str = "r64"        # width of the loop counter (DEC r64 / DEC r32)
    loop_branch: str = "rel32"  # displacement of the loop's JNZ
    body: tuple[str, ...] = ()  # forms (unordered) or steps (ordered), one iteration
    ordered: bool = False
    facts: dict = field(default_factory=dict)  # structured facts of the custom sections


def forms(text: str) -> tuple[str, ...]:
    """'2 inc r64; dec m8' -> ('inc r64', 'inc r64', 'dec m8'); newlines separate too."""
    out: list[str] = []
    for item in text.replace("\n", ";").split(";"):
        item = item.strip()
        if not item:
            continue
        n, _, rest = item.partition(" ")
        if n.isdigit():
            out += [rest.strip()] * int(n)
        else:
            out.append(item)
    return tuple(out)


def each(mnemonics: str, form_list: str) -> tuple[str, ...]:
    """Every mnemonic with every form: each('and or', 'r64,r64; m64,r64')."""
    fl = forms(form_list)
    return tuple(f"{m} {f}" for m in mnemonics.split() for f in fl)


ALU_FORMS = "r64,r64; eax,i32; m64,r64; r64,m64; r8,r8h; r32,r32; r8,r8; r16,r16; m32,r32; r16,m16"
UNARY_FORMS = "4 r64; r32; r16; r8h; r8; m64; m16"
SHIFT_FORMS = "r64,one; r64,cl; r64,i8; r32,one; r32,cl; r32,i8; r16,one; r16,cl; r16,i8; m64,i8"
DOUBLE_SHIFT_FORMS = ("2 r64,r64,i8; r64,r64,cl; 2 r32,r32,i8; r32,r32,cl; 2 r16,r16,i8; "
                      "r16,r16,cl; m64,r64,i8")
BIT_TEST_FORMS = "r64,i8; r32,i8; r16,i8; m16,r16; m32,r32; m64,r64; 2 r64,r64; r32,r32; r16,r16"
BIT_SCAN_FORMS = "2 r64,r64; 2 r32,r32; 3 r16,r16; r64,m64; r32,m32; r16,m16"

ARITH = Section(
    "arith", "integer arithmetic: inc dec add adc sub sbb cmp mul imul div idiv lea",
    100_000, instructions=130, branches=1, cond_branches=1,
    body=(each("inc", "4 r64; r32; r16; r8h; r8; m64; m16")
          + each("add adc sub sbb cmp", ALU_FORMS)
          + each("mul imul", "3 r64; r32; r16; r8; m8; m16; m32; m64")
          + forms("4 lea r64,m64; 5 lea r32,m32@a32; lea r16,m16")
          + each("dec", "2 r64; r32; r16; r8h; r8; m64; m8")
          # division: each width once unsigned and once signed, guarded by ORs and XORs
          + each("div idiv", "r64; r32; r16; r8; m64; m32; m16")
          + forms("2 or r64,i8; 2 or m64,i8; 2 or m32,i8; 2 or m16,i8; 8 xor r64,r64")),
)

LOGIC = Section(
    "logic", "logic and bit operations: and or xor neg not bsf bsr bswap bt* rotates shifts test",
    100_000, instructions=222, branches=1, cond_branches=1,
    body=(each("and or xor", ALU_FORMS)
          + each("neg not", UNARY_FORMS)
          + each("bsf bsr", BIT_SCAN_FORMS)
          + forms("7 bswap r64; 3 bswap r32")
          + each("bt btc btr bts", BIT_TEST_FORMS)
          + each("rcl rcr rol ror shl sar shr", SHIFT_FORMS)
          + each("shld shrd", DOUBLE_SHIFT_FORMS)
          + forms("test r64,r64; test eax,i32; 2 test m64,r64; test r8,r8h; test r32,r32; "
                  "test r8,r8; test r16,r16; test m32,r32; test m16,r16")),
)

MOVES = Section(
    "moves", "moves, sign/zero extension, exchanges, XLAT, accumulator conversions",
    100_000, instructions=126, branches=1, cond_branches=1,
    body=forms("""
        3 mov r64,i32
        6 mov r64,m64; 6 mov m64,r64; 5 mov r32,m32@a32; 5 mov m32@a32,r32
        3 mov r32,m32; 3 mov m32,r32; 3 mov r16,m16; 3 mov m16,r16; 3 mov r8,m8; 3 mov m8,r8
        mov r8h,m8; mov m8,r8h
        3 mov r64,r64; 3 mov r32,r32; 3 mov r16,r16; 3 mov r8,r8; mov r8,r8h
        4 mov r16,seg
        mov r8,i8; mov r16,i16; mov r32,i32; movabs r64,i64
        movsx r16,r8; movsx r16,m8; movsx r32,r8; movsx r32,m8; movsx r64,r8; movsx r64,m8
        movsx r32,r16; movsx r32,m16; movsx r64,r16; movsx r64,m16
        movsxd r64,r32; movsxd r64,m32
        movzx r16,r8; movzx r16,m8; movzx r32,r8; movzx r32,m8; movzx r64,r8; movzx r64,m8
        movzx r32,r16; movzx r32,m16; movzx r64,r16; movzx r64,m16
        2 xchg r8,r8; 4 xchg m8,r8; xchg r8,r8h; 2 xchg m8,r8h
        xchg ax,r16; xchg r16,r16; 4 xchg m16,r16
        xchg eax,r32; xchg r32,r32; 4 xchg m32,r32
        xchg rax,r64; xchg r64,r64; 4 xchg m64,r64
        xlatb; cbw; cwde; cdqe; push r64; cwd; cdq; cqo; pop r64"""),
)

# The NOP section executes these encodings (hex bytes): the P6 long NOPs of 1-8 bytes, the
# 32-bit assemblers' register NOPs (moves and LEAs that are not NOPs in 64-bit mode: they
# zero-extend ESI and EAX), operand-size-prefixed NOPs, the K7 register NOPs.
NOP_ENCODINGS = (
    "90", "66 90", "0f 1f 00", "0f 1f 40 00", "0f 1f 44 00 00", "66 0f 1f 44 00 00",
    "0f 1f 80 00 00 00 00", "0f 1f 84 00 00 00 00 00",
    "90", "89 f6", "8d 76 00", "8d 74 26 00", "8d b6 00 00 00 00", "8d b4 26 00 00 00 00",
    "90", "66 90", "66 66 90", "66 66 66 90",
    "90", "8b c0", "8d 04 20", "8d 44 20 00", "8d 80 00 00 00 00", "8d 04 05 00 00 00 00",
)
NOPS = Section(
    "nops", "NOP encodings of 1 to 8 bytes and the old register 'NOPs'",
    100_000, instructions=26, branches=1, cond_branches=1, loop_branch="rel8",
    facts={"encodings": NOP_ENCODINGS},
)

CONDITIONS = ("o", "no", "b", "ae", "e", "ne", "be", "a", "s", "ns", "p", "np", "l", "ge", "le",
              "g")
FLAGS = Section(
    "flags", "flag instructions: CLC STC CMC STD CLD SAHF LAHF PUSHF POPF and SETcc",
    100_000, instructions=43, branches=1, cond_branches=1,
    body=(forms("clc; stc; cmc; std; cld; sahf; lahf; pushfq; popfq")
          + tuple(f"set{c} {k}" for c in CONDITIONS for k in ("r8", "m8"))),
)

BRANCHES = Section(
    "branches", "JMP, CALL/RET, LOOP/LOOPE/LOOPNE, JRCXZ and every Jcc",
    100_000, instructions=167, branches=77, cond_branches=67,
    facts={
        "jump_chain": 5,        # five direct JMPs: one into a chain of four labels, visited
                                # out of order, each jumping to the next (the last: out)
        "calls": ("call rel32", "call r64"),  # both to one function that only returns;
        "jump_over": 1,         # then one JMP over that function
        # (instruction, its loop body, RCX loaded with, times the instruction executes)
        "loops": (("loop", "xor r64,r64", 10, 10), ("loope", "xor r64,r64", 10, 10),
                  ("loope", "or r64,i8", 10, 1), ("loopne", "xor r64,r64", 10, 1),
                  ("loopne", "or r64,i8", 10, 10)),
        # JRCXZ after RCX=0 (XOR) and after RCX=1 (OR), then RCX zeroed again (XOR)
        "jrcxz": ("xor r64,r64", "or r64,i8", "xor r64,r64"),
        # each Jcc twice, both times to the next instruction: (condition, the flag setter
        # before the first, the one before the second); an XOR r64,r64 follows each pair.
        # Setters: xor = XOR r64,r64; sub = SUB r64,i8 (1); or = OR r64,i8 (1); neg = NEG r64
        # (of a zero register); stc, clc.
        "jcc": (("o", "xor", "sub"), ("no", "xor", "sub"), ("b", "stc", "clc"),
                ("ae", "stc", "clc"), ("e", "xor", "or"), ("ne", "xor", "or"),
                ("be", "stc", "clc"), ("a", "stc", "clc"), ("s", "neg", "xor"),
                ("ns", "neg", "xor"), ("p", "xor", "or"), ("np", "xor", "or"),
                ("l", "sub", "xor"), ("ge", "sub", "xor"), ("le", "sub", "xor"),
                ("g", "sub", "xor")),
    },
)

STACK = Section(
    "stack", "ENTER/LEAVE, PUSH/POP of every register, segment registers, 16-bit and memory",
    100_000, instructions=51, branches=1, cond_branches=1, counter="r32", loop_branch="rel8",
    facts={"enter": ((16, 0), (32, 1)), "leave": 2,
           "push_pop_r64": 15,            # every general register but RSP, popped in reverse
           "push_pop_seg": ("fs", "gs"), "push_pop_r16": 4, "push_pop_m64": 1, "nop": 1},
)

CMOV_BLOCK = "2 r64,r64; r32,r32; 2 r16,r16; r64,m64; r32,m32; r16,m16"
CMOV = Section(
    "cmov", "CMOVcc of every condition, each with the condition true and false",
    100_000, instructions=242, branches=1, cond_branches=1,
    facts={
        # (condition, setters making the first block's outcome, setters for the second block,
        #  extra r64,r64 CMOVs in the first / second block); blocks run in this order
        "blocks": (("e", "xor r64,r64", "or r64,i8", 1, 1),
                   ("ne", "xor r64,r64", "or r64,i8", 1, 1),
                   ("be", "clc", "stc; xor r32,r32", 1, 0),
                   ("a", "clc; or r32,i8", "stc; xor r32,r32", 0, 0),
                   ("s", "xor r64,r64; not r64", "xor r64,r64; xor r32,r32", 0, 0),
                   ("ns", "xor r64,r64; not r64", "xor r64,r64; xor r32,r32", 0, 0),
                   ("p", "xor r64,r64; xor r64,r64", "xor r64,r64; inc r64", 0, 0),
                   ("np", "xor r64,r64; xor r64,r64", "xor r64,r64; inc r64", 0, 0),
                   ("l", "xor r64,r64; xor r64,r64", "xor r64,r64; neg r64", 0, 0),
                   ("ge", "xor r64,r64; xor r64,r64", "xor r64,r64; neg r64", 0, 0),
                   ("le", "xor r64,r64; xor r64,r64", "xor r64,r64; neg r64", 0, 0),
                   ("g", "xor r64,r64; xor r64,r64", "xor r64,r64; sub r64,i8", 0, 0)),
        "block": CMOV_BLOCK,
    },
)



@dataclass(frozen=True)
class StringOp:
    """One string instruction of the string section, with what it needs loaded before it.

    op: lods stos movs "repe cmps" "repne cmps" "repe scas" "repne scas" (plain lods, stos and
    movs carry REP); size: element bytes; count: RCX; src/dst: buffer addresses ("B1", "B2",
    "B1+16384" = the end of B1); load: the accumulator value loaded before (STOS, SCAS) at the
    element width (a MOV of that width, MOVABS for 8 bytes), "zero+al" = XOR r64,r64 then
    MOV r8,i8, None = kept; check: the never-taken Jcc after it that would leave the loop on
    wrong data: (bits compared with CMP or None, value, jcc, displacement); prefixes: the order
    of the 0x66 and REP prefixes when both are present and it is given.
    """
    op: str
    size: int
    count: int
    src: str | None = None
    dst: str | None = None
    load: int | str | None = None
    check: tuple | None = None
    prefixes: str | None = None


def _scan(op: str, size: int, dst: str, load: int, jcc: str, disp: str) -> StringOp:
    return StringOp(op, size, BUFFER_BYTES // size, dst=dst, load=load,
                    check=(None, None, jcc, disp))


def _cmps(op: str, size: int, jcc: str) -> StringOp:
    return StringOp(op, size, BUFFER_BYTES // size, "B1", "B2", check=(None, None, jcc, "rel32"))


STRING_OPS = (
    "cld",
    StringOp("lods", 2, 8192, "B1", prefixes="66 f3"),
    StringOp("lods", 2, 8192, "B1", prefixes="f3 66"),
    StringOp("stos", 1, 16384, dst="B1", load="zero+al:0x0d"),
    StringOp("lods", 1, 16384, "B1", check=(8, 0x0D, "jne", "rel32")),
    StringOp("stos", 2, 8192, dst="B1", load=0x020D),
    StringOp("lods", 2, 8192, "B1", check=(16, 0x020D, "jne", "rel32")),
    StringOp("stos", 4, 4096, dst="B1", load=0x0FEB1378),
    StringOp("lods", 4, 4096, "B1", check=(32, 0x0FEB1378, "jne", "rel32")),
    "std",
    StringOp("stos", 4, 4096, dst="B1+16384"),     # downwards from B1's end
    StringOp("lods", 4, 4096, "B1+16384"),
    "cld",
    StringOp("stos", 8, 2048, dst="B1", load=0xFEB131978A5A5A5A),
    StringOp("lods", 8, 2048, "B1", check=(32, 0x8A5A5A5A, "jne", "rel32")),
    StringOp("movs", 1, 16384, "B1", "B2"),
    StringOp("movs", 2, 8192, "B2", "B1"),
    StringOp("movs", 4, 4096, "B1", "B2"),
    StringOp("movs", 8, 2048, "B1", "B2"),
    StringOp("stos", 4, 4096, dst="B1", load=0xA5A5A5A5),
    StringOp("stos", 4, 4096, dst="B2", load=0xA5A5A5A5),
    *(_cmps("repe cmps", n, "jne") for n in (1, 2, 4, 8)),     # equal buffers: all compared
    StringOp("stos", 4, 4096, dst="B2", load=0x5A5A5A5A),
    *(_cmps("repne cmps", n, "je") for n in (1, 2, 4, 8)),     # different: all compared
    *(_scan("repe scas", n, "B1", int("a5" * n, 16), "jne", "rel8" if n == 8 else "rel32")
      for n in (1, 2, 4, 8)),
    *(_scan("repne scas", n, "B2", int("a5" * n, 16), "je", "rel8") for n in (1, 2, 4, 8)),
    "8 nop",
)
STRING = Section(
    "string", "REP LODS/STOS/MOVS, REPE/REPNE CMPS/SCAS of every width over two 16 KiB buffers",
    10_000, instructions=170, branches=21, cond_branches=21,
    facts={"ops": STRING_OPS},
)

CPUID = Section(
    "cpuid", "CMPXCHG (equal and different), CMPXCHG8B/16B, CPUID leaf 0, XADD",
    100_000, instructions=48, branches=1, cond_branches=1,
    facts={"cmpxchg_widths": (8, 16, 32, 64), "cpuid_leaf": 0, "xadd_widths": (8, 16, 32, 64)},
)

# --- x87: the execution sequence (its values decide the exception flags and the stack) -------
X87_STEPS = forms("""
    push rdx
    f2xm1; fabs; fld1; fldpi; fadd st,st1; fadd st1,st; fadd m32:F32; fadd m64:F64
    fld1; faddp st1,st; fldpi; faddp st2,st; fiadd m16:Q; fiadd m32:Q
    fldpi; fbstp m80:F80; fbld m80:F80; fld1; fchs; fclex; fnclex
    fcmovb st,st1; fcmovbe st,st1; fcmove st,st1; fcompp; fcompp
    fld1; fld1; fcmovnb st,st1; fcmovnbe st,st1; fcmovne st,st1; fcmovnu st,st1; fcmovu st,st1
    fcom st1; fcom st2; fcom m32:F32; fcom m64:F64
    fld1; fcomp st1; fld1; fcomp st2; fld1; fcomp m32:F32; fld1; fcomp m64:F64; fld1; fld1
    fcompp; fcomi st,st2; fld1; fcomip st,st2; fucomi st,st2; fld1; fucomip st,st2; fcompp
    fldpi; fcos; fdecstp; fincstp
    fldpi; fld1; fld1; fdiv st,st2; fdivr st2,st; fdiv m32:F32; fdiv m64:F64
    fld1; fdivrp st1,st; fld1; fdivrp st2,st
    mov m32:Q,i:0x10001000; fidiv m16:Q; fidiv m32:Q
    fld1; fdivr st,st2; fdiv st2,st; fdivr m32:F32; fdivr m64:F64
    fld1; fdivp st1,st; fld1; fdivp st2,st
    mov m32:Q,i:0x10001000; fidivr m16:Q; fidivr m32:Q; fcompp; fcompp; fcomp st1
    ffree st7; fld1; fldpi; ficom m16:Q; ficom m32:Q; fld1; ficomp m16:Q; fld1; ficomp m32:Q
    fild m16:Q; fild m32:Q; fild m64:Q; finit; fninit
    fld1; fist m16:Q; fist m32:Q; fld1; fld1; fld1; fistp m16:Q; fistp m32:Q; fistp m64:Q
    fld1; fld st1; fldpi; fstp m32:F32; fld m32:F32; fstp m64:F64; fld m64:F64
    fstp m80:F80; fld m80:F80
    fld1; fldl2e; fldl2t; fcompp; fcompp; fldlg2; fldln2; fldpi; fldz; fcompp; fcompp; fcompp
    sub rsp,i:8; fnstcw m16:rsp+2; fldcw m16:rsp+2; add rsp,i:8
    fstcw m16:CW
    mov eax,off:CW; fldcw m16@a32:eax; mov ebx,off:CW; fldcw m16@a32:ebx
    mov ecx,off:CW; fldcw m16@a32:ecx; mov edx,off:CW; fldcw m16@a32:edx
    mov eax,off:CW; sub eax,i:32; fldcw m16@a32:eax+32; mov ebx,eax; fldcw m16@a32:ebx+32
    mov ecx,eax; fldcw m16@a32:ecx+32; mov edx,eax; fldcw m16@a32:edx+32
    mov eax,off:CW; sub eax,i:30000; fldcw m16@a32:eax+30000; mov ebx,eax
    fldcw m16@a32:ebx+30000; mov ecx,eax; fldcw m16@a32:ecx+30000; mov edx,eax
    fldcw m16@a32:edx+30000
    fldpi; fnstcw m16:SCW; movzx eax,m16:SCW; mov ah,i:12; mov m16:CW,ax; fldcw m16:CW
    fistp m32:Q; fldcw m16:SCW; mov ebx,m32:Q; cmp ebx,i:3
    fstenv m:B1; fnstenv m:B1; fldenv m:B1
    fld1; fldpi; fldpi; fmul st,st1; fmul st1,st; fmul m32:F32; fmul m64:F64
    fld1; fmulp st1,st; fld1; fmulp st1,st; fimul m16:Q; fimul m32:Q; fnop
    fld1; fld1; fpatan; fldpi; fld1; fprem; fcompp; fcompp; fldpi; fld1; fprem1
    fldpi; fptan; fcompp; fldpi; frndint; fcompp; fcompp; fcomp st1
    fnsave m:B1; frstor m:B1; fsave m:B1
    fldpi; fldpi; fscale; fldpi; fsin; fldpi; fsincos; fldpi; fsqrt; fcompp
    fldpi; fld1; fst st2; fst m32:RES; fst m64:RES; fstp st2; fstp m32:RES; fstp m64:RES
    fstp m80:RES; fstsw ax; fnstsw ax; fstsw m16:Q; fnstsw m16:Q; fcomp st1
    fldpi; fld1; fsub st,st2; fsubr st2,st; fsub m32:F32; fsub m64:F64
    fld1; fsubrp st1,st; fld1; fsubrp st2,st; fisub m16:Q; fisub m32:Q
    fldpi; fld1; fsubr st,st2; fsub st2,st; fsubr m32:F32; fsubr m64:F64
    fld1; fsubp st1,st; fld1; fsubp st2,st; fisubr m16:Q; fisubr m32:Q
    fld1; ftst; fucom st1; fucom st2; fld1; fucomp st1; fld1; fucomp st2; fldpi; fucompp
    fxam; fxch st1; fxch st2; fxsave m:B1; fxrstor m:B1
    fldpi; fxtract; fcompp; fcompp; fld1; fldpi; fyl2x; fyl2xp1; fcompp
    pop rdx""")
# FCLEX, FINIT, FSTCW, FSTENV, FSAVE, FSTSW are each two instructions (FWAIT and the no-wait
# form): 7 FWAITs.  The steps are the original's, so every one raises the exception flags it
# raises there (precision, from the transcendental, division and rounding steps; nothing
# else): the flags pending at FCLEX, FINIT and FSAVE, on which an AMD FWAIT overcount depends,
# are the same.  The stack never over- or underflows.
X87 = Section(
    "x87", "every x87 instruction class, stack kept valid, the control word reloaded 15 times",
    100_000, instructions=295, branches=1, cond_branches=1, body=X87_STEPS, ordered=True,
    facts={"fwait_pairs": ("fclex", "finit", "fstcw", "fstenv", "fsave", "fstsw")},
)

MMX = Section(
    "mmx", "every MMX instruction with register, memory (64- and 32-bit addressing) operands",
    100_000, instructions=152, branches=1, cond_branches=1,
    body=(forms("""
        emms; 3 mov r64,i32
        3 movd mm,m32; 5 movd mm,m32@a32; 4 movd m32,mm; 6 movd m32@a32,mm; movd mm,r32
        2 movq mm,r64; maskmovq mm,mm; movntq m64,mm
        3 movq mm,m64; 5 movq mm,m64@a32; 4 movq m64,mm; 5 movq m64@a32,mm; movq mm,mm""")
          + each("pand pandn por pxor", "mm,mm; 2 mm,m64; mm,m64@a32")
          + each("pslld psllq psllw psrad psraw psrld psrlq psrlw", "mm,mm; mm,m64; mm,i8")
          + each("paddb paddd paddsb paddsw paddusb paddusw paddw pmaddwd pmulhw pmullw "
                 "psubb psubd psubsb psubsw psubusb psubusw psubw "
                 "pcmpeqb pcmpeqd pcmpeqw pcmpgtb pcmpgtd pcmpgtw packssdw packsswb packuswb "
                 "punpckhbw punpckhdq punpckhwd", "mm,mm; mm,m64")
          + each("punpcklbw punpckldq punpcklwd", "mm,mm; mm,m32")
          + forms("emms")),
)


def _tri(mn: str, w: int, cell: str = "T", dst_abs: str = "xmm0", dst_ix: str = "xmm2",
         ix_cell: str | None = None) -> tuple[str, ...]:
    """The usual three forms: XMM1 op= XMM0; dst_abs op= cell; dst_ix op= cell (indexed)."""
    ixc = ix_cell or cell
    return (f"{mn} xmm1,xmm0", f"{mn} {dst_abs},m{w}:{cell}", f"{mn} {dst_ix},m{w}:{ixc}@ix")


def _tri_mm(mn: str) -> tuple[str, ...]:
    return (f"{mn} mm1,mm0", f"{mn} mm0,m64:Q", f"{mn} mm2,m64:Q@ix")


def _moves6(mn: str, w: int) -> tuple[str, ...]:
    """Register copy, load absolute, load indexed, copy back, store absolute, store indexed."""
    return (f"{mn} xmm1,xmm0", f"{mn} xmm0,m{w}:T", f"{mn} xmm2,m{w}:T@ix", f"{mn} xmm0,xmm1",
            f"{mn} m{w}:T,xmm0", f"{mn} m{w}:T@ix,xmm2")


def _halves4(mn: str, w: int) -> tuple[str, ...]:
    return (f"{mn} xmm0,m{w}:T", f"{mn} m{w}:T@ix,xmm2", f"{mn} m{w}:T,xmm0",
            f"{mn} xmm2,m{w}:T@ix")


CMP_PREDICATES = ("eq", "lt", "le", "unord", "neq", "nlt", "nle", "ord")


def _cmp8(suffix: str, w: int) -> tuple[str, ...]:
    return tuple(s for p in CMP_PREDICATES for s in _tri(f"cmp{p}{suffix}", w))


def _cvt_si(mn: str, w: int, a32_second: bool = False) -> tuple[str, ...]:
    """Scalar conversions to/from a general register: 64- and 32-bit register, memory."""
    if mn.startswith("cvtsi2"):
        mem2 = f"m{w}@a32:T" if a32_second else f"m{w}:T"
        return (f"{mn} xmm0,rcx", f"{mn} xmm0,m{w}:T", f"{mn} xmm0,ecx", f"{mn} xmm0,{mem2}")
    return (f"{mn} rcx,xmm0", f"{mn} rcx,m{w}:T", f"{mn} ecx,xmm0", f"{mn} ecx,m{w}:T")


def _lanes(mn: str, ops: str, n: int = 8) -> tuple[str, ...]:
    return tuple(f"{mn} {ops},i:{k}" for k in range(n))


SHUF_IMMS = (0, 2, 4, 8, 16, 32)


def _div_pair(mn: str, cell: str, w: int) -> tuple[str, ...]:
    """Divide by the constant vector (reloaded into XMM3 before each use)."""
    return (f"movdqu xmm3,m128:{cell}", f"{mn} xmm0,xmm3", f"movdqu xmm3,m128:{cell}",
            f"{mn} xmm3,m{w}:{cell}")


def _est(mn: str, cell: str, w: int, second: str = "xmm0,xmm1") -> tuple[str, ...]:
    return (f"{mn} xmm1,m{w}:{cell}", f"{mn} {second}")


SSE1_STEPS = (
    ("xor rax,rax", "xor rbx,rbx")
    + _moves6("movapd", 128) + ("movhlps xmm1,xmm0",) + _halves4("movhps", 64)
    + ("movlhps xmm2,xmm1",) + _halves4("movlps", 64) + _halves4("movss", 32)
    + _moves6("movups", 128)
    + _tri("addps", 128) + _tri("addss", 32)
    + _div_pair("divps", "C8S", 128) + _div_pair("divss", "C8S", 32)
    + _tri("maxpd", 128) + _tri("maxss", 32) + _tri("minps", 128) + _tri("minss", 32)
    + _tri("mulps", 128) + _tri("mulss", 32)
    + _est("rcpps", "LARGE", 128, "xmm1,xmm0") + _est("rcpss", "CF32", 32)
    + _est("rsqrtps", "C8S", 128) + _est("rsqrtss", "C8S", 32)
    + _est("sqrtps", "C8S", 128) + _est("sqrtss", "C8S", 32)
    + _tri("subps", 128) + _tri("subss", 32)
    + _cmp8("ps", 128) + _cmp8("ss", 32)
    + _tri("comiss", 32) + _tri("ucomiss", 32, dst_abs="xmm1")
    + ("shufps xmm1,xmm0,i:0", "shufps xmm2,m128:Q,i:4", "shufps xmm2,m128:T@ix,i:8")
    + _tri("unpckhps", 128, dst_abs="xmm2") + _tri("unpcklps", 128, dst_abs="xmm2")
    + ("cvtpi2ps xmm1,mm0", "cvtpi2ps xmm0,m64:T", "cvtpi2ps xmm2,m64:T@ix")
    + ("cvtps2pi mm1,xmm0", "cvtps2pi mm0,m64:T", "cvtps2pi mm2,m64:T@ix")
    + _cvt_si("cvtsi2ss", 32, a32_second=True) + _cvt_si("cvtss2si", 32)
    + ("cvttps2pi mm1,xmm0", "cvttps2pi mm0,m64:T", "cvttps2pi mm2,m64:T@ix")
    + _cvt_si("cvttss2si", 32)
    + _tri("andnps", 128) + _tri("andps", 128) + _tri("orps", 128) + _tri("xorps", 128)
    + tuple(s for mn in ("pavgb", "pavgw", "pmaxsw", "pmaxub", "pminsw", "pminub", "pmulhuw",
                         "psadbw") for s in _tri(mn, 128) + _tri_mm(mn))
    + _lanes("pextrw", "ecx,xmm0") + _lanes("pextrw", "ecx,mm0")
    + _lanes("pinsrw", "xmm0,ecx") + _lanes("pinsrw", "xmm0,m16:T")
    + _lanes("pinsrw", "mm0,ecx") + _lanes("pinsrw", "mm0,m16:Q")
    + tuple(f"pshufw mm2,mm1,i:{k}" for k in SHUF_IMMS)
    + tuple(f"pshufw mm2,m64:T,i:{k}" for k in SHUF_IMMS)
    + ("movd ecx,xmm0", "movd m32@a32:T,xmm0", "movq rcx,xmm0", "movd m32:T,xmm0",
       "movd xmm0,ecx", "movd xmm0,m32@a32:T", "movq xmm0,rcx", "movd xmm0,m32:T",
       "movmskps ecx,xmm1")
    + ("movntps m128:T,xmm0", "movntps m128:T@ix,xmm2", "movntq m64:T,mm0", "movntq m64:T@ix,mm2")
    + tuple(s for i, p in enumerate(("prefetcht0", "prefetcht1", "prefetcht2", "prefetchnta"))
            for s in (f"{p} m8:T", f"{p} m8:NOWHERE+{i * 256}"))   # NOWHERE: an unmapped line
    + ("sfence", "stmxcsr m32:B1", "ldmxcsr m32:B1")
)
SSE1 = Section(
    "sse1", "SSE: moves, packed/scalar single arithmetic, compares, conversions, MMX extensions",
    100_000, instructions=308, branches=1, cond_branches=1, body=SSE1_STEPS, ordered=True,
)


def _tri_q(mn: str) -> tuple[str, ...]:
    """Integer SIMD with XMM1 as destination of both register and absolute forms."""
    return (f"{mn} xmm1,xmm0", f"{mn} xmm1,m128:T")


SSE2_STEPS = (
    ("xor rax,rax", "xor rbx,rbx")
    + _moves6("movapd", 128) + _halves4("movhpd", 64) + _halves4("movlpd", 64)
    + ("movmskpd ecx,xmm1",) + _halves4("movq", 64)
    + _moves6("movsd", 64) + _moves6("movupd", 128)
    + _tri("addpd", 128) + _tri("addsd", 64)
    + _div_pair("divpd", "C4D", 128) + _div_pair("divsd", "C4D", 64)
    + _tri("maxpd", 128) + _tri("maxsd", 64) + _tri("minpd", 128) + _tri("minsd", 64)
    + _tri("mulpd", 128) + _tri("mulsd", 64)
    + ("sqrtpd xmm1,m128:C4D", "sqrtpd xmm0,xmm1", "sqrtsd xmm1,m64:C4D", "sqrtsd xmm0,xmm1")
    + _tri("subpd", 128) + _tri("subsd", 64)
    + _cmp8("pd", 128) + _cmp8("sd", 64)
    + _tri("comisd", 64)
    + tuple(s for mn in ("pcmpeqb", "pcmpeqd", "pcmpeqw", "pcmpgtb", "pcmpgtd", "pcmpgtw")
            for s in _tri(mn, 128, dst_abs="xmm2"))
    + ("ucomisd xmm1,xmm0", "ucomisd xmm1,m64:Q")
    + ("shufpd xmm1,xmm0,i:0", "shufpd xmm2,m128:T,i:4", "shufpd xmm2,m128:T@ix,i:8")
    + _tri("unpckhpd", 128, dst_abs="xmm2") + _tri("unpcklpd", 128, dst_abs="xmm2")
    + _tri("cvtdq2pd", 64) + _tri("cvtdq2ps", 128) + _tri("cvtpd2dq", 128)
    + ("cvtpd2pi mm1,xmm0", "cvtpd2pi mm0,m128:T", "cvtpd2pi mm2,m128:T@ix")
    + _tri("cvtpd2ps", 128)
    + ("cvtpi2pd xmm1,mm0", "cvtpi2pd xmm0,m64:T", "cvtpi2pd xmm2,m64:T@ix")
    + _tri("cvtps2dq", 128) + _tri("cvtps2pd", 64)
    + _cvt_si("cvtsd2si", 64) + _tri("cvtsd2ss", 64) + _cvt_si("cvtsi2sd", 32, a32_second=True)
    + _tri("cvtss2sd", 32) + _tri("cvttpd2dq", 128)
    + ("cvttpd2pi mm1,xmm0", "cvttpd2pi mm0,m128:T", "cvttpd2pi mm2,m128:T@ix")
    + _tri("cvttps2dq", 128) + _cvt_si("cvttsd2si", 64)
    + _tri("andnpd", 128) + _tri("andpd", 128) + _tri("orpd", 128)
    + tuple(s for mn in ("pand", "pandn", "por", "pxor", "xorpd")
            for s in _tri(mn, 128, cell="Q", dst_abs="xmm1", ix_cell="T"))
    + ("movdq2q mm0,xmm0",) + _moves6("movdqa", 128)
    + ("movdqu xmm1,xmm0", "movdqu xmm0,m128:T", "movdqu xmm0,m128:B1+3",
       "movdqu xmm2,m128:T@ix", "movdqu xmm0,xmm1", "movdqu m128:T,xmm0",
       "movdqu m128:B1+6,xmm0", "movdqu m128:T@ix,xmm2", "movq2dq xmm0,mm0")
    + tuple(s for mn in ("paddb", "paddd", "paddq", "paddsb", "paddsw", "paddusb", "paddusw",
                         "paddw", "pmaddwd") for s in _tri_q(mn))
    + _tri("pmulhw", 128) + _tri("pmullw", 128) + _tri("pmuludq", 128) + _tri_mm("pmuludq")
    + tuple(s for mn in ("psubb", "psubd", "psubq") for s in
            _tri(mn, 128, dst_abs="xmm1", ix_cell="Q"))
    + ("psubq mm1,mm0", "psubq mm1,m64:T", "psubq mm2,m64:Q@ix")
    + tuple(s for mn in ("psubsb", "psubsw", "psubusb", "psubusw", "psubw") for s in
            _tri(mn, 128, dst_abs="xmm1", ix_cell="Q"))
    + tuple(s for mn in ("packssdw", "packsswb", "packuswb") for s in _tri_q(mn))
    + tuple(s for mn in ("pshufd", "pshufhw", "pshuflw") for s in
            tuple(f"{mn} xmm2,xmm1,i:{k}" for k in SHUF_IMMS)
            + tuple(f"{mn} xmm2,m128:T,i:{k}" for k in SHUF_IMMS))
    + tuple(s for mn in ("pslld", "pslldq", "psllq", "psllw", "psrad", "psraw", "psrld",
                         "psrldq", "psrlq", "psrlw")
            for s in ((f"{mn} xmm0,i:3",) if mn.endswith("dq") else
                      _tri_q(mn) + (f"{mn} xmm0,i:3",)))
    + tuple(s for mn in ("punpckhbw", "punpckhdq", "punpckhqdq", "punpckhwd", "punpcklbw",
                         "punpckldq", "punpcklqdq", "punpcklwd") for s in _tri_q(mn))
    + ("clflush m8:T", "lfence", "mov rdi,off:B1", "lddqu xmm5,m128:ZEROS",
       "maskmovdqu xmm0,xmm5", "lddqu xmm5,m128:ONES", "maskmovdqu xmm0,xmm5", "mfence",
       "movntdq m128:T,xmm0", "movntpd m128:T,xmm0", "movntpd m128:T@ix,xmm2",
       "movnti m32:Q,ecx", "movnti m64:Q,rcx", "pause", "pmovmskb ecx,xmm0",
       "pmovmskb ecx,mm0")
)
SSE2 = Section(
    "sse2", "SSE2: double-precision and 128-bit integer instructions, conversions, fences",
    100_000, instructions=405, branches=1, cond_branches=1, body=SSE2_STEPS, ordered=True,
)

SSE3_STEPS = (
    ("xor rax,rax", "xor rbx,rbx", "lddqu xmm4,m128:T", "lddqu xmm4,m128:T+8",
     "movddup xmm2,xmm1", "movddup xmm1,m64:T", "movshdup xmm2,xmm1", "movshdup xmm1,m128:T",
     "movsldup xmm2,xmm1", "movsldup xmm1,m128:T")
    + tuple(s for mn in ("addsubpd", "addsubps", "haddpd", "haddps", "hsubpd", "hsubps")
            for s in _tri(mn, 128))
    + ("fld1", "fld1", "fld1", "fisttp m16:TF", "fisttp m32:TF", "fisttp m64:TF")
)
# In its first iteration the SSE3 section finds the x87 stack full: SSE and SSE2 use MMX
# registers and leave the x87 unit in MMX state (all tags valid) without EMMS.  The three FLD1
# then raise a masked stack-overflow invalid operation and the FISTTPs store the integer
# indefinite; from the second iteration on the stack is empty enough and nothing is raised.
# The original does exactly this (variants all and sse), and so does the equivalent program.
SSE3 = Section(
    "sse3", "SSE3: LDDQU, MOVDDUP/MOVSHDUP/MOVSLDUP, ADDSUB, horizontal add/sub, FISTTP",
    100_000, instructions=36, branches=1, cond_branches=1, body=SSE3_STEPS, ordered=True,
)

OS = Section(
    "os", "system calls: write(1, msg, 16) and mmap(8 KiB, anonymous), touching the new page",
    10_000, instructions=19, branches=3, cond_branches=1, loop_branch="rel8",
    facts={
        # system call numbers are loaded with PUSH imm8 / POP r64; each argument with MOV
        "syscalls": (("write", 1, ("rsi=off:MSG", "rdi=1", f"rdx={MSG_BYTES}")),
                     ("mmap", 9, ("rdi=0:xor", "rsi=8192", "rdx=3", "r10=0x22", "r8=-1",
                                  "r9=0"))),
        "touch": ("m32:[rax]", "m32:[rax+4]"),   # two MOV m32,i32 into the new mapping
    },
)

SECTIONS = (ARITH, LOGIC, MOVES, NOPS, FLAGS, BRANCHES, STACK, CMOV, STRING, CPUID, X87, MMX,
            SSE1, SSE2, SSE3, OS)
BY_NAME = {s.name: s for s in SECTIONS}

# ---------------------------------------------------------------------------------------------
# Outside the sections: the general overhead of 30 instructions (every variant executes it)
# ---------------------------------------------------------------------------------------------
OVERHEAD = {
    "start": forms("9 xor r64,r64; inc r64"),   # nine registers zeroed, one of them made 1
    "counter_loads": len(SECTIONS),             # a MOV r64,i32 before each section's place,
                                                # whether the variant runs that section or not
    "before_x87": forms("fld1"),                # one value on the x87 stack before the x87 part
    "exit": forms("xor r64,r64; mov r64,i32; syscall"),  # exit(0): RDI zeroed, RAX = 60
    "exit_call": 60,
    "instructions": 30,
    "branches": 1,                              # the exit SYSCALL
}

# First-touched pages besides the program's own code and data: the string section writes
# both buffers whole (2 x 16 KiB), the OS section touches one new page per iteration.
PAGES = {"buffers": 2 * BUFFER_BYTES // 4096, "mmap_per_os_iteration": 1}

# ---------------------------------------------------------------------------------------------
# The four published variants (the original's build: which sections each assembles)
# ---------------------------------------------------------------------------------------------
VARIANTS = {
    "all": tuple(s.name for s in SECTIONS),
    "int": ("arith", "logic", "moves", "nops", "flags", "branches", "stack", "cmov", "string",
            "cpuid", "os"),
    "fp": ("x87", "mmx"),
    "sse": ("sse1", "sse2", "sse3"),
}
# The expected architectural counts: the sum of the sections' own figures (the original's
# comments) and the 30-instruction overhead.  Its results script (make_summary) states 226,990,030
# instructions and 9,240,001 branches for "all", as here; for "fp" it states 44,800,000
# instructions, but the x87 and MMX sections execute 29,500,000 + 15,200,000 and the build runs
# 44,700,030 (counted under QEMU), the figure below.
EXPECTED = {
    "all": {"instructions": 226_990_030, "branches": 9_240_001, "cond_branches": 8_220_000},
    "int": {"instructions": 107_390_030, "branches": 8_740_001, "cond_branches": 7_720_000},
    "fp": {"instructions": 44_700_030, "branches": 200_001, "cond_branches": 200_000},
    "sse": {"instructions": 74_900_030, "branches": 300_001, "cond_branches": 300_000},
}


def totals(variant: str) -> dict[str, int]:
    """Architectural instruction and branch counts of a variant, from the section facts."""
    secs = [BY_NAME[n] for n in VARIANTS[variant]]
    return {
        "instructions": OVERHEAD["instructions"] + sum(s.instructions * s.iterations
                                                       for s in secs),
        "branches": OVERHEAD["branches"] + sum(s.branches * s.iterations for s in secs),
        "cond_branches": sum(s.cond_branches * s.iterations for s in secs),
    }


def check() -> None:
    """The section facts add up to the published totals of every variant."""
    for v, want in EXPECTED.items():
        got = totals(v)
        assert got == want, (v, got, want)


check()
