"""Soak: -smp 4 Linux guests under multi-threaded TCG, every vCPU counting at once
(docs/hostile-guests.md; not in the README's test command: `./p4pmu.sh test -m soak`).

The default guest (Linux 5.10, the host clock with several vCPUs) with four
vCPUs, as four processors (threads=1) and as two Hyper-Threading cores (threads=2): on each
CPU a task pinned there runs, ROUNDS times, `perf stat -e instructions:u,branches:u count N`
and `perf record -e instructions:u -c PERIOD count N`, all four CPUs at once, for minutes.
Every one of the 4 x ROUNDS counts equals the model's count for that CPU's run (each vCPU has
its own branch predictor: the replay of its runs in order); every recording has one sample
per overflow (PERIOD of the run's instructions), except where the PMU log says the interrupt
was discarded before it was raised: the overflow came on the last counted event before
Linux stopped the counter (a context switch), whose write clears OVF before the next counted
event would have raised the PMI (SDM 18.15.5.8) -- on silicon too, but likelier here, where
the host time a deadline step takes brings the guest's timer interrupt right after the
block it stepped.  An interrupt lost or doubled by the plugin would show;
the run ends (no deadlock between the interpreter lock and QEMU's locks); the kernel saw no
NMI it could not explain and no lockup (its reports of slow handlers are the host clock's).
The loops run perf as an ordinary user (nobody, perf_event_paranoid 2), as most people
run it: perf 5.10 run by root first probes the kernel with a CPU-wide `cycles:u` event on
the first online CPU, whatever CPU perf itself runs on (tools/perf/util/perf_api_probe.c),
so every perf started on CPUs 1-3 put short-lived events on CPU 0.  Linux's P4 driver
schedules those next to CPU 0's own events with its multiplexing bug (docs/linux-guest.md,
"Multiplexed events"): on CPU 0 a count then took in another event's clocks or a recording
lost its samples now and then -- the driver's behaviour on a real Pentium 4 too, not
something this soak is about.  For an ordinary user the probe is a task event of perf itself.
For the same reason the guest boots with `nmi_watchdog=0`: no watchdog event shares a CPU
with the soak's events either.
"""
from __future__ import annotations

import re

import pytest
from test_linux_perf import BAD_KERNEL_MESSAGES, N1, replay, run_session

pytestmark = [pytest.mark.guest, pytest.mark.soak]

CPUS = 4
ROUNDS = 40
PERIOD = 100003
# On the host clock (several vCPUs) an interrupt's host cost shows as guest time: Linux
# reports its handlers as slow and would throttle sampling (perf_cpu_time_max_percent = 0
# turns that off); those timing messages are the clock's, not the PMU's
TIMING = ("took too long", "interrupt took")


# one CPU's loop, run as nobody: `sh /tmp/soak.sh K MASK`.  perf record's closing line says
# how many samples it wrote, "(N samples)", and leaves that out when it wrote none; its
# other messages pass (an error shows in the test's message); -m 16: four perf records'
# buffers stay within an ordinary user's locked-memory allowance (perf_event_mlock_kb)
_LOOP = f"""k=$1; pin=$2; export HOME=/tmp
for i in $(seq {ROUNDS}); do
  taskset $pin perf stat -x, -e instructions:u,branches:u,page-faults:u count {N1}
  taskset $pin perf record -m 16 -o /tmp/r$k.data -e instructions:u -c {PERIOD} count {N1} \\
    2>&1 > /dev/null | sed -e 's/.*(\\([0-9]*\\) samples).*/samples \\1/' \\
                           -e 's/.*Captured and wrote.*/samples 0/' -e '/Woken up/d'
done
"""


def _sections() -> list:
    loops = " ".join(f"( su -s /bin/sh nobody -c 'sh /tmp/soak.sh {k} {1 << k:x}' "
                     f"> /tmp/soak{k}.txt 2>&1 ) &" for k in range(CPUS))
    show = "; ".join(f"echo '== cpu{k}'; cat /tmp/soak{k}.txt" for k in range(CPUS))
    return [("boot", "dmesg | grep -e 'Brought up' -e 'NMI watchdog'; "
                     "echo watchdog $(cat /proc/sys/kernel/nmi_watchdog)"),
            # no throttling; perf for ordinary users (their own tasks, user mode)
            ("setup", "echo 0 > /proc/sys/kernel/perf_cpu_time_max_percent; "
                      "echo 2 > /proc/sys/kernel/perf_event_paranoid; "
                      f"cat > /tmp/soak.sh <<'EOF'\n{_LOOP}EOF\nchmod 755 /tmp/soak.sh"),
            ("soak", f"{loops} wait; {show}"),
            ("dmesg", "dmesg")]


# the counters Linux's P4 driver gives thread 1 of a core for the CRU_ESCR events
# (instructions, branches): thread 0 gets 12, 13 and 16
THREAD1_COUNTERS = {14, 15, 17}
_DISCARDED = re.compile(r"^# core (\d+): interrupts discarded before they were raised "
                        r"\(OVF cleared before the next counted event\): (.*)$", re.M)


def _discarded(pmu_log: str, threads: int) -> dict[int, int]:
    """cpu -> the interrupts the PMU discarded on its counters (Bridge's summary line)."""
    out: dict[int, int] = {}
    for core, each in _DISCARDED.findall(pmu_log):
        for ctr, n in re.findall(r"counter (\d+): (\d+)", each):
            lp = 1 if threads == 2 and int(ctr) in THREAD1_COUNTERS else 0
            cpu = int(core) * threads + lp
            out[cpu] = out.get(cpu, 0) + int(n)
    return out


def _runs(text: str) -> dict[int, tuple[list, list, list]]:
    """cpu -> ([(instructions, branches, page faults)] of its perf stat runs, [samples] of its
    recordings, [any other line perf printed]), in order."""
    out: dict[int, tuple] = {}
    parts = re.split(r"^== cpu(\d+)\n", text, flags=re.M)
    for cpu, body in zip(parts[1::2], parts[2::2]):
        vals = {"instructions:u": [], "branches:u": [], "page-faults:u": []}
        samples, other = [], []
        for ln in body.splitlines():
            f = ln.split(",")
            if len(f) > 2 and f[2] in vals:
                vals[f[2]].append(int(f[0]) if f[0].isdigit() else None)
            elif ln.startswith("samples "):
                samples.append(int(ln.split()[1]))
            else:
                other.append(ln)
        out[int(cpu)] = (list(zip(*vals.values())), samples, other)
    return out


@pytest.mark.parametrize("threads", (1, 2))
def test_four_cpus_count_exactly_at_once_for_minutes(tmp_path, threads):
    s = run_session(tmp_path, f"smp4-t{threads}", "amd64", _sections(), smp=CPUS,
                    threads=threads, kernel="5.10", recipe=False, clock="auto",
                    timeout=3700, guest_timeout=3600, append=("nmi_watchdog=0",))
    assert s.returncode == 0, s.stderr[-4000:]
    assert f"Brought up 1 node, {CPUS} CPUs" in s.sec("boot").text
    assert "watchdog 0" in s.sec("boot").text, s.sec("boot").text
    # each CPU held only its own task's events: Linux never multiplexed them
    assert "reprogrammed while enabled" not in s.pmu_log, s.pmu_log[-3000:]
    runs = _runs(s.sec("soak").text)
    # each CPU: its stat and record runs alternate, one predictor through all of them
    # (each page fault adds an instruction: docs/fidelity.md; a recording is taken to have
    # the page faults of the stat run before it, the same program)
    model = replay("amd64", "count", [N1] * (2 * ROUNDS))
    discarded = _discarded(s.pmu_log, threads)
    assert sorted(runs) == list(range(CPUS)), s.sec("soak").text[-3000:]
    for cpu, (stats, samples, other) in runs.items():
        faults = [pf or 0 for _, _, pf in stats]
        got = [(i, b) for i, b, _ in stats]
        want = [(c.with_returns(pf).linux_instructions, c.linux_branches)
                for c, pf in zip(model[0::2], faults)]
        want_samples = [c.with_returns(pf).linux_instructions // PERIOD  # overflows
                        for c, pf in zip(model[1::2], faults)]
        bad = [(i, g, w) for i, (g, w) in enumerate(zip(got, want)) if g != w]
        assert len(got) == ROUNDS and not bad, \
            f"CPU {cpu}: {len(got)} runs, {len(bad)} differ from the model, e.g. {bad[:3]}; " \
            f"perf also said: {other[:4]}"
        off = [(i, n, w) for i, (n, w) in enumerate(zip(samples, want_samples))
               if not w - 1 <= n <= w]
        short = sum(w - n for n, w in zip(samples, want_samples))
        assert len(samples) == ROUNDS and not off, \
            f"CPU {cpu}: {len(samples)} recordings, {len(off)} neither complete nor one " \
            f"sample short, e.g. {off[:3]}; perf also said: {other[:4]}"
        assert short <= discarded.get(cpu, 0), \
            f"CPU {cpu}: {short} samples missing, {discarded.get(cpu, 0)} interrupts " \
            f"discarded by the guest's writes"
    for bad in BAD_KERNEL_MESSAGES:
        if not any(t in bad for t in TIMING):
            assert bad not in s.sec("dmesg").text, bad
    assert "Traceback" not in s.stderr, s.stderr[-3000:]
