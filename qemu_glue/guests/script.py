"""Command scripts for the probe guests and the guests' answers (format: layout.py).

- `Script` builds a script (records of layout.py) and writes the multiboot module.
- `parse_serial` reads a guest's COM1 output into `Answer`s.
"""
from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field
from pathlib import Path

from . import layout as L

GP, UD = 13, 6  # exception vectors: general protection, invalid opcode


def vector_name(v) -> str:
    """#GP, #UD, ... without the '#'; the number for other vectors."""
    return {GP: "GP", UD: "UD", 14: "PF", 0: "DE"}.get(v, str(v))


@dataclass(frozen=True)
class Op:
    op: str
    ecx: int = 0
    value: int = 0
    mode: str = "ring0"
    prefix: str = "none"
    fsetup: str = "popf"
    fmem: int = 0
    ebx: int = 0xB0B0B0B0
    eflags: int = 0x2
    hi: int = 0
    tag: str = ""

    def describe(self) -> str:
        if self.op in L.PROBED_OPS:
            where = f"{self.mode}/{self.prefix}/{self.fsetup}"
            if self.hi:
                where += f"/hi=0x{self.hi:x}"
            arg = f" ECX=0x{self.ecx:x}"
            if self.op == "WRMSR":
                arg += f" EDX:EAX=0x{self.value:x}"
            return f"{self.op}{arg} [{where}]"
        if self.op == "CPUID":
            return f"CPUID 0x{self.ecx:x}.{self.value:x}"
        if self.op == "SETPCE":
            return f"SETPCE {self.value}"
        return self.op


class Script:
    """A list of records for one guest (bits = 32 or 64)."""

    def __init__(self, bits: int):
        assert bits in (32, 64)
        self.bits = bits
        self.ops: list[Op] = []

    def __len__(self) -> int:
        return len(self.ops)

    def add(self, op: str, **kw) -> int:
        o = Op(op, **kw)
        if o.op not in L.OPS:
            raise ValueError(f"unknown op {op}")
        if o.mode not in L.MODES or o.prefix not in L.PREFIX_INDEX or \
                o.fsetup not in L.FSETUP_INDEX:
            raise ValueError(f"bad record {o}")
        if self.bits not in L.PREFIXES[L.PREFIX_INDEX[o.prefix]][2]:
            raise ValueError(f"prefix {o.prefix} does not exist in {self.bits}-bit code")
        if o.mode == "cs_base" and self.bits == 64:
            raise ValueError("cs_base mode exists only in the 32-bit guest")
        if self.bits == 32 and o.hi:
            raise ValueError("hi (upper register halves) exists only in the 64-bit guest")
        self.ops.append(o)
        return len(self.ops) - 1

    def rdmsr(self, msr: int, **kw) -> int:
        return self.add("RDMSR", ecx=msr, **kw)

    def wrmsr(self, msr: int, value: int, **kw) -> int:
        return self.add("WRMSR", ecx=msr, value=value, **kw)

    def rdpmc(self, ecx: int, **kw) -> int:
        return self.add("RDPMC", ecx=ecx, **kw)

    def cpuid(self, leaf: int, sub: int = 0, **kw) -> int:
        return self.add("CPUID", ecx=leaf, value=sub, **kw)

    def set_pce(self, on: bool, **kw) -> int:
        return self.add("SETPCE", value=int(bool(on)), **kw)

    def indices(self, tag: str | None = None, prefix: str | None = None) -> list[int]:
        """Records with exactly `tag`, or whose tag starts with `prefix`."""
        return [i for i, o in enumerate(self.ops)
                if (tag is None or o.tag == tag) and (prefix is None or o.tag.startswith(prefix))]

    def to_bytes(self) -> bytes:
        out = [struct.pack("<IIII", L.MAGIC, L.VERSION, len(self.ops), 0)]
        for o in self.ops:
            out.append(struct.pack(
                "<BBBBIQIIII", L.OPS[o.op], L.MODES[o.mode], L.PREFIX_INDEX[o.prefix],
                L.FSETUP_INDEX[o.fsetup], o.ecx & 0xFFFFFFFF, o.value & (2**64 - 1),
                o.fmem & 0xFFFFFFFF, o.ebx & 0xFFFFFFFF, o.eflags & 0xFFFFFFFF,
                o.hi & 0xFFFFFFFF))
        data = b"".join(out)
        assert len(data) == L.HEADER_SIZE + L.RECORD_SIZE * len(self.ops)
        return data

    def write(self, path: Path) -> Path:
        path = Path(path)
        path.write_bytes(self.to_bytes())
        return path


# --------------------------------------------------------------------------------------------
# Guest output


@dataclass(frozen=True)
class Answer:
    index: int
    res: str  # "ok", "fault", "skip"
    vector: int | None
    error: int | None
    val: int | tuple[int, ...] | None  # EDX:EAX, CPUID (eax, ebx, ecx, edx), or None
    flags: int  # EFLAGS after the flag setup (reference run)
    chk: tuple[str, ...]  # guest-side check failures ("" = none)

    def show(self) -> str:
        if self.res == "fault":
            s = f"#{vector_name(self.vector)}({self.error})"
        elif self.res == "ok" and isinstance(self.val, int):
            s = f"ok 0x{self.val:x}"
        else:
            s = self.res
        return s


@dataclass
class GuestOutput:
    text: str
    lines: list[str]
    answers: dict[int, Answer] = field(default_factory=dict)
    booted: bool = False
    bits: int | None = None
    script_len: int | None = None
    done: bool = False
    panic: str | None = None
    no_long_mode: bool = False
    smoke: list[str] = field(default_factory=list)


_R = re.compile(r"^R (\d+) res=(\S+) val=(\S+) fl=([0-9a-f]+) chk=(\S+)$")


def parse_serial(text: str) -> GuestOutput:
    lines = [ln.rstrip("\r") for ln in text.splitlines()]
    g = GuestOutput(text, lines)
    for ln in lines:
        if ln.startswith("BOOT "):
            g.booted = True
            m = re.search(r"bits=(\d+)", ln)
            g.bits = int(m.group(1)) if m else None
        elif ln.startswith("SCRIPT n="):
            g.script_len = int(ln.split("=", 1)[1])
        elif ln.startswith("DONE "):
            g.done = True
        elif ln.startswith("PANIC "):
            g.panic = ln[6:]
        elif ln.startswith("NOLONGMODE"):
            g.no_long_mode = True
        elif ln.startswith("SMOKE "):
            g.smoke.append(ln[6:])
        else:
            m = _R.match(ln)
            if not m:
                continue
            idx, res, val, fl, chk = m.groups()
            vector = error = None
            if res.startswith("f"):
                v, e = res[1:].split(":")
                vector, error, res = int(v), int(e, 16), "fault"
            if val == "-":
                value = None
            elif "." in val:
                value = tuple(int(x, 16) for x in val.split("."))
            else:
                value = int(val, 16)
            g.answers[int(idx)] = Answer(int(idx), res, vector, error, value, int(fl, 16),
                                         () if chk == "ok" else tuple(chk.split(",")))
    return g


__all__ = ["Op", "Script", "Answer", "GuestOutput", "parse_serial", "GP", "UD", "vector_name"]
