"""Command scripts for the probe guests, their answers, and what the answers should be.

- `Script` builds a script (records of layout.py) and writes the multiboot module.
- `parse_serial` reads a guest's COM1 output.
- `Oracle` replays a script on `p4pmu.emulator.pmu.PMU` (one table, one truth) plus the
  architectural rules the PMU does not see (CPL and CR4.PCE checks, LOCK -> #UD), giving the
  expected answer of every record.
- `compare` lists the records whose answer differs from the expectation, or whose guest-side
  checks (registers, flags, fault address) failed, in words a developer can act on.
"""
from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field
from pathlib import Path

from . import layout as L

GP, UD = 13, 6


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
            s = f"#{_vec_name(self.vector)}({self.error})"
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


# --------------------------------------------------------------------------------------------
# Expectations


@dataclass(frozen=True)
class Expect:
    res: str  # "ok" or "fault"
    vector: int | None = None
    error: int | None = None
    val: int | None = None  # None: value not checked here
    why: str = ""

    def show(self) -> str:
        if self.res == "fault":
            return f"#{_vec_name(self.vector)}({self.error})"
        return "ok" if self.val is None else f"ok 0x{self.val:x}"


def _vec_name(v) -> str:
    return {GP: "GP", UD: "UD", 14: "PF", 0: "DE"}.get(v, str(v))


def _prefix_expectation(name: str) -> str:
    return L.PREFIXES[L.PREFIX_INDEX[name]][3]


class Oracle:
    """Replays a script on the emulator's register file (Contract 1 of docs/architecture.md)
    and the x86 rules around it; `expect(script)` gives one Expect (or None: no opinion) per
    record.  The same object can be asked about several scripts: each replay starts from a
    power-on PMU."""

    def __init__(self, model: str, strict: bool = False, ht: bool = False):
        from p4pmu.emulator.models import get_model
        from p4pmu.emulator.pmu import PMU, PMUFault
        self.model = get_model(model)
        self.strict, self.ht = strict, ht
        self._PMU, self._Fault = PMU, PMUFault

    def new_pmu(self):
        return self._PMU(self.model, ht=self.ht, strict=self.strict)

    def expect(self, script: Script) -> list[Expect | None]:
        from p4pmu.emulator.tables import MSR_IA32_MISC_ENABLE
        pmu = self.new_pmu()
        pce = False
        out: list[Expect | None] = []
        for o in script.ops:
            e: Expect | None = None
            if o.op in L.PROBED_OPS and _prefix_expectation(o.prefix) == "ud":
                e = Expect("fault", UD, 0, why="LOCK prefix on RDMSR/WRMSR/RDPMC is #UD")
            elif o.op in ("RDMSR", "WRMSR"):
                if o.mode == "ring3":
                    e = Expect("fault", GP, 0, why=f"{o.op} at CPL 3 is #GP(0)")
                elif self._PMU.handles(o.ecx):
                    e = self._pmu_call(pmu, o)
                elif o.ecx == MSR_IA32_MISC_ENABLE and o.op == "RDMSR":
                    e = Expect("ok", why="IA32_MISC_ENABLE: bits checked separately")
            elif o.op == "RDPMC":
                if o.mode == "ring3" and not pce:
                    e = Expect("fault", GP, 0, why="RDPMC at CPL 3 with CR4.PCE=0 is #GP(0)")
                else:
                    e = self._pmu_call(pmu, o)
            elif o.op == "SETPCE":
                pce = bool(o.value)
                e = Expect("ok")
            elif o.op in ("ECHO", "CR4"):
                e = Expect("ok")
            out.append(e)
        return out

    def _pmu_call(self, pmu, o: Op) -> Expect:
        try:
            if o.op == "RDMSR":
                return Expect("ok", val=pmu.rdmsr(0, o.ecx))
            if o.op == "WRMSR":
                pmu.wrmsr(0, o.ecx, o.value & (2**64 - 1))
                return Expect("ok")
            return Expect("ok", val=pmu.rdpmc(0, o.ecx))
        except self._Fault as f:
            return Expect("fault", GP, 0, why=str(f))


def compare(script: Script, out: GuestOutput, expects: list[Expect | None],
            indices=None, check_guest: bool = True) -> list[str]:
    """Human-readable problems for the records in `indices` (default: all)."""
    problems = []
    for i in (range(len(script.ops)) if indices is None else indices):
        o, e, a = script.ops[i], expects[i], out.answers.get(i)
        if a is None:
            problems.append(f"#{i} {o.describe()}: no answer from the guest")
            continue
        if a.res == "skip":
            problems.append(f"#{i} {o.describe()}: the guest has no such stub")
            continue
        if check_guest and a.chk:
            problems.append(f"#{i} {o.describe()}: guest-side checks failed: {','.join(a.chk)}"
                            f" (registers/flags/fault address differ from the reference run;"
                            f" flags after setup 0x{a.flags:x})")
        if e is None:
            continue
        bad = a.res != e.res
        if not bad and e.res == "fault":
            bad = (a.vector, a.error) != (e.vector, e.error)
        if not bad and e.res == "ok" and e.val is not None:
            bad = a.val != e.val
        if bad:
            why = f" [{e.why}]" if e.why else ""
            problems.append(f"#{i} {o.describe()}: expected {e.show()}, guest got {a.show()}"
                            f"{why}")
    return problems


def format_problems(problems: list[str], limit: int = 40) -> str:
    head = problems[:limit]
    more = f"\n... and {len(problems) - limit} more" if len(problems) > limit else ""
    return f"{len(problems)} problem(s):\n" + "\n".join(head) + more


__all__ = ["Op", "Script", "Answer", "GuestOutput", "parse_serial", "Expect", "Oracle",
           "compare", "format_problems", "GP", "UD"]
