"""The programmings the C register mirror may switch between without Python (plugin/programs.c;
docs/bridge.md, "Programming writes in C").

When Python hands the fast path over (Feeder.enable_fast_path), `Programs.hand_over`
registers the current programming -- its CCCRs (without OVF) and ESCRs, and what Python
derived from them: the running set, OVF_PMI, the per-kind table and its rates, the
outcome-free flag -- in the vCPU's `struct p4c_mirror` progs[].  A later CCCR or ESCR write
that leads to a registered programming is served in C.  When Python is called again,
`Programs.take_back` decodes the registers C changed into the Python model, so that the model
is the authority again.

Only simple programmings (Feeder.mirror_rule) that raise no notice (emulator/notices.py) are
registered, so a write C serves is one Python would have served the same way without a
message.
"""
from __future__ import annotations

import numpy as np

from p4pmu.emulator import notices
from p4pmu.emulator import tables as T

_OVF = np.uint64(T.CCCR_FIELD["OVF"].mask)


class Programs:
    def __init__(self, feeder):
        self.feeder = feeder
        self.ffi = feeder.ffi
        self.lib = feeder.lib
        self.nprogs = int(self.lib.P4_PROGS)
        self._slots: dict[int, dict[bytes, int]] = {}  # vcpu -> programming -> slot (LRU order)
        self._tables: dict[int, dict[int, tuple]] = {}  # vcpu -> slot -> (table key, table)
        self._quiet: dict[bytes, bool] = {}  # programming -> raises no notice
        self._ready: set[int] = set()
        self._views: dict[tuple[int, int], dict[str, np.ndarray]] = {}
        self._pebs: dict[int, bytes] = {}  # vcpu -> the replay-tagging MSRs of its slots
        self.registered = 0

    # -- Python -> C ----------------------------------------------------------------------

    def hand_over(self, vcpu: int, pmu, mv, o) -> None:
        """Before C serves again: its copy of the ESCRs, and the current programming
        registered (m.cur), or m.cur = -1 when it cannot be."""
        m = mv.m
        ne = len(pmu.escrs)
        if vcpu not in self._ready:
            self._ready.add(vcpu)
            m.nescr = ne
            self._view(m, "escr_msr", np.uint32)[:ne] = [e.msr for e in pmu.escrs]
            self._view(m, "escr_fault", np.uint64)[:ne] = [
                pmu.registers[e.msr].fault_mask for e in pmu.escrs]
        mv.escr[:ne] = pmu.escr_raw
        mv.cccr_decoded = mv.cccr & ~_OVF
        mv.prog_seen = int(m.prog_changes)
        pebs = self.feeder.pebs_key(pmu)
        if self._pebs.get(vcpu, pebs) != pebs:
            self._forget(vcpu, m, o)  # C matches CCCR and ESCR images only
        self._pebs[vcpu] = pebs
        m.cur = self._register(vcpu, pmu, mv, o)

    def _register(self, vcpu: int, pmu, mv, o) -> int:
        feeder = self.feeder
        m = mv.m
        key = feeder.programming_key(vcpu, pmu, o)
        slots = self._slots.setdefault(vcpu, {})
        slot = slots.pop(key, None)
        if slot is None:
            if not self._is_quiet(pmu, key):
                return -1
            slot = self._free_slot(vcpu, m, o, slots)
            m.progs[slot].hash = 0  # not found while it is filled in
            pv = self._slot_views(vcpu, m, slot)
            pv["cccr"][:] = mv.cccr_decoded
            pv["escr"][:] = mv.escr
            pv["escr_of"][:] = pmu.escr_index
            self.registered += 1
        slots[key] = slot  # the most recently used last
        p = m.progs[slot]
        pv = self._slot_views(vcpu, m, slot)
        for field in ("run", "pmi", "rate_b", "tmax"):
            pv[field][:] = getattr(mv, field)
        p.any_run = m.any_run
        p.lite = o.lite
        p.mem = o.mem
        p.wmem = o.wmem
        tables = self._tables.setdefault(vcpu, {})
        if m.any_run:
            p.winc, p.nkext = o.winc, o.nkext
            tables[slot] = feeder.current_table(vcpu)
        else:
            p.winc, p.nkext = self.ffi.NULL, 0
            tables.pop(slot, None)
        self.lib.p4c_prog_commit(vcpu, slot)
        return slot

    def _free_slot(self, vcpu: int, m, o, slots: dict) -> int:
        """A slot for a new programming: an unused one, else the least recently used one's
        (C's per-kind table pointer is cleared if it pointed at the table dropped)."""
        used = set(slots.values())
        for i in range(self.nprogs):
            if i not in used:
                return i
        old = next(iter(slots))
        slot = slots.pop(old)
        m.progs[slot].hash = 0
        gone = self._tables.get(vcpu, {}).pop(slot, None)
        if gone is not None and o.winc == self.ffi.cast("int32_t *", gone[1].ctypes.data):
            o.winc, o.nkext = self.ffi.NULL, 0
        return slot

    def _forget(self, vcpu: int, m, o) -> None:
        """Drop every programming registered for this vCPU: the replay-tagging MSRs changed,
        and C, which finds a programming by its CCCR and ESCR images, would switch to a
        per-kind table made under the old ones."""
        slots = self._slots.pop(vcpu, {})
        tables = self._tables.pop(vcpu, {})
        for slot in slots.values():
            m.progs[slot].hash = 0
            gone = tables.get(slot)
            if gone is not None and o.winc == self.ffi.cast("int32_t *", gone[1].ctypes.data):
                o.winc, o.nkext = self.ffi.NULL, 0

    def _is_quiet(self, pmu, key: bytes) -> bool:
        """No enabled counter of this programming has a notice (mask bits the emulator
        does not model, an empty mask: what Python says when such a programming is written)."""
        q = self._quiet.get(key)
        if q is None:
            q = not any(notices.programming(pmu, int(c)) for c in np.flatnonzero(pmu.enable))
            if len(self._quiet) > 4096:
                self._quiet.clear()
            self._quiet[key] = q
        return q

    # -- C -> Python ----------------------------------------------------------------------

    def take_back(self, vcpu: int, pmu, mv) -> None:
        """C served programming writes since the fast path was handed over: decode the
        CCCRs and ESCRs that changed into the model, and adopt the per-kind table C used."""
        m = mv.m
        mv.prog_seen = int(m.prog_changes)
        now = mv.cccr & ~_OVF
        cccrs = [int(n) for n in np.flatnonzero(now != mv.cccr_decoded)]
        ne = len(pmu.escrs)
        escrs = {int(s): int(mv.escr[s]) for s in np.flatnonzero(mv.escr[:ne] != pmu.escr_raw)}
        pmu.reload(cccrs, escrs)
        mv.cccr_decoded = now
        hit = self._tables.get(vcpu, {}).get(int(m.cur)) if m.any_run else None
        self.feeder.adopt_table(vcpu, *(hit or (None, None)))

    def _view(self, struct, field: str, dtype) -> np.ndarray:
        return np.frombuffer(self.ffi.buffer(getattr(struct, field)), dtype=dtype)

    def _slot_views(self, vcpu: int, m, slot: int) -> dict[str, np.ndarray]:
        """numpy views of progs[slot]'s arrays (made once per slot)."""
        v = self._views.get((vcpu, slot))
        if v is None:
            p = m.progs[slot]
            v = self._views[(vcpu, slot)] = {
                f: self._view(p, f, t) for f, t in (
                    ("cccr", np.uint64), ("escr", np.uint64), ("escr_of", np.int8),
                    ("run", np.uint8), ("pmi", np.uint8), ("rate_b", np.int32),
                    ("tmax", np.int32))}
        return v
