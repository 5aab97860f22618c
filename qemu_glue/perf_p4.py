"""Linux perf on the emulated Pentium 4: raw-event encoding, the 6.1 driver's quirk, and what
the bundled workloads should count (`p4pmu demo`, tests/test_linux_perf.py).

Raw events.  Linux's P4 driver packs a perf ``config`` as (ESCR image << 32) | CCCR image,
with the ESCR's event-select field (bits 30:25) holding the *Linux* event index (the order
of ``enum P4_EVENTS`` in arch/x86/include/asm/perf_event_p4.h, `LINUX_EVENT_ORDER`), not the
hardware select; the driver substitutes the hardware code, the ESCR select and the T0/T1
OS/USR bits itself (docs/linux-guest.md; arch/x86/events/intel/p4.c, p4_hw_config).  The
mask bits are the event table's (`p4pmu.emulator.events`).

The quirk.  Linux 6.1's ``p4_pmu_set_period`` reads the counter's previous period
(``pmc_prev_left[idx]``, per CPU and counter) *before* ``x86_perf_event_set_period`` updates
it, and writes it as the second (erratum N15) counter write.  So at every start of an event
the counter is loaded with -(the previous period used on that counter) while perf expects
-(the new period).  Counting events use the period 2^39 - 1 (`MAX_PERIOD`):
* a counter's first counting use after boot (previous period 0) reads exactly `MAX_PERIOD`
  too high; later counting runs on it are exact as long as each run started its event once;
* every further start of the event in a run (the task switched out and back in, perf
  multiplexing) adds (new period - previous period) mod 2^40: garbage, so measured tasks must
  not be preempted (`rt`, perf-setup) and event sets must fit the counters (no multiplexing);
* a sampling event's first period is the previous period of its counter: after perf's own
  counting probe events (``perf record`` opens cycles:u / instructions:u once to test kernel
  features) that is 2^39 - 1 clocks, i.e. no sample, until the task is switched out and back
  in once; from then on each period is the one before it (period - a few clocks).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from p4pmu.emulator import clockmodel as CM
from p4pmu.emulator import events as EV
from p4pmu.emulator import insn_classes as IC

# enum P4_EVENTS, arch/x86/include/asm/perf_event_p4.h (Linux 2.6.35 .. 6.x): index = position
LINUX_EVENT_ORDER = (
    "TC_deliver_mode", "BPU_fetch_request", "ITLB_reference", "memory_cancel",
    "memory_complete", "load_port_replay", "store_port_replay", "MOB_load_replay",
    "page_walk_type", "BSQ_cache_reference", "IOQ_allocation", "IOQ_active_entries",
    "FSB_data_activity", "BSQ_allocation", "bsq_active_entries", "SSE_input_assist",
    "packed_SP_uop", "packed_DP_uop", "scalar_SP_uop", "scalar_DP_uop", "64bit_MMX_uop",
    "128bit_MMX_uop", "x87_FP_uop", "TC_misc", "global_power_events", "tc_ms_xfer",
    "uop_queue_writes", "retired_mispred_branch_type", "retired_branch_type",
    "resource_stall", "WC_Buffer", "b2b_cycles", "bnr", "snoop", "response",
    "front_end_event", "execution_event", "replay_event", "instr_retired", "uops_retired",
    "uop_type", "branch_retired", "mispred_branch_retired", "x87_assist", "machine_clear",
    "instr_completed",
)
MAX_PERIOD = (1 << 39) - 1  # p4_pmu.max_period: the period of every counting event
COUNTER_MOD = 1 << 40


def linux_index(event: str) -> int:
    low = [n.lower() for n in LINUX_EVENT_ORDER]
    try:
        return low.index(event.lower())
    except ValueError:
        raise KeyError(f"{event!r} is not one of Linux's P4 events") from None


# The event-mask bits Linux's driver accepts in a raw event, where they are fewer than the
# event table's: p4_event_bind_map[].escr_emask (arch/x86/events/intel/p4.c; bit k = ESCR bit
# 9 + k, positions as in perf_event_p4.h's P4_ESCR_EMASKS).  p4_validate_raw_event fails a raw
# event with any other bit set (EINVAL).  Every Linux event not listed accepts all its bits.
LINUX_EMASK_NARROWER = {
    "TC_deliver_mode": 0x007F,  # no IB (bit 7)
    "memory_complete": 0x0003,  # no USC, ULC (SDM Table 19-34 only)
    "BSQ_cache_reference": 0x073F,  # no WR_2ndL_HIT, WR_3rdL_HIT, WR_3rdL_MISS (ditto)
    "IOQ_allocation": 0xEFE1,  # of the 5-bit request-type field only bit 0 ("DEFAULT")
    "IOQ_active_entries": 0xEFE1,
    "retired_mispred_branch_type": 0x001E,  # no UNCONDITIONAL (SDM Table 19-34 only)
    "retired_branch_type": 0x001E,
    "WC_Buffer": 0x0003,  # no WCB_HITM_EVICT (SDM Table 19-34 only)
    "b2b_cycles": 0, "bnr": 0, "snoop": 0, "response": 0,  # only an empty mask
    "machine_clear": 0x0007,  # Linux puts MOCLEAR/SMCLEAR at bits 1/2, the SDM at 2/6
}


def linux_emask(event: str) -> int:
    """The event-mask field bits (ESCR[24:9] >> 9) Linux's P4 driver accepts for `event` in a
    raw event; KeyError if Linux does not know the event."""
    linux_index(event)
    ev = next(e for e in EV.EVENTS if e.name.lower() == event.lower())
    return LINUX_EMASK_NARROWER.get(ev.name, sum(1 << k for k in ev.mask))


def raw_config(event: str, *masks: str, cccr: int = 0) -> int:
    """perf's raw config for a NetBurst event with the named ESCR mask bits (and CCCR bits
    such as COMPARE/THRESHOLD in `cccr`)."""
    ev = EV.EVENT_BY_NAME[next(e.name for e in EV.EVENTS if e.name.lower() == event.lower())]
    escr = linux_index(event) << 25 | ev.mask_value(*masks) << 9
    return escr << 32 | cccr


def raw_event(event: str, *masks: str, modifier: str = "u", cccr: int = 0) -> str:
    """The perf event string (``rHEX[:modifier]``) of `raw_config`."""
    return f"r{raw_config(event, *masks, cccr=cccr):x}" + (f":{modifier}" if modifier else "")


# --------------------------------------------------------------------------------------------
# What a bundled workload's loop counts, from its machine code and the model (I3-I6)
# --------------------------------------------------------------------------------------------


@dataclass
class LoopCounts:
    """User-level activity of a stretch of code, as the plugin's model counts it."""
    instructions: int = 0  # non-bogus retired instructions
    bogus: int = 0  # wrong-path instructions (CM.PARAMS bogus_insns per misprediction)
    cond: int = 0  # conditional branches
    calls: int = 0  # near calls
    rets: int = 0  # near returns
    MMNP: int = 0  # branch_retired, every branch (also JMP, far transfers)
    MMNM: int = 0
    MMTP: int = 0
    MMTM: int = 0
    clocks: int = 0
    returns: int = 0  # returns to this code after exceptions it took (page faults)

    @property
    def mispredicted(self) -> int:
        return self.MMNM + self.MMTM

    @property
    def linux_instructions(self) -> int:
        """Linux's `instructions` (instr_retired NBOGUSNTAG|BOGUSNTAG: bogus ones included;
        one more per return from an exception, clockmodel.RETURN_TAIL)."""
        return self.instructions + self.bogus + self.returns

    def with_returns(self, n: int) -> LoopCounts:
        """These counts when the code took `n` exceptions (page faults: perf's
        `page-faults:u`) and was returned to: silicon counts one more instruction and one
        more branch_retired (taken, predicted) for each, in a user-level clock of its own
        (clockmodel.RETURN_TAIL, docs/fidelity.md "Counting rules"); Linux's `branches`
        (retired_branch_type) does not see them."""
        return replace(self, MMTP=self.MMTP + n, returns=self.returns + n,
                       clocks=self.clocks + n)

    @property
    def linux_branches(self) -> int:
        """Linux's `branches` (retired_branch_type CONDITIONAL|CALL|RETURN|INDIRECT; the code
        here has no indirect branches)."""
        return self.cond + self.calls + self.rets

    @property
    def branches_retired(self) -> int:
        return self.MMNP + self.MMNM + self.MMTP + self.MMTM

    def __sub__(self, o: LoopCounts) -> LoopCounts:
        return LoopCounts(**{f.name: getattr(self, f.name) - getattr(o, f.name)
                             for f in fields(self)})


def _mode(path: Path) -> int:
    return 64 if path.read_bytes()[4] == 2 else 32  # ELF class


def loop_insns(path: Path, start: str, end: str | None = None,
               core: str = IC.DEFAULT_CORE) -> list:
    """The classified instructions (insn_classes.Insn) of a workload from symbol `start` to
    symbol `end`, or (end None) of the function `start` up to its first instruction that is
    neither a plain instruction nor a conditional branch (hotspots' RET)."""
    from p4pmu.qemu_glue import workloads as W
    syms = W.symbols(path)
    a = syms[start][0]
    b = syms[end][0] if end else a + syms[start][1]
    insns = IC.classify(W.code(path, a, b), a, _mode(path), core)
    if end is None:
        k = next((j for j, i in enumerate(insns) if i.branch not in (CM.BR_NONE, CM.BR_COND)),
                 len(insns))
        insns = insns[:k]
    return insns


def program_insns(path: Path, core: str = IC.DEFAULT_CORE) -> list:
    """Every instruction of a freestanding workload's code (from _start to its last
    function's end)."""
    from p4pmu.qemu_glue import workloads as W
    syms = W.symbols(path)
    a = syms["_start"][0]
    b = max(addr + size for addr, size in syms.values())
    return IC.classify(W.code(path, a, b), a, _mode(path), core)


def run(insns: list, outcomes, predictor: CM.Predictor, entry: int | None = None,
        params: dict | None = None) -> LoopCounts:
    """Run the code `insns` from `entry` (default: its first instruction) until control
    leaves it or a far transfer (the exit system call) retires, with the conditional-branch
    outcomes `outcomes` (an iterable of bools in execution order), through `predictor`,
    counting as the model does (docs/guest-events.md I3-I6): blocks end at branches (as
    QEMU's do in such code), a block's clocks from CM.block_clocks, CM.PARAMS bogus_insns
    wrong-path instructions per misprediction.  Works block by block (clocks cached per
    block and outcome): about a million blocks per second."""
    p = dict(CM.PARAMS, **(params or {}))
    bogus = p["bogus_insns"]
    by_addr = {i.addr: i for i in insns}
    blocks: dict = {}  # entry address -> (instructions, last instruction, {outcome: clocks})

    def block_at(pc):
        b = blocks.get(pc)
        if b is None:
            body = []
            a = pc
            while a in by_addr:
                ins = by_addr[a]
                body.append(ins)
                if ins.branch != CM.BR_NONE:
                    break
                a = ins.next
            b = blocks[pc] = (body, body[-1] if body else None, {})
        return b

    pc = insns[0].addr if entry is None else entry
    out = LoopCounts()
    stack: list[int] = []
    it = iter(outcomes)
    n_ins = n_cond = n_calls = n_rets = n_bogus = clocks = 0
    mm = [0, 0, 0, 0]  # MMNP, MMNM, MMTP, MMTM
    while pc in by_addr:
        body, last, cache = block_at(pc)
        n_ins += len(body)
        br = last.branch
        if br == CM.BR_NONE:  # ran off the end of the code
            clocks += len(CM.block_clocks(body, None, params))
            break
        taken, pred = True, True
        if br == CM.BR_COND:
            taken = bool(next(it))
            pred = predictor.cond(last.addr, last.target, taken)
            n_cond += 1
            pc = last.target if taken else last.next
        elif br == CM.BR_JMP:
            pc = last.target
        elif br == CM.BR_CALL:
            predictor.call(last.next)
            stack.append(last.next)
            n_calls += 1
            pc = last.target
        elif br == CM.BR_RET:
            pc = stack.pop()
            pred = predictor.ret(pc)
            n_rets += 1
        elif br == CM.BR_FAR:
            pc = None
        else:
            raise ValueError(f"run: {last.mnemonic} at {last.addr:#x} is not modelled here")
        mm[2 * taken + (not pred)] += 1
        if not pred:
            n_bogus += bogus
        key = (taken, pred)
        c = cache.get(key)
        if c is None:
            c = cache[key] = len(CM.block_clocks(body, key, params))
        clocks += c
    out.instructions, out.cond, out.calls, out.rets = n_ins, n_cond, n_calls, n_rets
    out.bogus, out.clocks = n_bogus, clocks
    out.MMNP, out.MMNM, out.MMTP, out.MMTM = mm
    return out


def simulate(insns: list, outcomes, predictor: CM.Predictor,
             params: dict | None = None) -> LoopCounts:
    """`run` over straight-line code with conditional branches only (a loop)."""
    return run(insns, outcomes, predictor, params=params)


def count_outcomes(n: int):
    """count.S / hotspots.S loops: `dec; jnz` taken n-1 times, then not taken."""
    for i in range(n, 0, -1):
        yield i > 1


def branchy_outcomes(n: int):
    """branchy.S: per iteration i = n..1, JE taken iff i & 3 == 3, then the loop's JNZ."""
    for i in range(n, 0, -1):
        yield (i & 3) == 3
        yield i > 1


def parse_outcomes(arg: str):
    """sys.h PARSE_ARG1 on the argument `arg`: JZ (no argument) not taken, per digit the JA
    not taken, then taken at the terminating NUL."""
    yield False
    for _ in arg:
        yield False
    yield True


def program_outcomes(name: str, n: int):
    """Every conditional-branch outcome of a run of count / branchy / hotspots (n > 0)."""
    yield from parse_outcomes(str(n))
    if name == "hotspots":
        yield from count_outcomes(3 * n)
        yield from count_outcomes(n)
        return
    yield n == 0  # jz .Ldone
    if n:
        yield from (count_outcomes(n) if name == "count" else branchy_outcomes(n))


def program_counts(path: Path, n: int, predictor: CM.Predictor,
                   core: str = IC.DEFAULT_CORE) -> LoopCounts:
    """A whole run of `count n`, `branchy n` or `hotspots n` (exec to exit): every user
    instruction and clock, on a CPU model of `core` (models.CpuModel.core)."""
    return run(program_insns(path, core), program_outcomes(path.name, n), predictor,
               params=CM.core_params(core))


# --------------------------------------------------------------------------------------------
# perf's output
# --------------------------------------------------------------------------------------------


@dataclass
class StatLine:
    event: str
    value: int | None  # None: <not counted> / <not supported>
    running_pct: float


def parse_stat_csv(text: str) -> dict[str, StatLine]:
    """`perf stat -x,` output (stderr) -> event -> StatLine."""
    out = {}
    for ln in text.splitlines():
        parts = ln.split(",")
        if len(parts) < 5 or not parts[2]:
            continue
        v = parts[0]
        value = int(v) if v.isdigit() else None
        try:
            pct = float(parts[4]) if parts[4] else 0.0
        except ValueError:
            continue
        out[parts[2]] = StatLine(parts[2], value, pct)
    return out


_REPORT_RE = re.compile(r"^\s*([\d.]+)%\s+(\d+)\s+(\S+)\s+(\S+)\s+\[(.)\]\s+(\S+)")


@dataclass
class Report:
    samples: int  # all samples in the file
    rows: list = field(default_factory=list)  # (percent, samples, comm, dso, level, symbol)

    def symbol_samples(self, sym: str, comm: str | None = None) -> int:
        return sum(r[1] for r in self.rows if r[5] == sym and (comm is None or r[2] == comm))


def parse_report(text: str) -> Report:
    """`perf report --stdio -n --sort comm,dso,sym` output."""
    total = 0
    m = re.search(r"^# Samples: (\d+)", text, re.M)
    if m:
        total = int(m.group(1))
    rows = []
    for ln in text.splitlines():
        r = _REPORT_RE.match(ln)
        if r:
            rows.append((float(r.group(1)), int(r.group(2)), r.group(3), r.group(4),
                         r.group(5), r.group(6)))
    return Report(total, rows)
