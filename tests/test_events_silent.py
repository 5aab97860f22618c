"""Silent branch outcomes (docs/guest-events.md, "Silent branch outcomes"): the plugin counts
a conditional branch's outcomes in one direction without a callback and replays them per
predictor entry later.  These tests look for the ways that can go wrong:

* the silent direction of a branch changes over time (loop `phases`: runs of 1, 2 and 3
  outcomes in either direction, so the entry keeps leaving and reaching saturation);
* one predictor entry, several blocks (loop `members`: two blocks end in the same branch,
  alternately, with mixed outcomes; every loop run at ring 0 and ring 3: two translations of
  the same code share the entries);
* interrupts between a branch and its successor (a periodic APIC timer while the loops
  run), and performance interrupts delivered at block entries;

with the plugin's branch trace (P4PMU_BRANCH_TRACE: every outcome the plugin resolved or
replayed, with its block) compared against the reference predictor (`clockmodel.Predictor`)
replayed over the loops' own branch sequence (tests/guests/loops.py), per branch address in
order, and per block; and with USR counts under interrupts against the clock model.
"""
from __future__ import annotations

import re
from collections import Counter, defaultdict

import pytest

from p4pmu.qemu_glue.guests import build as guest_build

from guests.evexpect import ClockOracle, LoopModel, blocks_of, pmi_landings, user_stream
from guests.evplan import Ctr, Plan, Setup
from guests.evscript import (
    LVT_NMI,
    PMI_CLEAR_OVF,
    PMI_RELOAD,
    PMI_UNMASK,
    VEC_PMI,
    EvScript,
    cccr_msr,
    cccr_value,
    counter_msr,
    escr_msr,
    escr_value,
    parse_events,
    preset,
)

pytestmark = pytest.mark.guest

# (loop, iterations, ring): ring-0 and ring-3 runs of the same loop alternate, lengths vary
CALLS = [("phases", 50, 0), ("members", 41, 3), ("phases", 37, 3), ("members", 60, 0),
         ("alt", 25, 3), ("pat3", 31, 0), ("phases", 23, 0), ("nop4", 17, 3),
         ("members", 19, 3), ("alt", 33, 0), ("pat3", 29, 3), ("phases", 64, 3),
         ("members", 7, 0), ("phases", 5, 3), ("members", 2, 3), ("phases", 1, 0)]
# APIC timer (1 tick = 1 ns of virtual time, i.e. host time without icount): an interrupt
# every 50 us (QEMU's timers do not fire much more often than that on a loaded host); how many
# land in a run depends on the host's speed, so the tests ask for one and check every one
TIMER_TICKS = 50000


def _model(bits: int) -> LoopModel:
    return LoopModel(guest_build.BUILD_DIR / f"events{bits}.elf", bits)


def _trace(path) -> list[tuple]:
    """The plugin's branch trace: (kind, addr, target, taken, predicted, block, count)."""
    out = []
    for ln in path.read_text().splitlines():
        f = ln.split()
        kind, addr, target, _nxt, _actual, taken, pred, block, count = f
        out.append((int(kind), int(addr, 16), int(target, 16), taken == "1", pred == "1",
                    int(block, 16), int(count)))
    return out


def _expected(model: LoopModel, calls) -> tuple[dict, Counter]:
    """Per conditional branch address, the (taken, predicted) sequence the reference
    predictor gives over every run of the loops in `calls`, in order (entries are
    independent: docs/guest-events.md I5); and per (block start, branch) the counts."""
    from p4pmu.emulator import clockmodel as CM
    p = CM.Predictor()
    seq: dict[int, list] = defaultdict(list)
    per_block: Counter = Counter()
    for loop, n, _ring in calls:
        for blk in blocks_of(model.trace(loop, n)):
            s = blk[-1]
            if s.branch != "cond":
                continue
            pred = p.cond(s.addr, s.target, s.taken)
            seq[s.addr].append((s.taken, pred))
            per_block[(blk[0].addr, s.addr, s.taken, pred)] += 1
    return seq, per_block


def _actual(trace, addrs) -> tuple[dict, Counter]:
    from p4pmu.emulator import clockmodel as CM
    seq: dict[int, list] = defaultdict(list)
    per_block: Counter = Counter()
    for kind, addr, _t, taken, pred, block, count in trace:
        if kind != CM.BR_COND or addr not in addrs:
            continue
        seq[addr] += [(taken, pred)] * count
        per_block[(block, addr, taken, pred)] += count
    return seq, per_block


def _compare(model, calls, trace):
    want_seq, want_blk = _expected(model, calls)
    got_seq, got_blk = _actual(trace, set(want_seq))
    bad = []
    for addr, want in want_seq.items():
        got = got_seq.get(addr, [])
        if got != want:
            i = next((k for k, (a, b) in enumerate(zip(got, want)) if a != b),
                     min(len(got), len(want)))
            bad.append(f"  branch 0x{addr:x} ({model.img.insn(addr).symbol}): {len(got)} "
                       f"outcomes, model {len(want)}; first difference at #{i}: "
                       f"plugin {got[i:i + 6]}, model {want[i:i + 6]}")
    assert not bad, "outcome sequences differ from the reference predictor:\n" + "\n".join(bad)
    diff = {k: (got_blk.get(k, 0), v) for k, v in want_blk.items() if got_blk.get(k, 0) != v}
    diff.update({k: (v, 0) for k, v in got_blk.items() if k not in want_blk})
    assert not diff, ("outcomes attributed to the wrong block ((block, branch, taken, "
                      "predicted): (plugin, model)):\n" +
                      "\n".join(f"  0x{b:x} 0x{a:x} {t} {p}: {v}"
                                for (b, a, t, p), v in sorted(diff.items())))
    return sum(len(v) for v in want_seq.values())


@pytest.mark.parametrize("bits", (32, 64))
@pytest.mark.parametrize("rewrite", ("on", "off"))
def test_changed_directions_replay_the_reference_predictor(run_guest, tmp_path, bits, rewrite):
    """With a window of 2^6 resolutions (directions=6) the silent directions change as
    often as the outcomes say: every conditional outcome is still the reference predictor's,
    in order per branch, attributed to the block that ran it, with fewer resolutions.  With
    dir_rewrite=off the changed branches' blocks are not dropped and run on in the old
    direction: each one that runs is seen, its group stays closed and a flush drops it, with
    the same outcomes (docs/guest-events.md, "Changed directions")."""
    calls = [(lp, n * 100, ring) for lp, n, ring in CALLS]
    runs = {}
    for d in (0, 6):
        trace = tmp_path / f"branches-{d}.txt"
        r = run_guest(f"events{bits}", script=_calls_script(calls, True),
                      plugin_opts=("count=on", f"directions={d}", f"dir_rewrite={rewrite}"),
                      env={"P4PMU_BRANCH_TRACE": str(trace), "P4PMU_DEBUG": "1"}, timeout=120)
        r.require_completed()
        assert _compare(_model(bits), calls, _trace(trace)) > 2000
        m = re.search(r"vCPU 0: \d+ folds, .*?, (\d+) resolutions", r.stderr)
        st = re.search(r"directions: \d+ looks, (\d+) changes, (\d+) branch bytes rewritten, "
                       r"\d+ not made \(address unknown or firmware\), (\d+) stale blocks ran",
                       r.stderr)
        runs[d] = (int(m.group(1)),) + tuple(int(x) for x in st.groups())
        stale_lines = [ln for ln in r.stderr.splitlines() if "ran after" in ln]
    assert runs[0][1:] == (0, 0, 0), runs
    changes, rewritten, stale = runs[6][1:]
    assert changes >= 2, runs
    if rewrite == "on":  # (a rare block the write does not drop: the firmware's, at boot)
        assert rewritten >= changes and stale * 20 <= changes, (runs, "\n".join(stale_lines))
    else:
        assert rewritten == 0 and stale >= 1, runs
    assert runs[6][0] < runs[0][0], f"(resolutions, changes, rewrites, stale runs): {runs}"


def _calls_script(calls, intr: bool) -> EvScript:
    s = EvScript()
    if intr:
        s.timer(TIMER_TICKS)
    for i, (loop, n, ring) in enumerate(calls):
        s.loop(loop, n, user=ring == 3, intr=intr)
        # a PMU access folds: every silent outcome so far is replayed (and traced) here
        s.rdmsr(counter_msr(0), f"f{i}")
    if intr:
        s.timer(0)
    return s


@pytest.mark.parametrize("intr", (False, True), ids=("quiet", "timer_interrupts"))
@pytest.mark.parametrize("bits", (32, 64))
def test_silent_outcomes_replay_the_reference_predictor(run_guest, tmp_path, bits, intr):
    """Every conditional outcome of the loops, silent or resolved, in order per branch, as
    the reference predictor gives it, and attributed to the block that ran it -- also when
    timer interrupts land between blocks anywhere in the loops."""
    # with interrupts, longer runs: the timer must hit the loops many times
    calls = CALLS * 2 if not intr else [(lp, n * 100, ring) for lp, n, ring in CALLS]
    trace = tmp_path / "branches.txt"
    r = run_guest(f"events{bits}", script=_calls_script(calls, intr), plugin_opts=("count=on",),
                  env={"P4PMU_BRANCH_TRACE": str(trace)}, timeout=120)
    r.require_completed()
    if intr:
        # how many follows the host's speed (the APIC timer runs on the host's clock; QEMU's
        # virtual clock would cut blocks where its instruction budget ends, a different test)
        n_int = parse_events(r.out.lines)["timer_count"]
        assert n_int >= 1, "no timer interrupt: the test did not test them"
    n = _compare(_model(bits), calls, _trace(trace))
    assert n > 2000


# --------------------------------------------------------------------------------------------
# performance interrupts: delivered at block entries, between a branch and its successor

CTR, ESCR = 12, "MSR_CRU_ESCR0"


@pytest.mark.parametrize("loop,period", [("phases", 97), ("members", 89), ("alt", 61)])
def test_pmis_between_branches_and_their_successors(run_guest, tmp_path, loop, period):
    """Periodic PMIs on a counter of USR instructions, every `period` events: the PMI lands
    at the entry of whatever block follows, often the silent successor of a branch.  The
    landings are where the clock model puts them, and the branch outcomes are unchanged."""
    iters = 700
    s = EvScript()
    cccr = cccr_value(CTR, ESCR, pmi_t0=True)
    lvt = LVT_NMI | VEC_PMI
    s.pmi_config(PMI_CLEAR_OVF | PMI_RELOAD | PMI_UNMASK, counter=CTR,
                 reload=preset(period - 1), cccr=cccr, lvt=lvt)
    s.pmi_reset()
    s.lvt(lvt)
    s.wrmsr(escr_msr(ESCR), escr_value("instr_retired", "NBOGUSNTAG", t0_usr=True))
    s.wrmsr(counter_msr(CTR), preset(period - 1))
    s.wrmsr(cccr_msr(CTR), cccr)
    s.loop(loop, iters, user=True)
    s.wrmsr(cccr_msr(CTR), 0)
    s.rdmsr(counter_msr(CTR), "ctr_after")
    s.pmi_log()
    trace = tmp_path / "branches.txt"
    r = run_guest("events32", script=s, env={"P4PMU_BRANCH_TRACE": str(trace)}, timeout=120)
    r.require_completed()
    out = parse_events(r.out.lines)
    m = _model(32)
    want = pmi_landings(m, user_stream(m, loop, iters), period, period)
    got = [(p.ip, p.ctr) for p in out.pmis]
    assert out.pmi_counts[-1][0] == len(want), (out.pmi_counts[-1], len(want))
    assert got == want[:len(got)], "\n".join(
        f"  PMI {i}: guest ip 0x{g[0]:x} counter {g[1]}; model ip 0x{w[0]:x} counter {w[1]}"
        for i, (g, w) in enumerate(zip(got, want)) if g != w)
    _compare(m, [(loop, iters, 3)], _trace(trace))


# --------------------------------------------------------------------------------------------
# USR counts while timer interrupts land anywhere in the loops

FSB0, C0, C1, C2, C3 = "MSR_FSB_ESCR0", "MSR_CRU_ESCR0", "MSR_CRU_ESCR1", "MSR_CRU_ESCR2", \
    "MSR_CRU_ESCR3"
TB1 = "MSR_TBPU_ESCR1"
USR = Setup("usr", [
    Ctr(0, FSB0, "global_power_events", ("RUNNING",), usr=True),
    Ctr(12, C0, "instr_retired", ("NBOGUSNTAG", "BOGUSNTAG"), usr=True),
    Ctr(16, C0, "instr_retired", ("NBOGUSNTAG", "BOGUSNTAG"), usr=True, compare=True,
        threshold=2, edge=True),
    Ctr(13, C2, "branch_retired", ("MMNM", "MMTM"), usr=True),
    Ctr(15, C3, "branch_retired", ("MMNP", "MMTP"), usr=True),
    Ctr(14, C1, "uops_retired", ("NBOGUS", "BOGUS"), usr=True, compare=True, threshold=2),
    Ctr(17, C1, "uops_retired", ("NBOGUS", "BOGUS"), usr=True),
    Ctr(6, TB1, "retired_mispred_branch_type", ("CONDITIONAL",), usr=True),
])
INTR_LOOPS = ["phases", "members", "alt", "pat3", "nop4"]


@pytest.mark.parametrize("bits", (32, 64))
def test_usr_counts_with_interrupts_anywhere(run_guest, bits):
    """The measured ring-3 loops with EFLAGS.IF = 1 and a periodic timer: the handler runs
    at CPL 0, so every USR count -- instructions, bogus ones, (mis)predicted branches,
    clocks, per-clock filters and edges -- is the loop's own, exactly as without interrupts
    (docs/guest-events.md I3-I6)."""
    plan = Plan([USR], INTR_LOOPS, rings=(3,), ns=(120, 1200), intr=True)
    s = plan.script()
    s.lines.insert(0, f"timer {TIMER_TICKS}")
    s.timer(0)
    r = run_guest(f"events{bits}", script=s, timeout=300)
    r.require_completed()
    out = parse_events(r.out.lines)
    assert out["timer_count"] >= 1, "no timer interrupt: the test did not test them"
    oracle = ClockOracle(_model(bits))
    n1, n2 = plan.ns
    bad, rows = [], []
    for loop in INTR_LOOPS:
        want = oracle.delta(USR, loop, 3, n1, n2, seeds=range(4))
        for c in USR.counters:
            got = plan.delta(out, "usr", loop, 3, c.n)
            row = (f"  {loop} counter {c.n:>2} {c.event}/{'/'.join(c.bits)} thr={c.threshold} "
                   f"edge={int(c.edge)}: guest {got}, model {want[c.n]}")
            rows.append(row)
            if got != want[c.n]:
                bad.append(row)
    assert not bad, (f"{bits}-bit guest, {n2} - {n1} iterations with timer interrupts: "
                     f"{len(bad)} of {len(rows)} counts differ:\n" + "\n".join(bad))
