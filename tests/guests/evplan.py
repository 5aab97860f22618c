"""Measurement plans for the events guests: many (programming, loop, ring, length)
measurements in one guest run.

A `Setup` is a PMU programming: counters, each with its ESCR image and CCCR options, plus
extra register writes (tagging ESCRs).  A `Plan` runs, for every setup, loop, ring and
iteration count:

    warm-up: meas NAME N0 (counted, then discarded) -- leaves the predictor entries of the
             loop and of the call into it in the state they produce, the same before every
             measurement
    counters := 0
    meas NAME N [u]: 18 enabling WRMSRs, loop_NAME(N), 18 disabling WRMSRs -- straight-line
             assembly (common/evasm.S), so no branch outside the loop runs in the counting
             window and nothing there depends on predictor history
    read every counter -> tag "<setup>.<loop>.r<ring>.<N>.c<k>"

The code in the counting window is the same for every N except for the loop itself, so the
difference of two lengths is the loop's own contribution, also for mispredictions and clocks
(docs/guest-events.md I3: the WRMSR that enables a counter is counted by it, the disabling
one is not; both are the same in every measurement).  (A first version enabled the counters
from the C interpreter: its own branches, e.g. "ring 3 or not", then mispredicted
differently before the N1 and the N2 measurement -- one misprediction of difference.)
"""
from __future__ import annotations

from dataclasses import dataclass, field

from . import evscript as S


@dataclass(frozen=True)
class Ctr:
    n: int                      # counter 0-17
    escr: str                   # ESCR name, e.g. "MSR_CRU_ESCR0"
    event: str
    bits: tuple[str, ...]
    os: bool = False            # T0_OS
    usr: bool = False           # T0_USR
    t1_os: bool = False
    t1_usr: bool = False
    compare: bool = False
    complement: bool = False
    threshold: int = 0
    edge: bool = False
    tag_enable: bool = False
    tag_value: int = 0

    def escr_value(self) -> int:
        return S.escr_value(self.event, *self.bits, t0_os=self.os, t0_usr=self.usr,
                            t1_os=self.t1_os, t1_usr=self.t1_usr,
                            tag_enable=self.tag_enable, tag_value=self.tag_value)

    def qualified(self, ring: int, lp: int = 0) -> bool:
        """Does an event of logical processor `lp` at `ring` pass the T-bits (I3)?"""
        if lp == 0:
            return self.os if ring == 0 else self.usr
        return self.t1_os if ring == 0 else self.t1_usr

    def cccr_value(self, enable: bool = True) -> int:
        return S.cccr_value(self.n, self.escr, enable=enable, compare=self.compare,
                            complement=self.complement, threshold=self.threshold,
                            edge=self.edge)


@dataclass
class Setup:
    name: str
    counters: list[Ctr]
    # ESCRs that only tag (uop_type on RAT_ESCRx, upstream execution-tagging ESCRs):
    # (ESCR name, value)
    escr_writes: list[tuple[str, int]] = field(default_factory=list)
    # other MSRs (MSR_PEBS_ENABLE, MSR_PEBS_MATRIX_VERT): (address, value)
    msr_writes: list[tuple[int, int]] = field(default_factory=list)

    def check(self) -> None:
        seen: dict[str, int] = {}
        for c in self.counters:
            v = c.escr_value()
            if seen.get(c.escr, v) != v:
                raise ValueError(f"setup {self.name}: two counters need different values of "
                                 f"{c.escr}")
            seen[c.escr] = v
        if len({c.n for c in self.counters}) != len(self.counters):
            raise ValueError(f"setup {self.name}: a counter is used twice")

    def escr_images(self) -> dict[str, int]:
        out = {c.escr: c.escr_value() for c in self.counters}
        for name, v in self.escr_writes:
            out[name] = v
        return out


def tag(setup: str, loop: str, ring: int, n: int, counter: int) -> str:
    return f"{setup}.{loop}.r{ring}.{n}.c{counter}"


@dataclass
class Plan:
    setups: list[Setup]
    loops: list[str]
    rings: tuple[int, ...] = (0, 3)
    ns: tuple[int, int] = (120, 1200)
    warmup: int = 24
    intr: bool = False  # measured calls with EFLAGS.IF = 1 (meas ... i)

    def script(self) -> S.EvScript:
        s = S.EvScript()
        used = sorted({name for st in self.setups for name in st.escr_images()})
        msrs = sorted({a for st in self.setups for a, _ in st.msr_writes})
        for st in self.setups:
            st.check()
            s.comment(f"setup {st.name}")
            for c in range(18):  # everything off
                s.wrmsr(S.cccr_msr(c), 0)
            for name in used:  # no tagging or selection left over from another setup
                s.wrmsr(S.escr_msr(name), 0)
            for name, v in st.escr_images().items():
                s.wrmsr(S.escr_msr(name), v)
            for a in msrs:
                s.wrmsr(a, dict(st.msr_writes).get(a, 0))
            s.measure_table([(S.cccr_msr(c.n), c.cccr_value(True)) for c in st.counters],
                            [(S.cccr_msr(c.n), c.cccr_value(False)) for c in st.counters])
            for loop in self.loops:
                for ring in self.rings:
                    for n in self.ns:
                        # warm-up through the same code (the same call sites: the
                        # indirect CALL of the loop must find its own target in the BTB)
                        s.measure(loop, self.warmup, user=ring == 3, intr=self.intr)
                        for c in st.counters:
                            s.wrmsr(S.counter_msr(c.n), 0)
                        s.measure(loop, n, user=ring == 3, intr=self.intr)
                        for c in st.counters:
                            s.rdmsr(S.counter_msr(c.n), tag(st.name, loop, ring, n, c.n))
        return s

    def delta(self, out: S.EvOutput, setup: str, loop: str, ring: int, counter: int) -> int:
        n1, n2 = self.ns
        return out[tag(setup, loop, ring, n2, counter)] - out[tag(setup, loop, ring, n1, counter)]

    def value(self, out: S.EvOutput, setup: str, loop: str, ring: int, n: int,
              counter: int) -> int:
        return out[tag(setup, loop, ring, n, counter)]
