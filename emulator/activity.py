"""Activity: what happened in the processor during one batch of clocks, in the form the
counting engine consumes (docs/emulator.md, "Activity" -- the one place the format and its
exactness are defined).

A batch of C clocks is a *joint histogram over clock kinds*.  A clock kind says, for one clock:

* for each logical processor (LP 0, LP 1): active or not (halted / waiting for SIPI are
  inactive, SDM 18.16 ACTIVE_THREAD) and whether it is at CPL 0 ("OS") or CPL 1-3 ("USR");
* for each event class (event, mask bit; events.CLASSES) and LP: the value 0-15 that the
  class's input line presents in that clock (SDM 18.15.5.2: four input lines of weight
  1, 2, 4, 8).

The batch gives how many clocks of each kind occurred (`count`), which kind followed which
(`trans[a, b]` = number of adjacent clock pairs (a, b) inside the batch) and the kinds of its
first and last clock.  From that every counter's total increment, including rising-edge
counts, is exact for any CCCR/ESCR programming: a counter's per-clock input is a function of
the clock's kind, and an edge is a property of a pair of adjacent clocks.  Only *where inside
the batch* an overflow happens is not recorded; see engine.py for what that implies.

With Hyper-Threading the two logical processors share the core's clock: a batch of one LP
may begin with `shared` clocks that coincide with clocks its sibling's batches already put
on the core's timeline (both LPs ran in them).  The LP's events in those clocks count as
usual; what counts *clocks* rather than events (COMPARE with COMPLEMENT) does not count them
a second time (engine.py, docs/emulator.md D21).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from . import events as EV

MAX_CLOCKS = 1 << 48


@dataclass(frozen=True)
class ClockKind:
    """One kind of clock.  `lines` maps (event name, mask bit name or number, lp) -> 0..15."""
    active: tuple[bool, bool] = (True, False)
    os: tuple[bool, bool] = (False, False)  # LP at CPL 0 (else CPL 1-3)
    lines: Mapping = field(default_factory=dict, hash=False, compare=False)

    def key(self):
        norm = tuple(sorted((EV.class_id(e, b), lp, v) for (e, b, lp), v in self.lines.items()
                            if v))
        return (tuple(bool(a) for a in self.active), tuple(bool(o) for o in self.os), norm)


def _line_items(kind: ClockKind):
    for (event, bit, lp), v in kind.lines.items():
        if not 0 <= v <= 15:
            raise ValueError(f"line value must be 0-15, got {v} for {event}.{bit} LP{lp}")
        if lp not in (0, 1):
            raise ValueError(f"lp must be 0 or 1, got {lp}")
        if v:
            yield EV.class_id(event, bit), lp, v


class Activity:
    """A batch in canonical (compiled) form; build it with `from_kinds` or `from_clocks`.

    Arrays (K kinds, L lines used in the batch):
      count[K]    clocks of each kind (sums to `clocks`)
      active[K,2] LP active; os[K,2] LP at CPL 0
      cols[L]     line ids (events.line_id(class, lp, priv)); the priv of a line is the CPL
                  of its LP in that kind, so a column holds zeros in kinds of the other CPL
      vals[K,L]   line values
      trans[K,K]  adjacent-pair counts inside the batch (sums to clocks - 1)
      first, last kind index of the batch's first and last clock
      shared      the batch's first `shared` clocks are already on the core's timeline
                  (Hyper-Threading: the sibling LP ran in them; 0 otherwise)
    """

    __slots__ = ("clocks", "count", "active", "os", "cols", "vals", "trans", "first", "last",
                 "kinds", "gidx_ht", "gidx_1", "tidx_ht", "tidx_1", "nonzero", "shared")

    def __init__(self, kinds: Sequence[ClockKind], count, trans, first: int, last: int,
                 shared: int = 0):
        self.kinds = tuple(kinds)
        K = len(self.kinds)
        self.count = np.asarray(count, dtype=np.float64).reshape(K)
        if (self.count < 0).any():
            raise ValueError("negative clock count")
        self.clocks = int(self.count.sum())
        if self.clocks >= MAX_CLOCKS:  # float64 totals stay exact below 2^53 (15 per clock)
            raise ValueError(f"a batch must have fewer than 2^48 clocks, got {self.clocks}")
        self.active = np.array([k.active for k in self.kinds], dtype=bool).reshape(K, 2)
        self.os = np.array([k.os for k in self.kinds], dtype=bool).reshape(K, 2)
        cells = {}
        for i, k in enumerate(self.kinds):
            for cls, lp, v in _line_items(k):
                col = EV.line_id(cls, lp, EV.OS if k.os[lp] else EV.USR)
                cells[(i, col)] = cells.get((i, col), 0) + v
        cols = sorted({c for _, c in cells})
        where = {c: j for j, c in enumerate(cols)}
        self.cols = np.array(cols, dtype=np.int64)
        self.vals = np.zeros((K, len(cols)), dtype=np.float64)
        for (i, c), v in cells.items():
            self.vals[i, where[c]] = v
        self._finish(trans, first, last, shared)

    def _finish(self, trans, first, last, shared: int = 0) -> None:
        """The adjacent-pair counts (clocks - 1 of them), the first and last kinds, the shared
        clocks, then the derived selectors: the common end of both constructors."""
        K = self.count.shape[0]
        self.shared = int(shared)
        if not 0 <= self.shared <= self.clocks:
            raise ValueError(f"shared clocks must be 0..{self.clocks}, got {self.shared}")
        if trans is None:
            # pairs not collected: only an edge detector reads them (Engine.increments
            # refuses such a batch for an effective EDGE counter)
            self.trans = None
            self.first, self.last = int(first), int(last)
            self._derive()
            return
        self.trans = np.asarray(trans, dtype=np.float64).reshape(K, K)
        if self.clocks and int(self.trans.sum()) != self.clocks - 1:
            raise ValueError(f"trans must count clocks - 1 = {self.clocks - 1} adjacent "
                             f"pairs, got {int(self.trans.sum())}")
        self.first, self.last = int(first), int(last)
        self._derive()

    def _derive(self) -> None:
        """Precomputed per-kind selectors for the engine (with and without Hyper-Threading):
        gate index = number of active LPs (ACTIVE_THREAD, SDM 18.16.1); without HT only LP 0
        exists.  TI qualification index = 2 * (some LP at CPL 0) + (some LP at CPL 1-3): it
        looks at the CPL of every existing LP (Table 18-67)."""
        self.gidx_ht = self.active.sum(axis=1).astype(np.int64)
        self.gidx_1 = self.active[:, 0].astype(np.int64)
        any_os = self.os.any(axis=1)
        any_usr = (~self.os).any(axis=1)
        self.tidx_ht = (2 * any_os + any_usr).astype(np.int64)
        self.tidx_1 = (2 * self.os[:, 0] + ~self.os[:, 0]).astype(np.int64)
        self.nonzero = self.count > 0

    # -- constructors ------------------------------------------------------------------------

    @classmethod
    def from_kinds(cls, kinds: Sequence[ClockKind], counts: Sequence[int], trans=None,
                   first: int | None = None, last: int | None = None,
                   shared: int = 0) -> Activity:
        """Batch from kinds and their clock counts.  Without `trans` the kinds are taken to
        occur as consecutive runs in the order given (so the edge detector sees one rising
        edge at most per run)."""
        K = len(kinds)
        counts = [int(c) for c in counts]
        used = [i for i in range(K) if counts[i] > 0]
        if trans is None:
            trans = np.zeros((K, K))
            for i in used:
                trans[i, i] = counts[i] - 1
            for a, b in zip(used, used[1:]):
                trans[a, b] += 1
        if first is None:
            first = used[0] if used else 0
        if last is None:
            last = used[-1] if used else 0
        return cls(kinds, counts, trans, first, last, shared)

    @classmethod
    def from_clocks(cls, clocks: Iterable[ClockKind]) -> Activity:
        """Exact batch from an explicit clock-by-clock sequence (tests, small producers).  A
        sequence that repeats the same ClockKind objects (a replayed loop) computes each one's
        key once."""
        index, kinds, seq = {}, [], []
        seen: dict[int, tuple[ClockKind, int]] = {}  # id -> (the object, kept alive; its row)
        for k in clocks:
            hit = seen.get(id(k))
            if hit is None or hit[0] is not k:
                key = k.key()
                if key not in index:
                    index[key] = len(kinds)
                    kinds.append(k)
                hit = seen[id(k)] = (k, index[key])
            seq.append(hit[1])
        return cls.from_sequence(kinds, seq)

    @classmethod
    def from_sequence(cls, kinds: Sequence[ClockKind], seq) -> Activity:
        """Exact batch from a clock-by-clock sequence of rows of `kinds` (kinds with distinct
        keys): the counts and adjacent pairs are counted with numpy, so a sequence of millions
        of clocks (a replayed loop) costs no Python per clock."""
        s = np.asarray(seq, dtype=np.int64)
        K = len(kinds)
        counts = np.bincount(s, minlength=K) if s.size else []
        trans = np.zeros((K, K))
        if s.size > 1:
            trans = np.bincount(s[:-1] * K + s[1:], minlength=K * K).reshape(K, K) \
                .astype(np.float64)
        return cls(kinds, counts, trans, int(s[0]) if s.size else 0,
                   int(s[-1]) if s.size else 0)

    @classmethod
    def from_arrays(cls, count, active, os, cols, vals, trans, first: int,
                    last: int, shared: int = 0) -> Activity:
        """Batch from the compiled arrays directly (the guest-activity feeder, which builds
        thousands of batches per second): count[K], active[K,2], os[K,2] (bool), cols[L]
        (events.line_id values, each column's priv matching its rows' CPL), vals[K,L] line
        values, trans[K,K] (or None: the pairs were not collected, for a PMU with no
        effective EDGE counter), and the batch's shared clocks.  No ClockKind objects; `kinds`
        is empty.  The same checks as the constructor on counts and trans."""
        self = cls.__new__(cls)
        self.kinds = ()
        self.count = np.asarray(count, dtype=np.float64)
        K = self.count.shape[0]
        if (self.count < 0).any():
            raise ValueError("negative clock count")
        self.clocks = int(self.count.sum())
        if self.clocks >= MAX_CLOCKS:
            raise ValueError(f"a batch must have fewer than 2^48 clocks, got {self.clocks}")
        self.active = np.asarray(active, dtype=bool).reshape(K, 2)
        self.os = np.asarray(os, dtype=bool).reshape(K, 2)
        self.cols = np.asarray(cols, dtype=np.int64)
        self.vals = np.asarray(vals, dtype=np.float64).reshape(K, self.cols.shape[0])
        self._finish(trans, first, last, shared)
        return self

    @classmethod
    def idle(cls, clocks: int, kind: ClockKind | None = None) -> Activity:
        """`clocks` clocks of one kind (default: LP 0 active at CPL 3, no events)."""
        return cls.from_kinds([kind or ClockKind()], [clocks])

    def __repr__(self):
        return f"Activity(clocks={self.clocks}, kinds={len(self.kinds)}, lines={len(self.cols)})"
