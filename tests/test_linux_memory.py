"""Linux perf's cache and TLB events in the default Linux guest (5.10, the virtual clock)
count what the memory model predicts (docs/memory-model.md): the `stream` workload
(qemu_glue/workloads/stream.S) streams over an 8 MB buffer; its loop's loads are run through
the reference model (emulator/memmodel.py, the default CPU model's geometry) to predict
cache-misses, L1-dcache-load-misses, LLC-load-misses, dTLB-load-misses and bus-cycles (the bus
model: a line read per L2 miss), and its loop block gives one ITLB look-up per execution
(iTLB-loads).  The counts may
exceed the prediction only by the few loads outside the loop (the argument on the stack) and,
for the DTLB, by the entries interrupt handlers take while the loop runs.  The same program
run twice gives the same counts up to those.  iTLB-load-misses is a handful (the program's
code pages once each, and what interrupts take).
"""
from __future__ import annotations

import pytest
from test_linux_perf import run_session

from p4pmu.emulator.memmodel import MemorySystem
from p4pmu.emulator.models import get_model
from p4pmu.qemu_glue import perf_p4 as P
from p4pmu.qemu_glue import workloads as W

pytestmark = pytest.mark.guest

PASSES = 4
EVENTS = ("cache-misses", "cache-references", "L1-dcache-load-misses", "LLC-load-misses",
          "dTLB-load-misses", "dTLB-store-misses", "iTLB-loads", "iTLB-load-misses",
          "bus-cycles")
OUTSIDE_LOOP = 4  # loads outside the loop: the argument pointer and its characters
BLOCKS_OUTSIDE = 16  # block executions outside the loop (argument parsing, exit)
INTERRUPTS = 8    # DTLB entries interrupt handlers may take from the loop while it runs


def predicted(arch: str) -> dict[str, int]:
    """The loop's loads through the reference memory model, from empty TLBs and caches."""
    sym = W.symbols(W.build_dir(arch) / "stream")
    buf, size = sym["stream_buf"]
    m = MemorySystem(get_model().memory)
    l1 = l2 = hits = dtlb = 0
    for _ in range(PASSES):
        for a in range(buf, buf + size, 64):
            o = m.access(a, 4, False)
            l1, l2, dtlb = l1 + o.l1_miss, l2 + o.l2_miss, dtlb + o.dtlb_miss
            hits += o.l2_hite + o.l2_hitm
    # the loop is one block, executed once per line, its fetch one ITLB hit (its page stays);
    # bus-cycles (FSB_data_activity DRDY_DRV|DRDY_OWN, EDGE): the clocks in which a line
    # transfer begins -- one per L2 miss (a load per loop iteration: never two clocks in a
    # row), no write-back (nothing is stored)
    return {"cache-misses": l2, "L1-dcache-load-misses": l1, "LLC-load-misses": l2,
            "dTLB-load-misses": dtlb, "cache-references": hits, "dTLB-store-misses": 0,
            "iTLB-loads": PASSES * size // 64, "bus-cycles": l2}


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    # one event per perf run: Linux's cache events share BSU_ESCR0 / counter 0, and the
    # replay-tagging ones the PEBS MSRs, so together they would be multiplexed
    runs = "; ".join(f"perf stat -x, -e {e}:u -- stream {PASSES}" for e in EVENTS)
    sections = [("first", f"echo 0 > /proc/sys/kernel/nmi_watchdog; {runs}"),
                ("second", runs)]
    return run_session(tmp_path_factory.mktemp("linux-memory"), "memory", "amd64", sections,
                       kernel="5.10", recipe=False, clock="virtual", timeout=600)


def test_cache_and_tlb_events_count_what_the_model_predicts(session):
    want = predicted("amd64")
    assert want["cache-misses"] == PASSES * 131072 and want["dTLB-load-misses"] == PASSES * 2048
    got = P.parse_stat_csv(session.sec("first").text)
    rows = []
    for e, w in want.items():
        line = next((v for k, v in got.items() if k.startswith(e)), None)
        assert line is not None and line.value is not None, (e, session.sec("first").text)
        slack = BLOCKS_OUTSIDE if e.startswith("iTLB") else \
            OUTSIDE_LOOP + (INTERRUPTS if e.startswith("dTLB") else 0)
        rows.append((e, line.value, w))
        assert w <= line.value <= w + slack, (e, line.value, w, rows)


def test_the_same_program_twice_gives_the_same_counts(session):
    """The loop's counts are the same run to run; the few loads outside it may differ: the
    argument's line was written by the kernel during exec, which the memory level sees or
    not depending on where the guest's timer interrupts fall (the virtual clock follows the
    host's), and the DTLB loses entries to interrupts."""
    a = P.parse_stat_csv(session.sec("first").text)
    b = P.parse_stat_csv(session.sec("second").text)
    for e in ("cache-misses", "L1-dcache-load-misses", "LLC-load-misses", "cache-references",
              "dTLB-load-misses", "bus-cycles"):
        ka = next(k for k in a if k.startswith(e))
        kb = next(k for k in b if k.startswith(e))
        slack = OUTSIDE_LOOP + (INTERRUPTS if e.startswith("dTLB") else 0)
        assert abs(a[ka].value - b[kb].value) <= slack, (e, a[ka], b[kb])


def test_itlb_misses_are_the_programs_first_fetches(session):
    """The program's code pages miss the ITLB once each (the loop's stays in), plus what
    interrupts take: a handful; no warning (the ITLB is modelled)."""
    got = P.parse_stat_csv(session.sec("first").text)
    k = next(k for k in got if k.startswith("iTLB-load-misses"))
    assert 1 <= got[k].value <= OUTSIDE_LOOP + INTERRUPTS, got[k]
    assert "ITLB_reference" not in session.stderr
