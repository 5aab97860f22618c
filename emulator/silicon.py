"""Published measurements of real NetBurst silicon: the fidelity reference (docs/fidelity.md).

One table: every measurement the model is held against, with the part it was measured on,
its full citation, the program it ran (a workload this project builds: `qemu_glue/workloads`),
what was counted, and the tolerance the comparison allows with the reason for it.  The
values are the published ones, never this emulator's; `qemu_glue/fidelity.py` runs the same
programs in the guest on the matching CPU model, and tests/test_fidelity.py compares.

A measurement's *band* is where p4pmu's value must lie:

* ``runs``: the published values of repeated runs; the band is the median plus or minus
  ``max(abs_tol, rel_tol * median)``;
* ``range``: a published range [lo, hi]; the band is [lo * (1 - rel_tol), hi * (1 + rel_tol)].

Only measurements with ``held=True`` are held by a test (the issue's acceptance list);
the others are shown in docs/fidelity.md for what they tell.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass


@dataclass(frozen=True)
class Source:
    """Where a number was published."""
    cite: str  # authors, title, venue, year
    url: str
    where: str  # table, section, figure or file


@dataclass(frozen=True)
class Measurement:
    key: str  # unique, stable: "<source>.<program>.<quantity>"
    program: str  # the workload run in the guest (qemu_glue/workloads.py)
    event: str  # what was counted, as `p4pmu events --perf` takes it
    part: str  # the silicon it was measured on
    model: str  # the CPU model of emulator/models.py that matches that part
    values: tuple  # the published runs, or (lo, hi) for a range
    kind: str  # "runs" or "range"
    rel_tol: float
    abs_tol: float
    why: str  # why this tolerance
    source: Source
    held: bool = True

    @property
    def centre(self) -> float:
        """The median of the runs, or the middle of the range."""
        if self.kind == "range":
            return (self.values[0] + self.values[1]) / 2
        return float(statistics.median(self.values))

    def band(self) -> tuple[float, float]:
        """(lo, hi): the values of p4pmu this measurement accepts."""
        if self.kind == "range":
            lo, hi = self.values
            return lo * (1 - self.rel_tol), hi * (1 + self.rel_tol)
        m = self.centre
        d = max(self.abs_tol, self.rel_tol * m)
        return m - d, m + d

    def holds(self, value: float) -> bool:
        lo, hi = self.band()
        return lo <= value <= hi

    def tolerance_text(self) -> str:
        if self.kind == "range":
            return f"range widened by {self.rel_tol:.0%}" if self.rel_tol else "range"
        parts = []
        if self.abs_tol:
            parts.append(f"{self.abs_tol:,.0f}")
        if self.rel_tol:
            parts.append(f"{self.rel_tol * 100:g} %")
        return ("max(" + ", ".join(parts) + ")") if len(parts) > 1 else parts[0]


# --------------------------------------------------------------------------------------------
# Sources
# --------------------------------------------------------------------------------------------

WEAVER_ISPASS13 = Source(
    cite="V. M. Weaver, D. Terpstra, S. Moore, \"Non-Determinism and Overcount on Modern "
         "Hardware Performance Counter Implementations\", IEEE ISPASS 2013; the benchmark's "
         "published per-run results (github.com/deater/deterministic, static/results/"
         "pentiumd/0, ten runs per binary, perfmon2 on Linux 2.6.28, user-level counts)",
    url="https://github.com/deater/deterministic",
    where="Table III-V; static/results/pentiumd/0/{inst,branches,uops}_retired.{all,int,fp,sse}",
)

# The machine of those results (static/results/pentiumd/0/*: "Family 15, Model 6, Stepping 4,
# Intel(R) Xeon(TM) CPU 3.46GHz"): a Dempsey Xeon, the Presler core of the 0F_06 model
PRESLER_XEON = "Xeon 3.46 GHz (Dempsey: Presler core, 65 nm), CPUID 0F_06 stepping 4"

# --------------------------------------------------------------------------------------------
# The deterministic benchmark's counts on silicon (ten runs each)
# --------------------------------------------------------------------------------------------

_DETERMINISTIC_RUNS = {
    # (binary, quantity) -> the ten published values
    ("all", "instr"): (229600599, 229600599, 229600600, 229600600, 229600600, 229600600,
                       229600602, 229600602, 229600603, 229600603),
    ("int", "instr"): (107400594, 107400596, 107400596, 107400596, 107400598, 107400599,
                       107400599, 107400599, 107400599, 107400599),
    ("fp", "instr"): (46700036,) * 10,
    ("sse", "instr"): (75500035,) + (75500036,) * 9,
    ("all", "branch"): (9250772, 9250773, 9250774, 9250774, 9250774, 9250774, 9250774,
                        9250775, 9250775, 9250776),
    ("int", "branch"): (8750632, 8750632, 8750633, 8750633, 8750634, 8750634, 8750635,
                        8750636, 8750636, 8750639),
    ("fp", "branch"): (200082, 200083, 200083, 200083, 200083, 200083, 200084, 200084,
                       200084, 200084),
    ("sse", "branch"): (300065, 300066, 300066, 300066, 300066, 300067, 300067, 300067,
                        300067, 300067),
    ("all", "uops"): (12551883414, 12551883801, 12551922375, 12552021874, 12553638916,
                      12555248358, 12556646881, 12557051429, 12560056977, 12561873586),
    ("int", "uops"): (12048252055, 12048252688, 12048515967, 12048560721, 12049567687,
                      12050829414, 12052066549, 12054351917, 12056412469, 12062184392),
    ("fp", "uops"): (342917483, 342917692, 342917692, 342917692, 342917692, 342917692,
                     342917692, 342917693, 342917901, 342917902),
    ("sse", "uops"): (160716016, 160716224, 160716224, 160716224, 160716225, 160716225,
                      160716412, 160716433, 160716433, 160716433),
}

_EVENTS = {
    "instr": "instr_retired:NBOGUSNTAG:u",
    "branch": "branch_retired:MMNP:MMNM:MMTP:MMTM:u",
    "uops": "uops_retired:NBOGUS:u",
}

_WHY = {
    "instr": "silicon's ten runs agree within 10; what remains between two systems is the "
             "count of page faults and interrupts taken from user code (a kernel and timer "
             "rate other than the measured Linux 2.6.28), a few hundred to a few thousand",
    "branch": "as for instructions: page faults and interrupts taken from user code each add "
              "a branch, and their number depends on the system",
    "uops": "the uop counts per instruction come from published per-instruction tables, not "
            "from this measurement; silicon's own spread is under 0.001 % (x87, SSE) to "
            "0.12 % (REP strings, whose microcode depends on alignment and interrupts)",
}

_TOL = {"instr": (0.0001, 2500), "branch": (0.0001, 2500), "uops": (0.02, 0)}

MEASUREMENTS: tuple[Measurement, ...] = tuple(
    Measurement(
        key=f"weaver13.deterministic-{binary}.{q}",
        program=f"deterministic-{binary}",
        event=_EVENTS[q],
        part=PRESLER_XEON,
        model="0F_06",
        values=runs,
        kind="runs",
        rel_tol=_TOL[q][0],
        abs_tol=_TOL[q][1],
        why=_WHY[q],
        source=WEAVER_ISPASS13,
    )
    for (binary, q), runs in _DETERMINISTIC_RUNS.items()
)

BY_KEY = {m.key: m for m in MEASUREMENTS}


def by_program() -> dict[str, list[Measurement]]:
    """program -> its measurements, in table order."""
    out: dict[str, list[Measurement]] = {}
    for m in MEASUREMENTS:
        out.setdefault(m.program, []).append(m)
    return out


# --------------------------------------------------------------------------------------------
# Load-to-use latency of a dependent load chain, per memory level (clocks per load)
# --------------------------------------------------------------------------------------------

AIDA = Source(
    cite="the InstLatx64 project's EVEREST / AIDA64 latency dumps of family-15 parts "
         "(MemLatX86: a dependent chain of loads over blocks of growing size)",
    url="https://github.com/InstLatx64/InstLatx64",
    where="GenuineIntel0000F24_P4_Northwood_MemLatX86.txt, ...F29..., ...F41_P4_Prescott..., "
          "...F43_P4_Prescott..., ...F44_P4_Smithfield...",
)


@dataclass(frozen=True)
class LoadLatency:
    """Published load-to-use latencies (the range over the parts measured) of one memory
    level on the parts of one CPU model, and the ring the `chase` workload walks to measure
    it in the guest (docs/timing.md)."""
    model: str  # emulator/models.py key
    level: str  # "L1", "L2", "memory"
    ring_kb: int  # the chase workload's ring: held by that level on every model
    lo: float
    hi: float
    parts: str
    source: Source = AIDA

    def holds(self, value: float) -> bool:
        return self.lo <= value <= self.hi


_NORTHWOOD = "Northwood 1.6 and 2.8 GHz, 512 KB L2 (AIDA F24, F29)"
_PRESCOTT = "Prescott-256 Celeron D, Prescott-2M, Smithfield Pentium D (AIDA F41, F43, F44)"
LOAD_LATENCIES: tuple[LoadLatency, ...] = (
    LoadLatency("0F_02", "L1", 4, 2, 2, _NORTHWOOD),
    # F29: 24 at 512 KB blocks, 18-19 for 16-256 KB; F24: 20
    LoadLatency("0F_02", "L2", 128, 18, 24, _NORTHWOOD),
    # 16 MB blocks, 1 KB stride (chipset- and DRAM-dependent)
    LoadLatency("0F_02", "memory", 16384, 262, 316, _NORTHWOOD),
    LoadLatency("0F_04", "L1", 4, 4, 4, _PRESCOTT),
    LoadLatency("0F_04", "L2", 128, 24, 28, _PRESCOTT),
    LoadLatency("0F_04", "memory", 16384, 291, 374, _PRESCOTT),
)


# --------------------------------------------------------------------------------------------
# CPI of compression code (user level): SPEC CPU2000's gzip and bzip2 on a Northwood Xeon
# --------------------------------------------------------------------------------------------

IISWC08 = Source(
    cite="V. M. Weaver, S. A. McKee, \"Can Hardware Performance Counters be Trusted?\", "
         "IEEE IISWC 2008, pp. 141-150; the raw counts of its runs (Xeon 2.8 GHz, Northwood "
         "core, 512 KB L2; SPEC CPU2000 reference inputs, static gcc -O2 i686 binaries; "
         "GLOBAL_POWER_EVENTS:RUNNING / INSTR_RETIRED:NBOGUSNTAG, user level, mean of 7 runs)",
    url="https://github.com/deater/deterministic",
    where="spec/iiswc2008/final/i686.*/pentium_4/{164.gzip,256.bzip2,401.bzip2}.*",
)

# How far beyond the published inputs' range a band reaches, as a factor each way: the same
# part's CPI moves by a factor of 2.33 between the inputs of one program (CPU2006 401.bzip2,
# same source: 1.585 to 3.700), and the guest runs other builds of the same algorithms
# (busybox's gzip and bzip2, Debian's compiler) on another input (300 KB of an x86 binary)
CPI_WIDEN = 1.5
CPI_WHY = ("other builds of the same algorithms on another input: CPI moves by a factor of "
           "2.33 between the inputs of one program on the same part (CPU2006 401.bzip2: "
           "1.585 to 3.700), so the band reaches a factor 1.5 below the lowest and above the "
           "highest published input")


@dataclass(frozen=True)
class PublishedCPI:
    """Published user-level CPI of one program over its inputs on one part, and the guest
    command that stands for it (run on the same CPU model, docs/fidelity.md)."""
    program: str  # the program measured on silicon
    command: str  # what the guest runs (its input prepared by CPI_INPUT)
    model: str
    per_input: tuple  # ((input, CPI), ...)
    part: str = "Xeon 2.8 GHz (Northwood, 512 KB L2), CPUID 0F_02"
    widen: float = CPI_WIDEN
    why: str = CPI_WHY
    source: Source = IISWC08

    @property
    def range(self) -> tuple[float, float]:
        values = [c for _, c in self.per_input]
        return min(values), max(values)

    def band(self) -> tuple[float, float]:
        lo, hi = self.range
        return lo / self.widen, hi * self.widen

    def holds(self, cpi: float) -> bool:
        lo, hi = self.band()
        return lo <= cpi <= hi


# The guest's input: the first 300 KB of its perf binary (the same bytes on every boot)
CPI_INPUT = "head -c 300000 $(command -v perf) > /tmp/cpi.in"
COMPRESSION_CPI: tuple[PublishedCPI, ...] = (
    PublishedCPI("164.gzip", "busybox gzip -9 -c /tmp/cpi.in", "0F_02",
                 (("graphic", 1.365), ("log", 1.343), ("program", 1.453), ("random", 1.245),
                  ("source", 1.502))),
    PublishedCPI("256.bzip2", "busybox bzip2 -c /tmp/cpi.in", "0F_02",
                 (("graphic", 2.083), ("program", 1.767), ("source", 2.209))),
)
