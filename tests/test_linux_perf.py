"""Linux perf on the emulated PMU (docs/linux-guest.md "perf"): the default 5.10 guest as a
newcomer gets it, and the 6.1 guest with its p4_pmu_set_period quirk.

Each guest configuration boots once (a module-scoped fixture) and runs one script of
sections; the tests check the sections' output, the kernel log and the plugin's access log.
Expectations come from the workloads' machine code run through the model's own tables
(`p4pmu.qemu_glue.perf_p4.simulate`: insn_classes, the documented predictor and clock model),
never from an earlier run.

The sessions "amd64", "i386", "smp2" and "ht" boot the 6.1 kernel.  What its P4 driver does
wrong (p4_pmu_set_period, qemu_glue/perf_p4.py) is expected here exactly as on hardware: the
first counting use of a counter after boot reads 2^39 - 1 too high; a sampling event whose
task is never switched out never samples.  The session "default" boots the default guest
(5.10, the virtual clock) with nothing set up and runs each perf command a newcomer tries
first.  The 6.1 sessions run on the host clock, where a timer interrupt comes only between
translated blocks, so user-level clocks are the model's to the clock (docs/linux-guest.md,
"The guest's clock").

Every 6.1 session: the measured tasks run under SCHED_FIFO (`rt`, after `perf-setup`) with the
lockup detector off so that they are not switched out; the guest boots with
watchdog_thresh=1 and ends with the NMI watchdog check (its event re-created, then a busy
loop until two of its NMIs arrived).
"""
from __future__ import annotations

import functools
import os
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from p4pmu.emulator import clockmodel as CM
from p4pmu.qemu_glue import perf_p4 as P
from p4pmu.qemu_glue import workloads as W

P4PMU_LINUX = [sys.executable, "-m", "p4pmu.qemu_glue.cli", "linux",
               *shlex.split(os.environ.get("P4PMU_LINUX_TEST_ARGS", ""))]

N1, N2 = 100000, 200000  # count lengths (same number of digits)
B1, B2 = 20000, 40000  # branchy lengths (same number of digits; multiples of 4)
HOT_N = 400000  # hotspots: hot_a 3*HOT_N iterations, hot_b HOT_N
PERIOD = 100000  # perf record -c
BR = "branch_retired"
BRANCHY_SETS = {  # event sets that fit the counters together (no multiplexing)
    "MMNP": ["instructions:u", "branches:u", P.raw_event(BR, "MMNP"), "page-faults:u"],
    "MMNM": ["instructions:u", "branches:u", P.raw_event(BR, "MMNM"), "page-faults:u"],
    "MMTP": ["instructions:u", "branches:u", P.raw_event(BR, "MMTP"), "page-faults:u"],
    "MMTM": ["instructions:u", "branches:u", P.raw_event(BR, "MMTM"), "page-faults:u"],
    "misses": ["branch-misses:u", P.raw_event(BR, "MMNP", "MMNM", "MMTP", "MMTM"),
               "page-faults:u"],
}
# the guest names the raw events with its p4event helper (docs/events.md); perf prints them
# as the raw encoding, which the results are looked up by: a p4event that encoded otherwise
# than the event table says fails the tests
P4EVENT = {P.raw_event(BR, *m): f"$(p4event {BR}:{':'.join(m)}:u)"
           for m in (("MMNP",), ("MMNM",), ("MMTP",), ("MMTM",), ("MMNP", "MMNM", "MMTP", "MMTM"))}
BAD_KERNEL_MESSAGES = (
    "Broken PMU hardware", "NMI received for unknown reason", "Dazed and confused",
    "perf: interrupt took too long", "took too long to run", "hard LOCKUP", "soft lockup",
    "BUG:", "WARNING:", "Oops", "Call Trace",
)


# --------------------------------------------------------------------------------------------
# Sessions


@dataclass
class Section:
    status: int
    text: str


@dataclass
class Session:
    name: str
    arch: str
    returncode: int
    sections: dict
    kernel_log: str
    pmu_log: str
    stderr: str
    seconds: float

    def sec(self, name: str) -> Section:
        assert name in self.sections, f"{self.name}: no section {name!r}\n{self.stderr[-3000:]}"
        s = self.sections[name]
        assert s.status == 0, f"{self.name} {name}: exit {s.status}\n{s.text[-3000:]}"
        return s

    def stat(self, name: str) -> dict:
        return P.parse_stat_csv(self.sec(name).text)


def _script(sections: list[tuple[str, str]], recipe: bool = True) -> str:
    out = [W.guest_prelude() if recipe else f"export PATH={W.GUEST_DIR}:$PATH"]
    for name, cmd in sections:
        out.append(f"echo '@@begin {name}'; {{ {cmd} ; }} 2>&1; echo \"@@end {name} $?\"")
    return "\n".join(out)


# A limit that only catches a hung guest: the sessions take 1-5 minutes on an idle 2-core
# machine, and two or three times that beside another test's guest (./p4pmu.sh test runs one
# test file per core); a limit near the idle time fails on a busy machine.
SESSION_TIMEOUT = 1500

_SECTION_RE = re.compile(r"^@@begin (\S+)\n(.*?)^@@end \1 (\d+)$", re.M | re.S)


def run_session(tmp: Path, name: str, arch: str, sections, *, smp: int = 1, threads: int = 1,
                timeout: float | None = None, kernel: str = "6.1", recipe: bool = True,
                clock: str = "host", guest_timeout: float | None = None,
                append: tuple[str, ...] = (), plugin_opts: tuple[str, ...] = ()) -> Session:
    """One boot running `sections`.  `recipe`: perf-setup first and watchdog_thresh=1 (the
    6.1 sessions); without it the guest is the default one, as a newcomer gets it.
    `guest_timeout`: p4pmu linux's --timeout (SESSION_TIMEOUT otherwise); `timeout`: the
    host's limit (the guest's and two minutes more otherwise); `append`: more kernel
    command-line arguments; `plugin_opts`: more K=V plugin options (model=, timing=)."""
    from p4pmu.qemu_glue.linux_image.cache import ensure_image
    from p4pmu.qemu_glue.plugin_lib import plugin_file
    from p4pmu.qemu_glue.provision import ProvisionError, ensure_qemu
    try:
        ensure_qemu(progress=True)
        if "--plugin" not in P4PMU_LINUX:
            plugin_file(build=True)
        ensure_image(arch, progress=True, kernel=kernel)
        add = W.add_argument(arch)
    except (ProvisionError, W.WorkloadBuildError) as e:
        pytest.fail(f"cannot prepare the {arch} guest: {e}", pytrace=False)
    klog, plog = tmp / f"{name}.kernel.log", tmp / f"{name}.pmu.log"
    cmd = [*P4PMU_LINUX, "--kernel", kernel, "--clock", clock, "--arch", arch, "--smp", str(smp),
           "--threads",
           str(threads), *(("--append", "watchdog_thresh=1") if recipe else ()),
           *(a for arg in append for a in ("--append", arg)),
           "--timeout", str(int(guest_timeout or SESSION_TIMEOUT)),
           *(a for opt in plugin_opts for a in ("--plugin-opt", opt)),
           "--add", add, "--kernel-log", str(klog), "--plugin-opt", f"log={plog}", "--",
           _script(sections, recipe)]
    t0 = time.monotonic()
    r = _run_stopping_cleanly(cmd, timeout or (guest_timeout or SESSION_TIMEOUT) + 120)
    secs = time.monotonic() - t0
    out = r.stdout.decode(errors="replace")
    (tmp / f"{name}.out").write_text(out)
    found = {m.group(1): Section(int(m.group(3)), m.group(2)) for m in _SECTION_RE.finditer(out)}
    return Session(name, arch, r.returncode, found,
                   klog.read_text(errors="replace") if klog.exists() else "",
                   plog.read_text(errors="replace") if plog.exists() else "",
                   r.stderr.decode(errors="replace") + out[-2000:], secs)


def _run_stopping_cleanly(cmd: list[str], timeout: float) -> subprocess.CompletedProcess:
    """subprocess.run, but a run over `timeout` gets SIGTERM, which p4pmu linux turns into
    stopping its QEMU (SIGKILL would leave QEMU running)."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         stdin=subprocess.DEVNULL)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.terminate()
        p.communicate(timeout=60)
        raise
    return subprocess.CompletedProcess(cmd, p.returncode, out, err)


def stat_cmd(events: list[str], prog: str, n: int, cpu: int | None = None) -> str:
    pin = f"-c {cpu} " if cpu is not None else ""
    return f"rt {pin}perf stat -x, -e {','.join(P4EVENT.get(e, e) for e in events)} {prog} {n}"


SLEPT = f"sh -c 'sleep 0.01; exec hotspots {HOT_N}'"


def record_cmds(tag: str, cpu: int | None = None, sleep_first: bool = True,
                event: str = "cycles") -> list:
    """perf record -c PERIOD of hotspots (after a short sleep in the same task, see the module
    doc of perf_p4), then its report."""
    pin = f"-c {cpu} " if cpu is not None else ""
    what = SLEPT if sleep_first else f"hotspots {HOT_N}"
    data = f"/tmp/{tag}.data"
    return [(f"record_{tag}",
             f"rt {pin}perf record -q -o {data} -e {event} -c {PERIOD} -- {what}"),
            (f"report_{tag}", f"perf report -i {data} --stdio -n --sort comm,dso,sym")]


# The lockup detector's hrtimer makes the CPU's stopper thread preempt whatever runs (even a
# SCHED_FIFO task) every watchdog_thresh * 2/5 s, and Linux 6.1's P4 driver miscounts a task
# that is switched out: the counting sections run with it off (kernel.watchdog = 0).
WATCHDOG_OFF = ("watchdog_off", "echo 0 > /proc/sys/kernel/watchdog")
# Switching it on again re-creates the NMI watchdog's event.  Its counter gets the period
# cpu_khz * 1000 * watchdog_thresh by the first write and the counter's previous period by the
# second (the 6.1 quirk): right for the watchdog only if nothing else used the counter since
# the watchdog's own start at boot (which loaded 0: the boot's event never fires).
WATCHDOG_ON = ("watchdog_on", "echo 1 > /proc/sys/kernel/watchdog")
WATCHDOG_RECREATE = ("watchdog_recreate",
                     "echo 0 > /proc/sys/kernel/nmi_watchdog; "
                     "echo 1 > /proc/sys/kernel/nmi_watchdog")
# The lockup detector on CPU 0 only: its hrtimer no longer sends CPU 1's stopper thread to
# preempt the task sampled there.  A preempted sampling task is switched in again, and Linux
# 6.1's P4 driver then loads its counter with a stale period (p4_pmu_set_period), after which
# it samples no more; on the host clock how often that happens depends on the host's speed
# (seen: hot_a 8-229 samples of 924 with --threads 2, and "soft lockup - CPU#1 stuck" on a
# loaded host).  CPU 0's own watchdog event is disabled and enabled again, which gives its
# counter its own period (nothing else used it since its start).
WATCHDOG_CPU0 = ("watchdog_cpu0", "echo 0 > /proc/sys/kernel/watchdog_cpumask")
WATCHDOG = ("watchdog",
            # spin on CPU 0 until CPU 0 got two more NMIs
            "nmi0() { awk '/^ *NMI:/ {print $2}' /proc/interrupts; }; n0=$(nmi0); "
            "i=0; while [ \"$(nmi0)\" -lt $((n0 + 2)) ] && [ $i -lt 400 ]; do "
            "taskset -c 0 hotspots 1000000; i=$((i+1)); done; "
            "grep -e '^ *NMI:' -e '^ *PMI:' /proc/interrupts; echo \"before $n0\"; "
            "dmesg | grep -e 'tsc: Detected' -e 'NMI watchdog'")
# page-faults:u: each page fault taken from the program adds an instruction and a
# branch_retired on silicon (docs/fidelity.md, "Counting rules"); the expectations add them
COUNT_EVENTS = ["cycles:u", "instructions:u", "branches:u", "page-faults:u"]
PF = "page-faults:u"


def full_sections() -> list:
    s = [("boot", "dmesg | grep -e 'Performance Events' -e 'NMI watchdog'"),
         WATCHDOG_RECREATE, WATCHDOG, WATCHDOG_OFF,
         ("warm", f"count {N1} && branchy 4000")]  # train the predictor entries, no perf
    s.append(("quirk", stat_cmd(COUNT_EVENTS, "count", N1)))
    for i, n in enumerate((N1, N2, N1)):  # count2 repeats count0
        s.append((f"count{i}", stat_cmd(COUNT_EVENTS, "count", n)))
    for k, ev in BRANCHY_SETS.items():
        for i, n in enumerate((B1, B1, B2)):  # the first primes the set's counters
            s.append((f"branchy_{k}{i}", stat_cmd(ev, "branchy", n)))
    s += record_cmds("naive", sleep_first=False)
    s += record_cmds("slept")
    s += record_cmds("user", event="cycles:u")  # user-level clocks only
    return s


def smp_sections() -> list:
    s = [("boot", "dmesg | grep -e 'Performance Events' -e 'NMI watchdog' -e 'Brought up'"),
         WATCHDOG_OFF]
    for cpu in (0, 1):  # no cycles: counter 0 stays the watchdog's (see WATCHDOG_ON)
        ev = ["instructions:u", "branches:u", "page-faults:u"]
        s.append((f"quirk_cpu{cpu}", stat_cmd(ev, "count", N1, cpu)))
        for i, n in enumerate((N1, N2)):
            s.append((f"count{i}_cpu{cpu}", stat_cmd(ev, "count", n, cpu)))
    s.append(WATCHDOG_ON)
    s.append(WATCHDOG_CPU0)  # the record on CPU 1 is not preempted (see WATCHDOG_CPU0)
    s += record_cmds("cpu1", cpu=1)
    s.append(WATCHDOG)
    return s


_sessions: dict = {}


def session(tmp_path_factory, key: str) -> Session:
    """The session `key`, run once; a session that could not run fails every test that uses
    it at once (it is not run again for each)."""
    if key not in _sessions:
        try:
            _sessions[key] = _run_named(tmp_path_factory.mktemp(key), key)
        except subprocess.TimeoutExpired as e:
            _sessions[key] = e
    if isinstance(_sessions[key], BaseException):
        pytest.fail(f"the {key} session could not run: {_sessions[key]!r}", pytrace=False)
    return _sessions[key]


def _run_named(tmp: Path, key: str) -> Session:
    if key in ("amd64", "i386"):
        return run_session(tmp, key, key, full_sections())
    if key == "smp2":
        return run_session(tmp, key, "amd64", smp_sections(), smp=2)
    if key == "ht":
        return run_session(tmp, key, "amd64", smp_sections(), smp=2, threads=2)
    if key == "top":
        return run_session(tmp, key, "amd64", [TOP], kernel="5.10", recipe=False,
                           clock="auto")
    if key == "default":
        return run_session(tmp, key, "amd64", default_sections(), kernel="5.10",
                           recipe=False, clock="auto")
    raise KeyError(key)


ALL = ["amd64", "i386", "smp2", "ht"]
FULL = ["amd64", "i386"]


# --------------------------------------------------------------------------------------------
# Expectations from the model


def workload(arch: str, name: str) -> Path:
    return W.ensure_built(arch) / name


@functools.cache
def _replay(arch: str, name: str, ns: tuple) -> tuple:
    path, pr = workload(arch, name), CM.Predictor()
    return tuple(P.program_counts(path, n, pr) for n in ns)


def replay(arch: str, name: str, ns: list[int]) -> list[P.LoopCounts]:
    """Whole runs of `name` with the arguments ns, in order, through one predictor (the
    guest's vCPU keeps its predictor entries across processes; nothing else in the guest
    has branches at the workloads' addresses)."""
    return list(_replay(arch, name, tuple(ns)))


# the runs of count / branchy in full_sections(), in order
FULL_COUNT_RUNS = ["warm", "quirk", "count0", "count1", "count2"]
FULL_COUNT_NS = [N1, N1, N1, N2, N1]
FULL_BRANCHY_RUNS = ["warm"] + [f"branchy_{k}{i}" for k in BRANCHY_SETS for i in range(3)]
FULL_BRANCHY_NS = [4000] + [n for _ in BRANCHY_SETS for n in (B1, B1, B2)]


# --------------------------------------------------------------------------------------------
# Tests


@pytest.mark.guest
@pytest.mark.slow
@pytest.mark.parametrize("key", ALL)
def test_driver_registers_and_the_logs_are_clean(tmp_path_factory, key):
    s = session(tmp_path_factory, key)
    assert s.returncode == 0, s.stderr[-4000:]
    assert "Performance Events: Netburst events, Netburst P4/Xeon PMU driver." in s.kernel_log
    assert "NMI watchdog: Enabled. Permanently consumes one hw-PMU counter." in s.kernel_log
    for bad in BAD_KERNEL_MESSAGES:
        assert bad not in s.kernel_log, f"{key}: {bad!r} in the kernel log:\n" + "\n".join(
            ln for ln in s.kernel_log.splitlines() if bad in ln)
    assert "Python error in" not in s.kernel_log and "Python error in" not in s.pmu_log
    assert re.search(r"# end: .* 0 Python errors", s.pmu_log), s.pmu_log[-500:]
    if key in ("smp2", "ht"):
        assert "smp: Brought up 1 node, 2 CPUs" in s.sec("boot").text


def _count_runs(s: Session) -> list[tuple[str, P.LoopCounts]]:
    """(section, expected counts) of every perf stat run of `count` in the session."""
    if s.name in FULL:
        exp = replay(s.arch, "count", FULL_COUNT_NS)
        return list(zip(FULL_COUNT_RUNS, exp))[1:]
    out = []
    for cpu in (0, 1):  # each CPU has its own predictor
        names = [f"quirk_cpu{cpu}", f"count0_cpu{cpu}", f"count1_cpu{cpu}"]
        out += list(zip(names, replay(s.arch, "count", [N1, N1, N2])))
    return out


@pytest.mark.guest
@pytest.mark.slow
@pytest.mark.parametrize("key", ALL)
def test_first_counting_use_of_a_counter_reads_max_period_too_high(tmp_path_factory, key):
    """Linux 6.1's p4_pmu_set_period loads the counter with -(its previous period), 0 after
    boot, while perf expects -(2^39 - 1): the first read is exactly 2^39 - 1 too high."""
    s = session(tmp_path_factory, key)
    for sec, exp in _count_runs(s):
        if not sec.startswith("quirk"):
            continue
        got = s.stat(sec)
        exp = exp.with_returns(got[PF].value)
        assert got["instructions:u"].value == exp.linux_instructions + P.MAX_PERIOD, (sec, got)
        assert got["branches:u"].value == exp.linux_branches + P.MAX_PERIOD, (sec, got)
    if key in FULL:
        # cycles:u (the watchdog off: global_power_events on counter 0, which last held the
        # NMI watchdog's period): too high by 2^39 - 1 minus that period, i.e. by the
        # difference of the driver's two writes of the counter
        writes = [int(ln.rsplit("<- ", 1)[1], 16) for ln in _pmu_lines(s.pmu_log, 0)
                  if "WRMSR 0x300 " in ln]
        k = writes.index((1 << 40) - P.MAX_PERIOD)  # the first counting start on counter 0
        excess = (writes[k + 1] - writes[k]) % (1 << 40)
        assert 0 < excess < P.MAX_PERIOD
        first, exact = s.stat("quirk")["cycles:u"].value, s.stat("count0")["cycles:u"].value
        assert first - exact == excess, (first, exact, excess)


@pytest.mark.guest
@pytest.mark.slow
@pytest.mark.parametrize("key", ALL)
def test_instructions_and_branches_are_exact(tmp_path_factory, key):
    """perf stat -e instructions:u,branches:u of `count N` gives exactly what the program
    retires from exec to exit by the model (count.S: 14 + 8 * digits + 4 * N instructions
    and 3 + digits + N branches, plus the model's wrong-path instructions after each
    misprediction, which Linux's `instructions` includes); the difference between the two
    lengths is the loop's 4 * (N2 - N1) and N2 - N1; repeated runs are identical.  With
    the watchdog off, cycles:u is global_power_events at user level: the clock model's
    clocks of the program, exactly."""
    s = session(tmp_path_factory, key)
    runs = _count_runs(s)
    for sec, exp in runs:
        if sec.startswith("quirk"):
            continue
        got = s.stat(sec)
        exp = exp.with_returns(got[PF].value)
        for ev in ("instructions:u", "branches:u"):
            assert got[ev].running_pct == 100.0, (sec, got)
        assert got["instructions:u"].value == exp.linux_instructions, (sec, got, exp)
        assert got["branches:u"].value == exp.linux_branches, (sec, got, exp)
        if "cycles:u" in got:  # user-level clocks: the clock model's, exactly
            assert got["cycles:u"].value == exp.clocks, (sec, got, exp)
    exp = dict(runs)
    for sfx in ([""] if key in FULL else ["_cpu0", "_cpu1"]):
        d = exp[f"count1{sfx}"] - exp[f"count0{sfx}"]
        assert d.linux_instructions == 4 * (N2 - N1) and d.linux_branches == N2 - N1
        a, b = s.stat(f"count0{sfx}"), s.stat(f"count1{sfx}")
        assert b["instructions:u"].value - a["instructions:u"].value == 4 * (N2 - N1)
        assert b["branches:u"].value - a["branches:u"].value == N2 - N1
    if key in FULL:
        assert s.stat("count2") == s.stat("count0")  # identical on repeated runs (same N)


@pytest.mark.guest
@pytest.mark.slow
@pytest.mark.parametrize("key", FULL)
def test_raw_branch_retired_masks_count_what_the_event_table_says(tmp_path_factory, key):
    """branch_retired with each MMxx mask (perf's P4 raw encoding, named in the guest by
    p4event), branch-misses, and the
    all-mask branch_retired on `branchy`, next to instructions and branches: exactly what
    the model says the program retires (its code through the documented predictor; branch_
    retired counts every branch, also JMP and the exit system call), also as differences."""
    s = session(tmp_path_factory, key)
    exp = dict(zip(FULL_BRANCHY_RUNS, replay(s.arch, "branchy", FULL_BRANCHY_NS)))
    for k, events in BRANCHY_SETS.items():
        for i in range(3):
            sec = f"branchy_{k}{i}"
            got = s.stat(sec)
            e = exp[sec].with_returns(got[PF].value)
            want = {"instructions:u": e.linux_instructions, "branches:u": e.linux_branches,
                    "branch-misses:u": e.mispredicted}
            if k == "misses":
                want[events[1]] = e.branches_retired
            else:
                want[events[2]] = getattr(e, k)
            for ev in events[:-1]:  # (not page-faults:u)
                v = got[ev].value
                if i == 0 and v == want[ev] + P.MAX_PERIOD:
                    continue  # the first use of the counter since boot (the quirk)
                assert got[ev].running_pct == 100.0 and v == want[ev], (sec, ev, got, want)
    # the loop's shape, by the model: per 4 iterations 3 JE not taken and predicted, 1
    # taken and mispredicted; the loop branch taken and predicted
    d = exp["branchy_MMNP2"] - exp["branchy_MMNP1"]
    assert (d.MMNP, d.MMTM, d.MMTP, d.MMNM) == (3 * (B2 - B1) // 4, (B2 - B1) // 4, B2 - B1, 0)
    assert d.linux_instructions == 7 * (B2 - B1) - (B2 - B1) // 4 + 3 * (B2 - B1) // 4


def _hot_expect(arch: str) -> dict:
    path = workload(arch, "hotspots")
    out = {}
    for fn, n in (("hot_a", 3 * HOT_N), ("hot_b", HOT_N)):
        out[fn] = P.simulate(P.loop_insns(path, fn), P.count_outcomes(n), CM.Predictor())
    return out


def _check_profile(s: Session, tag: str) -> None:
    """perf record of hotspots: attribution to hot_a / hot_b within 3 percentage points of
    their clocks by the model; their samples about clocks / PERIOD.

    Not exactly: `cycles` counts every privilege level, so interrupt handlers (and each
    sample's own NMI handler) take their share; and a PMI is delivered at the entry of the
    next translated block, decided at a deadline that costs host time, during which the
    guest's host-time-driven timer may fire -- that timer interrupt is then taken first and
    the sample lands at its entry (seen: 2-15 % of samples, more on a loaded host).  Both
    take samples from the two functions alike, so the shares hold.  How many samples land in
    the kernel's timer handlers (not checked) depends on the host's speed: the guest's timer
    runs on host time, so a loaded host gives the guest more ticks per modelled clock.

    With --threads 2 the same bounds hold: Linux sets ACTIVE_THREAD = any, and a clock in
    which the sibling runs too is one core clock, counted once (docs/guest-events.md I8); the
    sibling's short bursts (its timer ticks) do not add samples."""
    out = s.sec(f"report_{tag}").text
    rep = P.parse_report(out)
    exp = _hot_expect(s.arch)
    ca, cb = exp["hot_a"].clocks, exp["hot_b"].clocks
    assert 0.74 < ca / (ca + cb) < 0.76  # the same loop run 3N and N times
    sa, sb = rep.symbol_samples("hot_a", "hotspots"), rep.symbol_samples("hot_b", "hotspots")
    msg = f"hot_a {sa} (model {ca / PERIOD:.1f}), hot_b {sb} (model {cb / PERIOD:.1f}):\n{out}"
    assert abs(100 * sa / (sa + sb) - 100 * ca / (ca + cb)) <= 3, msg
    assert 0.75 * (ca + cb) / PERIOD - 2 <= sa + sb <= 1.1 * (ca + cb) / PERIOD + 2, msg


@pytest.mark.guest
@pytest.mark.slow
@pytest.mark.parametrize("key", FULL)
def test_perf_record_profile(tmp_path_factory, key):
    """perf record -e cycles -c PERIOD of hotspots (its task switched out once by a short
    sleep before it runs): samples in hot_a and hot_b in proportion to their clocks (3:1 by
    the clock model), about clocks / PERIOD of them."""
    _check_profile(session(tmp_path_factory, key), "slept")


@pytest.mark.guest
@pytest.mark.slow
@pytest.mark.parametrize("key", FULL)
def test_perf_record_sample_count_is_cycles_over_period(tmp_path_factory, key):
    """The same command sampled on user-level cycles (watchdog off: global_power_events with
    T0_USR only): the samples of the hotspots process (also those delivered at an
    interrupt's entry) are its user clocks by the model over PERIOD, and hot_a / hot_b are
    within 3 points of 3:1."""
    s = session(tmp_path_factory, key)
    clocks = P.program_counts(workload(s.arch, "hotspots"), HOT_N, CM.Predictor()).clocks
    out = s.sec("report_user").text
    rep = P.parse_report(out)
    proc = sum(r[1] for r in rep.rows if r[2] == "hotspots")
    assert abs(proc - clocks / PERIOD) <= 2, (proc, clocks, out)
    sa, sb = rep.symbol_samples("hot_a", "hotspots"), rep.symbol_samples("hot_b", "hotspots")
    assert abs(100 * sa / (sa + sb) - 75) <= 3, out


@pytest.mark.guest
@pytest.mark.slow
@pytest.mark.parametrize("key", FULL)
def test_sampling_task_never_switched_out_gets_no_samples(tmp_path_factory, key):
    """The 6.1 quirk for sampling: perf record's own probe event leaves 2^39 - 1 as the
    counter's previous period, so a task that runs without being switched out (SCHED_FIFO)
    is never sampled -- as on hardware."""
    s = session(tmp_path_factory, key)
    rep = s.sec("report_naive").text
    assert "hot_a" not in rep and "hot_b" not in rep, rep[-2000:]


@pytest.mark.guest
@pytest.mark.slow
@pytest.mark.parametrize("key", ["smp2", "ht"])
def test_smp_profile_on_the_second_cpu(tmp_path_factory, key):
    """--smp 2 and --smp 2 --threads 2: the profile of a task pinned to CPU 1 (with threads=2
    the sibling of CPU 0, on thread-1 counters and ESCRs)."""
    _check_profile(session(tmp_path_factory, key), "cpu1")


def _pmu_lines(log: str, vcpu: int) -> list[str]:
    pre = f"vcpu {vcpu} "
    return [ln[len(pre):] for ln in log.splitlines() if ln.startswith(pre)]


@pytest.mark.guest
@pytest.mark.slow
@pytest.mark.parametrize("key", ALL)
def test_nmi_watchdog(tmp_path_factory, key):
    """The NMI watchdog: its event is programmed with cpu_khz * 1000 * watchdog_thresh clocks
    (booted with watchdog_thresh=1), and every NMI of its counter arrives right after the
    counter overflows (the handler finds OVF set and reads a counter that has run only a few
    hundred clocks past zero), in particular one whose counter was loaded with exactly that
    period (re-created, and the second after it: by the 6.1 quirk the handler's second write
    carries the previous period, the re-created event's)."""
    s = session(tmp_path_factory, key)
    text = s.sec("watchdog").text
    khz = re.search(r"tsc: Detected (\d+)\.(\d{3}) MHz processor", text)
    assert khz, text
    period = (int(khz.group(1)) * 1000 + int(khz.group(2))) * 1000  # cpu_khz * 1000 * 1
    preload = (1 << 40) - period
    nmi = re.search(r"^\s*NMI:\s+(\d+)", text, re.M)
    before = re.search(r"^before (\d+)$", text, re.M)
    assert nmi and before and int(nmi.group(1)) >= int(before.group(1)) + 2, text
    lines = _pmu_lines(s.pmu_log, 0)
    writes = [(i, int(ln.rsplit("<- ", 1)[1], 16)) for i, ln in enumerate(lines)
              if "WRMSR 0x300 " in ln]
    # the re-created event's first write: -period
    assert any(v == preload for _, v in writes), ([hex(v) for _, v in writes[-6:]], hex(preload))
    # the watchdog's NMIs: the handler's RDMSR of BPU_CCCR0 with OVF (bit 31) set
    nmis = [i for i, ln in enumerate(lines)
            if re.search(r"RDMSR 0x360 \S+ -> 0x[89A-F][0-9A-F]{7}$", ln)]
    assert len(nmis) >= 2, "fewer than two watchdog NMIs in the PMU log"
    exact = 0
    for i in nmis:
        rd = next(ln for ln in lines[i:i + 6] if "RDPMC ECX=0x0 " in ln)
        k = int(rd.rsplit("-> ", 1)[1], 16)
        assert k < 4096, f"an NMI came {k} clocks after the overflow: {rd}"
        loaded = [v for j, v in writes if j < i][-1]  # what the counter ran from
        exact += loaded == preload
    assert exact >= 1, "no watchdog NMI after a counter loaded with exactly the period"


@pytest.mark.guest
@pytest.mark.slow
def test_the_61_driver_is_named_once(tmp_path_factory):
    """The 6.1 guest: p4pmu says once, at the first affected write, what its P4 driver does
    (the second counter write differs from the first: emulator/notices.py)."""
    s = session(tmp_path_factory, "amd64")
    warnings = [ln for ln in s.stderr.splitlines() if ln.startswith("p4pmu: warning:")]
    quirk = [ln for ln in warnings if "p4_pmu_set_period" in ln]
    assert len(quirk) == 1, warnings
    assert "--kernel 5.10" in quirk[0] and "docs/linux-guest.md" in quirk[0]


# --------------------------------------------------------------------------------------------
# The default guest (5.10), nothing set up: each command is the first of its kind after boot

N_INTERVAL = 2_000_000
N_DEFAULT = 10_000_000  # 40 ms of guest time: perf rotates multiplexed events every 4 ms
DEFAULT_COUNT_RUNS = ["first", "default", "interval"]
DEFAULT_COUNT_NS = [N1, N_DEFAULT, N_INTERVAL]
TOO_MANY = 10 ** 11  # no count of these programs comes near: 6.1's garbage is ~10^12


def default_sections() -> list:
    rep = "perf report -i {} --stdio -n --sort comm,dso,sym"
    return [
        ("boot", "uname -r; dmesg | grep -e 'Performance Events' -e 'NMI watchdog'"),
        ("first", f"perf stat -x, -e instructions:u,branches:u,{PF} count {N1}"),
        ("readme", "perf stat -e instructions,branches ls / > /dev/null"),
        ("default", f"perf stat -x, count {N_DEFAULT}"),
        ("system", "perf stat -a -x, -e cycles,instructions sleep 1"),
        ("interval", f"perf stat -I 100 -x, -e instructions:u,branches:u,{PF} "
                     f"count {N_INTERVAL}"),
        ("p4event", f"perf stat -x, -e $(p4event {BR}:MMTP:MMTM:u),{PF} branchy {B1}"),
        ("record_c", f"perf record -q -o /tmp/c.data -e instructions:u -c {PERIOD} "
                     f"hotspots {HOT_N}"),
        ("report_c", rep.format("/tmp/c.data")),
        ("record_a", f"perf record -q -a -o /tmp/a.data -e cycles -c {PERIOD} -- "
                     f"hotspots {HOT_N}"),
        ("report_a", rep.format("/tmp/a.data")),
        ("record_freq", f"perf record -q -o /tmp/f.data hotspots {HOT_N}"),
        ("report_freq", rep.format("/tmp/f.data")),
        ("unmapped", f"perf stat -x, -e ref-cycles:u count {N1}; "
                     f"perf stat -x, -e stalled-cycles-frontend:u count {N1}"),
    ]


@pytest.mark.guest
@pytest.mark.slow
def test_default_guest_unmapped_generic_events_read_0_and_say_why(tmp_path_factory):
    """ref-cycles and stalled-cycles-frontend have no NetBurst event in Linux's P4 driver: it
    programs TC_deliver_mode with an empty mask, which counts nothing (on a Pentium 4 too),
    and p4pmu says so once (emulator/notices.py `empty_mask`)."""
    s = session(tmp_path_factory, "default")
    got = s.stat("unmapped")
    assert got["ref-cycles:u"].value == 0 and got["stalled-cycles-frontend:u"].value == 0, got
    said = [ln for ln in s.stderr.splitlines() if "empty" in ln or "TC_deliver_mode" in ln]
    assert len(said) == 1 and said[0].startswith("p4pmu: warning:"), said
    assert "counts TC_deliver_mode with none of its event mask bits" in said[0], said
    assert "ref-cycles and stalled-cycles-frontend/-backend" in said[0], said


# perf top reads keys from stdin: a pipe that has no data until it ends keeps it refreshing.
# The sampled program sleeps between short runs: idle guest time costs nothing on the virtual
# clock, busy time 10^9 instructions a second.  Its own boot: after the default session's
# sections this command did not end (not understood yet; alone it takes about 30 s).
TOP = ("top", "(while true; do hotspots 20000; sleep 0.01; done) & bg=$!; "
              "timeout 4 sleep 5 | timeout -s INT 3 perf top --stdio -d 1 -E 8 "
              "> /tmp/top.out 2>&1; kill $bg; cat /tmp/top.out")


def _default_counts(s: Session) -> dict:
    return dict(zip(DEFAULT_COUNT_RUNS, replay(s.arch, "count", DEFAULT_COUNT_NS)))


@pytest.mark.guest
@pytest.mark.slow
def test_default_guest_boots_5_10_clean_and_without_warnings(tmp_path_factory):
    s = session(tmp_path_factory, "default")
    assert s.returncode == 0, s.stderr[-4000:]
    assert s.sec("boot").text.startswith("5.10."), s.sec("boot").text
    assert "Netburst P4/Xeon PMU driver." in s.kernel_log
    for bad in BAD_KERNEL_MESSAGES[:3] + ("BUG:", "Oops"):
        assert bad not in s.kernel_log, bad
    assert re.search(r"# end: .* 0 Python errors", s.pmu_log), s.pmu_log[-500:]
    assert "p4_pmu_set_period" not in s.stderr  # 5.10 writes the period it means


@pytest.mark.guest
@pytest.mark.slow
def test_default_guest_first_perf_stat_is_exact(tmp_path_factory):
    """The first perf command after boot, no recipe (no rt, watchdogs on): exactly the model's
    counts; so is the README's first example's order of magnitude."""
    s = session(tmp_path_factory, "default")
    got = s.stat("first")
    exp = _default_counts(s)["first"].with_returns(got[PF].value)
    assert got["instructions:u"].value == exp.linux_instructions, got
    assert got["branches:u"].value == exp.linux_branches, got
    text = s.sec("readme").text
    nums = [int(m.group(1).replace(",", "")) for m in
            re.finditer(r"^\s*([\d,]+)\s+(instructions|branches)\s", text, re.M)]
    assert len(nums) == 2 and all(0 < n < 10 ** 8 for n in nums), text


@pytest.mark.guest
@pytest.mark.slow
def test_default_guest_default_events_and_system_wide_are_sane(tmp_path_factory):
    """`perf stat` with perf's default events multiplexes (NetBurst puts instructions,
    branch-misses and the watchdog's cycles alias on CRU_ESCR0/2): no count near 10^12, and
    p4pmu says once that Linux's scheduler put two events on one counter (docs/linux-guest.md,
    "Multiplexed events").  `perf stat -a` counts, sanely."""
    s = session(tmp_path_factory, "default")
    exp = _default_counts(s)["default"]
    got = s.stat("default")
    for ev in ("cycles", "instructions", "branches", "branch-misses"):
        assert got[ev].value is not None and 0 < got[ev].value < TOO_MANY, (ev, got)
    assert got["branches"].value >= exp.linux_branches, got  # every level: more than user's
    assert "p4_pmu_schedule_events" in s.stderr, s.stderr[-3000:]
    system = s.stat("system")
    for ev in ("cycles", "instructions"):
        assert system[ev].value is not None and 0 < system[ev].value < TOO_MANY, system


@pytest.mark.guest
@pytest.mark.slow
def test_default_guest_interval_counts_add_up_to_the_model(tmp_path_factory):
    """perf stat -I: every interval's count is sane and they add up to the program's counts by
    the model, exactly."""
    s = session(tmp_path_factory, "default")
    exp = _default_counts(s)["interval"]
    tot = {"instructions:u": 0, "branches:u": 0, PF: 0}
    for ln in s.sec("interval").text.splitlines():
        parts = ln.split(",")
        if len(parts) > 3 and parts[3] in tot:
            assert parts[1].isdigit() and int(parts[1]) < TOO_MANY, ln
            tot[parts[3]] += int(parts[1])
    exp = exp.with_returns(tot.pop(PF))
    assert tot == {"instructions:u": exp.linux_instructions,
                   "branches:u": exp.linux_branches}, tot


@pytest.mark.guest
@pytest.mark.slow
def test_default_guest_p4event_counts_what_the_event_table_says(tmp_path_factory):
    """`perf stat -e $(p4event branch_retired:MMTP:MMTM:u)`: the guest's helper encodes the
    event by name; it counts the model's taken branches (predicted and mispredicted)."""
    s = session(tmp_path_factory, "default")
    got = s.stat("p4event")
    exp = replay(s.arch, "branchy", [B1])[0].with_returns(got.pop(PF).value)
    (line,) = got.values()
    assert line.value == exp.MMTP + exp.MMTM, (got, exp)


@pytest.mark.guest
@pytest.mark.slow
def test_default_guest_perf_record_count_and_system_wide(tmp_path_factory):
    """perf record -c on instructions:u, the task never switched out on purpose: one sample
    per PERIOD of the model's user instructions (within 2), 3:1 in hot_a / hot_b; and
    perf record -a on cycles: the same shares."""
    s = session(tmp_path_factory, "default")
    n = P.program_counts(workload(s.arch, "hotspots"), HOT_N, CM.Predictor()).linux_instructions
    rep = P.parse_report(s.sec("report_c").text)
    sa, sb = rep.symbol_samples("hot_a", "hotspots"), rep.symbol_samples("hot_b", "hotspots")
    assert abs((sa + sb) - n / PERIOD) <= 2, (sa, sb, n)
    assert abs(100 * sa / (sa + sb) - 75) <= 3, (sa, sb)
    rep = P.parse_report(s.sec("report_a").text)
    sa, sb = rep.symbol_samples("hot_a", "hotspots"), rep.symbol_samples("hot_b", "hotspots")
    assert sa + sb > 0.5 * 9.6 * HOT_N / PERIOD, s.sec("report_a").text
    # System-wide cycles: hot_a's share spreads over 71-79 % from boot to boot (the same
    # plugin and image alone: 77.8 and 78.0 %; after other sections: 71.3-78.7 %), where
    # the instructions profile above holds 75 +- 3; the cause is to be found (the cycles of
    # the two identical loops, or where their samples land, depend on something of the run)
    assert abs(100 * sa / (sa + sb) - 75) <= 5, s.sec("report_a").text


@pytest.mark.guest
@pytest.mark.slow
def test_default_guest_default_frequency_record_and_perf_top(tmp_path_factory):
    """perf record at perf's default frequency, and perf top: the guest's time comes from the
    instructions it executes (p4pmu linux --clock virtual), so perf's frequency mode sizes the
    period for a machine of a fixed speed: the samples are hotspots' clocks, 3:1 (perf top:
    within 8 points, its one-second screens hold a few hundred samples of them)."""
    s = session(tmp_path_factory, "default")
    text = s.sec("report_freq").text
    rep = P.parse_report(text)
    sa, sb = rep.symbol_samples("hot_a", "hotspots"), rep.symbol_samples("hot_b", "hotspots")
    total = sum(r[1] for r in rep.rows)
    assert sa + sb >= 20 and sa + sb >= 0.8 * total, text
    assert abs(100 * sa / (sa + sb) - 75) <= 5, text
    assert "took too long" not in s.kernel_log, s.kernel_log[-2000:]
    top = session(tmp_path_factory, "top").sec("top").text
    screens = [m.group(1) for m in re.finditer(r"PerfTop:\s+(\d+) irqs/sec", top)]
    assert screens and int(screens[-1]) > 100, top[-2000:]
    last = top[top.rfind("PerfTop:"):]
    pct = {m.group(2): float(m.group(1)) for m in
           re.finditer(r"^\s+([\d.]+)%\s+hotspots\s+\[\.\] (hot_[ab])$", last, re.M)}
    assert set(pct) == {"hot_a", "hot_b"}, last
    assert abs(100 * pct["hot_a"] / (pct["hot_a"] + pct["hot_b"]) - 75) <= 8, last
