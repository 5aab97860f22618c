"""Which SSE and x87 instructions of a loop body request an assist (SSE_input_assist, x87_assist
PREA and POAU), from the bytes in the ELF: a replay of the body's loads into XMM registers,
MXCSR and the x87 stack from read-only data (a base register set by `mov $symbol, %reg`), each
SSE instruction with floating-point inputs, each x87 load of a single or double and each x87
store of one asked of emulator/fp_assist.py. A body that reads an input this replay does not
know (an arithmetic result, a register loaded elsewhere) is refused: the expectation would be a
guess.
"""
from __future__ import annotations

import re
import struct

from p4pmu.emulator import fp_assist as FA

MXCSR_RESET = 0x1F80  # SDM Vol. 1 10.2.3.1
# loads into an XMM register: bytes read (the rest of the register: kept or zeroed)
_LOADS = {"movaps": 16, "movups": 16, "movapd": 16, "movupd": 16, "movdqa": 16, "movdqu": 16,
          "movss": 4, "movsd": 8}
# objdump's x87 size suffixes: s single, l double (t, double extended, takes no assist)
_X87_SIZE = {"s": 4, "l": 8}
_MEM = re.compile(r"^(-?0x[0-9a-f]+|-?\d+)?\((%\w+)\)$")


class SseReplayError(AssertionError):
    pass


def _name(mnemonic: str) -> str:
    """fp_assist's name of an objdump mnemonic (CMPccPS/PD/SS/SD by their suffix)."""
    if mnemonic.startswith("cmp") and mnemonic[-2:] in ("ps", "pd", "ss", "sd") and \
            len(mnemonic) > 5 and mnemonic not in ("cmpsd",):
        return "cmp" + mnemonic[-2:]
    return mnemonic


def _operands(text: str) -> list[str]:
    return [o.strip() for o in text.split(",")] if text else []


class Replay:
    """The state the replay knows: base registers, XMM registers (bytes or None), MXCSR."""

    def __init__(self, img):
        self.img = img
        self.base: dict[str, int] = {}
        self.xmm: dict[str, bytes | None] = {}
        self.mxcsr = MXCSR_RESET
        self.st: list[float | None] = []  # the x87 stack, ST(0) last (None: not known)

    def _mem(self, op: str, n: int) -> bytes:
        m = _MEM.match(op)
        if not m or m.group(2) not in self.base:
            raise SseReplayError(f"memory operand {op!r} not based on a known register")
        disp = int(m.group(1), 0) if m.group(1) else 0
        return self.img.data(self.base[m.group(2)] + disp, n)

    def _reg(self, op: str) -> bytes:
        v = self.xmm.get(op)
        if v is None:
            raise SseReplayError(f"{op} holds a value the replay does not know")
        return v

    def step(self, insn) -> str | None:
        """Replay one instruction; the clock field of the assist it requests (sse_assist,
        x87_prea), or None."""
        ops = _operands(insn.operands)
        name = _name(insn.mnemonic)
        x87 = insn.mnemonic[:-1]
        if x87 in FA.X87_DENORMAL_LOADS and insn.mnemonic[-1] in _X87_SIZE and len(ops) == 1 \
                and not ops[0].startswith("%"):
            data = self._mem(ops[0], _X87_SIZE[insn.mnemonic[-1]])
            fmt = "<f" if len(data) == 4 else "<d"
            if x87 == "fld":
                self.st.append(struct.unpack(fmt, data)[0])
            elif self.st:
                self.st[-1] = None  # an arithmetic result the replay does not compute
            return "x87_prea" if FA.x87_requests_assist(data) else None
        if x87 in FA.X87_DENORMAL_STORES and insn.mnemonic[-1] in _X87_SIZE and len(ops) == 1 \
                and not ops[0].startswith("%"):
            if not self.st or self.st[-1] is None:
                raise SseReplayError(f"{insn.mnemonic}: ST(0) holds a value the replay does not "
                                     "know")
            size = _X87_SIZE[insn.mnemonic[-1]]
            data = struct.pack("<f" if size == 4 else "<d", self.st[-1])
            if x87 == "fstp":
                self.st.pop()
            return "x87_poau" if FA.x87_output_assist(data) else None
        if insn.mnemonic == "fstp" and ops == ["%st(0)"]:
            if self.st:
                self.st.pop()
            return None
        if insn.mnemonic.startswith("mov") and len(ops) == 2 and ops[0].startswith("$") and \
                ops[1].startswith("%") and not ops[1].startswith("%xmm"):
            self.base[ops[1]] = int(ops[0][1:], 0)
            self.base[ops[1].replace("%e", "%r")] = self.base[ops[1]]
            return None
        if name == "ldmxcsr":
            self.mxcsr = int.from_bytes(self._mem(ops[0], 4), "little")
            return None
        if name in _LOADS and len(ops) == 2 and ops[1].startswith("%xmm"):
            n = _LOADS[name]
            if ops[0].startswith("%xmm"):
                self.xmm[ops[1]] = self._reg(ops[0])
            else:
                self.xmm[ops[1]] = self._mem(ops[0], n) + bytes(16 - n)
            return None
        row = FA.SSE_DENORMAL_INPUTS.get(name)
        if row is None or len(ops) < 2 or not ops[-1].startswith("%xmm"):
            for op in ops[-1:]:
                if op.startswith("%xmm"):
                    self.xmm[op] = None  # written by something the replay does not follow
            return None
        src, dest = ops[-2], ops[-1]
        n = row.count * row.bits // 8
        inputs = [self._reg(dest)] if row.dest_read else []
        inputs.append(self._reg(src) if src.startswith("%xmm") else self._mem(src, n))
        if name not in ("comiss", "ucomiss", "comisd", "ucomisd"):
            self.xmm[dest] = None
        return "sse_assist" if FA.requests_assist(row, inputs, self.mxcsr) else None


def assists(img, insns) -> dict[int, str | None]:
    """{address: the clock field of the assist it requests, or None} of every SSE instruction
    with floating-point inputs and every x87 load or store of a single or double among `insns`
    (instructions in the order they run), as its last execution among them did."""
    r = Replay(img)
    out = {}
    for insn in insns:
        got = r.step(insn)
        ops = _operands(insn.operands)
        sse = _name(insn.mnemonic) in FA.SSE_DENORMAL_INPUTS and ops[-1:] and \
            ops[-1].startswith("%xmm")
        x87 = insn.mnemonic[:-1] in FA.X87_DENORMAL_LOADS | FA.X87_DENORMAL_STORES and \
            insn.mnemonic[-1] in _X87_SIZE and len(ops) == 1 and not ops[0].startswith("%")
        if sse or x87:
            out[insn.addr] = got
    return out
