"""`p4pmu bench --linux`: the plugin's cost on real programs in the Linux guest.

Every configuration boots the default Linux guest (`p4pmu linux`, the host clock, so that the
guest's own clock measures what the host spends) and runs the same workloads, each timed in
the guest with /proc/uptime around it: inside the command perf runs, so that the time is the
program's while perf counts or samples it, and, separately, around the whole perf command
(perf's own start-up and exit, its build-id pass after `perf record` included).  The
configurations of one round run one after the
other, and a ratio is always a configuration's time over plain QEMU's in the same round;
the report gives the median and the spread over the rounds (docs/performance.md).

Configurations:

* plain  -- QEMU without the plugin (`--no-plugin`), the workload alone;
* L1     -- the plugin, nothing asked of perf (the NMI watchdog's counter counts clocks; the
            kernel disables and re-enables it around scheduling and idle);
* L2     -- ``perf stat`` with cycles, instructions, branches and branch-misses;
* L3     -- ``perf stat`` with more events than fit at once (perf multiplexes);
* L4     -- ``perf record -F 1000``;
* L5     -- ``perf record -c 100000 -e instructions``;
* R4     -- a reference: plain QEMU under ``perf record -F 1000 -e cpu-clock`` (the kernel's
            timer samples, no PMU): what sampling costs a one-vCPU guest anyway (perf's own
            process runs beside the workload, every sample is an interrupt and a record);
* M1     -- ``perf stat`` with cache-misses and L1-dcache-load-misses (the NMI watchdog off:
            cache-misses needs its counter): every guest access goes through the memory model
            (docs/memory-model.md);
* S2     -- ``perf stat`` as in L2 on a guest with two logical CPUs (``--smp 2``: QEMU's
            multi-threaded TCG), against plain QEMU with two (plain2);
* R0, R2 -- references: the plugin with the NMI watchdog off (``nmi_watchdog=0``), nothing
            counting (R0), and ``perf stat`` of the raw event instr_retired:NBOGUSNTAG (R2),
            which reads no branch outcome, so the plugin translates at its outcome-free level
            (docs/guest-events.md).  (Linux's own `instructions` includes the bogus
            instructions retired after a misprediction, and its `cycles` the misprediction
            penalty: both depend on outcomes.)

The guest-side stress of unusual programming is `p4pmu bench`'s (g), a bare-metal guest
(qemu_glue/bench_stress.py): the Linux image has no way for a user program to write MSRs (no
msr module).

Workloads: busybox ``gzip -9``, ``bzip2``, ``sha256sum`` and ``md5sum`` over the first
``size`` bytes of the guest's ``/usr/bin/perf`` (programs no one here wrote), and two of
``perf bench``'s own (``sched messaging``, ``mem memcpy``).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass

from p4pmu.qemu_glue import workloads as W
from p4pmu.qemu_glue.linux_io import HostOutput

INPUT = "/tmp/p4pmu-bench-input"
STRINGS_ROUNDS = 8000
ARCH = "amd64"  # the guest `p4pmu linux` boots by default
MAX_RATIO = 20  # a configuration's boot is stopped after this many times plain QEMU's run
MIN_PLAIN_S = 0.05  # shorter plain times are not compared: /proc/uptime counts in 10 ms
MARK = "P4PMU-BENCH"  # the workload alone, timed inside perf's command
MARK_WHOLE = "P4PMU-BENCH-WHOLE"  # the whole command, perf's start-up and exit included


@dataclass(frozen=True)
class Workload:
    name: str
    command: str  # runs in the guest's /bin/sh


WORKLOADS = (
    Workload("gzip -9", f"gzip -9 -c {INPUT} > /dev/null"),
    Workload("bzip2", f"bzip2 -c {INPUT} > /dev/null"),
    Workload("sha256sum", f"sha256sum {INPUT} > /dev/null"),
    Workload("md5sum", f"md5sum {INPUT} > /dev/null"),
    Workload("perf bench sched messaging", "perf bench sched messaging -g 2 -l 20 > /dev/null"),
    Workload("perf bench mem memcpy", "perf bench mem memcpy -s 4MB -l 20 > /dev/null"),
    # REP string microcode (qemu_glue/workloads/strings.S): 6.6 x 10^8 iterations
    Workload("strings", f"{W.GUEST_DIR}/strings {STRINGS_ROUNDS}"),
)


@dataclass(frozen=True)
class Config:
    key: str
    what: str
    plugin: bool
    wrap: str  # put in front of every workload's command (perf)
    append: str = ""  # extra kernel command-line arguments
    smp: int = 1  # logical CPUs (--smp; with two, QEMU's multi-threaded TCG)
    plain: str = "plain"  # the configuration its ratios divide by: plain QEMU, same --smp


_L3_EVENTS = ",".join(f"{e}{m}" for m in ("", ":u") for e in
                      ("cycles", "instructions", "branches", "branch-misses"))
CONFIGS = (
    Config("plain", "plain QEMU (--no-plugin)", False, ""),
    Config("plain2", "plain QEMU (--no-plugin), --smp 2 (reference for S2)", False, "", smp=2),
    Config("L1", "the plugin, nothing asked of perf (NMI watchdog on)", True, ""),
    Config("L2", "perf stat -e cycles,instructions,branches,branch-misses", True,
           "perf stat -o /dev/null -e cycles,instructions,branches,branch-misses --"),
    Config("L3", "perf stat, 8 events (multiplexed)", True,
           f"perf stat -o /dev/null -e {_L3_EVENTS} --"),
    Config("L4", "perf record -F 1000", True, "perf record -q -F 1000 -o /tmp/p.data --"),
    Config("L5", "perf record -c 100000 -e instructions", True,
           "perf record -q -c 100000 -e instructions -o /tmp/p.data --"),
    # references, not targets: what sampling costs the guest without the PMU (perf record's
    # own process shares the one vCPU with the workload; a timer samples instead of the
    # PMU), and the plugin's cost when no counter depends on branch outcomes (the NMI
    # watchdog off: nothing counts, then instructions only, at the outcome-free level)
    Config("R4", "plain QEMU, perf record -F 1000 -e cpu-clock (reference)", False,
           "perf record -q -F 1000 -e cpu-clock -o /tmp/p.data --"),
    Config("R0", "the plugin, NMI watchdog off: nothing counts (reference)", True, "",
           "nmi_watchdog=0"),
    Config("R2", "perf stat -e instr_retired:NBOGUSNTAG, NMI watchdog off: the outcome-free "
           "level (reference)", True,
           "perf stat -o /dev/null -e $(p4event instr_retired:NBOGUSNTAG) --", "nmi_watchdog=0"),
    # the memory level: every access through the memory model (docs/memory-model.md)
    Config("M1", "perf stat -e cache-misses,L1-dcache-load-misses, NMI watchdog off: the "
           "memory level", True,
           "perf stat -o /dev/null -e cache-misses,L1-dcache-load-misses --", "nmi_watchdog=0"),
    # two vCPUs (multi-threaded TCG: the plugin's per-vCPU state, no outcome-free level),
    # against plain QEMU with two vCPUs
    Config("S2", "--smp 2, perf stat -e cycles,instructions,branches,branch-misses", True,
           "perf stat -o /dev/null -e cycles,instructions,branches,branch-misses --", smp=2,
           plain="plain2"),
)
BY_KEY = {c.key: c for c in CONFIGS}


def _timed(marker: str, i: int, command: str) -> str:
    """`command` between two readings of the guest's clock, then one marker line."""
    return (f"read t0 x < /proc/uptime; {command}; rc=$?; read t1 x < /proc/uptime; "
            f"echo \"{marker} {i} $rc $t0 $t1\"")


def guest_script(config: Config, size: int) -> str:
    """The guest's command: the input file, then every workload timed with /proc/uptime,
    inside perf's command (MARK) and around it (MARK_WHOLE)."""
    lines = [f"head -c {size} /usr/bin/perf > {INPUT}"]
    for i, w in enumerate(WORKLOADS):
        inner = _timed(MARK, i, w.command)
        run = f"{config.wrap} sh -c '{inner}'" if config.wrap else inner
        lines.append(_timed(MARK_WHOLE, i, run))
    return "\n".join(lines)


def parse_times(text: str, marker: str = MARK) -> dict[int, float]:
    """Workload index -> seconds, from the guest's `marker` lines (a failed workload:
    absent)."""
    out = {}
    for line in text.splitlines():
        f = line.split()
        if len(f) == 5 and f[0] == marker and f[2] == "0":
            out[int(f[1])] = float(f[4]) - float(f[3])
    return out


def run_config(config: Config, size: int, model: str, timeout: float = 1800,
               timing: str = "core") -> tuple[dict[int, float], dict[int, float], str, bool]:
    """Boot the guest once for `config`; (workload index -> seconds of the workload alone,
    the same for the whole command with perf, the guest's stderr, whether `timeout` stopped
    it: then only the workloads it finished are there)."""
    from p4pmu.qemu_glue import linux
    ap = argparse.ArgumentParser(prog="p4pmu linux")
    linux.add_arguments(ap)
    argv = ["--clock", "host", "--model", model, "--timeout", str(int(timeout)),
            "--add", f"{W.ensure_built(ARCH)}:{W.GUEST_DIR}"]
    if not config.plugin:
        argv.append("--no-plugin")
    else:
        argv += ["--timing", timing]
    if config.append:
        argv += ["--append", config.append]
    if config.smp != 1:
        argv += ["--smp", str(config.smp)]
    out, err = bytearray(), bytearray()
    rc = linux.main(ap.parse_args(argv), [guest_script(config, size)],
                    HostOutput(stdout=out.extend, stderr=err.extend))
    text = out.decode(errors="replace")
    if rc not in (0, 124):
        raise RuntimeError(f"{config.key}: the guest run failed (status {rc}):\n"
                           f"{err.decode(errors='replace')[-2000:]}")
    return (parse_times(text), parse_times(text, MARK_WHOLE), err.decode(errors="replace"),
            rc == 124)


def measure(rounds: int, size: int, model: str, progress=print, timing: str = "core") -> dict:
    """All configurations, `rounds` times, with the plugin's `timing`;
    times[config][round][workload] in seconds (the workload alone),
    whole[config][round][workload] (perf's whole command)."""
    times: dict[str, list[dict[int, float]]] = {c.key: [] for c in CONFIGS}
    whole: dict[str, list[dict[int, float]]] = {c.key: [] for c in CONFIGS}
    for r in range(rounds):
        limit = 1800.0
        for c in CONFIGS:
            progress(f"bench --linux: round {r + 1}/{rounds}: {c.key} ({c.what})")
            t0 = time.monotonic()
            got, got_whole, _, stopped = run_config(c, size, model, limit, timing)
            times[c.key].append(got)
            whole[c.key].append(got_whole)
            if not c.plugin:  # a configuration over MAX_RATIO x plain QEMU is stopped
                limit = max(limit if c.key != "plain" else 0.0,
                            MAX_RATIO * (time.monotonic() - t0) + 60)
            progress(f"    {sum(got.values()):.1f} s of workloads "
                     f"({time.monotonic() - t0:.0f} s with the boot)"
                     + (f"; stopped after {limit:.0f} s: {len(WORKLOADS) - len(got)} "
                        "workload(s) not finished" if stopped else ""))
    return {"rounds": rounds, "size": size, "model": model, "times": times, "whole": whole}


def ratios(res: dict, key: str, workload: int | None) -> list[float]:
    """Per round: `key`'s time over plain QEMU's with as many vCPUs (one workload, or all of
    them summed); a round whose plain time is under MIN_PLAIN_S (/proc/uptime counts in 10 ms)
    has none."""
    out = []
    for mine, plain in zip(res["times"][key], res["times"][BY_KEY[key].plain]):
        idx = [workload] if workload is not None else sorted(plain)
        if sum(plain.get(i, 0.0) for i in idx) < MIN_PLAIN_S:
            continue
        if all(i in mine and i in plain for i in idx):
            out.append(sum(mine[i] for i in idx) / max(1e-9, sum(plain[i] for i in idx)))
    return out


def _cell(rs: list[float], short: bool = False) -> str:
    if short:
        return "too short"
    if not rs:
        return "stopped"
    if len(rs) == 1:
        return f"{rs[0]:.2f}"
    return f"{statistics.median(rs):.2f} ({min(rs):.2f}-{max(rs):.2f})"


def report(res: dict) -> str:
    plain = res["times"]["plain"]
    lines = [f"p4pmu bench --linux: model {res['model']}, {res['rounds']} round(s), input "
             f"{res['size']:,} bytes of /usr/bin/perf; the guest's clock (host time) around "
             "each workload, inside perf's command; ratio to plain QEMU in the same round: "
             "median (range); "
             f"stopped: not finished within {MAX_RATIO} x plain QEMU's run; too short: under "
             f"{MIN_PLAIN_S} s in plain QEMU (/proc/uptime counts in 10 ms)", ""]
    head = "| configuration | all workloads | " + " | ".join(w.name for w in WORKLOADS) + " |"
    lines += [head, "|" + "---|" * (2 + len(WORKLOADS))]
    secs = [statistics.median([p[i] for p in plain if i in p]) if any(i in p for p in plain)
            else float("nan") for i in range(len(WORKLOADS))]
    lines.append("| plain QEMU: seconds | " + f"{sum(secs):.2f} | " +
                 " | ".join(f"{s:.2f}" for s in secs) + " |")
    for c in CONFIGS[1:]:
        cells = [_cell(ratios(res, c.key, None))] + \
                [_cell(ratios(res, c.key, i), secs[i] < MIN_PLAIN_S)
                 for i in range(len(WORKLOADS))]
        lines.append(f"| {c.key}: {c.what} | " + " | ".join(cells) + " |")
    extra = [f"{c.key} {statistics.median(x):.2f} s" for c in CONFIGS[1:]
             if (x := perf_own_seconds(res, c.key))]
    if extra:
        lines += ["", "perf's own start-up and exit (its whole command less the workloads, all "
                      "workloads, median over rounds): " + ", ".join(extra)]
    return "\n".join(lines)


def perf_own_seconds(res: dict, key: str) -> list[float]:
    """Per round in which every workload finished: the seconds of `key`'s whole commands
    less those of its workloads alone (perf's own start-up and exit; 0 without perf)."""
    out = []
    for inner, whole in zip(res["times"][key], res.get("whole", {}).get(key, [])):
        if inner and set(inner) == set(whole) == set(range(len(WORKLOADS))):
            out.append(sum(whole.values()) - sum(inner.values()))
    return out


def main(a: argparse.Namespace) -> int:
    from p4pmu.qemu_glue.run_options import model_from_arg
    model = model_from_arg(a.model).key
    rounds = 1 if a.quick else a.rounds
    size = 1_000_000 if a.quick else 4_000_000
    timing = a.timing or "core"
    res = measure(rounds, size, model, progress=lambda s: print(s, file=sys.stderr,
                                                                flush=True), timing=timing)
    res["timing"] = timing
    print(f"timing: {timing} (docs/timing.md)")
    print(report(res))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
    return 0
