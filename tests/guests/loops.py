"""The instruction streams of the events guests' loops (common/loops.S), from the built ELF.

`LoopImage(elf)` disassembles the guest with objdump (binutils, already needed to build the
guests) and `trace(name, n)` replays `loop_<name>(n)` from its first instruction to its final
RET: a list of the instructions executed, in order, with the outcome of every branch.  The
replay is a tiny emulator of the few instructions that decide the control flow of these loops
(dec/inc, test with an immediate or a register, xor with an immediate, mov of an immediate,
a register or the iteration count, conditional jumps on ZF, direct and indirect jmp/call,
ret); every other instruction only advances the instruction pointer.  A loop whose control flow
depends on anything else is refused.

Expected counts in the tests come from these traces and the documented models, never from
numbers copied from a run.
"""
from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path

# Loops whose control flow the replay understands (bench's data-dependent branch is not).
TRACEABLE = ("nop4", "alu", "alt", "pat3", "callret", "indirect", "x87", "sse", "mmx", "mem",
             "phases", "members", "ucode", "split", "overcount")
# Traceable loops of the memory model's patterns (tests/test_events_memory.py): not in
# TRACEABLE, so that the other event tests do not run them.
TRACEABLE_MEMORY = ("hotbuf", "pages", "smc", "sbuf", "thrash", "tcsweep")
# ... and of the SSE instructions' input values (SSE_input_assist: tests/test_events_memory.py)
TRACEABLE_OPERANDS = ("denorm",)
# Traceable too, but only at CPL 0 (their PMU instructions fault at CPL 3): not in TRACEABLE,
# which the tests run at both levels.
TRACEABLE_CPL0 = ("rdpmc",)

_LINE = re.compile(r"^\s*([0-9a-f]+):\t((?:[0-9a-f]{2} )+)\s*\t?(.*)$")
_SYM = re.compile(r"^([0-9a-f]+) <([^>]+)>:$")
_REG32 = {"%rax": "%eax", "%rbx": "%ebx", "%rcx": "%ecx", "%rdx": "%edx", "%rsi": "%esi",
          "%rdi": "%edi", "%rbp": "%ebp", "%rsp": "%esp"}


@dataclass(frozen=True)
class Insn:
    addr: int
    raw: bytes
    mnemonic: str  # objdump's (AT&T) mnemonic, e.g. "jne", "addps", "call"
    operands: str  # objdump's operand text
    symbol: str    # the nearest preceding symbol (loop labels)

    @property
    def size(self) -> int:
        return len(self.raw)

    @property
    def text(self) -> str:
        return f"{self.mnemonic} {self.operands}".strip()


@dataclass(frozen=True)
class Step:
    """One executed instruction; for a branch, whether it was taken and where it went."""
    insn: Insn
    branch: str | None = None  # None, "cond", "jmp", "call", "ret", "jmp_ind", "call_ind"
    taken: bool = False
    target: int | None = None

    @property
    def addr(self) -> int:
        return self.insn.addr


class TraceError(RuntimeError):
    pass


class LoopImage:
    """The disassembled text of one events guest."""

    def __init__(self, elf: Path):
        self.elf = Path(elf)
        self.insns: dict[int, Insn] = {}
        self.symbols: dict[str, int] = {}
        self._data_syms: dict[str, int] | None = None
        self._rodata: dict[int, int] | None = None
        self._load()

    def _load(self) -> None:
        raw = subprocess.run(["objdump", "-d", "-w", "-j", ".text", str(self.elf)],
                             capture_output=True, text=True, check=True)
        sym = ""
        for ln in raw.stdout.splitlines():
            m = _SYM.match(ln)
            if m:
                sym = m.group(2)
                self.symbols[sym] = int(m.group(1), 16)
                continue
            m = _LINE.match(ln)
            if not m:
                continue
            addr = int(m.group(1), 16)
            b = bytes(int(x, 16) for x in m.group(2).split())
            text = m.group(3).strip()
            if not text:  # continuation line of a long instruction
                continue
            text = re.sub(r"\s+#.*$", "", text)
            parts = text.split(None, 1)
            mnem = parts[0]
            ops = parts[1] if len(parts) > 1 else ""
            self.insns[addr] = Insn(addr, b, mnem, ops, sym)

    def data_symbol(self, name: str) -> int:
        """The address of any symbol (data too: nm)."""
        if self._data_syms is None:
            out = subprocess.run(["nm", str(self.elf)], capture_output=True, text=True,
                                 check=True).stdout
            self._data_syms = {p[2]: int(p[0], 16) for p in (ln.split() for ln in out.splitlines())
                               if len(p) == 3}
        try:
            return self._data_syms[name]
        except KeyError:
            raise TraceError(f"symbol {name!r} not found in {self.elf}") from None

    def data(self, addr: int, n: int) -> bytes:
        """n bytes of the image's read-only data at `addr` (objdump -s of .rodata)."""
        if self._rodata is None:
            out = subprocess.run(["objdump", "-s", "-j", ".rodata", str(self.elf)],
                                 capture_output=True, text=True, check=True).stdout
            self._rodata = {}
            for ln in out.splitlines():
                m = re.match(r"^ ([0-9a-f]+) ((?:[0-9a-f]{2,8} ?){1,4})", ln)
                if m:
                    a = int(m.group(1), 16)
                    for k, b in enumerate(bytes.fromhex(m.group(2).replace(" ", ""))):
                        self._rodata[a + k] = b
        try:
            return bytes(self._rodata[a] for a in range(addr, addr + n))
        except KeyError:
            raise TraceError(f"no read-only data at 0x{addr:x} in {self.elf}") from None

    def sym(self, name: str) -> int:
        try:
            return self.symbols[name]
        except KeyError:
            raise TraceError(f"symbol {name!r} not found in {self.elf}") from None

    def insn(self, addr: int) -> Insn:
        try:
            return self.insns[addr]
        except KeyError:
            raise TraceError(f"no instruction at 0x{addr:x} in {self.elf}") from None

    def body(self, name: str) -> list[Insn]:
        """The instructions from `<name>_body` up to (not including) `<name>_end`."""
        a, end = self.sym(f"{name}_body"), self.sym(f"{name}_end")
        out = []
        while a < end:
            i = self.insn(a)
            out.append(i)
            a += i.size
        return out

    # -- replay ---------------------------------------------------------------------------

    def trace(self, name: str, n: int) -> list[Step]:
        """Every instruction `loop_<name>(n)` executes, from its first to its final RET."""
        if name not in TRACEABLE + TRACEABLE_CPL0 + TRACEABLE_MEMORY + TRACEABLE_OPERANDS:
            raise TraceError(f"loop {name!r} is not traceable (control flow not modelled)")
        return _trace(self, name, n)


def _reg(op: str) -> str:
    op = op.strip()
    return _REG32.get(op, op)


def _trace(img: LoopImage, name: str, n: int) -> list[Step]:
    regs: dict[str, int] = {}
    zf = None
    stack: list[int] = []
    pc = img.sym(f"loop_{name}")
    steps: list[Step] = []
    limit = 128 * n + 1000
    while True:
        if len(steps) > limit:
            raise TraceError(f"loop {name}: replay did not end")
        i = img.insn(pc)
        m, ops = i.mnemonic, i.operands
        nxt = pc + i.size
        args = [a.strip() for a in re.split(r",(?![^()]*\))", ops)] if ops else []
        if m in ("jne", "je", "jnz", "jz"):
            if zf is None:
                raise TraceError(f"loop {name}: {i.text} at 0x{pc:x} before any flag setter")
            taken = (not zf) if m in ("jne", "jnz") else zf
            tgt = int(args[0].split()[0], 16)
            steps.append(Step(i, "cond", taken, tgt))
            pc = tgt if taken else nxt
            continue
        if m == "jmp":
            if args[0].startswith("*"):
                tgt = regs[_reg(args[0][1:])]
                steps.append(Step(i, "jmp_ind", True, tgt))
            else:
                tgt = int(args[0].split()[0], 16)
                steps.append(Step(i, "jmp", True, tgt))
            pc = tgt
            continue
        if m == "call":
            if args[0].startswith("*"):
                tgt = regs[_reg(args[0][1:])]
                steps.append(Step(i, "call_ind", True, tgt))
            else:
                tgt = int(args[0].split()[0], 16)
                steps.append(Step(i, "call", True, tgt))
            stack.append(nxt)
            pc = tgt
            continue
        if m == "ret":
            if not stack:
                steps.append(Step(i, "ret", True, None))
                return steps
            tgt = stack.pop()
            steps.append(Step(i, "ret", True, tgt))
            pc = tgt
            continue
        if m.startswith("j") or m.startswith("loop"):
            raise TraceError(f"loop {name}: branch {i.text} at 0x{pc:x} not modelled")
        steps.append(Step(i))
        # register effects that decide the control flow
        if m == "mov" and len(args) == 2 and args[1].startswith("%"):
            dst = _reg(args[1])
            if args[0].startswith("$"):
                regs[dst] = int(args[0][1:], 16) & 0xFFFFFFFF
            elif dst == "%ecx" and (args[0] in ("%edi",) or "(%esp)" in args[0]):
                regs[dst] = n  # the prologue loads the iteration count
            elif args[0].startswith("%") and _reg(args[0]) in regs:
                regs[dst] = regs[_reg(args[0])]
            else:
                regs.pop(dst, None)
        elif m in ("dec", "inc") and args and args[0].startswith("%"):
            r = _reg(args[0])
            if r in regs:
                regs[r] = (regs[r] + (1 if m == "inc" else -1)) & 0xFFFFFFFF
                zf = regs[r] == 0
            else:
                zf = None
        elif m == "test" and len(args) == 2:
            r = _reg(args[1])
            if args[0].startswith("$"):
                v = int(args[0][1:], 16)
            else:
                v = regs.get(_reg(args[0]))
            zf = (regs[r] & v) == 0 if r in regs and v is not None else None
        elif m == "xor" and len(args) == 2 and _reg(args[0]) == _reg(args[1]):
            regs[_reg(args[1])] = 0
            zf = True
        elif m == "xor" and len(args) == 2 and args[0].startswith("$"):
            r = _reg(args[1])
            if r in regs:
                regs[r] ^= int(args[0][1:], 16)
                zf = regs[r] == 0
            else:
                zf = None
        pc = nxt


@cache
def image(elf: str) -> LoopImage:
    return LoopImage(Path(elf))


def branches(steps: list[Step]) -> list[Step]:
    return [s for s in steps if s.branch]
