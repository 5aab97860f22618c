"""`p4pmu trace FILE`: read the PMU access trace and print it for a person.

One job: read a trace that the plugin wrote with `trace=FILE` (JSON Lines, docs/trace.md),
keep the records that pass the filters (register, counter, vCPU, kind, instruction or clock
range) and print each on one line, its register values decoded by `emulator.decode.describe`
(the project's one wording of a CCCR, ESCR or counter); or print them unchanged (`--json`);
or, with `--summary`, each programming a counter counted with and how often it was written,
read, overflowed, and the PMIs of each vCPU (as text, or one JSON object with `--json`); or,
with `--plot`, draw them (trace_plot.py).  Exit statuses: 0 done, 1 no record matched the
filters, 2 a bad option or a file that is not a readable trace.
"""
from __future__ import annotations

import argparse
import collections
import difflib
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from p4pmu.emulator import decode as D
from p4pmu.emulator import tables as T
from p4pmu.emulator.models import CpuModel, get_model
from p4pmu.qemu_glue import trace_plot

PROG = "p4pmu trace"
FORMAT = "p4pmu-trace"  # the header's `format`
VERSION = 1  # the newest header `version` this reader knows (docs/trace.md)
ACCESS = ("rdmsr", "wrmsr", "rdpmc")
KINDS = ("header", *ACCESS, "overflow", "cascade", "pmi", "finding", "note", "end")
KIND_GROUPS = {"access": set(ACCESS)}  # `fault` is not a kind: records with a `fault` key


class TraceError(ValueError):
    """A file that is not a readable trace; the message is one line naming file and line."""


# --------------------------------------------------------------------------------------------
# Reading


@dataclass
class Line:
    number: int
    text: str  # as in the file, without the line end
    record: dict


def _parse(raw: bytes) -> dict:
    """One line's record; ValueError saying what is wrong with it."""
    try:
        rec = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise ValueError(f"not a JSON line ({e})") from None
    if not isinstance(rec, dict):
        raise ValueError("not a JSON object")
    if "k" not in rec:
        raise ValueError("record without `k` (its kind)")
    return rec


def _check_header(path: str, rec: dict) -> None:
    if rec.get("k") != "header" or rec.get("format") != FORMAT:
        raise TraceError(f"{path}: not a p4pmu trace (line 1 is not its header)")
    v = rec.get("version")
    if not isinstance(v, int) or v > VERSION:
        raise TraceError(f"{path}:1: trace version {v!r}; this reader knows up to {VERSION}")


def lines(path: str, notes: list[str] | None = None) -> Iterator[Line]:
    """The records of the trace at `path` with their text.  A last line without a line end
    that does not parse (a writer killed mid-line) is skipped and described in `notes`;
    any other bad line raises TraceError."""
    try:
        f = open(path, "rb")
    except OSError as e:
        raise TraceError(f"cannot read {path}: {e.strerror or e}") from None
    with f:
        for number, raw in enumerate(f, 1):
            try:
                rec = _parse(raw)
            except ValueError as e:
                if number == 1:
                    raise TraceError(f"{path}: not a p4pmu trace (line 1: {e})") from None
                if raw.endswith(b"\n"):
                    raise TraceError(f"{path}:{number}: {e}") from None
                if notes is not None:
                    notes.append(f"{path}:{number}: incomplete last line skipped "
                                 "(the writer stopped in mid-record)")
                return
            if number == 1:
                _check_header(path, rec)
            yield Line(number, raw.decode("utf-8").rstrip("\r\n"), rec)


def read(path: str, notes: list[str] | None = None) -> Iterator[tuple[int, dict]]:
    """(line number, record) for each record of the trace at `path` (see `lines`)."""
    for ln in lines(path, notes):
        yield ln.number, ln.record


# --------------------------------------------------------------------------------------------
# One record, one line


def num(v) -> int | None:
    """A number of the trace: an int, or a hexadecimal string ("0x4ff1000"); None stays."""
    if v is None or isinstance(v, int):
        return v
    return int(v, 16)


def _dash(v) -> str:
    return "-" if v is None else str(v)


def prefix(rec: dict) -> str:
    """`vcpu 0 lp 0  insns 123  clk 456  cpl 0  pc 0x...  ` for a record of one vCPU."""
    if "vcpu" not in rec:
        return ""
    lp = f" lp {_dash(rec['lp'])}" if "lp" in rec else ""
    out = f"vcpu {rec['vcpu']}{lp}  insns {_dash(rec.get('insns'))}  " \
          f"clk {_dash(rec.get('clk'))}  "
    if rec.get("cpl") is not None:
        out += f"cpl {rec['cpl']}  "
    if rec.get("pc") is not None:
        out += f"pc {num(rec['pc']):#x}  "
    return out


def reg_name(rec: dict, model: CpuModel) -> str:
    msr = num(rec.get("msr"))
    if rec.get("reg"):
        return rec["reg"]
    if msr is None:
        return "(no register)"
    return D.register_name(msr, model) or f"MSR {msr:#x}"


def decoded(msr: int | None, value: int, model: CpuModel) -> str:
    """What `describe` says after `NAME = 0x...: ` ("" when it decodes nothing)."""
    if msr is None:
        return ""
    text = D.describe(msr, value, model)
    return text.split(": ", 1)[1] if ": " in text else ""


def _access(rec: dict, model: CpuModel) -> str:
    k = rec["k"]
    msr = num(rec.get("msr"))
    head = k.upper() + (f" ecx={num(rec.get('ecx')):#x}" if k == "rdpmc" else "")
    if k != "rdpmc" or msr is not None:
        head += " " + reg_name(rec, model)
    value = num(rec.get("value"))
    if value is not None:
        head += f" {'<-' if k == 'wrmsr' else '->'} {value:#x}"
    parts = [head]
    if "fault" in rec:
        parts.append(f"#GP: {rec['fault']}")
    elif k == "rdpmc" and num(rec.get("ecx")) >> 31:
        parts.append("(fast read: the low 32 bits)")  # ECX bit 31 (SDM RDPMC)
    elif value is not None:
        parts.append(decoded(msr, value, model))
        if k == "wrmsr" and "changed" in rec:
            parts.append(f"[changed: {', '.join(rec['changed']) or 'nothing'}]")
    return "  ".join(p for p in parts if p)


def _header(rec: dict) -> str:
    strict = {True: "on", False: "off"}.get(rec.get("strict"), _dash(rec.get("strict")))
    return (f"TRACE {rec.get('format')} version {rec.get('version')}  model {rec.get('model')} "
            f"stepping {_dash(rec.get('stepping'))}  threads {_dash(rec.get('threads'))}  "
            f"vcpus {_dash(rec.get('vcpus'))}  strict {strict}")


def _event(rec: dict) -> str:
    k = rec["k"]
    if k in ("overflow", "cascade"):
        what = "OVF 0 -> 1" if k == "overflow" else "started"
        reg = f" {rec['reg']}" if rec.get("reg") else ""
        return f"{k.upper()} counter {rec.get('counter')}{reg}  {what}"
    if k == "pmi":
        vec = rec.get("vector")
        vec = f"{num(vec):#x}" if vec is not None else "-"
        return f"PMI vector {vec} mode {_dash(rec.get('mode'))}"
    if k == "note":
        return f"NOTE {rec.get('text', '')}"
    if k == "finding":  # the programming checker (docs/checker.md)
        return (f"FINDING {rec.get('register')}: {rec.get('text')} (SDM {rec.get('sdm')}); "
                f"fix: {rec.get('fix')} [{rec.get('rule')}]")
    if k == "end":
        return "END totals: " + "  ".join(f"{n} {_dash(v)}" for n, v in rec.items() if n != "k")
    rest = {a: b for a, b in rec.items() if a != "k"}
    return f"{str(k).upper()} (a kind this reader does not know) {json.dumps(rest)}"


def format_record(rec: dict, model: CpuModel | None = None) -> str:
    """One line for a person; register values decoded for `model` (the header's)."""
    model = model or get_model()
    if rec["k"] == "header":
        return _header(rec)
    body = _access(rec, model) if rec["k"] in ACCESS else _event(rec)
    return prefix(rec) + body


# --------------------------------------------------------------------------------------------
# Filters


def parse_reg(text: str) -> int:
    """A register name (with or without `MSR_`, any case) or an MSR number -> the MSR."""
    if text[:1].isdigit():
        try:
            return int(text, 0)
        except ValueError:
            raise TraceError(f"--reg {text}: not an MSR number (write hex as 0x36c)") from None
    names = D.register_msrs()
    if D.bare_name(text) in names:
        return names[D.bare_name(text)]
    close = difflib.get_close_matches(D.bare_name(text), list(names), n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise TraceError(f"--reg {text}: unknown register{hint}")


def parse_kinds(text: str) -> set[str]:
    kinds = {k.strip().lower() for k in text.split(",") if k.strip()}
    bad = kinds - set(KINDS) - set(KIND_GROUPS) - {"fault"}
    if bad or not kinds:
        raise TraceError(f"--kind {text}: unknown kind {', '.join(sorted(bad)) or '(none)'} "
                         f"(kinds: {', '.join(KINDS)}, access, fault)")
    return kinds


def _in(v, lo: int | None, hi: int | None) -> bool:
    if lo is None and hi is None:
        return True
    return v is not None and (lo is None or v >= lo) and (hi is None or v <= hi)


@dataclass
class Filters:
    msr: int | None = None
    counter: int | None = None
    vcpu: int | None = None
    kinds: set[str] | None = None  # as given: kinds, `access`, `fault`
    insns: tuple[int | None, int | None] = (None, None)
    clk: tuple[int | None, int | None] = (None, None)

    def _kind_ok(self, rec: dict) -> bool:
        if self.kinds is None:
            return True
        wanted = set().union(*(KIND_GROUPS.get(k, {k}) for k in self.kinds))
        return rec["k"] in wanted or ("fault" in self.kinds and "fault" in rec)

    def _counter_ok(self, rec: dict) -> bool:
        n, k = self.counter, rec["k"]
        if k in ("overflow", "cascade"):
            return rec.get("counter") == n
        msr = num(rec.get("msr")) if k in ACCESS else None
        if k == "rdpmc":
            return msr == T.COUNTER_BASE + n
        return msr in (T.COUNTER_BASE + n, T.CCCR_BASE + n)

    def matches(self, rec: dict) -> bool:
        if self.msr is not None and (rec["k"] not in ACCESS or num(rec.get("msr")) != self.msr):
            return False
        if self.counter is not None and not self._counter_ok(rec):
            return False
        if self.vcpu is not None and rec.get("vcpu") != self.vcpu:
            return False
        return (self._kind_ok(rec) and _in(rec.get("insns"), *self.insns)
                and _in(rec.get("clk"), *self.clk))


def filters_from(a: argparse.Namespace) -> Filters:
    """The Filters of the options; TraceError (a usage error) for a bad one."""
    if a.counter is not None and not 0 <= a.counter < T.NUM_COUNTERS:
        raise TraceError(f"--counter {a.counter}: counters are 0-{T.NUM_COUNTERS - 1}")
    for lo, hi, what in ((a.insns_from, a.insns_to, "--from/--to"),
                         (a.clk_from, a.clk_to, "--clk-from/--clk-to")):
        if lo is not None and hi is not None and lo > hi:
            raise TraceError(f"{what}: the range {lo}..{hi} is empty")
    return Filters(msr=parse_reg(a.reg) if a.reg is not None else None, counter=a.counter,
                   vcpu=a.vcpu, kinds=parse_kinds(a.kind) if a.kind is not None else None,
                   insns=(a.insns_from, a.insns_to), clk=(a.clk_from, a.clk_to))


# --------------------------------------------------------------------------------------------
# The summary


# CCCR bits that let a counter count (SDM 18.15.5.3: ENABLE, or a cascade start)
_START_BITS = T.CCCR_FIELD["ENABLE"].mask | T.CCCR_FIELD["CASCADE"].mask | \
    T.CCCR_FIELD["EXT_CASCADE"].mask
_OVF = T.CCCR_FIELD["OVF"].mask


@dataclass
class Programming:
    """One thing a counter counted with: its CCCR (OVF left out: the flag, not the
    programming) and the value of the ESCR that CCCR selects."""
    cccr: int
    escr_msr: int | None  # None: ESCR_SELECT names no ESCR of this counter on the model
    escr: int | None      # None: that ESCR was never written in the trace
    starts: int = 0       # times the counter began counting with it
    overflows: int = 0
    cascades: int = 0

    @property
    def key(self) -> tuple:
        return self.cccr, self.escr_msr, self.escr


@dataclass
class CounterStats:
    cccr: int | None = None  # the CCCR's last written value
    cccr_writes: int = 0
    counter_writes: int = 0
    reads: int = 0  # RDMSR of the counter or its CCCR, RDPMC of the counter
    overflows: int = 0
    cascades: int = 0
    faults: int = 0
    programmings: dict = field(default_factory=dict)  # Programming.key -> Programming
    counting: Programming | None = None  # what it counts with now (None: stopped)


@dataclass
class Summary:
    model: CpuModel  # the header's
    threads: int = 1  # the header's: logical processors per core
    counters: dict = field(default_factory=dict)  # (core, counter) -> CounterStats
    escrs: dict = field(default_factory=dict)  # (core, ESCR MSR) -> last written value
    pmis: collections.Counter = field(default_factory=collections.Counter)  # (vcpu, core, lp)
    faults: collections.Counter = field(default_factory=collections.Counter)  # (reg, kind)
    reasons: dict = field(default_factory=dict)  # (reg, kind) -> the last fault's reason
    kinds: collections.Counter = field(default_factory=collections.Counter)

    def _core(self, rec: dict) -> int:
        core = rec.get("core")
        return core if core is not None else rec.get("vcpu", 0) // max(self.threads, 1)

    def _stats(self, rec: dict, counter: int) -> CounterStats:
        return self.counters.setdefault((self._core(rec), counter), CounterStats())

    def add(self, rec: dict) -> None:
        k = rec["k"]
        self.kinds[k] += 1
        if k in ACCESS:
            self._access(rec)
        elif k in ("overflow", "cascade") and rec.get("counter") is not None:
            s = self._stats(rec, rec["counter"])
            s.overflows += k == "overflow"
            s.cascades += k == "cascade"
            if s.counting is not None:
                s.counting.overflows += k == "overflow"
                s.counting.cascades += k == "cascade"
        elif k == "pmi":
            self.pmis[(rec.get("vcpu"), self._core(rec), rec.get("lp"))] += 1

    def _access(self, rec: dict) -> None:
        k, msr, fault = rec["k"], num(rec.get("msr")), "fault" in rec
        if fault:
            key = (reg_name(rec, self.model) if k != "rdpmc" or msr is not None
                   else f"RDPMC ecx={num(rec.get('ecx')):#x}", k)
            self.faults[key] += 1
            self.reasons[key] = rec["fault"]
        if msr is None:
            return
        kind = D.register_kind(msr)
        if kind == "escr" and k == "wrmsr" and not fault:
            self.escrs[(self._core(rec), msr)] = num(rec.get("value"))
            self._escr_written(self._core(rec), msr)
        if kind not in ("counter", "cccr"):
            return
        counter = msr - (T.COUNTER_BASE if kind == "counter" else T.CCCR_BASE)
        s = self._stats(rec, counter)
        if fault:
            s.faults += 1
        elif k != "wrmsr":
            s.reads += 1
        elif kind == "cccr":
            s.cccr, s.cccr_writes = num(rec.get("value")), s.cccr_writes + 1
            self._follow(self._core(rec), counter, s)
        else:
            s.counter_writes += 1

    def _selected_escr(self, counter: int, cccr: int) -> int | None:
        escr = T.escr_for(counter, T.CCCR_FIELD["ESCR_SELECT"].get(cccr))
        return None if escr is None or self.model.model not in escr.models else escr.msr

    def _follow(self, core: int, counter: int, s: CounterStats) -> None:
        """After a write of the counter's CCCR or of the ESCR it selects: what it counts with
        now, a new start when that changed."""
        if s.cccr is None or not s.cccr & _START_BITS:
            s.counting = None
            return
        escr_msr = self._selected_escr(counter, s.cccr)
        now = Programming(s.cccr & ~_OVF, escr_msr,
                          None if escr_msr is None else self.escrs.get((core, escr_msr)))
        if s.counting is not None and s.counting.key == now.key:
            return
        s.counting = s.programmings.setdefault(now.key, now)
        s.counting.starts += 1

    def _escr_written(self, core: int, escr_msr: int) -> None:
        for (c, counter), s in self.counters.items():
            if c == core and s.counting is not None and s.counting.escr_msr == escr_msr:
                self._follow(core, counter, s)


def _table(head: tuple[str, ...], rows: list[tuple], align: str) -> list[str]:
    """Aligned rows; `align` has one letter a column: l flush left, r flush right."""
    cells = [tuple(str(c) for c in r) for r in [head, *rows]]
    w = [max(len(r[i]) for r in cells) for i in range(len(head))]
    return ["  ".join(c.ljust(w[i]) if align[i] == "l" else c.rjust(w[i])
                      for i, c in enumerate(r)).rstrip() for r in cells]


def _programming_text(s: Summary, counter: int, p: Programming, pad: str) -> list[str]:
    out = [pad + f"CCCR = {p.cccr:#x}: {D.describe_cccr(counter, p.cccr, s.model)}"]
    if p.escr_msr is None:
        return out + [pad + "ESCR: none (ESCR_SELECT names no ESCR of this counter)"]
    if p.escr is None:
        return out + [pad + f"ESCR {D.register_name(p.escr_msr, s.model)}: not written"]
    return out + [pad + f"ESCR {D.describe(p.escr_msr, p.escr, s.model)}"]


def programming(s: Summary, core: int, counter: int, cs: CounterStats) -> list[str]:
    """The lines under a counter's row: each programming it counted with (started N times,
    its overflows), then whether it counts at the end of the trace."""
    pad = "    "
    if cs.cccr is None:
        return [pad + "CCCR: not written"]
    if not cs.programmings:
        return [pad + f"never counted (its CCCR, last {cs.cccr:#x}, never set ENABLE)"]
    out = []
    for i, p in enumerate(cs.programmings.values(), 1):
        out.append(pad + f"counted with ({i}): started {p.starts}x, {p.overflows} "
                         f"overflows, {p.cascades} cascades")
        out += _programming_text(s, counter, p, pad + "  ")
    if cs.counting is None:
        out.append(pad + f"at the end: stopped (CCCR = {cs.cccr:#x})")
    else:
        n = list(cs.programmings.values()).index(cs.counting) + 1
        out.append(pad + f"at the end: counting with ({n})")
    return out


def summary_json(s: Summary) -> dict:
    """--summary --json: the summary's numbers and programmings, one JSON object."""
    def prog(counter, p):
        return {"cccr": f"{p.cccr:#x}", "cccr_text": D.describe_cccr(counter, p.cccr, s.model),
                "escr": None if p.escr_msr is None else D.register_name(p.escr_msr, s.model),
                "escr_value": None if p.escr is None else f"{p.escr:#x}",
                "escr_text": None if p.escr is None else D.describe(p.escr_msr, p.escr,
                                                                     s.model),
                "starts": p.starts, "overflows": p.overflows, "cascades": p.cascades}
    counters = []
    for (core, n), cs in sorted(s.counters.items()):
        progs = list(cs.programmings.values())
        counters.append({
            "core": core, "counter": n, "name": T.COUNTERS[n].counter_name,
            "cccr_writes": cs.cccr_writes, "counter_writes": cs.counter_writes,
            "reads": cs.reads, "overflows": cs.overflows, "cascades": cs.cascades,
            "faults": cs.faults, "last_cccr": None if cs.cccr is None else f"{cs.cccr:#x}",
            "counted_with": [prog(n, p) for p in progs],
            "counting_at_end": None if cs.counting is None else progs.index(cs.counting)})
    return {"model": s.model.key, "counters": counters,
            "pmis": [{"vcpu": v, "core": c, "lp": lp, "pmis": k}
                     for (v, c, lp), k in sorted(s.pmis.items(), key=lambda kv: [
                         -1 if x is None else x for x in kv[0]])],
            "faults": [{"register": r, "access": a, "faults": k, "last_reason": s.reasons[(r, a)]}
                       for (r, a), k in sorted(s.faults.items())],
            "kinds": dict(sorted(s.kinds.items()))}


def _counter_lines(s: Summary) -> list[str]:
    items = sorted(s.counters.items())
    rows = [(core, n, T.COUNTERS[n].counter_name, cs.cccr_writes, cs.counter_writes,
             cs.reads, cs.overflows, cs.cascades, cs.faults) for (core, n), cs in items]
    table = _table(("core", "ctr", "counter", "CCCR wr", "counter wr", "reads", "overflows",
                    "cascades", "faults"), rows, "rrlrrrrrr")
    out = ["counters (writes and reads that did not fault; faults: of its CCCR, its counter "
           "and RDPMC of it)", table[0]]
    for line, ((core, n), cs) in zip(table[1:], items):
        out += [line, *programming(s, core, n, cs)]
    return out


def format_summary(s: Summary) -> str:
    """The text of --summary: per counter, PMIs per vCPU, faults per register, kinds."""
    out = _counter_lines(s) if s.counters else ["counters: none touched"]
    if s.pmis:
        out += ["", "PMIs per vCPU"]
        out += _table(("vcpu", "core", "lp", "PMIs"),
                      [(*(_dash(x) for x in key), c) for key, c in sorted(
                          s.pmis.items(), key=lambda kv: [-1 if x is None else x
                                                          for x in kv[0]])], "rrrr")
    if s.faults:
        out += ["", "faults per register"]
        out += _table(("register", "access", "faults", "last reason"),
                      [(*key, c, s.reasons[key]) for key, c in sorted(s.faults.items())],
                      "llrl")
    out += ["", "records by kind"]
    out += _table(("kind", "records"),
                  [*sorted(s.kinds.items()), ("total", sum(s.kinds.values()))], "lr")
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------------------------
# The command

DESCRIPTION = """\
Print the PMU access trace the plugin wrote with --plugin-opt trace=FILE (every RDMSR,
WRMSR and RDPMC of a PMU register, overflows, cascades, PMIs, notes): one line per record,
register values decoded, only the records that pass the filters (filters combine: a record
must pass all of them).  With --summary: per counter, each programming it counted with (its
CCCR and the ESCR that CCCR selects, how often it started, its overflows) and its writes,
reads, overflows and faults; the PMIs of each vCPU (--json: as one JSON object).  docs/trace.md
describes
the trace."""
EPILOG = f"""\
KIND: {', '.join(KINDS)},
access (= rdmsr,wrmsr,rdpmc) or fault (records of a faulting access); several are
separated by commas.  Records without an instruction count (clock) pass only when no
--from/--to (--clk-from/--clk-to) is given.

exit status: 0 done, 1 no record matched the filters, 2 a bad option or a file that is not
a readable trace (one line on stderr).  A last line cut short (QEMU killed while writing
it) is skipped with a note on stderr.

examples:
  p4pmu trace pmu.jsonl --summary
  p4pmu trace pmu.jsonl --reg IQ_CCCR0 --kind wrmsr --vcpu 0 --from 1000000 --to 2000000
  p4pmu trace pmu.jsonl --counter 12 --kind access,overflow,pmi
  p4pmu trace pmu.jsonl --kind fault --json | jq .fault
  p4pmu trace pmu.jsonl --plot pmu.svg --vcpu 0 --x clocks"""


def _count(text: str) -> int:
    try:
        n = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is negative")
    return n


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE", help="the trace (JSON Lines, docs/trace.md)")
    p.add_argument("--reg", metavar="NAME_OR_MSR",
                   help="only accesses to this register: a name, with or without MSR_, any "
                        "case (IQ_CCCR0), or an MSR number (0x36c)")
    p.add_argument("--counter", type=int, metavar="N",
                   help="only counter N (0-17): accesses to its counter and CCCR MSRs, "
                        "RDPMC of it, its overflows and cascades")
    p.add_argument("--vcpu", type=int, metavar="N", help="only the records of vCPU N")
    p.add_argument("--kind", metavar="KIND[,KIND...]", help="only records of these kinds")
    p.add_argument("--from", dest="insns_from", type=_count, metavar="INSNS",
                   help="only records at or after this many instructions of their vCPU")
    p.add_argument("--to", dest="insns_to", type=_count, metavar="INSNS",
                   help="only records at or before this many instructions")
    p.add_argument("--clk-from", type=_count, metavar="CLK",
                   help="only records at or after this many clocks of their vCPU")
    p.add_argument("--clk-to", type=_count, metavar="CLK",
                   help="only records at or before this many clocks")
    p.add_argument("--json", action="store_true",
                   help="print the matching records as they are in the file (JSON Lines); "
                        "with --summary: the summary as one JSON object")
    p.add_argument("--summary", action="store_true",
                   help="per counter and per vCPU totals of the matching records instead "
                        "of the records")
    p.add_argument("--plot", metavar="OUT.png|OUT.svg",
                   help="draw the matching records as a timeline per logical processor "
                        "(registers, overflows, interrupts, faults, findings) into this "
                        "picture instead of printing them (needs matplotlib)")
    p.add_argument("--x", choices=("insns", "clocks"), default="insns",
                   help="with --plot: against instructions (default) or clocks")


def _fail(msg: str, status: int = 2) -> int:
    print(f"{PROG}: error: {msg}", file=sys.stderr)
    return status


def _header_model(path: str, rec: dict) -> CpuModel:
    try:
        return get_model(rec.get("model"))
    except KeyError as e:
        raise TraceError(f"{path}:1: {e.args[0]}") from None


def _emit(a: argparse.Namespace, ln: Line, model: CpuModel, summary: Summary,
          kept: list[dict]) -> None:
    if a.plot:
        kept.append(ln.record)
    elif a.summary:
        summary.add(ln.record)
    elif a.json:
        print(ln.text)
    else:
        print(format_record(ln.record, model))


def run(a: argparse.Namespace, flt: Filters, notes: list[str]) -> tuple[int, int]:
    """Print the matching records of a.file (or their summary); (matched, records)."""
    model, matched, total = get_model(), 0, 0
    summary = Summary(model)
    kept: list[dict] = []  # --plot's records
    for ln in lines(a.file, notes):
        if ln.record["k"] == "header":
            model = summary.model = _header_model(a.file, ln.record)
            summary.threads = ln.record.get("threads") or 1
        total += 1
        try:
            if not flt.matches(ln.record):
                continue
            matched += 1
            _emit(a, ln, model, summary, kept)
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            raise TraceError(f"{a.file}:{ln.number}: bad {ln.record['k']} record "
                             f"({type(e).__name__}: {e})") from None
    if a.summary and matched:
        if a.json:
            print(json.dumps(summary_json(summary), indent=1))
        else:
            sys.stdout.write(format_summary(summary))
    if a.plot and matched:
        drawn = trace_plot.plot(kept, model, Path(a.plot), a.x, title=a.file)
        print(f"{PROG}: {a.plot}: " + ", ".join(f"{n} {k}" for k, n in sorted(drawn.items())),
              file=sys.stderr)
    return matched, total


def main(a: argparse.Namespace) -> int:
    if a.plot and (a.summary or a.json):
        return _fail("--plot cannot go with --summary or --json")
    if a.plot and Path(a.plot).suffix.lower() not in trace_plot.FORMATS:
        return _fail(f"--plot {a.plot}: the picture's name must end in .png or .svg")
    if a.plot and not Path(a.plot).absolute().parent.is_dir():
        return _fail(f"--plot {a.plot}: no such folder")
    notes: list[str] = []
    try:
        matched, total = run(a, filters_from(a), notes)
    except (TraceError, trace_plot.PlotError) as e:
        return _fail(str(e))
    finally:
        for n in notes:
            print(f"{PROG}: note: {n}", file=sys.stderr)
    if not matched:
        why = "matches the filters" if total else "(the file is empty)"
        print(f"{PROG}: no record of {a.file} {why}", file=sys.stderr)
        return 1
    return 0
