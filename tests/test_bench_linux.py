"""`p4pmu bench --linux` (qemu_glue/bench_linux.py) without a guest: the guest script times
every workload, the marker lines are parsed, and ratios pair each round with plain QEMU's
same round.  The benchmark itself is run by hand (docs/performance.md), never as a timed
test."""
from __future__ import annotations

import pytest

from p4pmu.qemu_glue import bench_linux as B


def test_guest_script_times_every_workload_inside_and_around_perf():
    """The workload alone is timed inside the command perf runs (perf's start-up and its
    build-id pass after `perf record` are not the program's time); the whole command
    separately."""
    l4 = next(c for c in B.CONFIGS if c.key == "L4")
    script = B.guest_script(l4, 123)
    assert script.splitlines()[0] == f"head -c 123 /usr/bin/perf > {B.INPUT}"
    timed = script.splitlines()[1:]
    assert len(timed) == len(B.WORKLOADS)
    for i, (line, w) in enumerate(zip(timed, B.WORKLOADS)):
        inner = f"{B.MARK} {i} $rc"
        assert f"{l4.wrap} sh -c 'read t0 x < /proc/uptime; {w.command}; " in line
        assert line.index(inner) < line.index("'; rc=$?") < line.index(f"{B.MARK_WHOLE} {i}")
    plain = B.guest_script(B.CONFIGS[0], 123)
    assert "perf" not in plain.replace("/usr/bin/perf", "").replace("perf bench", "")
    assert B.WORKLOADS[0].command in plain and B.MARK_WHOLE in plain


def test_marker_lines_parsed_and_failed_workloads_left_out():
    text = (f"noise\n{B.MARK} 0 0 10.50 12.75\n{B.MARK} 1 1 12.75 13.00\n"
            f"{B.MARK} 2 0 13.00 13.25\nnot {B.MARK} 3 0 1 2\n")
    assert B.parse_times(text) == {0: pytest.approx(2.25), 2: pytest.approx(0.25)}
    whole = f"{B.MARK} 0 0 1.00 2.00\n{B.MARK_WHOLE} 0 0 0.50 2.75\n"
    assert B.parse_times(whole) == {0: pytest.approx(1.0)}
    assert B.parse_times(whole, B.MARK_WHOLE) == {0: pytest.approx(2.25)}


def test_perf_own_time_is_the_whole_commands_less_the_workloads():
    n = len(B.WORKLOADS)
    res = {"times": {"L4": [{i: 1.0 for i in range(n)}, {0: 1.0}]},
           "whole": {"L4": [{i: 1.5 for i in range(n)}, {0: 3.0}]}}
    assert B.perf_own_seconds(res, "L4") == [pytest.approx(0.5 * n)]  # round 2 incomplete


def test_ratios_pair_each_round_with_plain_qemu():
    res = {"times": {"plain": [{0: 1.0, 1: 3.0}, {0: 2.0, 1: 2.0}],
                     "L1": [{0: 2.0, 1: 3.0}, {0: 2.0, 1: 6.0}]}}
    assert B.ratios(res, "L1", 0) == [2.0, 1.0]
    assert B.ratios(res, "L1", None) == [pytest.approx(5 / 4), pytest.approx(8 / 4)]
    res["times"]["L1"][1].pop(1)  # a workload failed in round 2: that round is left out
    assert B.ratios(res, "L1", None) == [pytest.approx(5 / 4)]


def test_workloads_shorter_than_the_guest_clock_are_not_compared():
    """/proc/uptime counts in 10 ms: a workload plain QEMU runs in less than MIN_PLAIN_S gets
    no ratio (the report says "too short"), and a stopped configuration says "stopped"."""
    res = {"rounds": 1, "size": 1, "model": "0F_04",
           "times": {c.key: [{0: 1.0, 1: 0.01}] for c in B.CONFIGS}}
    res["times"]["L4"] = [{}]
    assert B.ratios(res, "L1", 1) == [] and B.ratios(res, "L1", 0) == [1.0]
    rows = {ln.split(":")[0].strip("| "): ln for ln in B.report(res).splitlines()}
    assert "| 1.00 | too short |" in rows["L1"]
    assert "| stopped | stopped | too short |" in rows["L4"]


def test_two_vcpu_configurations_divide_by_plain_qemu_with_two():
    res = {"times": {"plain": [{0: 1.0}], "plain2": [{0: 2.0}], "S2": [{0: 3.0}]}}
    assert B.ratios(res, "S2", 0) == [1.5]
    assert B.BY_KEY["S2"].smp == B.BY_KEY["plain2"].smp == 2
    assert B.BY_KEY["S2"].wrap == B.BY_KEY["L2"].wrap  # the same perf stat as L2
