"""The PMU model as a library, for unit-testing a driver's programming sequence without QEMU
(docs/library.md).

One job: a small, stable face over `PMU` (the register file and counting engine), the event
table and the programming checker.  Registers by name or number, writes that fault raise
`PMUFault` with the reason (the #GP the hardware would give), activity fed as clocks in which
event lines present values (the engine's own unit: SDM Vol. 3B 18.15.5.2, one value 0-15 per
event line and clock), and the checker's findings collected as the writes go::

    from p4pmu.emulator.library import SimulatedPMU
    pmu = SimulatedPMU("0F_04")
    pmu.wrmsr("MSR_CRU_ESCR0", 0x0400_020C)       # instr_retired NBOGUSNTAG, OS and USR
    pmu.wrmsr("MSR_IQ_COUNTER0", (1 << 40) - 100)  # overflow after 100 events
    pmu.wrmsr("MSR_IQ_CCCR0", 0x0403_9000)         # ENABLE, CRU_ESCR0, OVF_PMI_T0
    pmu.run(60, events={"instr_retired:NBOGUSNTAG": 2})
    assert pmu.ovf(12) and pmu.pmi_request()
"""
from __future__ import annotations

from . import checker as K
from . import decode
from .activity import Activity, ClockKind
from .models import get_model
from .pmu import PMU, PMUFault

__all__ = ["SimulatedPMU", "PMUFault"]


def _msr(reg) -> int:
    """An MSR number from a number or a register name (with or without MSR_, any case)."""
    if isinstance(reg, int):
        return reg
    msr = decode.register_msrs().get(decode.bare_name(reg))
    if msr is None:
        raise KeyError(f"no PMU register named {reg!r}")
    return msr


def _lines(events: dict | None, lp: int) -> dict:
    """{"event:MASKBIT": value} -> ClockKind lines {(event, bit, lp): value}."""
    out = {}
    for spec, value in (events or {}).items():
        event, _, bit = spec.partition(":")
        if not bit:
            raise ValueError(f"{spec!r}: name the mask bit (event:BIT), e.g. "
                             "instr_retired:NBOGUSNTAG")
        if not 0 <= int(value) <= 15:
            raise ValueError(f"{spec!r}: a line presents 0-15 per clock, got {value}")
        out[(event, bit, lp)] = int(value)
    return out


class SimulatedPMU:
    """One NetBurst core's PMU: `model` a CPU model key (docs/emulator.md), `ht` two logical
    processors sharing it, `strict` every undocumented bit faults (docs/bridge.md)."""

    def __init__(self, model: str = "0F_04", *, ht: bool = False, strict: bool = False,
                 stepping: int | None = None):
        self.pmu = PMU(get_model(model, stepping), ht=ht, strict=strict)
        self.checker = K.Checker()
        self.findings: list[K.Finding] = []  # the checker's, in the order the writes made them

    # -- registers -----------------------------------------------------------------------------

    def wrmsr(self, reg, value: int, lp: int = 0) -> list[K.Finding]:
        """WRMSR; raises PMUFault (the #GP(0), with its reason) where the hardware faults.
        Returns the checker's new findings (also appended to `findings`)."""
        msr = _msr(reg)
        r = self.pmu.registers.get(msr)
        counting = r is not None and r.kind == "counter" and bool(self.pmu.running()[r.index])
        self.pmu.wrmsr(lp, msr, value)
        new = self.checker.write(self.pmu, msr, value, counting)
        self.findings += new
        return new

    def rdmsr(self, reg, lp: int = 0) -> int:
        return int(self.pmu.rdmsr(lp, _msr(reg)))

    def rdpmc(self, ecx: int, lp: int = 0) -> int:
        """RDPMC: ECX[30:0] the counter, ECX[31] a fast (32-bit) read."""
        return int(self.pmu.rdpmc(lp, ecx))

    def describe(self, reg) -> str:
        """The register's value decoded (the trace's and the log's wording)."""
        msr = _msr(reg)
        return decode.describe(msr, self.rdmsr(msr), self.pmu.model)

    # -- activity ------------------------------------------------------------------------------

    def run(self, clocks: int, *, events: dict | None = None, lp: int = 0, cpl: int = 3,
            other: dict | None = None, other_cpl: int = 3) -> None:
        """`clocks` clocks of logical processor `lp` at privilege level `cpl`, in each of
        which every event line in `events` ({"event:MASKBIT": value 0-15}) presents that
        value (instructions retired: instr_retired:NBOGUSNTAG = instructions per clock,
        at most 3 on NetBurst).  With Hyper-Threading, `other` is the sibling's lines in the
        same clocks (None: the sibling is halted)."""
        if clocks <= 0:
            return
        os_ = [False, False]
        active = [False, False]
        lines = _lines(events, lp)
        os_[lp], active[lp] = cpl == 0, True
        if other is not None:
            if not self.pmu.ht:
                raise ValueError("`other` needs ht=True: without Hyper-Threading there is "
                                 "no second logical processor")
            lines.update(_lines(other, 1 - lp))
            os_[1 - lp], active[1 - lp] = other_cpl == 0, True
        kind = ClockKind(active=tuple(active), os=tuple(os_), lines=lines)
        self._advance(kind, clocks)

    def idle(self, clocks: int) -> None:
        """`clocks` clocks with no logical processor active (HLT)."""
        if clocks > 0:
            self._advance(ClockKind(active=(False, False)), clocks)

    def _advance(self, kind: ClockKind, clocks: int) -> None:
        """Step in parts no longer than the horizon (the clock before any OVF 0 -> 1), so
        that overflows, cascades and the PMI arming happen at their exact clock."""
        while clocks > 0:
            h = self.pmu.horizon()
            part = clocks if h > clocks else max(1, int(h) - 1) if h > 1 else 1
            self.pmu.advance(Activity.from_kinds([kind], [part]))
            clocks -= part

    # -- state ---------------------------------------------------------------------------------

    def counter(self, n: int) -> int:
        return int(self.pmu.counter[n])

    def ovf(self, n: int) -> bool:
        """CCCR n's OVF flag (bit 31, sticky: SDM 18.15.5.4)."""
        return bool(self.pmu.ovf[n])

    def pmi_request(self, lp: int = 0) -> bool:
        """Is the performance-monitoring interrupt requested for `lp` (SDM 18.15.5.8; the
        request stays while OVF is set: docs/guest-events.md, "PMI delivery")?"""
        return self.pmu.pmi_request(lp)

    def end_findings(self) -> list[K.Finding]:
        """The findings only the end of a sequence shows (ESCRs programmed and never
        selected); also appended to `findings`."""
        new = self.checker.idle(self.pmu)
        self.findings += new
        return new
