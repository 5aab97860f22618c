"""The Python entry point inside QEMU: serves the plugin's PMU accesses from the emulator.

The C plugin (intercept.c) calls the cffi-embedded functions of plugin/entry_points.py,
which delegate to one `Bridge`.  Python runs only when the guest touches the PMU (RDMSR/WRMSR
of 300h-3FFh, RDMSR of IA32_MISC_ENABLE, RDPMC), never per block or instruction.

The plugin options (``-plugin libp4pmu_plugin.so,name=value,...``) are listed, parsed and
documented by one table: plugin/options.py (docs/options.md).

Every method returns a status the C side understands (OK = 1, FAULT = 2).

Python errors during the run are never silent (plugin/errors.py): entry_points.py catches an
exception of an access method and calls the matching ``*_failed`` method, which reports it
(once per place, with its traceback, on stderr and in the log), counts it for the summary
at QEMU's exit, and completes the access as the hardware would where that is possible:

  RDMSR   the register's last known value: the C mirror's (plugin/mirror.c) while it holds
          this vCPU's registers, else the value stored in the PMU model (without bringing
          the counting up to date), else 0; an address that is no PMU register of the model
          faults (#GP(0), as the model's own RDMSR does)
  WRMSR   dropped: the register keeps its value (status OK, the guest carries on)
  RDPMC   the counter's last known value as for RDMSR (ECX[31]: its low 32 bits), #GP(0) for
          an index beyond the 18 counters (SDM Vol. 2B, RDPMC; the model's PMU.rdpmc)
  RDMSR IA32_MISC_ENABLE   QEMU's value
  deadline                 tried again P4_DEADLINE_RETRY clocks later (the C side's "not
                           handled")
  note, counter rewritten  dropped

One step per core at a time: vCPU threads run at once (multi-threaded TCG) and the GIL passes
between them in the middle of a step (every few milliseconds, and whenever numpy releases
it), so the two logical processors of a core (threads=2) stepping its one PMU together would
interleave their steps and lose updates (a counter's new value computed from the old one
while the sibling added to it).  Every call that reads or steps a core's PMU holds that
core's lock (`_one_step_per_core`); waiting for it releases the GIL, and the C side holds no
lock of its own across a Python call.
"""
from __future__ import annotations

import functools
import os
import sys
import threading
from collections.abc import Callable

import numpy as np

from p4pmu.emulator import tables as T
from p4pmu.plugin.errors import RunErrors
from p4pmu.plugin.options import OptionError, Options, parse_options
from p4pmu.plugin.trace_writer import TREC, TREC_FIELDS, TraceWriter

OK = 1
FAULT = 2

U64 = (1 << 64) - 1
MSR_MISC_ENABLE = 0x1A0
FAULTS_SHOWN = 5  # #GP(0) lines on stderr per kind (without log=), then totals at exit
MAX_FINDINGS_KEPT = 1000  # for the control channel's `state` (stderr and the trace have all)


def _one_step_per_core(method: Callable) -> Callable:
    """`method(self, vcpu, ...)` runs holding the lock of vCPU `vcpu`'s core (the module
    docstring says why)."""
    @functools.wraps(method)
    def stepped(self, vcpu: int, *args):
        with self._core_lock(vcpu):
            return method(self, vcpu, *args)
    return stepped


class Bridge:
    """One PMU per physical core; vCPU v is core v // threads, logical processor v % threads."""

    def __init__(self, options: Options, smp_vcpus: int = 1, max_vcpus: int = 1,
                 pmu_factory: Callable | None = None, native=None):
        from p4pmu.emulator.models import get_model
        from p4pmu.emulator.pmu import PMU, PMUFault
        self.options = options
        # timing=memory: the clocks charge the memory's latency (docs/timing.md); the feeder
        # and the notices read it here
        self.memory_timing = getattr(options, "timing", "core") == "memory"
        self.PMUFault = PMUFault
        try:
            self.model = get_model(options.model, options.stepping)
        except (KeyError, ValueError) as e:
            msg = e.args[0] if e.args else str(e)
            raise OptionError(f"option model={options.model!r}: {msg}") from None
        if not options.errata:
            self.model = self.model.without_errata()
        self.threads = options.threads
        self.smp_vcpus = smp_vcpus
        self.max_vcpus = max(max_vcpus, smp_vcpus, 1)
        ht = self.threads == 2
        if pmu_factory is None:
            def pmu_factory(core: int):
                # with the plugin, the counter state is stored in its C register file
                storage = self.feeder.storage(core) if self.feeder is not None else None
                return PMU(self.model, ht=ht, strict=options.strict, storage=storage)
        self._factory = pmu_factory
        self.pmus: dict[int, object] = {}
        self._lock = threading.Lock()
        self._core_locks: dict[int, threading.Lock] = {}
        self.n_rdmsr = self.n_wrmsr = self.n_rdpmc = self.n_misc = 0
        self.n_faults = 0
        self.fault_kinds: dict[tuple, int] = {}  # (instruction, PMUFault.kind) -> faults
        self.errors = RunErrors(self._write, options.log)  # plugin/errors.py
        self._said: set = set()  # keys of the notices already given (emulator/notices.py)
        self._log = self._open_log(options)
        self._profile = None
        self._profiled = set()
        if os.environ.get("P4PMU_PYPROFILE"):  # development: profile the Python half
            import cProfile
            self._profile = cProfile.Profile()
        self.feeder = None
        if native is not None and options.count != "off":
            from p4pmu.plugin.feeder import Feeder
            self.feeder = Feeder(self, *native)
        self._open_driver_tools(options, native)

    def _open_log(self, options: Options):
        """The text log (option log=), with its first line."""
        if not options.log:
            return None
        try:
            log = open(options.log, "w", buffering=1, encoding="utf-8")
        except OSError as e:
            raise OptionError(f"option log={options.log!r}: {e.strerror}") from None
        log.write(f"# p4pmu bridge: model {self.model.key} stepping {self.model.stepping}, "
                  f"threads={self.threads}, strict={'on' if options.strict else 'off'}, "
                  f"vCPUs {self.smp_vcpus} (max {self.max_vcpus})\n")
        return log

    def _open_driver_tools(self, options: Options, native) -> None:
        """The access trace (option trace=, plugin/trace_writer.py), the programming checker
        (lint=, or with a trace: emulator/checker.py) and the C side's records they and the
        log read (struct p4c_trace)."""
        self._trace = None
        if options.trace:
            try:
                self._trace = TraceWriter(options.trace, self.model, self.threads,
                                          self.smp_vcpus, options.strict,
                                          timed=native is not None and options.count != "off")
            except OSError as e:
                raise OptionError(f"option trace={options.trace!r}: {e.strerror}") from None
        self._checker = None
        if options.lint or self._trace is not None:
            from p4pmu.emulator.checker import Checker
            self._checker = Checker()
        self._ctrace = None
        self._native = native
        self._c_records_on()
        self.findings: list[str] = []  # reported findings, for the control channel
        self.control = None
        if options.control and native is not None:  # plugin/control.py, docs/gdb.md
            from p4pmu.plugin.control import ControlServer
            self.control = ControlServer(self, options.control, options.qmp, *native)
            try:
                self.control.start()
            except OSError as e:
                raise OptionError(f"option control={options.control!r}: {e.strerror}") from None

    def _c_records_on(self) -> None:
        """The C side keeps its records (struct p4c_trace) while the log, a trace or the
        checker reads them."""
        on = self._log is not None or self._trace is not None or self._checker is not None
        if self._native is None or not on or self._ctrace is not None:
            return
        self._ffi, lib = self._native
        self._ctrace = [lib.p4c_trace(v) for v in range(self.max_vcpus)]
        for t in self._ctrace:
            t.on = 1

    @classmethod
    def from_args(cls, args: list[str], smp_vcpus: int, max_vcpus: int,
                  native=None) -> Bridge:
        return cls(parse_options(args), smp_vcpus, max_vcpus, native=native)

    # -- helpers ---------------------------------------------------------------------------

    def core_lp(self, vcpu: int) -> tuple[int, int]:
        return vcpu // self.threads, vcpu % self.threads

    def pmu_of(self, vcpu: int):
        core = vcpu // self.threads
        pmu = self.pmus.get(core)
        if pmu is None:
            with self._lock:
                pmu = self.pmus.get(core)
                if pmu is None:
                    pmu = self.pmus[core] = self._factory(core)
        return pmu

    def _core_lock(self, vcpu: int) -> threading.Lock:
        core = vcpu // self.threads
        lock = self._core_locks.get(core)
        if lock is None:
            with self._lock:
                lock = self._core_locks.setdefault(core, threading.Lock())
        return lock

    @property
    def logging(self) -> bool:
        return self._log is not None

    def _here(self, vcpu: int) -> tuple[int, int, int, int]:
        """(cpl, pc, insns, clk) of vCPU `vcpu`'s current access (struct p4c_trace), or
        zeros without a C side (unit tests with a stand-in)."""
        if self._ctrace is None:
            return (0, 0, 0, 0)
        t = self._ctrace[vcpu]
        return int(t.cpl), int(t.pc), int(t.insns), int(t.clk)

    def _write(self, line: str) -> None:
        if self._log is not None:
            self._log.write(line + "\n")

    def _served(self, vcpu: int) -> None:
        """Write what the C side recorded since this vCPU's last Python call (accesses the
        mirror served, overflows, interrupts, privileged faults: struct p4c_trace) to the
        log and the trace; they come before anything this call writes, so both keep each
        vCPU's order."""
        if self._ctrace is None:
            return
        t = self._ctrace[vcpu]
        n = int(t.n)
        if not n:
            return
        raw = np.frombuffer(self._ffi.buffer(t.rec, n * TREC.itemsize), dtype=TREC)
        recs = list(zip(*(raw[f].tolist() for f in TREC_FIELDS)))
        t.n = 0
        if self._checker is not None:
            self._lint_c_records(vcpu, raw, recs)  # (writes the trace's records too)
        elif self._trace is not None:
            self._trace.c_records(vcpu, recs)
        if self._log is not None:
            pmu = self.pmu_of(vcpu)
            who = self._who(vcpu)
            for op, reg, value, *_ in recs:
                if op == 1:
                    self._write(f"{who}: RDMSR 0x{reg:X}{self._name(pmu, reg)} -> 0x{value:X}")
                elif op == 2:
                    self._write(f"{who}: WRMSR 0x{reg:X}{self._name(pmu, reg)} <- 0x{value:X}")
                elif op == 3:
                    self._write(f"{who}: RDPMC ECX=0x{reg:X} -> 0x{value:X}")

    # -- the programming checker (emulator/checker.py; docs/checker.md) ------------------------

    def _report(self, vcpu: int | None, where, findings) -> None:
        """New findings: on stderr with lint=on, in the trace and the log."""
        for f in findings:
            who = f"vcpu {vcpu}: " if vcpu is not None else ""
            if len(self.findings) < MAX_FINDINGS_KEPT:
                self.findings.append(f"{who}{f.line()}")
            if self.options.lint:
                print(f"p4pmu: finding: {who}{f.line()}", file=sys.stderr, flush=True)
            self._write(f"# finding: {who}{f.line()}")
            if self._trace is not None:
                self._trace.finding(vcpu, where, f)

    def _lint_write(self, vcpu: int, pmu, msr: int, value: int, counting: bool) -> None:
        self._report(vcpu, self._here(vcpu), self._checker.write(pmu, msr, value, counting))

    def _lint_c_records(self, vcpu: int, raw, recs) -> None:
        """The trace's records of what C served, each followed by what the checker says
        about it: counter writes worth a look (made while counting, or a 32-bit preset; the
        programmings C switches to were checked when Python first saw them), the LVT entry
        when a PMI was requested (P4_TR_LVT), and which ESCRs the writes program or select
        (for the findings at the end).  Vectorised: C serves up to 4,096 of them between
        two Python calls."""
        from p4pmu.emulator import checker as K
        from p4pmu.emulator import tables as T
        pmu = self.pmu_of(vcpu)
        ops, regs, vals = raw["op"], raw["reg"].astype(np.int64), raw["value"]
        writes = ops == 2
        self._checker.track_many(pmu, regs[writes], vals[writes])
        ctr = writes & (regs >= T.COUNTER_BASE) & (regs < T.COUNTER_BASE + T.NUM_COUNTERS)
        odd = ((raw["flags"] & 1) != 0) | \
            (((vals >> np.uint64(31)) & np.uint64(1)) == 1) & ((vals >> np.uint64(32)) == 0)
        shown: list[tuple[int, list]] = []
        for i in np.flatnonzero((ctr & odd) | (ops == 7)).tolist():
            op, reg, value, _, cpl, pc, insns, clk, flags = recs[i]
            found = self._checker.new(K.check_write(pmu, reg, value, bool(flags & 1))) \
                if op == 2 else self._checker.lvt(value, reg > 0)
            if found:
                shown.append((i, found))
        start = 0
        for i, found in shown + [(len(recs) - 1, [])]:
            if self._trace is not None:
                self._trace.c_records(vcpu, recs[start:i + 1])
            start = i + 1
            if found:
                op, reg, value, _, cpl, pc, insns, clk, flags = recs[i]
                self._report(vcpu, (cpl, pc, insns, clk), found)

    def _enter(self, vcpu: int, pmu, feeder) -> None:
        """Start of a Python call that may use the PMU: the C fast path stops serving it."""
        if self._profile is not None:
            self._prof()
        self._served(vcpu)
        if feeder.mirror_on:
            feeder.disable_fast_path(vcpu, pmu)
        if self._trace is not None:
            self._trace.before(vcpu, pmu)

    def _consume(self, vcpu: int, pmu, feeder) -> None:
        """The activity up to now (Feeder.consume); the trace gets the overflows and
        cascade starts it made."""
        feeder.consume(vcpu, pmu)
        if self._trace is not None:
            self._trace.after(vcpu, pmu, self._here(vcpu))
            self._trace.before(vcpu, pmu)

    def _leave(self, vcpu: int, pmu, feeder) -> None:
        feeder.after(vcpu, pmu)
        feeder.enable_fast_path(vcpu, pmu)

    def _traced(self, vcpu: int, pmu, op: str, reg: int, value: int | None, **kw) -> None:
        """The access just served by Python into the trace, with the cascade starts it made
        (a write that sets CASCADE while the alternate's OVF is set: SDM 18.15.5.6)."""
        tr = self._trace
        here = self._here(vcpu)
        tr.access(vcpu, here, op, reg, value, **kw)
        tr.after(vcpu, pmu, here, overflows=False)
        tr.flush()

    def _who(self, vcpu: int) -> str:
        core, lp = self.core_lp(vcpu)
        return f"vcpu {vcpu} core {core} lp {lp}"

    def _name(self, pmu, msr: int) -> str:
        try:
            n = pmu.name_of(msr)
        except Exception:
            n = None
        return f" {n}" if n else ""

    def _fault(self, vcpu: int, what: str, fault: Exception) -> int:
        """A #GP(0) for the guest: every one in the log; on stderr (without a log) the first
        FAULTS_SHOWN of each kind, the totals per kind at exit (fault_totals)."""
        self.n_faults += 1
        kind = (what.split()[0], getattr(fault, "kind", "other"))
        n = self.fault_kinds[kind] = self.fault_kinds.get(kind, 0) + 1
        line = f"{self._who(vcpu)}: {what}: #GP(0): {fault}"
        self._write(line)
        if self._log is None and n <= FAULTS_SHOWN:
            print(f"p4pmu: {line}", file=sys.stderr, flush=True)
            if n == FAULTS_SHOWN:
                print(f"p4pmu: further {self._fault_label(kind)} faults are counted, not shown "
                      f"(totals at exit; log=FILE records each one)", file=sys.stderr,
                      flush=True)
        return FAULT

    @staticmethod
    def _fault_label(kind: tuple) -> str:
        from p4pmu.emulator.pmu import FAULT_KINDS
        return f"{kind[0]} #GP(0) ({FAULT_KINDS.get(kind[1], kind[1])})"

    def fault_totals(self) -> str:
        """'' or the #GP(0) totals per kind, e.g. '#GP(0) for PMU accesses: 1500 (WRMSR
        #GP(0) (reserved bits set) 1000, RDMSR #GP(0) (no such MSR on this model) 500)'."""
        if not self.n_faults:
            return ""
        parts = ", ".join(f"{self._fault_label(k)} {n}" for k, n in
                          sorted(self.fault_kinds.items(), key=lambda kv: (-kv[1], kv[0])))
        return f"#GP(0) for PMU accesses: {self.n_faults} ({parts})"

    # -- the accesses (hot path: no formatting unless a log is open) ------------------------

    @_one_step_per_core
    def rdmsr(self, vcpu: int, msr: int) -> tuple[int, int]:
        pmu = self.pmus.get(vcpu // self.threads) or self.pmu_of(vcpu)
        self.n_rdmsr += 1
        feeder = self.feeder
        if feeder is not None:
            self._enter(vcpu, pmu, feeder)
            self._consume(vcpu, pmu, feeder)
        try:
            value = int(pmu.rdmsr(vcpu % self.threads, msr)) & U64
        except self.PMUFault as f:
            if self._trace is not None:
                self._traced(vcpu, pmu, "rdmsr", msr, None, fault=str(f))
            return self._fault(vcpu, f"RDMSR 0x{msr:X}{self._name(pmu, msr)}", f), 0
        finally:
            if feeder is not None:
                self._leave(vcpu, pmu, feeder)
        if self._trace is not None:
            self._traced(vcpu, pmu, "rdmsr", msr, value)
        if self._log is not None:
            self._write(f"{self._who(vcpu)}: RDMSR 0x{msr:X}{self._name(pmu, msr)} -> "
                        f"0x{value:X}")
        return OK, value

    @_one_step_per_core
    def wrmsr(self, vcpu: int, msr: int, value: int) -> int:
        pmu = self.pmus.get(vcpu // self.threads) or self.pmu_of(vcpu)
        self.n_wrmsr += 1
        feeder = self.feeder
        if feeder is not None:
            self._enter(vcpu, pmu, feeder)
            self._consume(vcpu, pmu, feeder)
        # the notices read the emulator's decoded state; a stand-in PMU (tests) has none
        reg = getattr(pmu, "registers", {}).get(msr)
        old = 0  # the ESCR's or CCCR's value before the write (emulator/notices.py)
        if reg is not None and reg.kind == "escr":
            old = int(pmu.escr_raw[reg.index])
        elif reg is not None and reg.kind == "cccr":
            old = int(pmu.cccr_raw[reg.index]) | int(pmu.ovf[reg.index]) << 31
        before = self._last_known(vcpu, msr)[1] if self._trace is not None else None
        counting = self._checker is not None and reg is not None and reg.kind == "counter" \
            and bool(pmu.running()[reg.index])
        try:
            pmu.wrmsr(vcpu % self.threads, msr, value)
        except self.PMUFault as f:
            if self._trace is not None:
                self._traced(vcpu, pmu, "wrmsr", msr, value, fault=str(f))
            return self._fault(vcpu, f"WRMSR 0x{msr:X}{self._name(pmu, msr)} <- 0x{value:X}", f)
        finally:
            if feeder is not None:
                self._leave(vcpu, pmu, feeder)
        if self._trace is not None:
            self._traced(vcpu, pmu, "wrmsr", msr, value, old=before)
        if self._checker is not None and reg is not None:
            self._lint_write(vcpu, pmu, msr, value, counting)
        if self._log is not None:
            self._write(f"{self._who(vcpu)}: WRMSR 0x{msr:X}{self._name(pmu, msr)} <- "
                        f"0x{value:X}")
        if reg is not None and reg.kind in ("cccr", "escr", "pebs_enable", "pebs_matrix_vert"):
            self._check_programming(vcpu, pmu, reg, old)
        return OK

    def _check_programming(self, vcpu: int, pmu, reg, old: int) -> None:
        """Say once what a CCCR, ESCR or replay-tagging write makes untrustworthy
        (emulator/notices.py)."""
        from p4pmu.emulator import notices
        if reg.kind.startswith("pebs"):  # what replay_event counts changed
            for c in pmu.enable.nonzero()[0]:
                self._say(vcpu, notices.unmodelled(pmu, int(c)))
            return
        if reg.kind == "cccr":
            self._say(vcpu, notices.cccr_changed_under(pmu, reg.index, old))
            for n in notices.programming(pmu, reg.index, self.memory_timing):
                self._say(vcpu, n)
            return
        self._say(vcpu, notices.escr_changed_under(pmu, reg.index, old))
        for c in (pmu.escr_index == reg.index).nonzero()[0]:
            for n in notices.programming(pmu, int(c), self.memory_timing):
                self._say(vcpu, n)

    def _say(self, vcpu: int, notice) -> None:
        """A warning for the user, once per notice key: stderr (p4pmu linux shows QEMU's
        "p4pmu: warning:" lines as they come) and the log."""
        if notice is None or notice.key in self._said:
            return
        self._said.add(notice.key)
        line = f"{self._who(vcpu)}: {notice.text}"
        self._write(f"# warning: {line}")
        if self._trace is not None:
            self._trace.note(vcpu, notice.text)
        print(f"p4pmu: warning: {line}", file=sys.stderr, flush=True)

    def counter_rewritten(self, vcpu: int, msr: int, first: int, second: int) -> None:
        """C side: a counter's two back-to-back writes differ (intercept.c)."""
        from p4pmu.emulator import notices
        self._say(vcpu, notices.counter_rewritten(msr, first, second))

    @_one_step_per_core
    def rdpmc(self, vcpu: int, ecx: int) -> tuple[int, int]:
        pmu = self.pmus.get(vcpu // self.threads) or self.pmu_of(vcpu)
        self.n_rdpmc += 1
        feeder = self.feeder
        if feeder is not None:
            self._enter(vcpu, pmu, feeder)
            self._consume(vcpu, pmu, feeder)
        try:
            value = int(pmu.rdpmc(vcpu % self.threads, ecx)) & U64
        except self.PMUFault as f:
            if self._trace is not None:
                self._traced(vcpu, pmu, "rdpmc", ecx, None, fault=str(f))
            return self._fault(vcpu, f"RDPMC ECX=0x{ecx:X}", f), 0
        finally:
            if feeder is not None:
                self._leave(vcpu, pmu, feeder)
        if self._trace is not None:
            self._traced(vcpu, pmu, "rdpmc", ecx, value)
        if self._log is not None:
            self._write(f"{self._who(vcpu)}: RDPMC ECX=0x{ecx:X} -> 0x{value:X}")
        return OK, value

    @_one_step_per_core
    def misc_enable(self, vcpu: int, qemu_value: int) -> tuple[int, int]:
        pmu = self.pmus.get(vcpu // self.threads) or self.pmu_of(vcpu)
        self.n_misc += 1
        self._served(vcpu)  # the log and the trace keep this vCPU's order
        value = int(pmu.misc_enable(qemu_value)) & U64
        if self._log is not None:
            self._write(f"{self._who(vcpu)}: RDMSR 0x1A0 IA32_MISC_ENABLE: QEMU 0x{qemu_value:X}"
                        f" -> 0x{value:X}")
        return OK, value

    def _prof(self) -> None:
        t = threading.get_ident()
        if t not in self._profiled:
            self._profiled.add(t)
            self._profile.enable()  # cProfile follows the thread that enables it

    @_one_step_per_core
    def deadline(self, vcpu: int) -> int:
        """A counting deadline or fold request of vCPU `vcpu` (C side: cb_sched)."""
        pmu = self.pmus.get(vcpu // self.threads) or self.pmu_of(vcpu)
        feeder = self.feeder
        if feeder is not None:
            self._enter(vcpu, pmu, feeder)
            self._consume(vcpu, pmu, feeder)
            self._leave(vcpu, pmu, feeder)
            if self._trace is not None:
                self._trace.flush()
        return OK

    def note(self, vcpu: int, message: str) -> None:
        self._served(vcpu)
        self._write(f"{self._who(vcpu)}: note: {message}")
        if self._trace is not None:
            self._trace.note(vcpu, message)
            self._trace.flush()

    # -- after a Python error (the module docstring; plugin/errors.py) ----------------------

    @property
    def n_errors(self) -> int:
        return self.errors.total

    def _mirror_values(self, vcpu: int):
        """(counters, CCCRs, OVF flags) of the C mirror while it is this vCPU's authority."""
        feeder = self.feeder
        if feeder is None or not feeder.mirror_on or vcpu not in feeder.mirror_vcpus():
            return None
        m = feeder.lib.p4c_mirror(vcpu)
        return (m.ctr, m.cccr, m.ovf) if m.active else None

    def _last_counter(self, vcpu: int, pmu, index: int) -> int:
        mirror = self._mirror_values(vcpu)
        return int(mirror[0][index] if mirror else pmu.counter[index])

    def _last_known(self, vcpu: int, msr: int) -> tuple[int, int]:
        """(status, value) of a PMU register without the counting machinery: the C mirror's
        value while it holds this vCPU's registers, else the model's stored value."""
        pmu = self.pmus.get(vcpu // self.threads)
        regs = getattr(pmu, "registers", None)
        if regs is None:
            return OK, 0  # no PMU yet, or a stand-in
        reg = regs.get(msr)
        if reg is None:
            return FAULT, 0
        if reg.kind == "counter":
            return OK, self._last_counter(vcpu, pmu, reg.index)
        if reg.kind == "cccr":
            mirror = self._mirror_values(vcpu)
            cccr, ovf = (mirror[1][reg.index], mirror[2][reg.index]) if mirror else \
                (pmu.cccr_raw[reg.index], pmu.ovf[reg.index])
            return OK, (int(cccr) & ~(1 << 31)) | (1 << 31 if ovf else 0)  # bit 31: OVF
        if reg.kind == "escr":
            return OK, int(pmu.escr_raw[reg.index])
        return OK, int(getattr(pmu, reg.kind, 0)) & U64

    def _last_pmc(self, vcpu: int, ecx: int) -> tuple[int, int]:
        """(status, value) of RDPMC from the last known counter value (PMU.rdpmc's rules)."""
        from p4pmu.emulator import tables as T
        ecx &= 0xFFFF_FFFF
        index, fast = ecx & 0x7FFF_FFFF, ecx >> 31
        if index >= T.NUM_COUNTERS:
            return FAULT, 0
        pmu = self.pmus.get(vcpu // self.threads)
        if getattr(pmu, "counter", None) is None:
            return OK, 0
        value = self._last_counter(vcpu, pmu, index)
        return OK, value & 0xFFFF_FFFF if fast else value

    @staticmethod
    def _safely(fallback: Callable, default):
        try:
            return fallback()
        except Exception:
            return default

    def log_error(self, where: str, text: str) -> None:
        """An error known only as its traceback text: reported and counted (plugin/errors.py)."""
        self.errors.record_text(where, where, text, "left to QEMU")

    @_one_step_per_core
    def rdmsr_failed(self, vcpu: int, msr: int, exc_info) -> tuple[int, int]:
        status, value = self._safely(lambda: self._last_known(vcpu, msr), (OK, 0))
        self.errors.record("RDMSR", f"RDMSR 0x{msr:X} on vCPU {vcpu}", exc_info,
                           _read_outcome(status, value))
        return status, value

    def wrmsr_failed(self, vcpu: int, msr: int, value: int, exc_info) -> int:
        self.errors.record("WRMSR", f"WRMSR 0x{msr:X} <- 0x{value:X} on vCPU {vcpu}", exc_info,
                           "the write is dropped")
        return OK

    @_one_step_per_core
    def rdpmc_failed(self, vcpu: int, ecx: int, exc_info) -> tuple[int, int]:
        status, value = self._safely(lambda: self._last_pmc(vcpu, ecx), (OK, 0))
        self.errors.record("RDPMC", f"RDPMC ECX=0x{ecx:X} on vCPU {vcpu}", exc_info,
                           _read_outcome(status, value))
        return status, value

    def misc_enable_failed(self, vcpu: int, qemu_value: int, exc_info) -> tuple[int, int]:
        self.errors.record("RDMSR IA32_MISC_ENABLE", f"RDMSR 0x1A0 on vCPU {vcpu}", exc_info,
                           "the guest reads QEMU's value")
        return 0, qemu_value  # not handled: QEMU's value stays

    def deadline_failed(self, vcpu: int, exc_info) -> int:
        retry = self.feeder.lib.P4_DEADLINE_RETRY if self.feeder is not None else 0
        self.errors.record("deadline", f"a counting deadline of vCPU {vcpu}", exc_info,
                           f"the deadline is tried again {retry} clocks later")
        return 0  # not handled: the C side sets no deadline

    def call_failed(self, kind: str, vcpu: int, exc_info) -> int:
        """A notice call (note, counter rewritten) failed: it is dropped."""
        self.errors.record(kind, f"{kind} of vCPU {vcpu}", exc_info, "dropped")
        return 1

    # -- the control channel's writes and trace (plugin/control_state.py) ---------------------

    def control_vcpus(self) -> int:
        """The guest's vCPUs (QEMU's -smp; at -S some may not have started yet)."""
        return self.smp_vcpus

    def control_changed(self, vcpu: int) -> None:
        """vCPU `vcpu` steps (deadline, PMI) at its next block entry."""
        self._native[1].p4c_control_changed(vcpu)

    @_one_step_per_core
    def host_wrmsr(self, vcpu: int, msr: int, value: int) -> tuple[bool, int, str]:
        """A write by the host (gdb's `p4pmu set`), validated as the guest's WRMSR: (done,
        the value before, the reason the hardware would fault).  In the trace as a note."""
        pmu = self.pmu_of(vcpu)
        lp = vcpu % self.threads
        feeder = self.feeder
        if feeder is not None:
            self._enter(vcpu, pmu, feeder)
        try:
            old = int(pmu.rdmsr(lp, msr)) & U64
            pmu.wrmsr(lp, msr, value)
        except self.PMUFault as f:
            return False, 0, str(f)
        finally:
            if feeder is not None:
                self._leave(vcpu, pmu, feeder)
        line = f"host write (control channel): 0x{msr:X}{self._name(pmu, msr)} <- 0x{value:X}"
        self._write(f"{self._who(vcpu)}: {line}")
        if self._trace is not None:
            self._trace.note(vcpu, line)
            self._trace.flush()
        return True, old, ""

    def set_trace(self, path: str | None, on: bool) -> str | None:
        """Start (to `path`, else the option trace='s file, else p4pmu-trace.jsonl) or end
        the access trace; returns its file."""
        if on:
            if self._trace is not None:
                raise ValueError(f"the trace is on already ({self._trace.path})")
            path = path or self.options.trace or "p4pmu-trace.jsonl"
            self._trace = TraceWriter(path, self.model, self.threads, self.smp_vcpus,
                                      self.options.strict, timed=self.feeder is not None)
            if self._checker is None:
                from p4pmu.emulator.checker import Checker
                self._checker = Checker()
            self._c_records_on()
            return path
        if self._trace is None:
            raise ValueError("the trace is off")
        for vcpu in range(self.max_vcpus if self._ctrace is not None else 0):
            self._served(vcpu)
        path, tr = self._trace.path, self._trace
        tr.end(ended_by="control channel")
        tr.close()
        self._trace = None
        return path

    def close(self) -> None:
        """QEMU exits: the profile, the log's summary lines and the error summary."""
        if self.control is not None:
            self.control.close()
        try:
            self._close_profile_and_feeder()
        finally:
            summary = self.errors.summary()
            if summary:
                print(summary, file=sys.stderr, flush=True)
                self._write(f"# {summary}")
            totals = self.fault_totals()
            if totals:
                self._write(f"# {totals}")
                if self._log is None and max(self.fault_kinds.values()) > FAULTS_SHOWN:
                    print(f"p4pmu: {totals}", file=sys.stderr, flush=True)
            if self._log is not None:
                self._log.close()
                self._log = None
            if self._trace is not None:
                self._trace.close()

    def _close_profile_and_feeder(self) -> None:
        if self._profile is not None:
            self._profile.disable()
            self._profile.dump_stats(os.environ["P4PMU_PYPROFILE"])
            self._profile = None
        n_rd, n_wr, n_pmc = self.n_rdmsr, self.n_wrmsr, self.n_rdpmc
        for vcpu in range(self.max_vcpus if self._ctrace is not None else 0):
            self._served(vcpu)
        if self.feeder is not None:
            if self.feeder.mirror_on:
                r, w, p, *_ = self.feeder.mirror_counts()
                n_rd, n_wr, n_pmc = n_rd + r, n_wr + w, n_pmc + p
            self._write(self.feeder.summary())
        self._write(f"# end: {n_rd} RDMSR, {n_wr} WRMSR, {n_pmc} RDPMC, {self.n_misc} "
                    f"MISC_ENABLE reads, {self.n_faults} faults, {self.n_errors} Python errors")
        self._write_discarded_pmis()
        if self._checker is not None:
            if self.feeder is not None and self.feeder.mirror_on:
                for vcpu in self.feeder.mirror_vcpus():  # the registers C changed last
                    self.feeder.disable_fast_path(vcpu, self.pmu_of(vcpu))
            for core in sorted(self.pmus):
                self._report(None, None, self._checker.idle(self.pmus[core]))
        if self._trace is not None:
            dropped = sum(int(t.dropped) for t in self._ctrace or ())
            self._trace.end(rdmsr=n_rd, wrmsr=n_wr, rdpmc=n_pmc, faults=self.n_faults,
                            python_errors=self.n_errors, dropped=dropped)


    def discarded_pmis(self, core: int) -> np.ndarray:
        """Per counter of `core`: overflows whose PMI was discarded before it was raised --
        software cleared OVF before the next counted event (SDM 18.15.5.8), as Linux's P4
        driver does when it stops a counter that has just overflowed: that sample is lost, on
        silicon too.  Python's writes and the C mirror's."""
        pmu = self.pmus.get(core)
        d = np.array(getattr(pmu, "discarded_pmis", np.zeros(T.NUM_COUNTERS)), dtype=np.int64)
        if self.feeder is not None:
            for lp in range(self.threads):
                d = d + self.feeder.mirror_discarded(core * self.threads + lp)
        return d

    def _write_discarded_pmis(self) -> None:
        for core in sorted(self.pmus):
            d = self.discarded_pmis(core)
            if d.any():
                each = ", ".join(f"counter {n}: {int(d[n])}" for n in np.flatnonzero(d))
                self._write(f"# core {core}: interrupts discarded before they were raised "
                            f"(OVF cleared before the next counted event): {each}")


def _read_outcome(status: int, value: int) -> str:
    if status == FAULT:
        return "#GP(0) for the guest (no PMU register of the model)"
    return f"the guest reads 0x{value:X}, the last known value"
