"""Memory-side events on real guest activity (docs/memory-model.md): split loads and stores
counted exactly, in the clock their instruction retires in, through every counter filter
(threshold, complement, edge) and replay tagging's split metrics -- against the documented
clock model with the split accesses of the `split` loop (tests/guests/evexpect.py
ClockOracle), exact.  Every other loop has no split access: its split events must not move.

The patterns whose outcome the memory model fixes, on the guest: `hotbuf` re-reads a buffer
that fits in L1 (no miss, no walk per iteration once it is in), `pages` loads from 72 pages
per iteration (more than the DTLB holds: one page walk each), `smc` stores into code it then
calls (one self-modifying-code machine clear per iteration), `sbuf` loads against buffered
stores (a replay for a partial overlap and for another start, a cancel for 64 K aliasing),
`thrash` stores to more lines of one L2 set than it has ways (a bus line read and a
write-back per store) and loads from as many lines of the next set (a line read per load),
which the bus-queue events BSQ_allocation and IOQ_allocation select by the requests'
attributes, `tcsweep` runs code in more lines of one set of the trace cache than it has ways
(a trace-cache miss per block), and `smc`'s store makes its target's line miss the trace cache
too.  Their expected outcomes come from the reference model (emulator/memmodel.py) run over
the loops' own accesses and fetches.  At timing=memory, the loads' stall clocks and the bus
queues' occupancy (bsq_active_entries, IOQ_active_entries) on `thrash` and two control loops.
"""
from __future__ import annotations

import pytest

from p4pmu.emulator import clockmodel as CM
from p4pmu.emulator.memmodel import MemorySystem
from p4pmu.emulator.models import get_model
from p4pmu.qemu_glue.guests import build as guest_build

from guests import sse_inputs
from guests.evexpect import ClockOracle, LoopModel, blocks_of, oracle_mismatches
from guests.evplan import Ctr, Plan, Setup
from guests.evscript import parse_events
from guests.loops import TRACEABLE_MEMORY

pytestmark = pytest.mark.guest

S0, S1 = "MSR_SAAT_ESCR0", "MSR_SAAT_ESCR1"
C0, C2, C3 = "MSR_CRU_ESCR0", "MSR_CRU_ESCR2", "MSR_CRU_ESCR3"
REPLAY_SPLIT_LD = [(0x3F1, (1 << 24) | (1 << 10)), (0x3F2, 1 << 0)]  # SDM Table 19-33
REPLAY_SPLIT_ST = [(0x3F1, (1 << 24) | (1 << 10)), (0x3F2, 1 << 1)]
REPLAY_L1_LOAD_MISS = [(0x3F1, (1 << 24) | (1 << 0)), (0x3F2, 1 << 0)]
REPLAY_DTLB_LOAD_MISS = [(0x3F1, (1 << 24) | (1 << 2)), (0x3F2, 1 << 0)]
REPLAY_MOB_LOAD = [(0x3F1, (1 << 24) | (1 << 9)), (0x3F2, 1 << 0)]
L2_READS = ("RD_2ndL_HITE", "RD_2ndL_HITM", "RD_2ndL_MISS")
# the bus requests (emulator/bus_requests.py): BSQ_allocation's encodings of a line read, a
# read for ownership and a write-back (every sub-group must match), IOQ_allocation's fields
BSQ_LINE = ("REQ_LEN0", "REQ_LEN1", "REQ_CACHE_TYPE", "REQ_DEM_TYPE", "MEM_TYPE1", "MEM_TYPE2")
BSQ_READ, BSQ_RFO = BSQ_LINE, BSQ_LINE + ("REQ_TYPE0",)
BSQ_WRITEBACK = BSQ_LINE + ("REQ_TYPE0", "REQ_TYPE1")
IOQ_OWN_WB = ("ReqA0", "MEM_WB", "OWN")
BSU0, FSB1 = "MSR_BSU_ESCR0", "MSR_FSB_ESCR1"

SETUPS = [
    Setup("split", [
        Ctr(8, S0, "memory_complete", ("LSC", "SSC"), os=True, usr=True),
        # rising edges of "a split completes in this clock"
        Ctr(9, S0, "memory_complete", ("LSC", "SSC"), os=True, usr=True, compare=True,
            threshold=0, edge=True),
        Ctr(10, S1, "load_port_replay", ("SPLIT_LD",), os=True, usr=True),
        # clocks without a split load
        Ctr(11, S1, "load_port_replay", ("SPLIT_LD",), os=True, usr=True, compare=True,
            complement=True, threshold=0),
        Ctr(13, C2, "replay_event", ("NBOGUS",), os=True, usr=True),
        Ctr(12, C0, "instr_retired", ("NBOGUSNTAG",), os=True, usr=True),
        # bus requests: line reads (BSQ), every own request (IOQ: both directions)
        Ctr(0, BSU0, "BSQ_allocation", BSQ_READ, os=True, usr=True),
        Ctr(1, BSU0, "BSQ_allocation", BSQ_READ, os=True, usr=True, compare=True,
            threshold=0, edge=True),
        Ctr(2, FSB1, "IOQ_allocation", IOQ_OWN_WB + ("ALL_READ", "ALL_WRITE"), usr=True),
        Ctr(3, FSB1, "IOQ_allocation", IOQ_OWN_WB + ("ALL_READ", "ALL_WRITE"), usr=True,
            compare=True, complement=True, threshold=0),
    ], msr_writes=REPLAY_SPLIT_LD),
    Setup("split2", [
        Ctr(8, S0, "store_port_replay", ("SPLIT_ST",), usr=True),
        Ctr(9, S0, "store_port_replay", ("SPLIT_ST",), usr=True, compare=True, threshold=0),
        Ctr(10, S1, "memory_complete", ("LSC",), os=True),
        # falling edges (rising edges of "no split load completes")
        Ctr(11, S1, "memory_complete", ("LSC",), os=True, compare=True, complement=True,
            threshold=0, edge=True),
        Ctr(15, C3, "replay_event", ("NBOGUS",), os=True, usr=True),
        # bus requests: write-backs (BSQ), own reads (IOQ: line reads and RFOs alike)
        Ctr(0, BSU0, "BSQ_allocation", BSQ_WRITEBACK, usr=True),
        Ctr(2, FSB1, "IOQ_allocation", IOQ_OWN_WB + ("ALL_READ",), os=True, usr=True),
        Ctr(3, FSB1, "IOQ_allocation", IOQ_OWN_WB + ("ALL_READ",), os=True, usr=True,
            compare=True, threshold=1),
    ], msr_writes=REPLAY_SPLIT_ST),
    # instruction fetches: one ITLB look-up per block execution, a hit once the loop's page
    # is in (it is, after the warm-up: the difference of two lengths has no miss)
    Setup("itlb", [
        Ctr(0, "MSR_ITLB_ESCR0", "ITLB_reference", ("HIT",), os=True, usr=True),
        Ctr(1, "MSR_ITLB_ESCR0", "ITLB_reference", ("HIT",), os=True, usr=True, compare=True,
            complement=True, threshold=0, edge=True),
        Ctr(2, "MSR_PMH_ESCR1", "page_walk_type", ("ITMISS",), os=True, usr=True),
        Ctr(3, "MSR_ITLB_ESCR1", "ITLB_reference", ("MISS", "HIT_UC"), usr=True),
        Ctr(12, C0, "instr_retired", ("NBOGUSNTAG",), os=True, usr=True),
    ]),
    # data page walks: DTMISS, the loads' DTLB metric; L2 reads by result
    Setup("walks", [
        Ctr(0, "MSR_BSU_ESCR0", "BSQ_cache_reference", L2_READS, os=True, usr=True),
        Ctr(2, "MSR_PMH_ESCR1", "page_walk_type", ("DTMISS",), os=True, usr=True),
        Ctr(3, "MSR_PMH_ESCR1", "page_walk_type", ("DTMISS",), os=True, usr=True,
            compare=True, complement=True, threshold=0, edge=True),
        Ctr(14, C3, "replay_event", ("NBOGUS",), os=True, usr=True),
        Ctr(12, C0, "instr_retired", ("NBOGUSNTAG",), os=True, usr=True),
    ], msr_writes=REPLAY_DTLB_LOAD_MISS),
    # L1 load misses (the replay metric) and L2 reads, by ring
    Setup("l1", [
        Ctr(0, "MSR_BSU_ESCR0", "BSQ_cache_reference", L2_READS, usr=True),
        Ctr(13, C2, "replay_event", ("NBOGUS",), os=True, usr=True),
        Ctr(16, C2, "replay_event", ("NBOGUS",), os=True, usr=True, compare=True,
            threshold=0),
    ], msr_writes=REPLAY_L1_LOAD_MISS),
    # self-modifying code: machine clears (a clear is one clock: CLEAR = SMCLEAR); the trace
    # cache: the code lines a block fetch does not find (the same code-line record)
    Setup("smc", [
        Ctr(0, "MSR_BPU_ESCR0", "BPU_fetch_request", ("TCMISS",), os=True, usr=True),
        Ctr(1, "MSR_BPU_ESCR0", "BPU_fetch_request", ("TCMISS",), os=True, usr=True,
            compare=True, threshold=0, edge=True),
        Ctr(2, "MSR_BPU_ESCR1", "BPU_fetch_request", ("TCMISS",), usr=True),
        Ctr(3, "MSR_BPU_ESCR1", "BPU_fetch_request", ("TCMISS",), usr=True, compare=True,
            complement=True, threshold=0),
        Ctr(12, C2, "machine_clear", ("SMCLEAR",), os=True, usr=True),
        Ctr(13, C2, "machine_clear", ("SMCLEAR",), os=True, usr=True, compare=True,
            complement=True, threshold=0, edge=True),
        Ctr(14, C3, "machine_clear", ("CLEAR", "MOCLEAR"), usr=True),
        Ctr(15, C3, "machine_clear", ("CLEAR", "MOCLEAR"), usr=True, compare=True,
            threshold=0),
        # ... and the executions that missed it are built: their clocks (build mode, LP 1
        # absent), the uops the trace cache builds and delivers, and the clocks in which it
        # delivers or builds (not those of the microcode ROM: II, no bit)
        Ctr(4, "MSR_TC_ESCR0", "TC_deliver_mode", ("BI",), os=True, usr=True),
        Ctr(5, "MSR_TC_ESCR0", "TC_deliver_mode", ("BI",), os=True, usr=True, compare=True,
            threshold=0, edge=True),
        Ctr(6, "MSR_MS_ESCR1", "uop_queue_writes", ("FROM_TC_BUILD", "FROM_TC_DELIVER"),
            usr=True),
        Ctr(7, "MSR_TC_ESCR1", "TC_deliver_mode", ("DI", "BI"), os=True, usr=True,
            compare=True, complement=True, threshold=0),
    ]),
    # the store buffers: MOB replays, 64 K aliasing cancels, the MOB replay metric
    Setup("mob", [
        Ctr(0, "MSR_MOB_ESCR0", "MOB_load_replay", ("PARTIAL_DATA", "UNALGN_ADDR", "NO_STA"),
            os=True, usr=True),
        Ctr(2, "MSR_MOB_ESCR1", "MOB_load_replay", ("UNALGN_ADDR",), usr=True),
        Ctr(3, "MSR_MOB_ESCR1", "MOB_load_replay", ("UNALGN_ADDR",), usr=True, compare=True,
            complement=True, threshold=0, edge=True),
        Ctr(8, "MSR_DAC_ESCR0", "memory_cancel", ("64K_CONF", "ST_RB_FULL"), os=True,
            usr=True),
        Ctr(13, C2, "replay_event", ("NBOGUS",), os=True, usr=True),
        Ctr(1, BSU0, "BSQ_allocation", BSQ_RFO, os=True, usr=True),  # reads for ownership
    ], msr_writes=REPLAY_MOB_LOAD),
    # the bus: line reads and write-backs (Linux's bus-cycles: DRDY_DRV|DRDY_OWN, EDGE)
    Setup("bus", [
        Ctr(0, "MSR_FSB_ESCR0", "FSB_data_activity", ("DRDY_DRV", "DRDY_OWN"), os=True,
            usr=True),
        Ctr(1, "MSR_FSB_ESCR0", "FSB_data_activity", ("DRDY_DRV", "DRDY_OWN"), os=True,
            usr=True, compare=True, threshold=0, edge=True),
        Ctr(2, "MSR_FSB_ESCR1", "FSB_data_activity", ("DBSY_DRV", "DBSY_OTHER"), usr=True),
    ]),
]

# the memory patterns, and of the other loops those whose instructions differ in kind (plain,
# loads and stores, calls, indirect branches, microcode, x87): each must leave the memory
# events alone.  A measurement costs its PMU accesses, whatever the iterations.
CONTROL_LOOPS = ("nop4", "alu", "callret", "indirect", "mem", "ucode", "x87", "split")
PLAN = Plan(SETUPS, list(CONTROL_LOOPS) + list(TRACEABLE_MEMORY), rings=(0, 3), ns=(60, 600))
def _ebx_access(insn, ebx: int | None):
    """(address, size, store) of a pattern loop's `mov` between a 32- or 16-bit register and memory
    through %ebx/%rbx (whose value the loop set with a `mov $imm`), or None (the prologue's
    stack accesses are the same in every measurement)."""
    if insn.mnemonic != "mov" or not insn.operands.endswith(("(%ebx)", "(%rbx)")) and \
            "(%ebx)," not in insn.operands and "(%rbx)," not in insn.operands:
        return None
    src, dst = [a.strip() for a in insn.operands.split(",", 1)]
    (mem, reg), store = ((dst, src), True) if "(" in dst else ((src, dst), False)
    assert ebx is not None, insn.text
    disp = mem.split("(")[0]
    size = 4 if reg.startswith("%e") else 2 if len(reg) == 3 and reg.endswith("x") else None
    assert size, insn.text
    return ebx + (int(disp, 16) if disp else 0), size, store


def pattern_outcomes(model, loop: str, cpu: str | None = None) -> dict:
    """{instruction address: memory fields} of every execution of `loop`'s body once its
    accesses repeat (the reference model of CPU model `cpu`'s caches over its fetches and
    accesses, three iterations: the third's outcomes); a block's trace-cache misses go to its
    first instruction."""
    mm = MemorySystem(get_model(cpu).memory)
    ebx, last, tc = None, {}, {}
    for blk in blocks_of(model.trace(loop, 3)):
        tc[blk[0].addr] = mm.fetch_code(blk[0].addr, blk[-1].addr + blk[-1].insn.size)
        for st in blk:
            if st.insn.mnemonic == "mov" and st.insn.operands.startswith("$") and \
                    st.insn.operands.endswith("%ebx"):
                ebx = int(st.insn.operands[1:].split(",")[0], 16)
            acc = _ebx_access(st.insn, ebx)
            if acc is not None:
                last[st.addr] = CM.memory_fields(mm.access(*acc), acc[2])
    out = {a: f for a, f in last.items() if f}
    for a, n in tc.items():
        if n:
            out[a] = dict(out.get(a, {}), tc_miss=n)
    return out


@pytest.fixture(scope="module")
def memory(run_guest):
    cache = {}

    def get(bits: int):
        if bits not in cache:
            r = run_guest(f"events{bits}", script=PLAN.script(), timeout=900)
            r.require_completed()
            model = LoopModel(guest_build.BUILD_DIR / f"events{bits}.elf", bits)
            sym = model.img.symbols
            mem = {}
            for loop in ("split",) + TRACEABLE_MEMORY:
                mem.update(pattern_outcomes(model, loop))
            # the split loop's line crossings, counted by hand; its load at 125 also overlaps
            # part of the store before it at 126 (a MOB replay)
            splits = {a: {k: v for k, v in f.items() if k.startswith("split")}
                      for a, f in mem.items()}
            assert {a: f for a, f in splits.items() if f} == {
                sym["split_body"]: {"split_ld": 1}, sym["split_ld2"]: {"split_ld": 1},
                sym["split_ld3"]: {"split_ld": 1}, sym["split_ld4"]: {"split_ld": 1},
                sym["split_st1"]: {"split_st": 1}}
            assert mem[sym["split_ld3"]].get("ld_partial") == 1
            # every block's fetch: one ITLB hit (no loop crosses a page)
            cache[bits] = (parse_events(r.out.lines),
                           ClockOracle(model, mem=mem, fetch_hits=True))
        return cache[bits]

    return get


@pytest.mark.parametrize("loop", CONTROL_LOOPS + TRACEABLE_MEMORY)
@pytest.mark.parametrize("bits", (32, 64))
def test_memory_events_count_exactly_in_their_clocks(memory, bits, loop):
    out, oracle = memory(bits)
    n1, n2 = PLAN.ns
    bad, rows = oracle_mismatches(PLAN, SETUPS, out, oracle, loop)
    # the loops that do something: the expectations are not trivially 0
    if loop == "split":
        assert PLAN.delta(out, "split", loop, 3, 10) == 4 * (n2 - n1)
    if loop == "pages":  # one walk per load, 72 loads per iteration
        assert PLAN.delta(out, "walks", loop, 0, 2) == 72 * (n2 - n1)
        assert PLAN.delta(out, "walks", loop, 0, 14) == 72 * (n2 - n1)
    if loop == "hotbuf":  # 32 loads per iteration, no L1 miss
        assert PLAN.delta(out, "l1", loop, 0, 13) == 0
    if loop == "smc":  # one clear per iteration, and its line misses the trace cache
        assert PLAN.delta(out, "smc", loop, 0, 12) == n2 - n1
        assert PLAN.delta(out, "smc", loop, 0, 0) == n2 - n1
    if loop == "tcsweep":  # 9 lines of one set of the trace cache: 9 misses per iteration
        assert PLAN.delta(out, "smc", loop, 0, 0) == 9 * (n2 - n1)
        assert PLAN.delta(out, "smc", loop, 3, 2) == 9 * (n2 - n1)
        # ... so its 9 block executions are built: one run of build-mode clocks each
        assert PLAN.delta(out, "smc", loop, 0, 5) == 9 * (n2 - n1)
    if loop == "sbuf":  # one replay of each kind and one 64 K aliasing cancel per iteration
        assert PLAN.delta(out, "mob", loop, 0, 0) == 2 * (n2 - n1)
        assert PLAN.delta(out, "mob", loop, 3, 2) == n2 - n1
        assert PLAN.delta(out, "mob", loop, 0, 8) == n2 - n1
        assert PLAN.delta(out, "mob", loop, 0, 13) == 2 * (n2 - n1)
    if loop == "thrash":  # per iteration 9 reads for ownership and 9 write-backs, 9 line reads
        n = n2 - n1
        assert PLAN.delta(out, "bus", loop, 0, 0) == 27 * n
        assert PLAN.delta(out, "bus", loop, 3, 2) == 9 * n
        for setup, ctr, want in (("split", 0, 9), ("split", 2, 27), ("split2", 0, 9),
                                 ("split2", 2, 18), ("mob", 1, 9)):
            assert PLAN.delta(out, setup, loop, 3, ctr) == want * n, (setup, ctr)
    assert not bad, (f"{bits}-bit guest, loop {loop}, {n2} - {n1} iterations: {len(bad)} of "
                     f"{len(rows)} counts differ:\n" + "\n".join(bad))


# the determinism run: every setup, on the loops of the memory patterns
AGAIN = Plan(SETUPS, ["split", *TRACEABLE_MEMORY], rings=PLAN.rings, ns=PLAN.ns)


def test_same_counts_with_the_trace_the_checker_and_the_control_channel(run_guest, memory,
                                                                        tmp_path):
    """Determinism: the memory patterns again, with trace=, lint=on and control= (which also
    instrument from the first block): every counter's count over the n2 - n1 iterations is
    the same as in the full run (what ran before a measurement differs, its steady state does
    not)."""
    first, _ = memory(32)
    opts = (f"trace={tmp_path / 't.jsonl'}", "lint=on", f"control={tmp_path / 'c.sock'}")
    r = run_guest("events32", script=AGAIN.script(), timeout=900, plugin_opts=opts)
    r.require_completed()
    second = parse_events(r.out.lines)
    keys = [(st.name, loop, ring, c.n) for st in SETUPS for loop in AGAIN.loops
            for ring in AGAIN.rings for c in st.counters]
    diff = [k for k in keys if PLAN.delta(first, *k) != AGAIN.delta(second, *k)]
    assert not diff, f"{len(diff)} of {len(keys)} counts differ, e.g. " + ", ".join(
        f"{k}: {PLAN.delta(first, *k)} vs {AGAIN.delta(second, *k)}" for k in diff[:10])
    assert (tmp_path / "t.jsonl").stat().st_size > 0


# ---- timing=memory: the bus queues' occupancy ---------------------------------------------

# the loads' stall clocks (docs/timing.md) and the read they wait for in the bus queues
# (docs/events.md, "Bus requests"), counted plainly, by edges into and out of them, and
# against the clocks: the occupancy clocks must sit last of the stalls, before the block's
# instructions, in the plugin's clock pairs as in the reference
IOQ_READ = ("ReqA0", "ALL_READ", "MEM_WB", "OWN")
TIMED_SETUPS = [
    Setup("bsq", [
        Ctr(0, BSU0, "BSQ_allocation", BSQ_READ, os=True, usr=True),
        Ctr(1, BSU0, "BSQ_allocation", BSQ_READ, os=True, usr=True, compare=True, complement=True,
            threshold=0),
        Ctr(2, "MSR_BSU_ESCR1", "bsq_active_entries", BSQ_READ, os=True, usr=True),
        Ctr(3, "MSR_BSU_ESCR1", "bsq_active_entries", BSQ_READ, os=True, usr=True, compare=True,
            threshold=0, edge=True),
    ]),
    Setup("ioq", [
        Ctr(0, "MSR_FSB_ESCR0", "global_power_events", ("RUNNING",), os=True, usr=True),
        Ctr(2, FSB1, "IOQ_active_entries", IOQ_READ, os=True, usr=True),
        Ctr(3, FSB1, "IOQ_active_entries", IOQ_READ, os=True, usr=True, compare=True,
            complement=True, threshold=0, edge=True),
    ]),
]
TIMED = Plan(TIMED_SETUPS, ["alu", "pages", "thrash"], rings=(0, 3), ns=(60, 600))


@pytest.fixture(scope="module")
def timed(run_guest):
    cache = {}

    def get(bits: int, cpu: str):
        if (bits, cpu) not in cache:
            r = run_guest(f"events{bits}", cpu, script=TIMED.script(), timeout=900,
                          plugin_opts=("timing=memory",))
            r.require_completed()
            core = get_model(cpu).core
            model = LoopModel(guest_build.BUILD_DIR / f"events{bits}.elf", bits, core)
            mem = {}
            for loop in ("pages", "thrash"):
                mem.update(pattern_outcomes(model, loop, cpu))
            params = CM.core_params(core, memory_timing=1)
            cache[bits, cpu] = (parse_events(r.out.lines),
                                ClockOracle(model, params=params, mem=mem, fetch_hits=True))
        return cache[bits, cpu]

    return get


# (pages on a Northwood: the code between two measurements evicts a varying few of its 72
# lines from the 8 KB L1, and each costs an L2 hit's 17 clocks in the first iteration -- the
# clocks differ by multiples of 17; its page walks' stall clocks are checked on the Prescott)
@pytest.mark.parametrize("bits, cpu, loop", [(b, c, loop) for b, c in ((32, "0F_04"), (64, "0F_04"))
                                             for loop in TIMED.loops] +
                         [(32, "0F_02", loop) for loop in TIMED.loops if loop != "pages"])
def test_bus_queue_occupancy_counts_exactly_at_timing_memory(timed, bits, cpu, loop):
    """A Northwood (every clock a read waits counts) and a Prescott (every other one), 32-
    and 64-bit."""
    out, oracle = timed(bits, cpu)
    n = TIMED.ns[1] - TIMED.ns[0]
    bad, rows = oracle_mismatches(TIMED, TIMED_SETUPS, out, oracle, loop)
    t = CM.core_params(get_model(cpu).core, memory_timing=1)
    per_read = t["stall_mem"] // t["queue_update"]
    assert per_read == {"0F_02": 288, "0F_04": 143}[cpu]
    if loop == "thrash":  # 9 line reads per iteration, each active for its wait
        assert TIMED.delta(out, "bsq", loop, 3, 0) == 9 * n
        assert TIMED.delta(out, "bsq", loop, 3, 2) == 9 * n * per_read
        assert TIMED.delta(out, "ioq", loop, 3, 2) == 9 * n * per_read
        assert TIMED.delta(out, "bsq", loop, 3, 3) > 0  # runs of active clocks
    else:  # no L2 miss of a load
        assert TIMED.delta(out, "bsq", loop, 3, 2) == 0
    assert not bad, (f"{bits}-bit guest, {cpu}, timing=memory, loop {loop}: {len(bad)} of "
                     f"{len(rows)} counts differ:\n" + "\n".join(bad))


# ---- the SSE input assists ------------------------------------------------------------------

# SSE_input_assist (FIRM_ESCR0/1, counters 8-11) and x87_assist PREA and POAU (CRU_ESCR2/3,
# counters 12-15): plainly, by rising edges, and the clocks without an assist; `denorm` runs
# SSE and x87 instructions on denormal and normal inputs, `alu` none
FIRM0, FIRM1 = "MSR_FIRM_ESCR0", "MSR_FIRM_ESCR1"
ASSIST_SETUPS = [
    Setup("assist", [
        Ctr(8, FIRM0, "SSE_input_assist", ("ALL",), os=True, usr=True),
        Ctr(9, FIRM0, "SSE_input_assist", ("ALL",), os=True, usr=True, compare=True,
            threshold=0, edge=True),
        Ctr(10, FIRM1, "SSE_input_assist", ("ALL",), usr=True, compare=True,
            complement=True, threshold=0),
        Ctr(11, FIRM1, "SSE_input_assist", ("ALL",), usr=True, compare=True,
            complement=True, threshold=0, edge=True),
        Ctr(12, C2, "x87_assist", ("PREA",), os=True, usr=True),
        Ctr(13, C2, "x87_assist", ("PREA",), os=True, usr=True, compare=True, threshold=0,
            edge=True),
        Ctr(14, C3, "x87_assist", ("POAU",), usr=True),
        Ctr(15, C3, "x87_assist", ("POAU",), usr=True, compare=True, threshold=0, edge=True),
    ]),
]
ASSIST = Plan(ASSIST_SETUPS, ["alu", "denorm"], rings=(0, 3), ns=(60, 600))


def assist_outcomes(model: LoopModel, loop: str) -> dict:
    """{instruction address: {clock field: 1}} of the loop's SSE and x87 instructions whose
    inputs request an assist (tests/guests/sse_inputs.py: their inputs read from the ELF,
    asked of emulator/fp_assist.py), as in its second iteration."""
    steps = model.trace(loop, 2)
    got = sse_inputs.assists(model.img, [s.insn for s in steps])
    return {a: {field: 1} for a, field in got.items() if field}


@pytest.fixture(scope="module")
def assisted(run_guest):
    cache = {}

    def get(bits: int, cpu: str):
        if (bits, cpu) not in cache:
            r = run_guest(f"events{bits}", cpu, script=ASSIST.script(), timeout=900)
            r.require_completed()
            core = get_model(cpu).core
            model = LoopModel(guest_build.BUILD_DIR / f"events{bits}.elf", bits, core)
            mem = assist_outcomes(model, "denorm")
            cache[bits, cpu] = (parse_events(r.out.lines), mem,
                                ClockOracle(model, params=CM.core_params(core), mem=mem,
                                            fetch_hits=True))
        return cache[bits, cpu]

    return get


@pytest.mark.parametrize("loop", ASSIST.loops)
@pytest.mark.parametrize("bits, cpu", ((32, "0F_02"), (32, "0F_04"), (64, "0F_04")))
def test_sse_input_assists_count_exactly(assisted, bits, cpu, loop):
    """The plugin reads the SSE and x87 instructions' inputs: an execution with a denormal
    input (SSE: and MXCSR.DAZ clear) requests one assist, on a Northwood and a Prescott, 32-
    and 64-bit."""
    out, mem, oracle = assisted(bits, cpu)
    n = ASSIST.ns[1] - ASSIST.ns[0]
    bad, rows = oracle_mismatches(ASSIST, ASSIST_SETUPS, out, oracle, loop)
    if loop == "denorm":  # the loop's design (its comments): four SSE, two x87 loads, a store
        img = oracle.m.img
        assert sorted(img.insn(a).mnemonic for a in mem) == \
            ["addps", "addsd", "faddl", "flds", "fsts", "maxpd", "sqrtss"]
        assert ASSIST.delta(out, "assist", loop, 3, 8) == 4 * n
        assert ASSIST.delta(out, "assist", loop, 3, 9) > 0  # runs of assisting clocks
        assert ASSIST.delta(out, "assist", loop, 3, 12) == 2 * n
        assert ASSIST.delta(out, "assist", loop, 3, 14) == n
    else:
        for ctr in (8, 12, 14):
            assert ASSIST.delta(out, "assist", loop, 3, ctr) == 0
    assert not bad, (f"{bits}-bit guest, {cpu}, loop {loop}: {len(bad)} of {len(rows)} "
                     "counts differ:\n" + "\n".join(bad))
