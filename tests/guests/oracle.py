"""What the probe guests' answers should be, and where they differ.

- `Oracle` replays a script on `p4pmu.emulator.pmu.PMU` (one table, one truth) plus the
  architectural rules the PMU does not see (CPL and CR4.PCE checks, LOCK -> #UD), giving the
  expected answer of every record.
- `compare` lists the records whose answer differs from the expectation, or whose guest-side
  checks (registers, flags, fault address) failed, in words a developer can act on.
"""
from __future__ import annotations

from dataclasses import dataclass

from p4pmu.qemu_glue.guests import layout as L
from p4pmu.qemu_glue.guests.script import GP, UD, GuestOutput, Op, Script, vector_name


@dataclass(frozen=True)
class Expect:
    res: str  # "ok" or "fault"
    vector: int | None = None
    error: int | None = None
    val: int | None = None  # None: value not checked here
    why: str = ""

    def show(self) -> str:
        if self.res == "fault":
            return f"#{vector_name(self.vector)}({self.error})"
        return "ok" if self.val is None else f"ok 0x{self.val:x}"


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


__all__ = ["Expect", "Oracle", "compare", "format_problems"]
