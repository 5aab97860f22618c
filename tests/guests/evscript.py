"""Scripts for the events guests (events32 / events64) and their output.

The guest (common/events.c) reads a text script -- one command per line, see the comment at
the top of events.c -- from its first multiboot module and prints machine-readable lines:

    V <tag> <hex>                      a value (RDMSR, RDPMC, LVT read, ...)
    M <tag>                            a mark
    P <i> cpu= vec= lvt= ovf= ip= cs= ctr=   one recorded performance interrupt
    I <count BSP> <count AP> <records> interrupt counts

`EvScript` builds a script (it has `.write(path)`, so it can be given to the `run_guest`
fixture of tests/conftest.py as `script=`), `parse_events` reads the output.  Helpers here
encode PMU register values from the emulator's tables (`p4pmu.emulator.tables/events`), so no
bit position is written twice.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from p4pmu.emulator import events as E
from p4pmu.emulator import tables as T

# evrt.h
VEC_NMI = 2
VEC_PMI = 0x40
LVT_MASK = 1 << 16
LVT_NMI = 4 << 8
PMI_CLEAR_OVF, PMI_RELOAD, PMI_UNMASK, PMI_MINIMAL = 1, 2, 4, 8


# --------------------------------------------------------------------------------------------
# register values from the tables


def escr_msr(name: str) -> int:
    return T.ESCR_BY_NAME[name].msr


def escr_value(event: str, *bits, t0_os=False, t0_usr=False, t1_os=False, t1_usr=False,
               tag_enable=False, tag_value=0) -> int:
    v = E.EVENT_BY_NAME[event].escr_value(*bits, t0_os=t0_os, t0_usr=t0_usr, t1_os=t1_os,
                                          t1_usr=t1_usr)
    F = T.ESCR_FIELD
    if tag_enable:
        v |= F["TAG_ENABLE"].mask
    v |= (tag_value << F["TAG_VALUE"].lo) & F["TAG_VALUE"].mask
    return v


def cccr_value(counter: int, escr: str, *, enable=True, active_thread=3, compare=False,
               complement=False, threshold=0, edge=False, force_ovf=False, pmi_t0=False,
               pmi_t1=False, cascade=False, ext_cascade=False, ovf=False) -> int:
    """CCCR image for `counter` selecting ESCR `escr` (its ESCR number, Table 18-63)."""
    e = T.ESCR_BY_NAME[escr]
    if counter not in e.feeds():
        raise ValueError(f"{escr} does not feed counter {counter} (feeds {e.feeds()})")
    F = T.CCCR_FIELD
    v = e.number << F["ESCR_SELECT"].lo | (active_thread << F["ACTIVE_THREAD"].lo)
    v |= (threshold << F["THRESHOLD"].lo) & F["THRESHOLD"].mask
    for name, on in (("ENABLE", enable), ("COMPARE", compare), ("COMPLEMENT", complement),
                     ("EDGE", edge), ("FORCE_OVF", force_ovf), ("OVF_PMI_T0", pmi_t0),
                     ("OVF_PMI_T1", pmi_t1), ("CASCADE", cascade), ("OVF", ovf),
                     ("EXT_CASCADE", ext_cascade)):
        if on:
            v |= F[name].mask
    return v


def cccr_msr(n: int) -> int:
    return T.CCCR_BASE + n


def counter_msr(n: int) -> int:
    return T.COUNTER_BASE + n


def preset(n_events: int) -> int:
    """Counter value that overflows on the n-th event (40-bit two's complement of n)."""
    return (-n_events) & T.COUNTER_MASK


# --------------------------------------------------------------------------------------------
# scripts


ALIAS = 0x40000000  # 64-bit guest: 1-2 GiB maps 0-1 GiB (arch64/boot.S)


class EvScript:
    def __init__(self):
        self.lines: list[str] = []

    def _add(self, line: str, cpu: int = 0) -> EvScript:
        self.lines.append(("@1 " if cpu else "") + line)
        return self

    def comment(self, text: str) -> EvScript:
        self.lines.append(f"# {text}")
        return self

    def wrmsr(self, msr: int, value: int, cpu: int = 0):
        return self._add(f"w 0x{msr:x} 0x{value:x}", cpu)

    def rdmsr(self, msr: int, tag: str, cpu: int = 0):
        return self._add(f"r 0x{msr:x} {tag}", cpu)

    def rdpmc(self, idx: int, tag: str, cpu: int = 0):
        return self._add(f"pmc 0x{idx:x} {tag}", cpu)

    def loop(self, name: str, n: int, user: bool = False, intr: bool = False, cpu: int = 0,
             alias: bool = False):
        """alias (64-bit guest): run the loop at its second virtual address, ALIAS higher
        (the same physical pages: arch64/boot.S)."""
        assert n >= 1
        return self._add(f"loop {name} {n}" + (" u" if user else "") + (" i" if intr else "")
                         + (" a" if alias else ""), cpu)

    def mtab(self, on: bool, slot: int, msr: int, value: int, cpu: int = 0):
        return self._add(f"mtab {int(on)} {slot} 0x{msr:x} 0x{value:x}", cpu)

    def measure_table(self, on: list[tuple[int, int]], off: list[tuple[int, int]],
                      cpu: int = 0):
        """Fill the measured call's 18-entry WRMSR tables; unused entries repeat the last
        write (the same number of WRMSRs in every measurement)."""
        for flag, writes in ((True, on), (False, off)):
            assert 1 <= len(writes) <= 18
            full = list(writes) + [writes[-1]] * (18 - len(writes))
            for i, (msr, v) in enumerate(full):
                self.mtab(flag, i, msr, v, cpu)
        return self

    def measure(self, name: str, n: int, user: bool = False, cpu: int = 0, intr: bool = False):
        """`meas`: the enabling WRMSRs, loop_NAME(n), the disabling WRMSRs, with no branch
        outside the loop in between (evasm.S); intr: with EFLAGS.IF = 1."""
        assert n >= 1
        return self._add(f"meas {name} {n}" + (" u" if user else "") + (" i" if intr else ""),
                         cpu)

    def lvt(self, value: int, cpu: int = 0):
        return self._add(f"lvt 0x{value:x}", cpu)

    def lvt_read(self, tag: str, cpu: int = 0):
        return self._add(f"lvtr {tag}", cpu)

    def pmi_config(self, flags: int, counter: int = 0, reload: int = 0, cccr: int = 0,
                   max_unmask: int = 0, lvt: int = VEC_PMI):
        return self._add(f"pmicfg {flags} {counter} 0x{reload:x} 0x{cccr:x} {max_unmask} "
                         f"0x{lvt:x}")

    def pmi_reset(self):
        return self._add("pmireset")

    def fuzz(self, seed: int, n: int, every: int, dump_from: int = 0, dump_n: int = 0):
        """n random PMU accesses of the stream `seed` (tests/guests/fuzz.py)."""
        return self._add(f"fuzz 0x{seed:x} {n} {every} {dump_from} {dump_n}")

    def pmi_log(self, cpu: int = 0):
        return self._add("pmilog", cpu)

    def halt(self, n: int, ticks: int, cpu: int = 0):
        return self._add(f"halt {n} {ticks}", cpu)

    def timer(self, ticks: int, cpu: int = 0):
        """Periodic APIC timer interrupts every `ticks` from now on (0: off, and the guest
        prints `timer_count`, the interrupts taken so far)."""
        return self._add(f"timer {ticks}", cpu)

    def sti(self, cpu: int = 0):
        return self._add("sti", cpu)

    def cli(self, cpu: int = 0):
        return self._add("cli", cpu)

    def ap_start(self):
        return self._add("apstart")

    def ap_sync(self, ticks: int):
        """From now on a command for the AP starts only once the BSP is about to halt, plus
        `ticks` TSC ticks (the vCPU threads are not synchronised)."""
        return self._add(f"apsync {ticks}")

    def ap_spin(self, on: bool = True):
        """From now on the BSP busy-waits (a pause loop) while a command runs on the AP,
        instead of waiting in HLT: both logical processors run."""
        return self._add(f"apspin {int(on)}")

    def mark(self, tag: str, cpu: int = 0):
        return self._add(f"mark {tag}", cpu)

    def ticks(self, tag: str, cpu: int = 0):
        return self._add(f"ticks {tag}", cpu)

    # -- composite helpers --------------------------------------------------------------

    def program(self, counter: int, escr: str, escr_val: int, cccr_val: int,
                start: int = 0, cpu: int = 0):
        """ESCR, counter value, CCCR (the CCCR last: it may enable the counter)."""
        self.wrmsr(escr_msr(escr), escr_val, cpu)
        self.wrmsr(counter_msr(counter), start, cpu)
        self.wrmsr(cccr_msr(counter), cccr_val, cpu)
        return self

    def read_counters(self, counters, prefix: str, cpu: int = 0):
        for n in counters:
            self.rdmsr(counter_msr(n), f"{prefix}c{n}", cpu)
        return self

    def read_cccrs(self, counters, prefix: str, cpu: int = 0):
        for n in counters:
            self.rdmsr(cccr_msr(n), f"{prefix}cccr{n}", cpu)
        return self

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"

    def write(self, path: Path) -> Path:
        path = Path(path)
        path.write_text(self.text())
        return path

    def show(self) -> str:
        return self.text()


# --------------------------------------------------------------------------------------------
# output


@dataclass(frozen=True)
class Pmi:
    index: int
    cpu: int
    vec: int
    lvt: int
    ovf: int  # bit n: CCCR n had OVF set when the handler looked
    ip: int
    cs: int
    ctr: int

    @property
    def masked(self) -> bool:
        return bool(self.lvt & LVT_MASK)


@dataclass
class EvOutput:
    values: dict[str, int] = field(default_factory=dict)
    marks: list[str] = field(default_factory=list)
    pmis: list[Pmi] = field(default_factory=list)
    pmi_counts: list[tuple[int, int, int]] = field(default_factory=list)  # one per pmilog
    apic_id: int | None = None

    def __getitem__(self, tag: str) -> int:
        try:
            return self.values[tag]
        except KeyError:
            raise KeyError(f"the guest printed no value {tag!r} "
                           f"(it printed: {', '.join(self.values) or 'none'})") from None


_P = re.compile(r"^P (\d+) cpu=(\d+) vec=(\d+) lvt=([0-9a-f]+) ovf=([0-9a-f]+) "
                r"ip=([0-9a-f]+) cs=([0-9a-f]+) ctr=([0-9a-f]+)$")


def parse_events(lines) -> EvOutput:
    out = EvOutput()
    for ln in lines:
        ln = ln.rstrip("\r")
        if ln.startswith("V "):
            _, tag, val = ln.split()
            out.values[tag] = int(val, 16) if not val.startswith("-") else int(val)
        elif ln.startswith("M "):
            out.marks.append(ln[2:])
        elif ln.startswith("APIC "):
            out.apic_id = int(ln.split()[1])
        elif ln.startswith("I "):
            a, b, c = (int(x) for x in ln.split()[1:])
            out.pmi_counts.append((a, b, c))
        else:
            m = _P.match(ln)
            if m:
                i, cpu, vec = (int(x) for x in m.groups()[:3])
                lvt, ovf, ip, cs, ctr = (int(x, 16) for x in m.groups()[3:])
                out.pmis.append(Pmi(i, cpu, vec, lvt, ovf, ip, cs, ctr))
    return out
