"""The Python entry point inside QEMU: serves the plugin's PMU accesses from the emulator.

The C plugin (intercept.c) calls the cffi-embedded functions defined in build.INIT_CODE,
which delegate to one `Bridge`.  Python runs only when the guest touches the PMU (RDMSR/WRMSR
of 300h-3FFh, RDMSR of IA32_MISC_ENABLE, RDPMC), never per block or instruction.

Plugin options (``-plugin libp4pmu_plugin.so,opt=val,...``; Contract 2 of docs/architecture.md):

  model=0F_04     CPU model key (p4pmu.emulator.models)        default: the models' default
  stepping=N      CPUID stepping 0-15                            default: the model's
  strict=on|off   reserved-bit policy of the PMU model           default: off
  log=PATH        log every PMU access and every fault (with its reason) to PATH
  threads=1|2     logical processors per core: with 2, vCPUs 2k and 2k+1 share one PMU
                  as LP 0 and LP 1                                default: 1
  pypath=DIR[:DIR] site directories to add to sys.path (set by `p4pmu qemu`)
  verbose=on|off  C side: print each intercepted instruction at translation (-d plugin)
  count=auto|on|off  event counting from guest activity (docs/guest-events.md I1)
                                                               default: auto
  pmi=on|off      deliver overflow interrupts                    default: on
  bp_penalty=N    branch misprediction penalty in clocks         default: clockmodel's
  errata=on|off   emulate the model's errata (cascade-PMI)       default: on
  mirror=on|off   let the C-side register mirror serve accesses and deadlines of simple
                  programmings (plugin/mirror.c; docs/bridge.md)  default: on
  exact=on|off    exact deadlines: the counter that drives the deadline is watched in its
                  own events, not in clocks (plugin/deadline.c W2; docs/guest-events.md
                  "Exact deadlines")                            default: on
  lite=on|off     the outcome-free level: while no enabled counter depends on branch
                  outcomes, blocks are translated without outcome callbacks
                  (docs/guest-events.md "The outcome-free level")  default: on

Every method returns a status the C side understands (OK = 1, FAULT = 2); an exception is
reported by the embedding's error handler and the C side then leaves the access to QEMU.
"""
from __future__ import annotations

import os
import sys
import threading
from dataclasses import dataclass
from typing import Callable

OK = 1
FAULT = 2
U64 = (1 << 64) - 1
MSR_MISC_ENABLE = 0x1A0

_TRUE = {"on", "yes", "true", "1"}
_FALSE = {"off", "no", "false", "0"}


class OptionError(ValueError):
    """A bad plugin option: the message is printed and QEMU does not load the plugin."""


@dataclass
class Options:
    model: str | None = None
    stepping: int | None = None
    strict: bool = False
    log: str | None = None
    threads: int = 1
    pypath: str | None = None
    verbose: bool = False
    count: str = "auto"
    pmi: bool = True
    bp_penalty: int | None = None
    errata: bool = True
    mirror: bool = True
    exact: bool = True
    lite: bool = True


OPTION_NAMES = ("model", "stepping", "strict", "log", "threads", "pypath", "verbose", "count",
                "pmi", "bp_penalty", "errata", "mirror", "exact", "lite")


def _bool(name: str, value: str) -> bool:
    v = value.strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise OptionError(f"option {name}={value!r}: expected on or off")


def parse_options(args: list[str]) -> Options:
    """Parse QEMU's plugin arguments ("key=value" strings)."""
    o = Options()
    for a in args:
        if "=" not in a:
            raise OptionError(f"plugin option {a!r} is not key=value; known options: "
                              f"{', '.join(OPTION_NAMES)}")
        k, v = a.split("=", 1)
        k = k.strip()
        if k == "model":
            o.model = v
        elif k == "stepping":
            try:
                o.stepping = int(v, 0)
            except ValueError:
                raise OptionError(f"option stepping={v!r}: expected a number 0-15") from None
            if not 0 <= o.stepping <= 15:
                raise OptionError(f"option stepping={v!r}: expected a number 0-15")
        elif k == "strict":
            o.strict = _bool(k, v)
        elif k == "log":
            if not v:
                raise OptionError("option log= needs a file name")
            o.log = v
        elif k == "threads":
            if v not in ("1", "2"):
                raise OptionError(f"option threads={v!r}: expected 1 or 2 (logical processors "
                                  "per core)")
            o.threads = int(v)
        elif k == "pypath":
            o.pypath = v
        elif k == "verbose":
            o.verbose = _bool(k, v)
        elif k == "count":
            if v not in ("auto", "on", "off"):
                raise OptionError(f"option count={v!r}: expected auto, on or off")
            o.count = v
        elif k == "pmi":
            o.pmi = _bool(k, v)
        elif k == "errata":
            o.errata = _bool(k, v)
        elif k == "mirror":
            o.mirror = _bool(k, v)
        elif k == "exact":
            o.exact = _bool(k, v)
        elif k == "lite":
            o.lite = _bool(k, v)
        elif k == "bp_penalty":
            try:
                o.bp_penalty = int(v, 0)
            except ValueError:
                raise OptionError(f"option bp_penalty={v!r}: expected a number 0-60") from None
            if not 0 <= o.bp_penalty <= 60:
                raise OptionError(f"option bp_penalty={v!r}: expected a number 0-60")
        else:
            raise OptionError(f"unknown plugin option {k!r}; known options: "
                              f"{', '.join(OPTION_NAMES)}")
    return o


class Bridge:
    """One PMU per physical core; vCPU v is core v // threads, logical processor v % threads."""

    def __init__(self, options: Options, smp_vcpus: int = 1, max_vcpus: int = 1,
                 pmu_factory: Callable | None = None, native=None):
        from p4pmu.emulator.models import get_model
        from p4pmu.emulator.pmu import PMU, PMUFault
        self.options = options
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
            def pmu_factory():
                return PMU(self.model, ht=ht, strict=options.strict)
        self._factory = pmu_factory
        self.pmus: dict[int, object] = {}
        self._lock = threading.Lock()
        self._log = None
        self.n_rdmsr = self.n_wrmsr = self.n_rdpmc = self.n_misc = 0
        self.n_faults = self.n_errors = 0
        self._said: set = set()  # keys of the notices already given (emulator/notices.py)
        if options.log:
            try:
                self._log = open(options.log, "w", buffering=1, encoding="utf-8")
            except OSError as e:
                raise OptionError(f"option log={options.log!r}: {e.strerror}") from None
            self._write(f"# p4pmu bridge: model {self.model.key} stepping {self.model.stepping}"
                        f", threads={self.threads}, strict={'on' if options.strict else 'off'}"
                        f", vCPUs {smp_vcpus} (max {self.max_vcpus})")
        self._profile = None
        self._profiled = set()
        if os.environ.get("P4PMU_PYPROFILE"):  # development: profile the Python half
            import cProfile
            self._profile = cProfile.Profile()
        self.feeder = None
        if native is not None and options.count != "off":
            from p4pmu.plugin.feeder import Feeder
            self.feeder = Feeder(self, *native)

    @classmethod
    def from_args(cls, args: list[str], smp_vcpus: int, max_vcpus: int,
                  native=None) -> "Bridge":
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
                    pmu = self.pmus[core] = self._factory()
        return pmu

    @property
    def logging(self) -> bool:
        return self._log is not None

    def _write(self, line: str) -> None:
        if self._log is not None:
            self._log.write(line + "\n")

    def _served(self, vcpu: int) -> None:
        """Log the accesses the C mirror served since this vCPU's last Python call (they
        come before anything this call writes: the log keeps each vCPU's order)."""
        recs = self.feeder.served(vcpu)
        if not recs:
            return
        pmu = self.pmu_of(vcpu)
        who = self._who(vcpu)
        for op, reg, value in recs:
            if op == 1:
                self._write(f"{who}: RDMSR 0x{reg:X}{self._name(pmu, reg)} -> 0x{value:X}")
            elif op == 2:
                self._write(f"{who}: WRMSR 0x{reg:X}{self._name(pmu, reg)} <- 0x{value:X}")
            else:
                self._write(f"{who}: RDPMC ECX=0x{reg:X} -> 0x{value:X}")

    def _enter(self, vcpu: int, pmu, feeder) -> None:
        """Start of a Python call that may use the PMU: the C mirror's values come back."""
        if feeder.mirror_on:
            if self._log is not None:
                self._served(vcpu)
            feeder.pull(vcpu, pmu)

    def _leave(self, vcpu: int, pmu, feeder) -> None:
        feeder.after(vcpu, pmu)
        feeder.handover(vcpu, pmu)

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
        self.n_faults += 1
        line = f"{self._who(vcpu)}: {what}: #GP(0): {fault}"
        self._write(line)
        if self._log is None:
            print(f"p4pmu: {line}", file=sys.stderr, flush=True)
        return FAULT

    # -- the accesses (hot path: no formatting unless a log is open) ------------------------

    def rdmsr(self, vcpu: int, msr: int) -> tuple[int, int]:
        pmu = self.pmus.get(vcpu // self.threads) or self.pmu_of(vcpu)
        self.n_rdmsr += 1
        feeder = self.feeder
        if feeder is not None:
            if self._profile is not None:
                self._prof()
            self._enter(vcpu, pmu, feeder)
            feeder.consume(vcpu, pmu)
        try:
            value = int(pmu.rdmsr(vcpu % self.threads, msr)) & U64
        except self.PMUFault as f:
            return self._fault(vcpu, f"RDMSR 0x{msr:X}{self._name(pmu, msr)}", f), 0
        finally:
            if feeder is not None:
                self._leave(vcpu, pmu, feeder)
        if self._log is not None:
            self._write(f"{self._who(vcpu)}: RDMSR 0x{msr:X}{self._name(pmu, msr)} -> "
                        f"0x{value:X}")
        return OK, value

    def wrmsr(self, vcpu: int, msr: int, value: int) -> int:
        pmu = self.pmus.get(vcpu // self.threads) or self.pmu_of(vcpu)
        self.n_wrmsr += 1
        feeder = self.feeder
        if feeder is not None:
            self._enter(vcpu, pmu, feeder)
            feeder.consume(vcpu, pmu)
        # the notices read the emulator's decoded state; a stand-in PMU (tests) has none
        reg = getattr(pmu, "registers", {}).get(msr)
        old = 0  # the ESCR's or CCCR's value before the write (emulator/notices.py)
        if reg is not None and reg.kind == "escr":
            old = int(pmu.escr_raw[reg.index])
        elif reg is not None and reg.kind == "cccr":
            old = int(pmu.cccr_raw[reg.index]) | int(pmu.ovf[reg.index]) << 31
        try:
            pmu.wrmsr(vcpu % self.threads, msr, value)
        except self.PMUFault as f:
            return self._fault(vcpu, f"WRMSR 0x{msr:X}{self._name(pmu, msr)} <- 0x{value:X}", f)
        finally:
            if feeder is not None:
                self._leave(vcpu, pmu, feeder)
        if self._log is not None:
            self._write(f"{self._who(vcpu)}: WRMSR 0x{msr:X}{self._name(pmu, msr)} <- "
                        f"0x{value:X}")
        if reg is not None and reg.kind in ("cccr", "escr"):
            self._check_programming(vcpu, pmu, reg, old)
        return OK

    def _check_programming(self, vcpu: int, pmu, reg, old: int) -> None:
        """Say once what a CCCR or ESCR write makes untrustworthy (emulator/notices.py)."""
        from p4pmu.emulator import notices
        if reg.kind == "cccr":
            self._say(vcpu, notices.cccr_changed_under(pmu, reg.index, old))
            self._say(vcpu, notices.unmodelled(pmu, reg.index))
            return
        self._say(vcpu, notices.escr_changed_under(pmu, reg.index, old))
        for c in (pmu.escr_index == reg.index).nonzero()[0]:
            self._say(vcpu, notices.unmodelled(pmu, int(c)))

    def _say(self, vcpu: int, notice) -> None:
        """A warning for the user, once per notice key: stderr (p4pmu linux shows QEMU's
        "p4pmu: warning:" lines as they come) and the log."""
        if notice is None or notice.key in self._said:
            return
        self._said.add(notice.key)
        line = f"{self._who(vcpu)}: {notice.text}"
        self._write(f"# warning: {line}")
        print(f"p4pmu: warning: {line}", file=sys.stderr, flush=True)

    def counter_rewritten(self, vcpu: int, msr: int, first: int, second: int) -> None:
        """C side: a counter's two back-to-back writes differ (intercept.c)."""
        from p4pmu.emulator import notices
        self._say(vcpu, notices.counter_rewritten(msr, first, second))

    def rdpmc(self, vcpu: int, ecx: int) -> tuple[int, int]:
        pmu = self.pmus.get(vcpu // self.threads) or self.pmu_of(vcpu)
        self.n_rdpmc += 1
        feeder = self.feeder
        if feeder is not None:
            self._enter(vcpu, pmu, feeder)
            feeder.consume(vcpu, pmu)
        try:
            value = int(pmu.rdpmc(vcpu % self.threads, ecx)) & U64
        except self.PMUFault as f:
            return self._fault(vcpu, f"RDPMC ECX=0x{ecx:X}", f), 0
        finally:
            if feeder is not None:
                self._leave(vcpu, pmu, feeder)
        if self._log is not None:
            self._write(f"{self._who(vcpu)}: RDPMC ECX=0x{ecx:X} -> 0x{value:X}")
        return OK, value

    def misc_enable(self, vcpu: int, qemu_value: int) -> tuple[int, int]:
        pmu = self.pmus.get(vcpu // self.threads) or self.pmu_of(vcpu)
        self.n_misc += 1
        if self._log is not None and self.feeder is not None and self.feeder.mirror_on:
            self._served(vcpu)  # the log keeps this vCPU's order
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

    def deadline(self, vcpu: int) -> int:
        """A counting deadline or fold request of vCPU `vcpu` (C side: cb_sched)."""
        if self._profile is not None:
            self._prof()
        pmu = self.pmus.get(vcpu // self.threads) or self.pmu_of(vcpu)
        feeder = self.feeder
        if feeder is not None:
            self._enter(vcpu, pmu, feeder)
            feeder.consume(vcpu, pmu)
            self._leave(vcpu, pmu, feeder)
        return OK

    def note(self, vcpu: int, message: str) -> None:
        if self._log is not None and self.feeder is not None and self.feeder.mirror_on:
            self._served(vcpu)
        self._write(f"{self._who(vcpu)}: note: {message}")

    def log_error(self, where: str, text: str) -> None:
        self.n_errors += 1
        if self._log is not None:
            self._write(f"# Python error in {where} (left to QEMU):")
            for line in text.rstrip().splitlines():
                self._write(f"#   {line}")

    def close(self) -> None:
        if self._profile is not None:
            self._profile.disable()
            self._profile.dump_stats(os.environ["P4PMU_PYPROFILE"])
            self._profile = None
        n_rd, n_wr, n_pmc = self.n_rdmsr, self.n_wrmsr, self.n_rdpmc
        if self.feeder is not None:
            if self.feeder.mirror_on:
                for vcpu in self.feeder.mirror_vcpus():
                    if self._log is not None:
                        self._served(vcpu)
                r, w, p, *_ = self.feeder.mirror_counts()
                n_rd, n_wr, n_pmc = n_rd + r, n_wr + w, n_pmc + p
            self._write(self.feeder.summary())
        if self._log is not None:
            self._write(f"# end: {n_rd} RDMSR, {n_wr} WRMSR, {n_pmc} "
                        f"RDPMC, {self.n_misc} MISC_ENABLE reads, {self.n_faults} faults, "
                        f"{self.n_errors} Python errors")
            self._log.close()
            self._log = None
