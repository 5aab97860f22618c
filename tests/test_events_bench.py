"""The benchmark's guest set-ups do what `p4pmu bench` says they do (not a timing test):
(c) all 18 counters count something in the benchmark loop, (d) one interrupt per 10,000
instructions; and the report formats a result, including a stopped configuration."""
from __future__ import annotations

import pytest

from p4pmu.qemu_glue import bench as B

from guests.evscript import EvScript, parse_events

pytestmark = pytest.mark.guest


class _Text(EvScript):
    def __init__(self, text: str):
        super().__init__()
        self.lines = text.rstrip("\n").split("\n")


def test_all_18_counters_count_in_the_benchmark_loop(run_guest):
    r = run_guest("events32", script=_Text(B.script("all18", "bench", 20_000)), timeout=60)
    r.require_completed()
    out = parse_events(r.out.lines)
    counts = {n: out[f"c{n}"] for n in range(18)}
    assert all(v > 0 for v in counts.values()), counts
    # instructions (12, 16) and uops (14, 17): more than the loop's 17 per iteration
    assert min(counts[12], counts[14]) > 17 * 20_000, counts


def test_one_interrupt_every_10000_instructions(run_guest):
    n = 60_000
    r = run_guest("events32", script=_Text(B.script("pmi", "bench", n)), timeout=120)
    r.require_completed()
    out = parse_events(r.out.lines)
    got = out.pmi_counts[-1][0]
    # loop instructions plus the handler's own (counted: OS and USR), 17-18 per iteration
    assert n * 17 // (B.PMI_PERIOD + 40) <= got <= n * 18 // B.PMI_PERIOD + 1, got


@pytest.mark.parametrize("loop,want", (("selfnmi", True), ("selfnmi_ram", False)))
def test_floor_loops_take_one_nmi_every_10000_instructions_in_plain_qemu(run_guest, loop, want):
    """(f): without the plugin, `selfnmi` sends itself an NMI every 571 iterations (about
    10,000 instructions) through the APIC's ICR and (d)'s handler takes it; `selfnmi_ram`,
    the same loop storing to RAM, takes none."""
    n = 571 * 40
    r = run_guest("events32", script=_Text(B.script("floor", loop, n)), plugin=False, timeout=60)
    r.require_completed()
    got = parse_events(r.out.lines).pmi_counts[-1][0]
    assert got == (40 if want else 0), got


def test_report_formats_results():
    res = {"model": "0F_04", "iterations": 1000, "instructions": 17500, "repeat": 1,
           "guest": {"plain": {"guest_s": 1.0, "ns_per_insn": 1.0, "ratio": 1.0,
                               "ratio_median": 1.0},
                     "none": {"guest_s": 1.01, "ns_per_insn": 1.0, "ratio": 1.01,
                              "ratio_median": 1.04, "target": 1.05, "met": True},
                     "all18": {"guest_s": 2.0, "ns_per_insn": 2.0, "ratio": 2.0,
                               "ratio_median": 1.87,
                               "target": 1.3, "met": False, "counts": {0: 5, 1: 0},
                               "iterations": 100},
                     "pmi": {"timed_out_s": 30.0, "ratio_above": 29.0, "target": 1.5,
                             "met": False}},
           "msr": {k: {"plugin_ns_median": 1500.0, "plain_ns_median": 10.0,
                       "target_ns": 2000.0, "met": True}
                   for k in ("rdmsr", "wrmsr", "rdmsr_counting", "rdmsr_other")},
           "msr_k": [1, 2]}
    text = B.report(res)
    assert "MISSED" in text and "stopped" in text and "scaled" in text
    assert "counters that stayed 0: [1]" in text
    assert " 1.01    1.04 <= 1.05 ok" in text and " 2.00    1.87  <= 1.3 MISSED" in text, text
    res["floor"] = {"ratio": 1.07, "interrupts": 35_000, "us_per_interrupt": 1.1}
    assert "(f) plain QEMU, a self-NMI" in B.report(res)


def test_round_ratios_pair_each_round_with_its_own_plain_run():
    """The median column: each round's work over the same round's plain run (start-ups
    subtracted); a configuration scaled down mid-run has only its last rounds."""
    plain = {"start_min_s": 0.1, "work_all_s": [1.1, 2.1, 1.6]}
    g = {"start_min_s": 0.3, "work_all_s": [1.3, 4.3, 2.3]}
    assert B._round_ratios(plain, g, 1.0) == pytest.approx([1.0, 2.0, 1.333333], rel=1e-5)
    scaled = {"start_min_s": 0.3, "work_all_s": [0.5, 0.45]}  # 1/10 of the loop, rounds 2-3
    assert B._round_ratios(plain, scaled, 10.0) == pytest.approx([1.0, 1.0], rel=1e-5)


@pytest.mark.parametrize("plugin", (False, True))
def test_runs_are_timed_by_the_vcpu_thread(plugin):
    """The figure compared is the CPU time of QEMU's vCPU thread (the guest, every plugin
    callback and Python call), read while it runs: not the main thread's start-up (Python
    and numpy with the plugin), which the process figure includes."""
    b = B.Bench(model="0F_04", repeat=1, iterations=1000, msr_k=(1, 2), progress=False)
    machine, serial = b.machine(plugin, B.script("all18" if plugin else "none", "bench", 200_000))
    with machine:
        r = B._run(machine, timeout=120)
        assert r.status == 1 and b"DONE" in machine.memfd_bytes(serial), r.serial[-2000:]
    assert r.vcpu, "the vCPU thread's CPU time was not read"
    assert 0 < r.cpu < r.process_cpu
    if plugin:
        # the plugin's Python start-up ran on the main thread, before the vCPU thread existed
        assert r.process_cpu - r.cpu > 0.05, (r.cpu, r.process_cpu)
