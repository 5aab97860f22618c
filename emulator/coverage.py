"""What this emulator counts for every NetBurst event and mask bit, and why the others read 0.

One table per fact: the clock model's features (`clockmodel.FEATURES`) each say what they are
counted from and whether that is *exact* (a function of the retired instruction stream alone)
or *modelled* (it also depends on one of the documented models: the instruction table, the
branch predictor, the clock schedule); the events no model drives each have a reason.  A mask
bit's status follows from the features its line reads (`clockmodel.line_matrix`, under no
tagging and under every tagging), so the list cannot drift from what the plugin counts.
`markdown()` is the reference section of docs/events.md (tests/test_events_cmd.py checks it
is current; `python -m p4pmu.emulator.coverage` prints it).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np

from . import bus_requests as BR
from . import clockmodel as CM
from . import events as EV
from . import tables as T

EXACT, MODELLED, ZERO = "exact", "modelled", "0"

# feature -> (exact?, what it counts); docs/guest-events.md I3-I6 define each
FEATURE_SOURCE: dict[str, tuple[bool, str]] = {
    "instr": (True, "retired instructions"),
    "instr_ld": (False, "instructions with a load (insn_classes)"),
    "instr_st": (False, "instructions with a store (insn_classes)"),
    "instr_ldst": (False, "instructions with a load and a store (insn_classes)"),
    "uops": (False, "uops per instruction (insn_classes)"),
    "ld": (False, "load uops (insn_classes)"),
    "st": (False, "store uops (insn_classes)"),
    "bogus_instr": (False, "wrong-path instructions after a misprediction (clockmodel "
                           "bogus_insns)"),
    "bogus_uops": (False, "wrong-path uops after a misprediction"),
    "MMNP": (False, "branches not taken, predicted (the predictor)"),
    "MMNM": (False, "branches not taken, mispredicted (the predictor)"),
    "MMTP": (False, "branches taken, predicted (the predictor)"),
    "MMTM": (False, "branches taken, mispredicted (the predictor)"),
    "misp": (False, "mispredicted branches (the predictor)"),
    "rbt_uncond": (True, "direct near JMPs"),
    "rbt_cond": (True, "conditional branches"),
    "rbt_call": (True, "near CALLs"),
    "rbt_ret": (True, "near RETs"),
    "rbt_ind": (True, "near RETs, indirect CALLs and JMPs"),
    "rmbt_uncond": (False, "mispredicted direct JMPs (the predictor: never)"),
    "rmbt_cond": (False, "mispredicted conditional branches (the predictor)"),
    "rmbt_call": (False, "mispredicted indirect CALLs (the predictor)"),
    "rmbt_ret": (False, "mispredicted RETs (the predictor)"),
    "rmbt_ind": (False, "mispredicted RETs, indirect CALLs and JMPs (the predictor)"),
    "running": (False, "clocks of the logical processor not halted (the clock model)"),
    "ms": (False, "microcoded instructions: more than ms_rom_above uops, or REP string"),
    "ms_uops": (False, "uops of microcoded instructions"),
    "tc_uops": (False, "uops not from the microcode ROM, delivered by the trace cache (not in a "
                       "built block execution: the memory model's code-line record)"),
    "tc_build_uops": (False, "uops not from the microcode ROM in a block execution whose fetch "
                             "missed the trace cache: built (the memory model's code-line "
                             "record)"),
    "mode_d": (False, "clocks in which the trace cache delivers: not built, no ROM uops (the "
                      "clock model, the code-line record)"),
    "mode_b": (False, "clocks of block executions whose fetch missed the trace cache, after "
                      "the bubble: building (the clock model, the code-line record)"),
    "mode_i": (False, "clocks in which the microcode ROM delivers uops (the clock model)"),
    "instr_x": (True, "the second count of instructions silicon counts twice (FLDCW, "
                      "FLDENV, FRSTOR, EMMS, MASKMOVQ, SFENCE, MFENCE, CVT(T)PD2PI from "
                      "memory), and one per return to user code after an exception"),
    "instr_cx": (True, "one per return to user code after an exception"),
    "br_x": (True, "one per return to user code after an exception"),
    "x87": (False, "x87 arithmetic uops (insn_classes)"),
    "psp": (False, "packed single-precision SSE uops (insn_classes)"),
    "pdp": (False, "packed double-precision SSE2 uops (insn_classes)"),
    "ssp": (False, "scalar single-precision SSE uops (insn_classes)"),
    "sdp": (False, "scalar double-precision SSE2 uops (insn_classes)"),
    "mmx64": (False, "integer SIMD uops on MMX registers (insn_classes)"),
    "mmx128": (False, "integer SIMD uops on XMM registers (insn_classes)"),
    "movst": (False, "x87/SIMD store and register-move uops (insn_classes)"),
    "movld": (False, "x87/SIMD load uops (insn_classes)"),
    # the memory model (docs/memory-model.md): exact for splits (address and size alone)
    "split_ld": (True, "loads crossing a 64-byte line"),
    "split_st": (True, "stores crossing a 64-byte line"),
    "dtlb_ld": (False, "DTLB misses of loads (the memory model)"),
    "dtlb_st": (False, "DTLB misses of stores (the memory model)"),
    "dtlb_walks": (False, "page walks for DTLB misses of loads and stores (the memory model)"),
    "l1_ld": (False, "L1 data-cache lines loads missed (the memory model)"),
    "l2_hite": (False, "L2 reads by loads hitting an Exclusive line (the memory model)"),
    "l2_hitm": (False, "L2 reads by loads hitting a Modified line (the memory model)"),
    "l2_ld": (False, "L2 lines loads missed (the memory model)"),
    "l2_rfo": (False, "L2 lines stores' reads for ownership missed (the memory model)"),
    "l2_rd_miss": (False, "L2 lines loads and stores' reads for ownership missed (the memory "
                          "model; the bus model: one line read each)"),
    "ld_l1miss": (False, "loads missing the L1 data cache (the memory model)"),
    "ld_l2miss": (False, "loads missing L2 (the memory model)"),
    "ld_dtlb": (False, "loads missing the DTLB (the memory model)"),
    "st_dtlb": (False, "stores missing the DTLB (the memory model)"),
    "smc": (False, "stores into code lines the processor fetched: self-modifying code (the "
                   "memory model's code-line record)"),
    "ld_partial": (False, "loads a buffered store overlaps in part: no forwarding (the memory "
                          "model's store buffers)"),
    "ld_unalgn": (False, "loads inside a buffered store from another start: no forwarding "
                         "(the memory model's store buffers)"),
    "ld_64k": (False, "loads at a buffered store's address modulo 64 KB, not overlapping it "
                      "(the memory model's store buffers)"),
    "ld_mob": (False, "loads the memory order buffer replays: a buffered store overlaps them "
                      "and cannot forward (the memory model's store buffers)"),
    "wb": (False, "modified lines written back to memory (the memory model's L2; the bus "
                  "model: one transfer each)"),
    "itlb_hit": (False, "ITLB look-ups of block fetches that hit (the memory model)"),
    "itlb_miss": (False, "ITLB look-ups of block fetches that missed: page walks (the memory "
                         "model)"),
    "tc_miss": (False, "code lines block fetches did not find in the trace cache (the memory "
                       "model's code-line record)"),
    "tc_build": (False, "clocks of block executions built into the trace cache"),
    "sse_assist": (False, "SSE instructions with a denormal input while MXCSR.DAZ is clear, one "
                          "per execution (the plugin reads the inputs: emulator/fp_assist.py)"),
    "x87_prea": (False, "x87 instructions that load a denormal single or double from memory, "
                        "one per execution (the plugin reads the value: emulator/fp_assist.py)"),
    "x87_poau": (False, "x87 stores of ST(0) as a single or double whose value stored is a "
                        "denormal, one per execution (the plugin reads the value: "
                        "emulator/fp_assist.py)"),
    "rd_active": (False, "clocks a load waits for its line from memory, once per update of the "
                         "queue's count (timing=memory; the memory model)"),
}

_NO_MEMORY = "no memory-order model (store buffers, the memory order buffer)"
_NO_OCCUPANCY = ("only loads wait for their bus requests in this model (timing=memory): a "
                 "store's read for ownership and a write-back hold up nothing, and the model "
                 "gives them no time in the queues")
_BUS_SIGNALS = ("no source defines these bus signals' mask bits: the SDM lists the bit numbers "
                "without meanings (Table 19-28), and every other source copies it")
# event -> why it reads 0 (every mask bit the clock model does not drive)
ZERO_REASON: dict[str, str] = {
    "TC_misc": "no source says what flushes the trace cache: the SDM gives only \"number of "
               "flushes\" (Table 19-28), and no other source names a cause",
    "memory_cancel": _NO_MEMORY,
    "MOB_load_replay": _NO_MEMORY,
    "IOQ_active_entries": _NO_OCCUPANCY, "bsq_active_entries": _NO_OCCUPANCY,
    "b2b_cycles": _BUS_SIGNALS,
    "bnr": _BUS_SIGNALS, "snoop": _BUS_SIGNALS, "response": _BUS_SIGNALS,
    "resource_stall": "no pipeline-resource model",
    "WC_Buffer": "no write-combining model",
    "machine_clear": _NO_MEMORY,
    "uop_type": "tags uops, never counts (SDM Table 19-28)",
    "replay_event": "wrong-path uops are not tagged in this model",
}
_NO_L3 = "none of the modelled parts has an L3"
_WRITE_THROUGH = "write-back lookups from L1: the L1 data cache is write-through, it has none"
# mask bits the modelled parts themselves never count (docs/memory-model.md): 0 here as on
# the hardware the model describes, so a counter on them is no coverage gap (no notice)
HARDWARE_ZERO: dict[tuple[str, str], str] = {
    ("BSQ_cache_reference", "RD_2ndL_HITS"): "one processor: a valid line is never Shared",
    **{("BSQ_cache_reference", b): _NO_L3 for b in ("RD_3rdL_HITS", "RD_3rdL_HITE",
                                                    "RD_3rdL_HITM", "RD_3rdL_MISS",
                                                    "WR_3rdL_HIT", "WR_3rdL_MISS")},
    ("BSQ_cache_reference", "WR_2ndL_HIT"): _WRITE_THROUGH,
    ("BSQ_cache_reference", "WR_2ndL_MISS"): _WRITE_THROUGH,
}
_OTHER_AGENTS = ("other agents' transfers (another processor, DMA) are not modelled: each "
                 "processor's model sees its own accesses")
_MEMORY_TYPES = "no memory types (every page is write-back)"
# mask bits of otherwise modelled events that stay 0
ZERO_BIT_REASON: dict[tuple[str, str], str] = {
    # the x87 assists the plugin cannot see (fp_assist.py models PREA only)
    **{("x87_assist", b): "QEMU's plugin API reads the x87 tag word as 0 (its gdb register "
       "ftag), so the plugin cannot read which stack registers are empty" for b in ("FPSU",
                                                                                   "FPSO")},
    ("x87_assist", "POAO"): "not modelled: an overflowing result is stored as an infinity, which "
                            "the plugin cannot tell from one it was given",
    ("TC_deliver_mode", "BB"): "each logical processor's batch shows the other one delivering "
                               "(its mode in that clock is in its own batch): both building is "
                               "never seen",
    # the bus requests' attributes (bus_requests.py): what no modelled request has
    **{("IOQ_allocation", f"ReqA{k}"): "no source gives the FSB request-type encodings of "
       "the transactions: only the default type (ReqA0 alone) selects" for k in range(1, 5)},
    **{("IOQ_allocation", f"MEM_{t}"): _MEMORY_TYPES for t in ("UC", "WC", "WT", "WP")},
    ("IOQ_allocation", "OTHER"): _OTHER_AGENTS,
    ("IOQ_allocation", "PREFETCH"): "no prefetches: the memory model fetches no line it was "
                                    "not asked for",
    ("BSQ_allocation", "REQ_IO_TYPE"): "no port I/O requests: IN and OUT reach QEMU's "
                                       "devices, not the memory model",
    ("BSQ_allocation", "REQ_LOCK_TYPE"): "no bus locks: a LOCK'd access to write-back memory "
                                         "is a cache lock (SDM Vol. 3A 8.1.4)",
    ("BSQ_allocation", "REQ_SPLIT_TYPE"): "no partial (8-byte chunk) requests: every "
                                          "modelled request is a 64-byte line",
    ("BSQ_allocation", "REQ_ORD_TYPE"): "no source says which requests are ordered",
    ("BSQ_allocation", "MEM_TYPE0"): _MEMORY_TYPES,
    ("FSB_data_activity", "DRDY_OTHER"): _OTHER_AGENTS,
    ("FSB_data_activity", "DBSY_OTHER"): _OTHER_AGENTS,
    ("memory_cancel", "ST_RB_FULL"): "the model's store buffers have no time: never full",
    ("MOB_load_replay", "NO_STA"): "no pipeline timing: a store's address is always known",
    ("MOB_load_replay", "NO_STD"): "no pipeline timing: a store's data is always known",
    ("ITLB_reference", "HIT_UC"): "no memory types (every page is write-back)",
    ("memory_complete", "USC"): "no memory types (every access is write-back)",
    ("memory_complete", "ULC"): "no memory types (every access is write-back)",
    **HARDWARE_ZERO,
    ("instr_retired", "BOGUSTAG"): "wrong-path instructions are not tagged in this model",
    ("front_end_event", "BOGUS"): "wrong-path uops are not tagged in this model",
    **{("execution_event", f"BOGUS{k}"): "wrong-path uops are not tagged in this model"
       for k in range(4)},
}
# lines that tagging changes (SDM Vol. 3B 18.15.6-18.15.7): what they count, in words
TAGGED_TEXT: dict[tuple[str, str], str] = {
    ("instr_retired", "NBOGUSNTAG"): "retired instructions not front-end tagged (uop_type)",
    ("instr_retired", "NBOGUSTAG"): "retired instructions with a load or store uop that "
                                    "front-end tagging (uop_type TAGLOADS/TAGSTORES) tags",
    ("front_end_event", "NBOGUS"): "the load or store uops front-end tagging (uop_type) tags",
    **{("execution_event", f"NBOGUS{k}"): f"the FP/SIMD uops of the classes a FIRM ESCR "
                                          f"tags with tag bit {k} (execution tagging)"
       for k in range(4)},
    ("replay_event", "NBOGUS"): "the uops replay tagging tags (MSR_PEBS_ENABLE, "
                                "MSR_PEBS_MATRIX_VERT; SDM Table 19-33): mispredicted "
                                "branches (the predictor), loads missing L1 or L2, loads and "
                                "stores missing the DTLB, split loads and stores, loads the "
                                "memory order buffer replays (the memory model)",
}


@dataclass(frozen=True)
class BitStatus:
    event: str
    bit: int
    name: str
    status: str  # EXACT, MODELLED or ZERO
    text: str    # what it is counted from, or why it reads 0


def _features_of(cid: int, tagging) -> list[str]:
    """The features the class's line reads under `tagging`, for a clock of any pair of
    logical processors (clockmodel.PAIRS) ([]: no line)."""
    out = []
    for pair in CM.PAIRS:
        ids, M = CM.line_matrix(tagging, pair)
        hit = np.flatnonzero(ids == cid)
        if hit.size:
            out += [CM.FEATURES[f] for f in np.flatnonzero(M[:, hit[0]])
                    if CM.FEATURES[f] not in out]
    return out


_EVERY_TAG = CM.Tagging(True, True, tuple((f, 0xF) for f in sorted(
    set(CM.UOP_EVENT_FEATURES.values()))),
    tuple(sorted({f for fs in CM.REPLAY_FEATURES.values() for f in fs})))


def bit_status(event: str, bit: int) -> BitStatus:
    """What mask bit `bit` of `event` counts here."""
    ev = EV.EVENT_BY_NAME[event]
    name = ev.mask[bit]
    if not ev.counts:
        return BitStatus(event, bit, name, ZERO, ZERO_REASON.get(event, "never counts"))
    if ev.selects_requests:
        return _request_bit_status(ev, bit)
    cid = EV.CLASS_ID[(ev.name, bit)]
    plain, tagged = _features_of(cid, CM.NO_TAGGING), _features_of(cid, _EVERY_TAG)
    feats = plain or tagged
    if not feats:
        why = ZERO_BIT_REASON.get((event, name)) or ZERO_REASON.get(event, "not modelled")
        return BitStatus(event, bit, name, ZERO, why)
    if (event, name) in TAGGED_TEXT:
        exact = False
        text = TAGGED_TEXT[(event, name)]
    else:
        exact = all(FEATURE_SOURCE[f][0] for f in feats)
        text = "; ".join(FEATURE_SOURCE[f][1] for f in feats)
    return BitStatus(event, bit, name, EXACT if exact else MODELLED, text)


def _request_bit_status(ev, bit: int) -> BitStatus:
    """A bus-queue event's mask bit: what the requests whose mask has it count from
    (bus_requests.canonical_mask), or why none does."""
    name = ev.mask[bit]
    reqs = [r for r in CM.modelled_requests(ev.name) if BR.canonical_mask(ev.name, r) >> bit & 1]
    if not reqs:
        # an occupancy event's bit: no time for the requests its allocations count, else why
        # its allocations do not count it
        alloc = CM.ALLOCATION_OF.get(ev.name, ev.name)
        if alloc != ev.name and _request_bit_status(EV.EVENT_BY_NAME[alloc], bit).status != ZERO:
            return BitStatus(ev.name, bit, name, ZERO, _NO_OCCUPANCY)
        why = ZERO_BIT_REASON.get((alloc, name)) or ZERO_REASON.get(ev.name, "not modelled")
        return BitStatus(ev.name, bit, name, ZERO, why)
    when = (" for the clocks a load waits for it (timing=memory)"
            if any(r.active for r in reqs) and ev.name in CM.ACTIVE_EVENTS else "")
    return BitStatus(ev.name, bit, name, MODELLED,
                     f"in the mask of bus requests (the memory model; \"Bus requests\" above): "
                     f"{BR.mask_list(ev.name, reqs)}{when}")


def _wiring(ev) -> str:
    return "; ".join(f"{e} → {', '.join(str(c) for c in T.ESCR_BY_NAME[e].feeds())}"
                     for e in ev.escrs)


def _models(ev) -> str:
    return " ".join(f"0F_{m:02X}" for m in sorted(ev.models))


def markdown() -> str:
    """The reference table of docs/events.md: every event and mask bit."""
    rows = ["| event | ESCRs → counters | models | mask bit | counts | from, or why 0 |",
            "|---|---|---|---|---|---|"]
    n_ev = n_bits = 0
    total_bits = 0
    for ev in EV.EVENTS:
        first = True
        counted = False
        for bit in sorted(ev.mask):
            st = bit_status(ev.name, bit)
            total_bits += ev.counts
            counted = counted or st.status != ZERO
            n_bits += st.status != ZERO
            head = (f"{ev.name} ({ev.kind})", _wiring(ev), _models(ev)) if first else \
                ("", "", "")
            rows.append(f"| {' | '.join(head)} | {bit} {st.name} | {st.status} | {st.text} |")
            first = False
        n_ev += counted
    summary = (f"{n_ev} of {len(EV.EVENTS)} events and {n_bits} of {total_bits} mask bits of "
               "counting events count from modelled activity; *exact*: a function of the "
               "retired instructions alone; *modelled*: it also depends on a documented model "
               "(docs/guest-events.md I3-I6); *0*: reads 0 whatever the guest does, for the "
               "reason given.")
    return summary + "\n\n" + "\n".join(rows) + "\n"


if __name__ == "__main__":
    sys.stdout.write(markdown())
