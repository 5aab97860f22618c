"""Bus requests: the transactions the memory model puts on the bus, their attributes as the
bus-queue events encode them, and which event masks select them (SDM Vol. 3B Table 19-28:
BSQ_allocation, bsq_active_entries, IOQ_allocation, IOQ_active_entries).

Every other event's mask is a set of classes whose lines add up.  A bus-queue event's mask is a
pattern instead: a request counts when its attributes match the mask, field by field (an AND of
fields), so these events have one event class per *request* (events.Event.line_bits), and
the counting engine selects the requests a mask matches (events.selected_classes).

The requests (docs/memory-model.md): one per 64-byte line the L2 reads for a load that missed it
(`read`), one per line it reads for ownership for a store that missed it (`rfo`), one per
modified line written back when its sector is replaced (`writeback`).  Each is a demand request
of this processor to write-back memory: the model has no memory types, no prefetcher, no port
I/O on the bus and no bus locks.  Decisions where the sources are silent (docs/events.md,
"Bus requests"): a write-back is cacheable and a demand (it is no prefetch), and no request is
"ordered" (REQ_ORD_TYPE: no source says which are).
"""
from __future__ import annotations

from dataclasses import dataclass

# BSQ_allocation's sub-groups (SDM Table 19-28): REQ_TYPE bits 1:0 (0 read, 1 read
# invalidate, 2 write other than a write-back, 3 write-back), REQ_LEN bits 3:2 (0, 1 or 8
# chunks: 0, 1, 3), the independent bits 5-10, MEM_TYPE bits 13:11 (0 UC, 1 WC, 4 WT, 5 WP,
# 6 WB).  Bit 4 is undefined.
BSQ_READ, BSQ_READ_INVALIDATE, BSQ_WRITE, BSQ_WRITEBACK = range(4)
BSQ_LEN_8_CHUNKS = 3
BSQ_IO, BSQ_LOCK, BSQ_CACHE, BSQ_SPLIT, BSQ_DEMAND, BSQ_ORDERED = (1 << b for b in range(5, 11))
BSQ_DEFINED = 0x3FEF  # bits 0-3 and 5-13
MEM_UC, MEM_WC, MEM_WT, MEM_WP, MEM_WB = 0, 1, 4, 5, 6

# IOQ_allocation's fields: the request type (bits 4:0; 00001b is the default that selects
# every type), ALL_READ (5), ALL_WRITE (6), the memory types (7 UC, 8 WC, 9 WT, 10 WP, 11 WB),
# the agent (13 OWN, 14 OTHER), 15 PREFETCH (prefetches included)
IOQ_TYPE_FIELD, IOQ_DEFAULT_TYPE = 0x1F, 0x01
IOQ_ALL_READ, IOQ_ALL_WRITE = 1 << 5, 1 << 6
IOQ_MEM_BIT = {MEM_UC: 7, MEM_WC: 8, MEM_WT: 9, MEM_WP: 10, MEM_WB: 11}
IOQ_OWN, IOQ_OTHER, IOQ_PREFETCH = 1 << 13, 1 << 14, 1 << 15


@dataclass(frozen=True)
class BusRequest:
    """One kind of bus request: its name, the clock-model feature that counts it per clock
    (clockmodel.FEATURES), the one that counts it per clock it is active in the bus queues
    (None: it never holds up the processor, so the model gives it no time), and its
    attributes."""
    name: str
    feature: str
    active: str | None
    bsq_type: int  # REQ_TYPE
    write: bool  # IOQ: ALL_WRITE, else ALL_READ
    length: int = BSQ_LEN_8_CHUNKS  # REQ_LEN: a 64-byte line is 8 chunks of 8 bytes
    flags: int = BSQ_CACHE | BSQ_DEMAND  # BSQ bits 5-10
    mem_type: int = MEM_WB
    own: bool = True
    prefetch: bool = False

    @property
    def bsq(self) -> int:
        """Its BSQ_allocation encoding: the one mask that selects it."""
        return self.bsq_type | self.length << 2 | self.flags | self.mem_type << 11

    @property
    def ioq(self) -> int:
        """The IOQ_allocation mask that selects it and nothing else of another direction,
        memory type or agent: default type, its direction, memory type and agent."""
        return IOQ_DEFAULT_TYPE | (IOQ_ALL_WRITE if self.write else IOQ_ALL_READ) | \
            1 << IOQ_MEM_BIT[self.mem_type] | (IOQ_OWN if self.own else IOQ_OTHER) | \
            (IOQ_PREFETCH if self.prefetch else 0)


REQUESTS: tuple[BusRequest, ...] = (
    BusRequest("read", "l2_ld", "rd_active", BSQ_READ, write=False),
    BusRequest("rfo", "l2_rfo", None, BSQ_READ_INVALIDATE, write=False),
    BusRequest("writeback", "wb", None, BSQ_WRITEBACK, write=True),
)
REQUEST_BY_NAME = {r.name: r for r in REQUESTS}


def bsq_selects(mask: int, r: BusRequest) -> bool:
    """BSQ_allocation / bsq_active_entries: "specify an encoding for each sub-group" (SDM
    Table 19-28): every sub-group of the mask equals the request's."""
    return mask & BSQ_DEFINED == r.bsq


def ioq_selects(mask: int, r: BusRequest, model: int) -> bool:
    """IOQ_allocation / IOQ_active_entries.  Models 2 and later: (request type) AND (ALL_READ
    or ALL_WRITE, by direction) AND (memory type) AND (agent); models 0 and 1: ((request
    type) OR (direction) OR (memory type, ignored when ALL_READ or ALL_WRITE is set)) AND
    (agent) (SDM Table 19-28, the event's notes).  The type field selects a request only
    as the default 00001b: no source gives the FSB request encodings of the transactions.
    A prefetch counts only with PREFETCH."""
    type_ok = mask & IOQ_TYPE_FIELD == IOQ_DEFAULT_TYPE
    dir_ok = bool(mask & (IOQ_ALL_WRITE if r.write else IOQ_ALL_READ))
    mem_ok = bool(mask >> IOQ_MEM_BIT[r.mem_type] & 1)
    agent_ok = bool(mask & (IOQ_OWN if r.own else IOQ_OTHER))
    if r.prefetch and not mask & IOQ_PREFETCH:
        return False
    if model >= 2:
        return type_ok and dir_ok and mem_ok and agent_ok
    any_dir = bool(mask & (IOQ_ALL_READ | IOQ_ALL_WRITE))
    return (type_ok or dir_ok or (mem_ok and not any_dir)) and agent_ok


# event name -> how its mask selects requests
MATCHERS = {
    "BSQ_allocation": lambda mask, r, model: bsq_selects(mask, r),
    "bsq_active_entries": lambda mask, r, model: bsq_selects(mask, r),
    "IOQ_allocation": ioq_selects,
    "IOQ_active_entries": ioq_selects,
}
# the canonical mask of a request for each event (the one the docs and tests use)
CANONICAL = {"BSQ_allocation": "bsq", "bsq_active_entries": "bsq", "IOQ_allocation": "ioq",
             "IOQ_active_entries": "ioq"}


def selects(event: str, mask: int, r: BusRequest, model: int) -> bool:
    """Does `event` with this ESCR event mask count request `r` on CPU model `model`?"""
    return MATCHERS[event](mask, r, model)


def selected(event: str, mask: int, model: int) -> tuple[BusRequest, ...]:
    """The requests `event` with this mask counts on CPU model `model`."""
    return tuple(r for r in REQUESTS if selects(event, mask, r, model))


def canonical_mask(event: str, r: BusRequest) -> int:
    """The mask of `event` that selects request `r` (on every CPU model)."""
    return getattr(r, CANONICAL[event])


def mask_list(event: str, requests) -> str:
    """The requests and the masks of `event` that select them, for messages and docs:
    "read 328Ch, rfo 328Dh, writeback 328Fh"."""
    return ", ".join(f"{r.name} {canonical_mask(event, r):04X}h" for r in requests)


def care_mask(event: str, r: BusRequest) -> int:
    """The bits of a mask that decide whether `event` selects `r` on models 2 and later:
    it does iff mask & care_mask == canonical_mask (a form the guest's p4event tests in sh).
    BSQ: every defined bit; IOQ: the request-type field and r's own direction, memory-type
    and agent bits (the others only widen the selection)."""
    if CANONICAL[event] == "bsq":
        return BSQ_DEFINED
    return r.ioq | IOQ_TYPE_FIELD


def default_mask(event: str, requests) -> int:
    """The mask of a spec that names no bits (`p4pmu events --perf`, the guest's p4event):
    the union of the `requests`' masks if it selects them all (IOQ: every own request), else
    the first one's (BSQ, whose mask is one request's encoding: a line read)."""
    if not requests:
        return 0
    union = 0
    for r in requests:
        union |= canonical_mask(event, r)
    if all(union & care_mask(event, r) == canonical_mask(event, r) for r in requests):
        return union
    return canonical_mask(event, requests[0])


__all__ = ["BusRequest", "REQUESTS", "REQUEST_BY_NAME", "MATCHERS", "selects", "selected",
           "canonical_mask", "mask_list", "care_mask", "default_mask", "bsq_selects",
           "ioq_selects"]
