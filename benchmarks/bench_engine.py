"""Cost of one counting-engine advance step with all 18 counters active.

Run (repository root):  .venv/bin/python benchmarks/bench_engine.py [--repeat R] [--number N]

Set-up (what the figure in docs/performance.md means): model 0F_04 with Hyper-Threading,
all 18 counters enabled, every ESCR of the model programmed with a documented event, a mix of
filters (plain, threshold, complement, edge on 4 counters, one thread-independent event), the
counters far from overflow (the common step: no OVF transition).  The batch is what a guest
activity feeder would hand over: 8 clock kinds (both LPs, OS/USR, one halted kind) and 12
event lines.  The step is `PMU.advance(activity)`; activity construction is not timed.
Prints microseconds per step, min and median over R repeats of N steps each, for two
filter mixes: with 4 EDGE counters (the rising-edge term costs a few microseconds) and
without.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from p4pmu.emulator import events as EV
from p4pmu.emulator import tables as T
from p4pmu.emulator.activity import Activity, ClockKind
from p4pmu.emulator.models import get_model
from p4pmu.emulator.pmu import PMU

F = T.CCCR_FIELD


def programmed_pmu(edge_counters=(1, 5, 9, 13)) -> PMU:
    pmu = PMU(get_model("0F_04"), ht=True)
    # one documented counting event per ESCR, all mask bits, both threads, OS+USR
    for e in pmu.escrs:
        evs = [ev for ev in EV.EVENTS if e.name in ev.escrs and ev.counts]
        if evs:
            ev = evs[0]
            pmu.wrmsr(0, e.msr, ev.escr_value(*ev.mask, t0_os=True, t0_usr=True,
                                                 t1_os=True, t1_usr=True))
    for c in T.COUNTERS:
        sel = next(s for s in range(8) if pmu.select_slot[c.index, s] >= 0
                   and pmu.escr_raw[pmu.select_slot[c.index, s]])
        v = F["ENABLE"].mask | sel << F["ESCR_SELECT"].lo | 3 << F["ACTIVE_THREAD"].lo
        v |= F["OVF_PMI_T0"].mask
        if c.index % 3 == 1:
            v |= F["COMPARE"].mask | 1 << F["THRESHOLD"].lo
        if c.index % 3 == 2:
            v |= F["COMPARE"].mask | F["COMPLEMENT"].mask | 15 << F["THRESHOLD"].lo
        if c.index in edge_counters:
            v |= F["COMPARE"].mask | F["EDGE"].mask
        pmu.wrmsr(0, c.cccr_msr, v)
        pmu.wrmsr(0, c.counter_msr, 1000)
    return pmu


def guest_like_activity() -> Activity:
    lines = [("instr_retired", "NBOGUSNTAG"), ("uops_retired", "NBOGUS"),
             ("branch_retired", "MMTP"), ("branch_retired", "MMNP"),
             ("global_power_events", "RUNNING"), ("retired_branch_type", "CONDITIONAL"),
             ("x87_FP_uop", "ALL"), ("TC_deliver_mode", "DD"), ("BPU_fetch_request", "TCMISS"),
             ("ITLB_reference", "HIT"), ("memory_complete", "LSC"), ("tc_ms_xfer", "CISC")]
    kinds = []
    for i in range(8):
        active = (i != 7, i % 2 == 0)
        os = (i % 3 == 0, i % 4 == 1)
        ln = {}
        for j, (ev, bit) in enumerate(lines):
            if (i + j) % 3 == 0 and active[j % 2]:
                ln[(ev, bit, j % 2)] = 1 + (i + j) % 3
        kinds.append(ClockKind(active, os, ln))
    return Activity.from_kinds(kinds, [1000 + 37 * i for i in range(8)])


def measure(pmu, act, repeat, number):
    per_step = []
    for _ in range(repeat):
        pmu.counter[:] = 1000  # stay far from overflow: every step is a full fast-path step
        t0 = time.perf_counter()
        for _ in range(number):
            pmu.advance(act)
        per_step.append((time.perf_counter() - t0) / number * 1e6)
    return min(per_step), statistics.median(per_step)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--number", type=int, default=2000)
    args = ap.parse_args(argv)
    act = guest_like_activity()
    print(f"PMU.advance, model 0F_04 with HT, 18 active counters, {len(act.kinds)} clock "
          f"kinds, {len(act.cols)} event lines, {act.clocks} clocks per batch")
    for label, edges in (("4 of them with EDGE", (1, 5, 9, 13)), ("no EDGE counter", ())):
        pmu = programmed_pmu(edges)
        assert pmu.running().all()
        r = pmu.advance(act)
        assert (r.overflow_clock < 0).all() and r.exact
        lo, med = measure(pmu, act, args.repeat, args.number)
        print(f"  {label:20s} min {lo:6.2f} us/step   median {med:6.2f} us/step")
    # the rare path: an OVF 0 -> 1 transition inside the batch that starts a cascade
    pmu = programmed_pmu(())
    x, y = 0, 2  # BPU_fetch_request.TCMISS is in the activity
    pmu.wrmsr(0, T.CCCR_BASE + y, pmu.rdmsr(0, T.CCCR_BASE + y) & ~F["ENABLE"].mask
              | F["CASCADE"].mask)
    x_cccr = pmu.rdmsr(0, T.CCCR_BASE + x)

    def rearm():
        pmu.wrmsr(0, T.COUNTER_BASE + x, (1 << 40) - 5)
        pmu.wrmsr(0, T.CCCR_BASE + x, x_cccr)

    rearm()
    r = pmu.advance(act)
    assert r.overflow_clock[x] > 0 and r.started_clock[y] > 0
    n = max(1, args.number // 10)
    both, rearm_only = [], []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        for _ in range(n):
            rearm()
            pmu.advance(act)
        t1 = time.perf_counter()
        for _ in range(n):
            rearm()
        t2 = time.perf_counter()
        both.append((t1 - t0) / n * 1e6)
        rearm_only.append((t2 - t1) / n * 1e6)
    lo = min(both) - min(rearm_only)
    med = statistics.median(both) - statistics.median(rearm_only)
    print(f"  {'overflow + cascade':20s} min {lo:6.2f} us/step   median {med:6.2f} us/step"
          f"   (rare path: an OVF 0->1 transition starting a counter)")
    print(f"  ({args.repeat} repeats x {args.number} steps; numpy {np.__version__}, "
          f"Python {sys.version.split()[0]})")


if __name__ == "__main__":
    main()
