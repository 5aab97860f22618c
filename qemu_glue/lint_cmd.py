"""`p4pmu lint FILE`: the programming checker over an access trace.

One job: replay the register writes of a trace (`trace=FILE`, docs/trace.md) into the PMU
model, one PMU per core as the plugin had them, and report what the programming checker
(emulator/checker.py; docs/checker.md) finds, each (rule, register) once, with the time and
place of the write that first showed it.  Findings the plugin could only make at run time (the
LVT entry when a PMI was requested) come from the trace's own `finding` records.  Exit
statuses: 0 no finding, 1 findings, 2 a bad option or a file that is not a readable trace.
"""
from __future__ import annotations

import argparse
import json
import sys

from p4pmu.emulator import checker as K
from p4pmu.emulator.models import get_model
from p4pmu.emulator.pmu import PMU, PMUFault
from p4pmu.qemu_glue import trace_cmd as TC

PROG = "p4pmu lint"
DESCRIPTION = """\
Run the programming checker over a PMU access trace (--plugin-opt trace=FILE): replay its
register writes into the PMU model, one PMU per core, and print what the hardware would
accept silently but is almost certainly a mistake -- each finding once per rule and
register, with the SDM section, the fix, and the time and place of the write that first
showed it.  docs/checker.md lists the rules."""
EPILOG = """\
examples:
  p4pmu qemu --plugin-opt trace=pmu.jsonl -- -kernel mydriver.elf
  p4pmu lint pmu.jsonl
  p4pmu lint --json pmu.jsonl > findings.jsonl

exit status: 0 no finding, 1 findings, 2 a bad option or a file that is not a readable
trace."""


class Replay:
    """The trace's writes applied to one PMU per core, and the checker's findings."""

    def __init__(self, header: dict):
        self.model = get_model(header["model"], header.get("stepping"))
        self.ht = int(header.get("threads", 1)) == 2
        self.strict = bool(header.get("strict"))
        self.pmus: dict[int, PMU] = {}
        self.checker = K.Checker()
        self.found: list[tuple[dict | None, dict]] = []  # (record, finding as a dict)

    def _pmu(self, core: int) -> PMU:
        if core not in self.pmus:
            self.pmus[core] = PMU(self.model, ht=self.ht, strict=self.strict)
        return self.pmus[core]

    def _add(self, rec: dict | None, findings) -> None:
        for f in findings:
            self.found.append((rec, as_record(f)))

    def record(self, rec: dict) -> None:
        k = rec["k"]
        if k == "finding":
            key = (rec["rule"], rec["register"])
            if key not in self.checker.seen:
                self.checker.seen.add(key)
                self.found.append((rec, rec))
            return
        if k != "wrmsr" or "fault" in rec:
            return
        pmu = self._pmu(int(rec.get("core", 0)))
        msr, value = int(rec["msr"], 16), int(rec["value"], 16)
        reg = pmu.registers.get(msr)
        if reg is None:
            return
        counting = reg.kind == "counter" and bool(pmu.running()[reg.index])
        try:
            pmu.wrmsr(int(rec.get("lp", 0)), msr, value)
        except PMUFault:
            return  # (the plugin served it: a trace from another policy)
        self._add(rec, self.checker.write(pmu, msr, value, counting))

    def finish(self) -> None:
        for core in sorted(self.pmus):
            self._add(None, self.checker.idle(self.pmus[core]))


def as_record(f: K.Finding) -> dict:
    """A finding as the trace writes it (docs/trace.md, `finding`)."""
    return {"k": "finding", "rule": f.rule.key, "sdm": f.rule.sdm, "register": f.register,
            "text": f.text, "fix": f.fix}


def format_finding(where: dict | None, f: dict) -> str:
    at = TC.prefix(where) if where is not None and "vcpu" in where else \
        ("at the end: " if where is None else "")
    return (f"{at}{f['register']}: {f['text']} (SDM {f['sdm']})\n    fix: {f['fix']}  "
            f"[{f['rule']}]")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE", help="the trace (--plugin-opt trace=FILE)")
    p.add_argument("--json", action="store_true",
                   help="print the findings as JSON lines (the trace's `finding` records)")


def main(a: argparse.Namespace) -> int:
    notes: list[str] = []
    replay = None
    try:
        for _, rec in TC.read(a.file, notes):
            if replay is None:
                replay = Replay(rec)  # TC.read checked that the first record is a header
                continue
            replay.record(rec)
    except (TC.TraceError, OSError) as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    for n in notes:
        print(f"{PROG}: note: {n}", file=sys.stderr)
    if replay is None:
        print(f"{PROG}: {a.file}: empty trace, nothing to check", file=sys.stderr)
        return 0
    replay.finish()
    for where, f in replay.found:
        print(json.dumps(f) if a.json else format_finding(where, f))
    if not a.json:
        n = len(replay.found)
        print(f"{n} finding{'s' if n != 1 else ''} (docs/checker.md explains each rule)"
              if n else "no findings")
    return 1 if replay.found else 0
