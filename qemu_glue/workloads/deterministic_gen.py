"""Write the equivalent of Weaver's deterministic benchmark for one variant (GNU as source).

``python deterministic_gen.py VARIANT OUT.S`` (or `generate`) turns the facts of
`deterministic_mix` into a freestanding static x86-64 Linux program (no libc, Intel syntax):
the general overhead, then for each section of the variant a loop of its ``iterations`` whose
body executes the section's forms or steps, then exit(0).  Loop scaffolding, register
allocation, operand choices and the order of the unordered sections are this generator's own;
what each iteration executes, and how often, is the table's.  Every loop lies between the
global symbols ``det_<section>`` and ``det_<section>_end``; the data cells are ``det_<cell>``.

Safety by construction: every loop counts in R15; R13 is 1 from the overhead on and serves as
divisor (all divisions divide by 1 with RDX kept 0, so none can fault) and as bit offset of the
bit tests into memory; memory operands address the data cells, the two buffers or the page the
OS section maps.  The generator checks what it writes: per section, the instructions (an
FWAIT-prefixed x87 form counts two) and branches one iteration executes equal the table's.
"""
from __future__ import annotations

import importlib.util
import re
import struct
import sys
from pathlib import Path


def _load_mix():
    """The table module, read afresh (a sibling file: this folder is no package of its own)."""
    name = "p4pmu_workloads_deterministic_mix"
    spec = importlib.util.spec_from_file_location(
        name, Path(__file__).with_name("deterministic_mix.py"))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod                       # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


MIX = _load_mix()

COUNTER = "r15"           # every loop counts down in R15 (R15D for a 32-bit counter)
ONE = "r13"               # 1 from the overhead on: the divisor, the bit offset into memory
NOWHERE = 0x1000_0000     # an unmapped line, target of the prefetches to nowhere
SIZE_PTR = {8: "BYTE", 16: "WORD", 32: "DWORD", 64: "QWORD", 80: "TBYTE", 128: "XMMWORD"}
FWAIT_FORMS = ("fclex", "finit", "fstcw", "fstenv", "fsave", "fstsw")  # FWAIT + the no-wait form
GPR = ("rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "rsp") + tuple(f"r{i}" for i in
                                                                      range(8, 16))
BRANCH = re.compile(r"^(?:\{disp32\} )?(j[a-z]+|loop[a-z]*|call|ret|syscall)\b")


def reg(name64: str, bits: int) -> str:
    """The `bits`-wide part of a 64-bit register: reg('rsi', 8) == 'sil'."""
    if name64[1:].isdigit():
        return name64 + {64: "", 32: "d", 16: "w", 8: "b"}[bits]
    base = name64[1:]                                  # ax, bx, si, ...
    return {64: name64, 32: "e" + base, 16: base,
            8: base[0] + "l" if base.endswith("x") else base + "l"}[bits]


# --- the table's operand notation -> GNU as Intel syntax ---------------------------------------

def sym(cell: str) -> str:
    return f"det_{cell}"


def memory(spec: str) -> tuple[str, bool]:
    """'m32:T@ix' -> ('DWORD PTR [rax+rbx*2+det_T]', False); the flag: needs ADDR32."""
    m = re.fullmatch(r"m(\d*)(@a32)?:(.+)", spec)
    ptr = f"{SIZE_PTR[int(m.group(1))]} PTR " if m.group(1) else ""
    a32, where = bool(m.group(2)), m.group(3)
    if where.startswith("["):                          # an address expression as it is
        return ptr + where, False
    if where.endswith("@ix"):                          # base + index*2, both zero
        return f"{ptr}[rax+rbx*2+{sym(where[:-3])}]", False
    cell, _, off = where.partition("+")
    if cell in ("rsp", "eax", "ebx", "ecx", "edx"):   # register-relative
        return f"{ptr}[{where}]", False
    if cell == "NOWHERE":
        return f"{ptr}[{NOWHERE + int(off or 0, 0):#x}]", a32
    return f"{ptr}[{sym(cell)}{'+' + off if off else ''}]", a32   # absolute


def operand(op: str) -> tuple[str, bool]:
    if op.startswith("m") and ":" in op:
        return memory(op)
    if op.startswith("i:"):
        return op[2:], False
    if op.startswith("off:"):                          # the address of a data cell
        return f"OFFSET {sym(op[4:])}", False
    if op.startswith("lab:"):                          # the address of a code label
        return f"OFFSET {op[4:]}", False
    if re.fullmatch(r"st\d", op):
        return f"st({op[2]})", False
    return op, False


def render(step: str) -> str:
    """One step (explicit operands) as a line of GNU as; labels, bytes, {disp32} kept."""
    if step.endswith(":") or step.startswith(".byte"):
        return step
    if step.startswith("{disp32} "):
        return "{disp32} " + render(step.split(" ", 1)[1])
    mn, _, rest = step.partition(" ")
    ops = [operand(o) for o in rest.split(",")] if rest else []
    prefix = "addr32 " if any(a32 for _, a32 in ops) else ""
    return f"{prefix}{mn} {', '.join(o for o, _ in ops)}".rstrip()


def instructions_in(line: str) -> int:
    """Retired instructions of one rendered line (a label: none; FCLEX and its kin: two)."""
    if line.endswith(":"):
        return 0
    return 2 if line.split()[0] in FWAIT_FORMS else 1


# --- concrete operands for the kind-based forms ---------------------------------------------

class Chooser:
    """Registers from a rotating pool (distinct within one instruction; AH..DH only next to
    legacy registers), memory cells and immediates by kind."""

    LEGACY8 = ("rbx", "rcx", "rdx")

    def __init__(self, pool: tuple[str, ...], mem: dict[str, str] | None = None):
        self.pool, self.mem = pool, mem or INT_MEM
        self.n = self.h = 0

    def concrete(self, form: str) -> str:
        mn, _, rest = form.partition(" ")
        kinds = rest.split(",") if rest else []
        used: set[str] = set()
        ops = [self._one(k, "r8h" in kinds, used) for k in kinds]
        return f"{mn} {','.join(ops)}".strip()

    def _one(self, k: str, legacy: bool, used: set[str]) -> str:
        if k in ("r64", "r32", "r16", "r8"):
            pool = self.LEGACY8 if legacy and k == "r8" else self.pool
            for _ in range(2 * len(pool)):
                r = pool[self.n % len(pool)]
                self.n += 1
                if r not in used:
                    used.add(r)
                    return reg(r, int(k[1:]))
            raise ValueError(f"no free register for {k}")
        if k == "r8h":
            self.h += 1
            return ("ah", "bh", "ch", "dh")[(self.h - 1) % 4]
        if k.startswith("m"):
            return self.mem[k]
        if k in INT_IMM:
            return "i:" + INT_IMM[k]
        return k                                       # a register the table names


POOL = ("rbx", "rsi", "rdi", "r8", "r9", "r10", "r11", "r12", "r14", "rbp", "rcx")
INT_MEM = {f"m{b}": f"m{b}:Q" for b in (8, 16, 32, 64)}
INT_IMM = {"i8": "5", "i16": "0x5eed", "i32": "0x5eedbeef", "i64": "0x1234fedc5eedbeef",
           "one": "1"}


def same_reg(form: str, r64: str) -> str:
    """A flag-setter form on one register: 'xor r32,r32' -> 'xor r8d,r8d' for r64='r8'."""
    mn, _, rest = form.partition(" ")
    if not rest:                                       # CLC, STC
        return mn
    ops = [reg(r64, int(k[1:])) if k in ("r64", "r32") else "i:1" for k in rest.split(",")]
    return f"{mn} {','.join(ops)}"


def take(forms: list[str], form: str, n: int) -> int:
    """Remove up to n copies of form from forms; return how many were there."""
    k = 0
    while k < n and form in forms:
        forms.remove(form)
        k += 1
    return k


# --- the integer sections -----------------------------------------------------------------------

LEA_ADDRESS = {"m64": "m64:[rbx+rsi*8+7]", "m32@a32": "m32@a32:[esi+edi*2+0x1eed]",
               "m16": "m16:[rdi+5]"}


def arith(sec) -> list[str]:
    forms = list(sec.body)
    division = [f for f in sec.body if f.split()[0] in ("div", "idiv") or f in
                ("or r64,i8", "xor r64,r64") or re.fullmatch(r"or m\d+,i8", f)]
    for f in division:
        forms.remove(f)
    ch = Chooser(POOL)
    out, products = [], []
    for f in forms:
        mn, _, kinds = f.partition(" ")
        if mn == "lea":
            dst, src = kinds.split(",")
            out.append(f"lea {ch.concrete('x ' + dst).split()[1]},{LEA_ADDRESS[src]}")
        elif mn in ("mul", "imul"):                    # after the divisions: they set RDX:RAX
            products.append(ch.concrete(f))
        else:
            out.append(ch.concrete(f))
    return out + divisions(division) + products


def divisions(forms: list[str]) -> list[str]:
    """Each width of DIV and IDIV divides by 1 (ONE; the DIV cell OR-ed with 1): RDX stays 0
    after one XOR, AX is zeroed before the 8-bit ones, RAX before the signed ones."""
    seq = []
    for op, first in (("div", "xor rdx,rdx"), ("idiv", "xor rax,rax")):
        seq += [f"or {ONE},i:1", first, f"{op} {ONE}", "xor rdx,rdx", f"{op} {reg(ONE, 32)}",
                "xor rdx,rdx", f"{op} {reg(ONE, 16)}",
                "xor rax,rax" if op == "div" else "xor rdx,rdx", f"{op} {reg(ONE, 8)}"]
        seq += [s for b in (64, 32, 16) for s in (f"or m{b}:DIV,i:1", f"{op} m{b}:DIV")]
    kinds = [re.sub(r"\b(r13|rdx|rax)\b", "r64", s).replace("r13d", "r32").replace(
        "r13w", "r16").replace("r13b", "r8").replace(":DIV", "").replace("i:1", "i8")
        for s in seq]
    assert sorted(kinds) == sorted(forms), "the division facts changed"
    return seq


def logic(sec) -> list[str]:
    ch = Chooser(tuple(r for r in POOL if r != "rcx"))   # CL is the shift count
    out = []
    for f in sec.body:
        mn, _, kinds = f.partition(" ")
        if mn.startswith("bt") and kinds.startswith("m"):  # bit offset 1: stays in the cell
            w = int(kinds.split(",")[0][1:])
            out.append(f"{mn} m{w}:Q,{reg(ONE, w)}")
        else:
            out.append(ch.concrete(f))
    return out


MOVE_BASE, MOVE_INDEX = "rsi", "rdi"      # B1 and 4 for the addressed moves
MOVE_SHAPES = {"m64": ("[rdi*8+det_B1]", "[rsi+rdi*2+24]", "[rsi+rdi*8]"),
               "m32@a32": ("[esi+edi*4+8]", "[edi*1+det_B1]", "[esi+edi*8+5]",
                           "[esi+edi*1+12]", "[esi+edi*2+3]")}
MOVE_TAIL = ("xlatb", "cbw", "cwde", "cdqe", "push r64", "cwd", "cdq", "cqo", "pop r64")


def moves(sec) -> list[str]:
    forms = list(sec.body)
    assert take(forms, "mov r64,i32", 3) == 3         # base, index, the XLAT table
    assert all(take(forms, f, 1) for f in MOVE_TAIL)
    out = [f"mov {MOVE_BASE},off:B1", f"mov {MOVE_INDEX},i:4"]
    regs = ("rcx", "r9", "r10", "r11", "r12")
    for kind, shapes in MOVE_SHAPES.items():
        w = 64 if kind == "m64" else 32
        n_ld = take(forms, f"mov r{w},{kind}", len(shapes))
        n_st = take(forms, f"mov {kind},r{w}", len(shapes))
        out += [f"mov {reg(regs[i], w)},{kind}:{shapes[i]}" for i in range(n_ld)]
        out += [f"mov {kind}:{shapes[i]},{reg(regs[i], w)}" for i in range(n_st)]
    segs = iter(("ds", "es", "fs", "gs"))
    ch = Chooser(("rbx", "rcx", "r8", "r9", "r10", "r11", "rdx", "r12"))
    out += [ch.concrete(f).replace("seg", next(segs)) if f.endswith(",seg") else
            ch.concrete(f) for f in forms]
    # XLAT reads [RBX+AL] in B1; RDX is kept across the sign extensions into it
    return out + ["mov rbx,off:B1", "xlatb", "cbw", "cwde", "cdqe", "push rdx", "cwd", "cdq",
                  "cqo", "pop rdx"]


def nops(sec) -> list[str]:
    return [".byte " + ",".join(f"0x{b}" for b in enc.split())
            for enc in sec.facts["encodings"]]


def flags(sec) -> list[str]:
    ch = Chooser(("rax",))
    return [ch.concrete(f) for f in sec.body]


def stack(sec) -> list[str]:
    f = sec.facts
    out = [f"enter i:{a},i:{b}" for a, b in f["enter"]] + ["leave"] * f["leave"]
    regs = [r for r in GPR if r != "rsp"]
    assert len(regs) == f["push_pop_r64"]
    out += [f"push {r}" for r in regs] + [f"pop {r}" for r in reversed(regs)]
    out += [s for sg in f["push_pop_seg"] for s in (f"push {sg}", f"pop {sg}")]
    r16 = ["ax", "bx", "cx", "dx"][:f["push_pop_r16"]]
    out += [f"push {r}" for r in r16] + [f"pop {r}" for r in reversed(r16)]
    return out + ["push m64:Q", "pop m64:Q"] * f["push_pop_m64"] + ["nop"] * f["nop"]


def cmov(sec) -> list[str]:
    """Per condition two blocks, each after its flag setters (which work on R8)."""
    ch = Chooser(("rax", "r9", "rbx", "r10", "r11", "rcx"))
    out = []
    for cc, first, second, extra1, extra2 in sec.facts["blocks"]:
        for setters, extra in ((first, extra1), (second, extra2)):
            out += [same_reg(s, "r8") for s in MIX.forms(setters)]
            block = MIX.forms(sec.facts["block"]) + ("r64,r64",) * extra
            out += [ch.concrete(f"cmov{cc} {k}") for k in block]
    return out


def cpuid(sec) -> list[str]:
    f = sec.facts
    out = []
    for same in (True, False):          # the accumulator equal to the destination, then not
        for w in f["cmpxchg_widths"]:
            out += ["xor rax,rax", "xor rsi,rsi" if same else "or rsi,i:1",
                    f"cmpxchg {reg('rsi', w)},{reg('rdi', w)}",
                    f"cmpxchg m{w}:Q,{reg('rdi', w)}"]
    out += ["push rbx", "cmpxchg8b m64:B1", "cmpxchg16b m128:B1",
            f"mov eax,i:{f['cpuid_leaf']}" if f["cpuid_leaf"] else "xor rax,rax", "cpuid",
            "pop rbx"]
    for w in f["xadd_widths"]:
        out += [f"xadd {reg('rsi', w)},{reg('rax', w)}", f"xadd m{w}:Q,{reg('rax', w)}"]
    return out


def os_calls(sec) -> list[str]:
    out = []
    for _, number, args in sec.facts["syscalls"]:
        out += [f"push i:{number}", "pop rax"]
        for a in args:
            r, _, v = a.partition("=")
            out.append(f"xor {r},{r}" if v.endswith(":xor") else
                       f"mov {r},{v if v.startswith('off:') else 'i:' + v}")
        out.append("syscall")
    return out + [f"mov {t},i:0x5eedf00d" for t in sec.facts["touch"]]


# --- control flow, strings, MMX ------------------------------------------------------------------

def branches(sec, label: str) -> list:
    """Steps of the branch section; (step, n) for a step executed n times per iteration."""
    f = sec.facts
    assert f["calls"] == ("call rel32", "call r64") and f["jump_over"] == 1
    n = f["jump_chain"] - 1                        # JMPs at n labels, plus the entry JMP
    order = [(3 * i + 2) % n for i in range(n)]    # the labels are visited out of order
    nxt = {order[i]: f"{label}_j{order[i + 1]}" for i in range(n - 1)}
    out = [f"jmp {label}_j{order[0]}"]
    for k in range(n):
        out += [f"{label}_j{k}:", f"jmp {nxt.get(k, label + '_jdone')}"]
    fn = f"{label}_fn"
    out += [f"{label}_jdone:", f"call {fn}", f"mov rbx,lab:{fn}", "call rbx",
            f"jmp {label}_after", f"{fn}:", ("ret", 2), f"{label}_after:"]
    for i, (insn, body, rcx, times) in enumerate(f["loops"]):
        out += [f"mov rcx,i:{rcx}", f"{label}_l{i}:", (same_reg(body, "rax"), times),
                (f"{insn} {label}_l{i}", times)]
    z = [same_reg(s, "rcx") for s in f["jrcxz"]]
    out += [z[0], f"jrcxz {label}_z0", f"{label}_z0:", z[1], f"jrcxz {label}_z1",
            f"{label}_z1:", z[2]]
    setter = {"xor": "xor rax,rax", "sub": "sub rax,i:1", "or": "or rax,i:1", "neg": "neg rax",
              "stc": "stc", "clc": "clc"}
    for i, (cc, first, second) in enumerate(f["jcc"]):
        out += [setter[first], f"j{cc} {label}_c{i}a", f"{label}_c{i}a:", setter[second],
                f"j{cc} {label}_c{i}b", f"{label}_c{i}b:", "xor rax,rax"]
    return out


ACC = {1: "al", 2: "ax", 4: "eax", 8: "rax"}
STRING_OPCODE = {"lods": 0xAD, "stos": 0xAB, "movs": 0xA5}     # the 16/32/64-bit forms


def string_op(op, label: str) -> list[str]:
    out = [f"mov rcx,i:{op.count}"]
    out += [f"mov rsi,off:{op.src}"] if op.src else []
    out += [f"mov rdi,off:{op.dst}"] if op.dst else []
    if isinstance(op.load, str):                       # 'zero+al:V': XOR, then MOV AL
        out += ["xor rax,rax", f"mov al,i:{op.load.split(':')[1]}"]
    elif op.load is not None:
        out.append(f"{'movabs' if op.size == 8 else 'mov'} {ACC[op.size]},i:{op.load:#x}")
    if op.prefixes:                                    # 0x66 and REP in a given order
        out.append(".byte " + ",".join(f"0x{b}" for b in op.prefixes.split())
                   + f",{STRING_OPCODE[op.op]:#x}")
    else:
        rep = "" if op.op.startswith("rep") else "rep "
        out.append(f"{rep}{op.op}{dict(zip((1, 2, 4, 8), 'bwdq'))[op.size]}")
    if op.check:
        bits, value, jcc, disp = op.check
        out += [f"cmp {ACC[bits // 8]},i:{value:#x}"] if bits else []
        out.append(f"{'{disp32} ' if disp == 'rel32' else ''}{jcc} {label}_end")
    return out


def string(sec, label: str) -> list[str]:
    out = []
    for op in sec.facts["ops"]:
        out += list(MIX.forms(op)) if isinstance(op, str) else string_op(op, label)
    return out


MMX_SETUP = ("mov r9,off:B1", "mov r8,i:8", "mov rdi,off:Q")   # base, index; MASKMOVQ's RDI
MMX_SHAPES = {"a64": ("Q", "[r9+r8*2+16]", "[r8*1+det_B1+8]"),
              "a32": ("[r9d+r8d*8+16]", "[r9d+r8d*2+8]", "Q")}  # a32 Q: absolute with ADDR32


def mmx(sec) -> list[str]:
    forms = list(sec.body)
    assert take(forms, "emms", 2) == 2 and take(forms, "mov r64,i32", 3) == 3
    turn = {"a64": 0, "a32": 0, "mm": 0}

    def pick(kind: str) -> str:
        if kind == "mm":
            turn["mm"] += 1
            return f"mm{(turn['mm'] - 1) % 8}"
        if kind.startswith("m"):
            key = "a32" if "@a32" in kind else "a64"
            turn[key] += 1
            return f"{kind}:{MMX_SHAPES[key][(turn[key] - 1) % 3]}"
        return {"r32": "ecx", "r64": "rcx", "i8": "i:3"}[kind]

    out = ["emms", *MMX_SETUP]
    for f in forms:
        mn, _, kinds = f.partition(" ")
        ops = ["mm0", "mm1"] if mn == "maskmovq" else [pick(k) for k in kinds.split(",")]
        out.append(f"{mn} {','.join(ops)}")
    return out + ["emms"]


EMITTERS = {"arith": arith, "logic": logic, "moves": moves, "nops": nops, "flags": flags,
            "stack": stack, "cmov": cmov, "cpuid": cpuid, "mmx": mmx, "os": os_calls}


def section_body(sec, label: str) -> list:
    """The steps of one iteration (the loop's DEC and JNZ not included)."""
    if sec.name == "branches":
        return branches(sec, label)
    if sec.name == "string":
        return string(sec, label)
    return list(sec.body) if sec.ordered else EMITTERS[sec.name](sec)


# --- the program ---------------------------------------------------------------------------------

def loop(sec, enabled: bool) -> list[str]:
    """The counter load (always: it is overhead), then the section's loop if enabled."""
    label = f"det_{sec.name}"
    out = [render(f"mov {COUNTER},i:{sec.iterations}")]
    if sec.name == "x87":
        out += [render(s) for s in MIX.OVERHEAD["before_x87"]]
    if not enabled:
        return out
    steps = [s if isinstance(s, tuple) else (s, 1) for s in section_body(sec, label)]
    lines = [(render(s), n) for s, n in steps]
    check_section(sec, lines)
    counter = COUNTER if sec.counter == "r64" else reg(COUNTER, 32)
    disp = "{disp32} " if sec.loop_branch == "rel32" else ""
    return out + [f".globl {label}, {label}_end", f"{label}:", *(ln for ln, _ in lines),
                  f"dec {counter}", f"{disp}jnz {label}", f"{label}_end:"]


def check_section(sec, lines: list[tuple[str, int]]) -> None:
    """One iteration's instructions and branches (lines with their execution counts, plus
    the loop's DEC and JNZ) equal the table's."""
    insns = sum(n * instructions_in(ln) for ln, n in lines) + 2
    runs = sum(n for ln, n in lines if BRANCH.match(ln)) + 1
    if (insns, runs) != (sec.instructions, sec.branches):
        raise AssertionError(f"{sec.name}: writes {insns} instructions, {runs} branches per "
                             f"iteration; the table says {sec.instructions}, {sec.branches}")


def cell_lines(c) -> list[str]:
    if c.kind == "float80":                            # the assembler rounds to 80 bits
        return [f".tfloat {v!r}" for v in c.value]
    pack = {"int32": "<I", "float32": "<f", "float64": "<d"}
    raw = (bytes(c.size) if c.kind == "zero" else c.value[0] if c.kind == "ascii" else
           b"".join(struct.pack(pack[c.kind], v) for v in c.value))
    assert len(raw) == c.size, c
    return [".byte " + ",".join(str(b) for b in raw)]


def data_lines() -> list[str]:
    out = [".data", ".p2align 12"]
    for c in MIX.DATA:
        out += [".p2align 4"] if c.name in MIX.ALIGN16 else []
        out += [f".globl {sym(c.name)}", f"{sym(c.name)}:", *cell_lines(c)]
    return out + [".bss", ".p2align 4", f".globl {sym('B1')}, {sym('B2')}",
                  f"{sym('B1')}: .zero {MIX.BUFFER_BYTES}",
                  f"{sym('B2')}: .zero {MIX.BUFFER_BYTES}"]


def generate(variant: str) -> str:
    """The whole program of one variant (GNU as, Intel syntax) as text."""
    enabled = set(MIX.VARIANTS[variant])
    zeroed = ("rax", "rbx", "rcx", "rdx", "rsi", "rdi", "r8", "r9", ONE)
    assert MIX.OVERHEAD["start"] == ("xor r64,r64",) * len(zeroed) + ("inc r64",)
    body = [render(f"xor {r},{r}") for r in zeroed] + [render(f"inc {ONE}")]
    for sec in MIX.SECTIONS:
        body += loop(sec, sec.name in enabled)
    body += [render(s) for s in ("xor rdi,rdi", f"mov rax,i:{MIX.OVERHEAD['exit_call']}",
                                 "syscall")]                                    # exit(0)
    head = [f"/* The equivalent of Weaver's deterministic benchmark, variant {variant}: written",
            "   by deterministic_gen.py from the facts in deterministic_mix.py. */",
            ".intel_syntax noprefix", ".text", ".globl _start", "_start:"]
    code = [ln if ln.endswith(":") else "\t" + ln for ln in body]
    return "\n".join(head + code + data_lines() + ['.section .note.GNU-stack,"",@progbits', ""])


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in MIX.VARIANTS:
        print(f"usage: deterministic_gen.py {{{'|'.join(MIX.VARIANTS)}}} OUT.S", file=sys.stderr)
        return 2
    Path(argv[1]).write_text(generate(argv[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
