"""The access trace's writer (option ``trace=FILE``; the format: docs/trace.md).

One job: turn what the bridge serves (accesses, faults) and what the C side recorded without
Python (struct p4c_trace in plugin/p4c_api.h: accesses the register mirror served, overflows
it found, interrupts sent, privileged accesses QEMU faults) into JSON lines, decoded with the
model's own tables (emulator/decode.py `fields`).  Lines are written as they come and flushed
at the end of every Python call, so a killed QEMU leaves a file whose complete lines parse.
A record's part after its time and place is cached per (access, value, value before):
Linux rewrites the same few values at every context switch.
"""
from __future__ import annotations

import json

import numpy as np

from p4pmu.emulator import decode
from p4pmu.emulator import tables as T

FORMAT, VERSION = "p4pmu-trace", 1
_ACCESS = {1: "rdmsr", 2: "wrmsr", 3: "rdpmc"}  # P4_TR_RDMSR .. P4_TR_RDPMC
_PRIV_REASON = {
    1: "RDMSR at CPL {cpl}: privileged (SDM Vol. 2B, RDMSR)",
    2: "WRMSR at CPL {cpl}: privileged (SDM Vol. 2B, WRMSR)",
    3: "RDPMC at CPL {cpl} with CR4.PCE clear (SDM Vol. 2B, RDPMC)",
}
_MODES = {0: "fixed", 1: "lowest-priority", 2: "SMI", 4: "NMI", 5: "INIT", 7: "ExtINT"}
_TAILS_KEPT = 1 << 16  # cached record tails (TraceWriter.access)
# struct p4c_trec (plugin/p4c_api.h), read as a whole buffer
TREC = np.dtype([("op", "<u4"), ("reg", "<u4"), ("value", "<u8"), ("old", "<u8"),
                 ("pc", "<u8"), ("insns", "<u8"), ("clk", "<u8"), ("cpl", "<u4"),
                 ("flags", "<u4")])
TREC_FIELDS = ("op", "reg", "value", "old", "cpl", "pc", "insns", "clk", "flags")


class TraceWriter:
    """Writes one trace file for the bridge (plugin/bridge.py)."""

    def __init__(self, path: str, model, threads: int, vcpus: int, strict: bool, timed: bool):
        self._f = open(path, "w", encoding="utf-8")  # flushed per Python call (flush())
        self.path = path
        self.model = model
        self.timed = timed  # blocks are instrumented (count= is not off): insns and clk
        self.threads = threads
        self._tails: dict[tuple, str] = {}
        self._before: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self.n = 0
        self._line({"k": "header", "format": FORMAT, "version": VERSION, "model": model.key,
                    "stepping": model.stepping, "threads": threads, "vcpus": vcpus,
                    "strict": bool(strict)})
        self.flush()

    # -- output ------------------------------------------------------------------------------

    def _line(self, rec: dict, extra: str = "") -> None:
        text = json.dumps(rec, separators=(",", ":"))
        self._f.write(text[:-1] + extra + "}\n" if extra else text + "\n")
        self.n += 1

    def flush(self) -> None:
        self._f.flush()

    def close(self) -> None:
        if not self._f.closed:
            self._f.close()

    # -- pieces --------------------------------------------------------------------------------

    def _head(self, kind: str, vcpu: int, where) -> str:
        """The record's first keys, without the closing brace: kind, who, when, where."""
        cpl, pc, insns, clk = where
        when = f'"insns":{insns},"clk":{clk}' if self.timed else '"insns":null,"clk":null'
        return (f'{{"k":"{kind}","vcpu":{vcpu},"core":{vcpu // self.threads},'
                f'"lp":{vcpu % self.threads},"cpl":{cpl},"pc":"{pc:#x}",{when}')

    def _decoded(self, msr: int, value: int) -> str:
        """',"fields":{...}' for a register value."""
        f = decode.fields(msr, value, self.model)
        return ',"fields":' + json.dumps(f, separators=(",", ":")) if f else ""

    def _access_tail(self, op: str, reg: int, value: int | None, old: int | None,
                     fault: str | None, by: str) -> str:
        """Everything of an access record after its head (docs/trace.md), closing brace
        included."""
        d: dict = {}
        msr = reg
        if op == "rdpmc":
            d["ecx"] = f"{reg:#x}"
            index = reg & 0x7FFFFFFF
            msr = T.COUNTER_BASE + index if index < T.NUM_COUNTERS else None
        d["msr"] = f"{msr:#x}" if msr is not None else None
        d["reg"] = decode.register_name(msr, self.model) if msr is not None else None
        extra = ""
        if fault is not None:
            d["fault"] = fault
            if op == "wrmsr" and value is not None:
                d["value"] = f"{value:#x}"
        else:
            d["value"] = f"{value:#x}"
            if op == "wrmsr" and old is not None:
                d["old"] = f"{old:#x}"
                d["changed"] = decode.changed(msr, old, value, self.model) \
                    if decode.register_kind(msr) else []
            if msr is not None and not (op == "rdpmc" and reg >> 31):
                extra = self._decoded(msr, value)
        d["by"] = by
        return "," + json.dumps(d, separators=(",", ":"))[1:-1] + extra + "}\n"

    # -- records -------------------------------------------------------------------------------

    def access(self, vcpu: int, where, op: str, reg: int, value: int | None, *,
               old: int | None = None, fault: str | None = None, by: str = "python") -> None:
        """One RDMSR / WRMSR / RDPMC (`reg`: the MSR, or ECX for RDPMC) at `where`, the
        access's (cpl, pc, insns, clk).
        The part after the head is cached: drivers write and read the same values again and
        again (Linux's context switches, a handler's reloads)."""
        key = (op, reg, value, old, fault, by)
        tail = self._tails.get(key)
        if tail is None:
            tail = self._access_tail(op, reg, value, old, fault, by)
            if len(self._tails) >= _TAILS_KEPT:
                self._tails.clear()
            self._tails[key] = tail
        self._f.write(self._head(op, vcpu, where) + tail)
        self.n += 1

    def c_records(self, vcpu: int, recs) -> None:
        """The records C made since the last call: (op, reg, value, old, cpl, pc, insns, clk,
        flags) tuples of struct p4c_trec (P4_TR_*), in their order (P4_TR_LVT is the
        checker's: Bridge._served)."""
        for op, reg, value, old, cpl, pc, insns, clk, _ in recs:
            where = (cpl, pc, insns, clk)
            if op == 1:
                self.access(vcpu, where, "rdmsr", reg, value, by="c")
            elif op == 2:
                self.access(vcpu, where, "wrmsr", reg, value, old=old, by="c")
            elif op == 3:
                self.access(vcpu, where, "rdpmc", reg, value, by="c")
            elif op == 4:
                self.counter_event(vcpu, where, "overflow", reg)
            elif op == 5:
                mode = reg >> 8
                self._f.write(self._head("pmi", vcpu, where) +
                              f',"vector":{reg & 0xFF},"mode":"{_MODES.get(mode, mode)}"}}\n')
                self.n += 1
            elif op == 6:
                reason = _PRIV_REASON[value].format(cpl=cpl)
                self.access(vcpu, where, _ACCESS[value], reg, None, fault=reason, by="qemu")

    def counter_event(self, vcpu: int, where, kind: str, counter: int) -> None:
        self._f.write(self._head(kind, vcpu, where) + f',"counter":{counter},'
                      f'"reg":"{T.COUNTERS[counter].counter_name}"}}\n')
        self.n += 1

    # -- overflows and cascade starts the model made in a Python call ---------------------------

    def before(self, vcpu: int, pmu) -> None:
        """Note OVF and the cascade-started counters at the start of a Python call."""
        self._before[vcpu] = (pmu.ovf.copy(), pmu.running() & ~pmu.enable)

    def after(self, vcpu: int, pmu, where, overflows: bool = True) -> None:
        """Records at `where` (cpl, pc, insns, clk) for the OVF 0 -> 1 transitions (unless
        a write set OVF: `overflows` False) and cascade starts since before()."""
        b = self._before.pop(vcpu, None)
        if b is None:
            return
        ovf0, casc0 = b
        for n in np.flatnonzero(pmu.ovf & ~ovf0) if overflows else ():
            self.counter_event(vcpu, where, "overflow", int(n))
        for n in np.flatnonzero(pmu.running() & ~pmu.enable & ~casc0):
            self.counter_event(vcpu, where, "cascade", int(n))

    def finding(self, vcpu: int | None, where, f) -> None:
        """A programming checker's finding (emulator/checker.py; docs/checker.md) shown by
        the record at `where` (None: at the end of the run)."""
        body = json.dumps({"rule": f.rule.key, "sdm": f.rule.sdm, "register": f.register,
                           "text": f.text, "fix": f.fix}, separators=(",", ":"))[1:]
        if vcpu is None or where is None:
            self._f.write('{"k":"finding",' + body + "\n")
        else:
            self._f.write(self._head("finding", vcpu, where) + "," + body + "\n")
        self.n += 1

    def note(self, vcpu: int | None, text: str) -> None:
        d = {"k": "note", "text": text}
        if vcpu is not None:
            d["vcpu"] = vcpu
        self._line(d)

    def end(self, **counts) -> None:
        self._line({"k": "end", **counts})
        self.flush()
