"""The fuzzing guest's stream and its expected digests (qemu_glue/guests/common/fuzz.c).

`ops(seed, n)` is the guest's stream of operations, computed the same way (xorshift64*),
and `expected(seed, n, every, model)` replays it on the emulator alone
(`p4pmu.emulator.pmu.PMU`) with the x86 rules around it (CPL 3 and CR4.PCE, IA32_MISC_ENABLE
left to QEMU), giving the digest the guest must print after every `every` operations.  A
digest covers every fault and every value read except counter values and the CCCRs' OVF bit
(which depend on how far the counters have counted: the event tests check those), and of
IA32_MISC_ENABLE the PMU's bits 7, 11 and 12.
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

M64 = (1 << 64) - 1
WRMSR, RDMSR, RDPMC, SETPCE = range(4)
NAMES = ("wrmsr", "rdmsr", "rdpmc", "setpce")
GP = 13
FNV_OFFSET, FNV_PRIME = 0xCBF29CE484222325, 0x100000001B3
MISC_ENABLE_PMU_BITS = (1 << 7) | (1 << 11) | (1 << 12)
CCCR_OVF = 1 << 31


@dataclass(frozen=True)
class Op:
    kind: int
    ring3: bool
    ecx: int
    value: int

    def show(self) -> str:
        return f"{NAMES[self.kind]} {'CPL3' if self.ring3 else 'CPL0'} ecx=0x{self.ecx:x} " \
               f"value=0x{self.value:x}"


def _rng(state: int) -> tuple[int, int]:
    x = state
    x ^= x >> 12
    x ^= (x << 25) & M64
    x ^= x >> 27
    return x, (x * 0x2545F4914F6CDD1D) & M64


def ops(seed: int, n: int) -> Iterator[Op]:
    s = seed or 1
    for _ in range(n):
        s, r = _rng(s)
        s, c = _rng(s)
        s, v = _rng(s)
        a, cl, ch = r >> 32, c & 0xFFFFFFFF, c >> 32
        k = a % 100
        kind = WRMSR if k < 45 else RDMSR if k < 85 else RDPMC if k < 98 else SETPCE
        ecx = 0x1A0 if cl % 20 == 0 else 0x300 + (ch & 0xFF)
        style = (cl >> 8) % 64
        value = v if style < 24 else v & 0xFFFFFFFF if style < 44 else \
            v & 0x7FFFFFFF if style < 63 else 0xFFFFFFFFFF - (v & 0xFFFF)
        if kind == RDPMC:
            ecx = (((ch >> 8) % 18) | ((ch >> 16) & 1) << 31) if (cl >> 16) % 10 < 7 \
                else v & 0xFFFFFFFF
        if kind == SETPCE:
            value = v & 1
        yield Op(kind, (a >> 8) % 10 == 0, ecx, value)


def covered(op: Op, vec: int, val: int) -> int:
    if vec >= 0 or op.kind in (WRMSR, SETPCE, RDPMC):
        return 0
    if 0x300 <= op.ecx <= 0x311:
        return 0
    if 0x360 <= op.ecx <= 0x371:
        return val & ~CCCR_OVF & M64
    if op.ecx == 0x1A0:
        return val & MISC_ENABLE_PMU_BITS
    return val


def _fnv(h: int, v: int, n: int) -> int:
    for i in range(n):
        h = ((h ^ (v >> (8 * i) & 0xFF)) * FNV_PRIME) & M64
    return h


class Replay:
    """The emulator alone over the stream: each operation's (vector or -1, value)."""

    def __init__(self, model: str):
        from p4pmu.emulator.models import get_model
        from p4pmu.emulator.pmu import PMU, PMUFault
        self.pmu = PMU(get_model(model))
        self.fault = PMUFault
        self.pce = False

    def run(self, op: Op) -> tuple[int, int]:
        if op.kind == SETPCE:
            self.pce = bool(op.value)
            return -1, 0
        if op.kind in (RDMSR, WRMSR) and op.ring3:
            return GP, 0  # privileged instructions (QEMU's own check)
        if op.kind == RDPMC and op.ring3 and not self.pce:
            return GP, 0
        if op.ecx == 0x1A0:  # QEMU's register; the plugin sets the PMU's bits of reads
            return -1, self.pmu.misc_enable(0) if op.kind == RDMSR else 0
        try:
            if op.kind == RDMSR:
                return -1, self.pmu.rdmsr(0, op.ecx)
            if op.kind == WRMSR:
                self.pmu.wrmsr(0, op.ecx, op.value)
                return -1, 0
            return -1, self.pmu.rdpmc(0, op.ecx)
        except self.fault:
            return GP, 0


@dataclass(frozen=True)
class Checkpoint:
    done: int
    digest: int
    gp: int
    pmis: int = 0


def expected(seed: int, n: int, every: int, model: str = "0F_04") -> list[Checkpoint]:
    rep, h, gp, out = Replay(model), FNV_OFFSET, 0, []
    for i, op in enumerate(ops(seed, n)):
        vec, val = rep.run(op)
        gp += vec == GP
        h = _fnv(_fnv(_fnv(h, i, 4), vec & 0xFFFFFFFF, 4), covered(op, vec, val), 8)
        if (i + 1) % every == 0 or i + 1 == n:
            out.append(Checkpoint(i + 1, h, gp))
    return out


def first_difference(seed: int, dumped: list[tuple], model: str = "0F_04") -> str | None:
    """The first of the guest's dumped operations (FZD lines: index, kind, ring3, ecx, value,
    vector, value read) whose covered result differs from the replay's, in words."""
    rep = Replay(model)
    by_index = {d[0]: d for d in dumped}
    for i, op in enumerate(ops(seed, max(by_index) + 1)):
        vec, val = rep.run(op)
        d = by_index.get(i)
        if d is None:
            continue
        gvec, gval = d[5], d[6]
        if (gvec, covered(op, gvec, gval)) != (vec, covered(op, vec, val)):
            return (f"operation {i}: {op.show()}: the guest got vector {gvec} value 0x{gval:x}, "
                    f"the emulator alone gives vector {vec} value 0x{val:x}")
    return None


_FZ = re.compile(r"^FZ (\d+) ([0-9a-f]+) (\d+) (\d+)$")
_FZD = re.compile(r"^FZD (\d+) (\w+) (\d) 0x([0-9a-f]+) 0x([0-9a-f]+) (-?\d+) 0x([0-9a-f]+)$")


def parse(lines: list[str]) -> tuple[list[Checkpoint], list[tuple], list[str]]:
    """(checkpoints, dumped operations, other fuzz lines: FZC check failures, FZX vectors)."""
    cps, dumped, other = [], [], []
    for line in lines:
        if m := _FZ.match(line):
            cps.append(Checkpoint(int(m[1]), int(m[2], 16), int(m[3]), int(m[4])))
        elif m := _FZD.match(line):
            dumped.append((int(m[1]), m[2], int(m[3]), int(m[4], 16), int(m[5], 16),
                           int(m[6]), int(m[7], 16)))
        elif line.startswith(("FZC ", "FZX ")):
            other.append(line)
    return cps, dumped, other
