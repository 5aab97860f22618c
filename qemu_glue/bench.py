"""`p4pmu bench`: what the emulated PMU costs a CPU-bound guest.

Runs the events guest (p4pmu.qemu_glue.guests, `events32`) in the same
invocation under

  (a) plain QEMU: the model's CPU, no plugin;
  (b) the plugin loaded, nothing enabled;
  (c) the plugin with all 18 counters counting modelled events;
  (d) the plugin with a performance interrupt every 10,000 instructions (NMI, minimal handler:
      reload the counter, clear OVF, unmask the LVT entry);
  (f) QEMU's own floor for (d), without the plugin: the loop `selfnmi`, which stores NMI |
      self to the local APIC's ICR every 571 iterations (about 10,000 instructions), with
      (d)'s handler, against `selfnmi_ram`, the same loop storing to RAM instead: what an
      interrupt at (d)'s rate costs in plain QEMU (delivery, handler, IRET);
  (e) the MSR microbenchmark: one RDMSR 300h / WRMSR 300h / RDMSR 174h (not a PMU MSR) per
      loop iteration, with and without the plugin, nothing enabled; and RDMSR 300h with the
      18 counters of (c) counting;
  (g) random programming (qemu_glue/bench_stress.py): 2,000 random accesses of every
      counter, CCCR and ESCR, FORCE_OVF with the LVT entry masked, near-overflow presets,
      each followed by some of the benchmark loop, with and without the plugin, and the
      host time of each access,

and prints a table and the ratios to plain QEMU.

Method.  The machine is shared, so the figure is CPU time, not wall time: the CPU time of
QEMU's vCPU thread ("CPU 0/TCG", read from /proc/PID/task/TID/schedstat while it runs), which
runs the guest, every plugin callback and every Python call of the plugin.  Not the whole
process: its main thread starts Python and numpy (0.2-0.3 s, page faults, varying by
+-0.03 s from run to run), work that the start-up run subtracts only up to that noise, which
biased every plugin configuration's ratio upwards (a host profile of (b): its vCPU thread
did plain QEMU's work within 3 %, while the process figure said 1.10).  Each
configuration runs a work run (the benchmark loop, N iterations) and a start-up run (the
same script with an empty loop: boot, plugin and Python start-up, PMU programming); guest
work = work run - start-up run, each the minimum over --repeat runs (interleaved across
configurations, so a burst of load from elsewhere hits all of them).  The report also gives
the median over rounds of each round's ratio to the same round's plain run (one unusually
fast or slow plain run moves every best-of ratio, not this median); a target counts as met
only when both meet it.  The MSR cost is (t(K2) - t(K1)) / (K2 - K1) for two loop lengths,
the median over the repeats.

The benchmark loop (loops.S `loop_bench`): 17-18 instructions per iteration -- xorshift ALU work,
a load and a read-modify-write store into a 64-byte table, a data-dependent branch, one scalar
SSE add and the loop branch.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from p4pmu.emulator import events as E
from p4pmu.emulator import tables as T
from p4pmu.plugin import bookkeeping_errors
from p4pmu.qemu_glue import bench_stress
from p4pmu.qemu_glue.guests import build as guest_build
from p4pmu.qemu_glue.machine import P4Machine
from p4pmu.qemu_glue.plugin_lib import plugin_file
from p4pmu.qemu_glue.provision import ensure_qemu
from p4pmu.qemu_glue.run_options import apply_timing, model_from_arg, parse_plugin_opts

GUEST = "events32"
MACHINE_ARGS = ("-machine", "pc", "-m", "64", "-nodefaults", "-display", "none",
                "-no-reboot", "-device", "isa-debug-exit,iobase=0xf4,iosize=0x04")
INSNS_PER_ITER = 17.5  # loop_bench (loops.S): 17, plus the INC on about half the iterations
PMI_PERIOD = 10_000
TARGETS = {"none": 1.05, "all18": 1.3, "pmi": 1.5}
# configuration -> (with the plugin, the script's set-up)
CONFIGURATIONS = {"plain": (False, "none"), "none": (True, "none"), "all18": (True, "all18"),
                  "pmi": (True, "pmi")}
MSR_TARGET_NS = 2000.0

# (c): every counter counts an event the guest-activity model feeds (docs/guest-events.md),
# OS and USR.  (counter, ESCR, event, mask bits)
ALL18 = (
    (0, "MSR_FSB_ESCR0", "global_power_events", ("RUNNING",)),
    (1, "MSR_FSB_ESCR0", "global_power_events", ("RUNNING",)),
    (2, "MSR_FSB_ESCR1", "global_power_events", ("RUNNING",)),
    (3, "MSR_FSB_ESCR1", "global_power_events", ("RUNNING",)),
    (4, "MSR_TBPU_ESCR0", "retired_branch_type", ("CONDITIONAL", "CALL", "RETURN", "INDIRECT")),
    (5, "MSR_TBPU_ESCR0", "retired_branch_type", ("CONDITIONAL", "CALL", "RETURN", "INDIRECT")),
    (6, "MSR_TBPU_ESCR1", "retired_mispred_branch_type",
     ("CONDITIONAL", "CALL", "RETURN", "INDIRECT")),
    (7, "MSR_TBPU_ESCR1", "retired_mispred_branch_type",
     ("CONDITIONAL", "CALL", "RETURN", "INDIRECT")),
    (8, "MSR_FIRM_ESCR0", "scalar_SP_uop", ("ALL",)),
    (9, "MSR_FIRM_ESCR0", "scalar_SP_uop", ("ALL",)),
    (10, "MSR_FIRM_ESCR1", "scalar_SP_uop", ("ALL",)),
    (11, "MSR_FIRM_ESCR1", "scalar_SP_uop", ("ALL",)),
    (12, "MSR_CRU_ESCR0", "instr_retired", ("NBOGUSNTAG", "NBOGUSTAG")),
    (13, "MSR_CRU_ESCR2", "branch_retired", ("MMNP", "MMNM", "MMTP", "MMTM")),
    (14, "MSR_CRU_ESCR1", "uops_retired", ("NBOGUS",)),
    (15, "MSR_CRU_ESCR3", "branch_retired", ("MMNP", "MMNM", "MMTP", "MMTM")),
    (16, "MSR_CRU_ESCR0", "instr_retired", ("NBOGUSNTAG", "NBOGUSTAG")),
    (17, "MSR_CRU_ESCR1", "uops_retired", ("NBOGUS",)),
)


def _escr(event: str, bits) -> int:
    return E.EVENT_BY_NAME[event].escr_value(*bits, t0_os=True, t0_usr=True)


def _cccr(counter: int, escr: str, enable=True, pmi=False) -> int:
    F = T.CCCR_FIELD
    v = T.ESCR_BY_NAME[escr].number << F["ESCR_SELECT"].lo | F["ACTIVE_THREAD"].mask
    if enable:
        v |= F["ENABLE"].mask
    if pmi:
        v |= F["OVF_PMI_T0"].mask
    return v


def script(config: str, loop: str, n: int) -> str:
    """The guest script of one run (format: qemu_glue/guests/common/events.c)."""
    lines = []
    if config == "all18":
        for _ctr, escr, ev, bits in ALL18:
            lines.append(f"w 0x{T.ESCR_BY_NAME[escr].msr:x} 0x{_escr(ev, bits):x}")
        for ctr, escr, _ev, _bits in ALL18:
            lines.append(f"w 0x{T.COUNTER_BASE + ctr:x} 0")
            lines.append(f"w 0x{T.CCCR_BASE + ctr:x} 0x{_cccr(ctr, escr):x}")
    elif config == "floor":
        # (d)'s handler and LVT, nothing counting (plain QEMU ignores the handler's WRMSRs
        # to PMU registers it does not know)
        cccr = _cccr(12, "MSR_CRU_ESCR0", pmi=True)
        reload = (-(PMI_PERIOD - 1)) & T.COUNTER_MASK
        lines += [f"pmicfg 8 12 0x{reload:x} 0x{cccr:x} 0 0x{4 << 8:x}", f"lvt 0x{4 << 8:x}"]
    elif config == "pmi":
        escr = "MSR_CRU_ESCR0"
        reload = (-(PMI_PERIOD - 1)) & T.COUNTER_MASK  # interrupt on the 10,000th event
        cccr = _cccr(12, escr, pmi=True)
        lvt = 4 << 8  # NMI, unmasked
        lines += [f"w 0x{T.ESCR_BY_NAME[escr].msr:x} 0x{_escr('instr_retired', ('NBOGUSNTAG',)):x}",
                  f"pmicfg 8 12 0x{reload:x} 0x{cccr:x} 0 0x{lvt:x}",
                  f"w 0x{T.COUNTER_BASE + 12:x} 0x{reload:x}",
                  f"w 0x{T.CCCR_BASE + 12:x} 0x{cccr:x}",
                  f"lvt 0x{lvt:x}"]
    lines.append(f"loop {loop} {n}")
    if config == "all18":
        for ctr, *_ in ALL18:
            lines.append(f"r 0x{T.COUNTER_BASE + ctr:x} c{ctr}")
    if config in ("pmi", "floor"):
        lines.append("pmilog")
    return "\n".join(lines) + "\n"


@dataclass
class Run:
    cpu: float          # the figure compared: the vCPU thread's CPU time, else the process's
    wall: float
    status: int
    serial: str
    process_cpu: float = 0.0  # user + system time of the whole QEMU process
    vcpu: bool = False        # cpu is the vCPU thread's


def _vcpu_thread(pid: int) -> str | None:
    """The task id of QEMU's vCPU thread (comm "CPU 0/TCG"), once it exists."""
    try:
        for t in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{t}/comm") as f:
                if f.read().strip().endswith("/TCG"):
                    return t
    except OSError:
        pass
    return None


def _thread_ns(pid: int, tid: str) -> int | None:
    """CPU time (ns) of one thread so far: the first field of its schedstat."""
    try:
        with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


class RunTimeout(RuntimeError):
    pass


def _run(machine: P4Machine, timeout: float) -> Run:
    """Launch the machine and time it (see the module doc); RunTimeout after ``timeout``."""
    t0 = time.monotonic()
    p = machine.launch()
    deadline = t0 + timeout
    tid, vcpu_ns = None, None
    while True:
        pid, status, ru = os.wait4(p.pid, os.WNOHANG)
        if pid:
            break
        # the vCPU thread's CPU time, read while it runs (it is gone once the process
        # exits; what it does after the last read -- the guest's exit -- is at most one
        # poll interval and the same in the start-up run)
        tid = tid or _vcpu_thread(p.pid)
        if tid:
            vcpu_ns = _thread_ns(p.pid, tid) or vcpu_ns
        if time.monotonic() > deadline:
            os.killpg(p.pid, 9)  # the session this run created, nothing else
            pid, status, ru = os.wait4(p.pid, 0)
            p.returncode = -9
            raise RunTimeout(f"timed out after {timeout:.0f} s: {shlex.join(machine.command)}")
        time.sleep(0.002)
    p.returncode = os.waitstatus_to_exitcode(status)
    err = p.stderr.read().decode(errors="replace") if p.stderr else ""
    proc = ru.ru_utime + ru.ru_stime
    if vcpu_ns:
        return Run(vcpu_ns / 1e9, time.monotonic() - t0, p.returncode, err, proc, True)
    return Run(proc, time.monotonic() - t0, p.returncode, err, proc, False)


class Bench:
    def __init__(self, model: str, repeat: int, iterations: int, msr_k: tuple[int, int],
                 progress: bool = True, max_ratio: float = 20.0,
                 plugin_opts: dict[str, str] | None = None):
        self.model = model_from_arg(model)
        self.repeat = repeat
        self.iterations = iterations
        self.msr_k = msr_k
        self.progress = progress
        self.max_ratio = max_ratio
        self.plugin_opts = dict(plugin_opts or {})
        self.qemu = ensure_qemu(progress=progress)
        self.plugin = plugin_file(build=True, progress=progress)
        self.guest = Path(guest_build.build_all(progress)[GUEST])
        self.commands: dict[str, str] = {}
        self.process_time_runs = 0  # runs timed by process CPU time (vCPU thread not read)

    def machine(self, plugin: bool, text: str,
                env: dict[str, str] | None = None) -> tuple[P4Machine, str]:
        """The QEMU of one run, its guest script and serial port in memory; (machine, the
        serial port's path for machine.memfd_bytes)."""
        m = P4Machine(self.qemu, self.model, plugin=self.plugin if plugin else None,
                      plugin_opts=self.plugin_opts if plugin else {}, env=env,
                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, own_session=True)
        script = m.add_memfd("script", text.encode())
        serial = m.add_memfd("serial")
        m.qemu_args = [*MACHINE_ARGS, "-serial", f"file:{serial}", "-kernel", str(self.guest),
                       "-initrd", script]
        return m, serial

    def one(self, key: str, plugin: bool, text: str, timeout: float = 600,
            env: dict[str, str] | None = None) -> tuple[float, str]:
        """One run: (the CPU time, the guest's serial output); QEMU's standard error is kept
        in self.last_stderr."""
        machine, serial = self.machine(plugin, text, env)
        with machine:
            self.commands.setdefault(key, shlex.join(machine.command))
            r = _run(machine, timeout=timeout)
            out = machine.memfd_bytes(serial).decode(errors="replace")
        self.last_stderr = r.serial
        if not r.vcpu and not self.process_time_runs:
            print(f"bench: warning: {key}: the vCPU thread's CPU time could not be read "
                  "(/proc/PID/task/TID/schedstat); this run counts the whole process's",
                  file=sys.stderr, flush=True)
        self.process_time_runs += 0 if r.vcpu else 1
        for line in bookkeeping_errors(r.serial):  # a plugin bug: say so, whatever the timing
            print(f"bench: {key}: {line}", file=sys.stderr, flush=True)
        if r.status != 1 or "DONE" not in out:
            raise RuntimeError(f"guest run failed (status {r.status}): {self.commands[key]}\n"
                               f"{out[-2000:]}\n{r.serial[-2000:]}")
        return r.cpu, out

    def say(self, msg: str) -> None:
        if self.progress:
            print(msg, file=sys.stderr, flush=True)

    def run(self) -> dict:
        """Every configuration, the floor and the MSR microbenchmark: the results."""
        res = self._guest_loop()
        self._floor(res)
        self._msr(res)
        self._stress(res)
        res["commands"] = self.commands
        res["timing"] = ("vCPU thread" if not self.process_time_runs else
                         f"vCPU thread, {self.process_time_runs} run(s) whole process")
        return res

    def _guest_loop(self) -> dict:
        """(a)-(d): the benchmark loop under each configuration, round by round."""
        rounds = self._guest_rounds()
        return self._guest_results(*rounds)

    def _guest_rounds(self):
        """Work and start-up runs of every configuration, --repeat rounds, interleaved;
        (work, start, outputs, timed_out, scaled) by configuration."""
        confs = CONFIGURATIONS
        work: dict[str, list[float]] = {k: [] for k in confs}
        start: dict[str, list[float]] = {k: [] for k in confs}
        outputs: dict[str, str] = {}
        timed_out: dict[str, float] = {}
        scaled: dict[str, int] = {}  # configuration -> loop iterations, when not the full
        for rep in range(self.repeat):
            self.say(f"bench: round {rep + 1}/{self.repeat}: guest loop")
            for key, (plugin, cfg) in confs.items():
                if key in timed_out:
                    continue
                # a configuration more than `max_ratio` times slower than plain QEMU is
                # stopped and reported as such
                limit = 600.0
                if key != "plain" and work["plain"]:
                    limit = max(30.0, self.max_ratio * min(work["plain"]) + 10.0)
                n = scaled.get(key, self.iterations)
                try:
                    t, out = self.one(f"{key}-work", plugin, script(cfg, "bench", n),
                                      timeout=limit)
                except RunTimeout:
                    # too slow for the full loop: measure the same work per instruction on
                    # a shorter loop (reported as such), down to 1/1000 of it
                    if n // 10 >= self.iterations // 1000:
                        scaled[key] = n // 10
                        self.say(f"bench: {key}: stopped after {limit:.0f} s; "
                                 f"measuring {n // 10:,} iterations instead")
                        work[key].clear()
                        start[key].clear()
                        continue
                    timed_out[key] = limit
                    self.say(f"bench: {key}: stopped after {limit:.0f} s")
                    continue
                work[key].append(t)
                outputs[key] = out
                t, _ = self.one(f"{key}-start", plugin, script(cfg, "empty", 1))
                start[key].append(t)
        return work, start, outputs, timed_out, scaled

    def _guest_results(self, work, start, outputs, timed_out, scaled) -> dict:
        """The results of (a)-(d) from their runs: guest work, ratios, targets."""
        confs = CONFIGURATIONS
        res: dict = {"model": self.model.key, "iterations": self.iterations,
                     "instructions": int(self.iterations * INSNS_PER_ITER), "repeat": self.repeat,
                     "plugin_opts": self.plugin_opts}
        guest = {}
        for key in confs:
            if key in timed_out:
                guest[key] = {"timed_out_s": timed_out[key]}
                continue
            if not work[key]:  # scaled down in the last round: no complete measurement
                guest[key] = {"timed_out_s": self.max_ratio * min(work["plain"]) + 10.0}
                timed_out[key] = guest[key]["timed_out_s"]
                continue
            w, s = min(work[key]), min(start[key])
            n = scaled.get(key, self.iterations)
            # guest work for the full loop: a scaled-down run counts n / iterations of it
            guest[key] = {"work_min_s": w, "start_min_s": s,
                          "guest_s": (w - s) * self.iterations / n, "iterations": n,
                          "work_all_s": work[key], "start_all_s": start[key]}
        base = guest["plain"]["guest_s"]
        for key in confs:
            g = guest[key]
            if "timed_out_s" in g:
                g["ratio_above"] = (g["timed_out_s"] - guest["plain"]["start_min_s"]) / base
                g["met"] = False
                if key in TARGETS:
                    g["target"] = TARGETS[key]
                continue
            g["ratio"] = g["guest_s"] / base if base > 0 else float("nan")
            g["ns_per_insn"] = g["guest_s"] * 1e9 / res["instructions"]
            # the same ratio round by round (plain QEMU's run of the same round, each side's
            # fastest start-up subtracted): one unusually fast or slow plain run moves every
            # best-of ratio, the median of these not
            g["ratio_rounds"] = _round_ratios(guest["plain"], g, self.iterations / g["iterations"])
            g["ratio_median"] = (statistics.median(g["ratio_rounds"]) if g["ratio_rounds"]
                                 else float("nan"))
            if key in TARGETS:
                g["target"] = TARGETS[key]
                # met only when both agree (the machine's noise decides otherwise)
                g["met"] = g["ratio"] <= TARGETS[key] and g["ratio_median"] <= TARGETS[key]
        # how many interrupts the PMI run took, and did all 18 counters count
        for ln in outputs.get("pmi", "").splitlines():
            if ln.startswith("I "):
                guest["pmi"]["interrupts"] = int(ln.split()[1])
        counts = {}
        for ln in outputs.get("all18", "").splitlines():
            if ln.startswith("V c"):
                _, tag, val = ln.split()
                counts[int(tag[1:])] = int(val, 16)
        guest["all18"]["counts"] = counts
        res["guest"] = guest
        return res

    def _floor(self, res: dict) -> None:
        """(f): QEMU's own cost of (d)'s interrupts, without the plugin."""
        # (f) QEMU's floor: a self-NMI every ~10,000 instructions, plain QEMU
        fl: dict[str, list[float]] = {"selfnmi_ram": [], "selfnmi": []}
        fl_out = ""
        for rep in range(self.repeat):
            self.say(f"bench: round {rep + 1}/{self.repeat}: plain QEMU with self-NMIs")
            for loop in fl:
                t, out = self.one(f"floor-{loop}", False, script("floor", loop, self.iterations))
                fl[loop].append(t)
                if loop == "selfnmi":
                    fl_out = out
        t0, _ = self.one("floor-start", False, script("floor", "empty", 1))
        a, b = min(fl["selfnmi_ram"]) - t0, min(fl["selfnmi"]) - t0
        nmis = 0
        for ln in fl_out.splitlines():
            if ln.startswith("I "):
                nmis = int(ln.split()[1])
        res["floor"] = {"loop_s": a, "nmi_s": b, "ratio": b / a if a > 0 else float("nan"),
                        "interrupts": nmis,
                        "us_per_interrupt": (b - a) * 1e6 / nmis if nmis else float("nan"),
                        "loop_all_s": fl["selfnmi_ram"], "nmi_all_s": fl["selfnmi"]}

    def _msr(self, res: dict) -> None:
        """(e): the cost of one intercepted MSR access."""
        # (e) MSR microbenchmark
        k1, k2 = self.msr_k
        msr = {}
        for name, loop, cfg in (("rdmsr", "rdmsr", "none"), ("wrmsr", "wrmsr", "none"),
                                ("rdmsr_counting", "rdmsr", "all18"),
                                ("rdmsr_other", "rdmsr_other", "none")):
            per = {True: [], False: []}
            a, b = k1, k2
            for rep in range(self.repeat):
                self.say(f"bench: round {rep + 1}/{self.repeat}: {name} loop")
                for plugin in (False, True):
                    key = f"{name}-{'plugin' if plugin else 'plain'}"
                    t1, _ = self.one(key + "-k1", plugin, script(cfg, loop, a))
                    t2, _ = self.one(key + "-k2", plugin, script(cfg, loop, b))
                    per[plugin].append((t2 - t1) * 1e9 / (b - a))
            msr[name] = {"k": [a, b], "plugin_ns_median": statistics.median(per[True]),
                         "plugin_ns_all": per[True],
                         "plain_ns_median": statistics.median(per[False]),
                         "plain_ns_all": per[False]}
        for name in ("rdmsr", "wrmsr", "rdmsr_counting"):
            msr[name]["target_ns"] = MSR_TARGET_NS
            msr[name]["met"] = msr[name]["plugin_ns_median"] <= MSR_TARGET_NS
        res["msr"] = msr
        res["msr_k"] = [k1, k2]


    def _stress(self, res: dict) -> None:
        """(g): random programming of every counter, FORCE_OVF with a masked LVT entry,
        near-overflow presets (qemu_glue/bench_stress.py)."""
        text = bench_stress.script(self.model.key)
        empty = "lvt 0x10000\nloop empty 1\n"
        work: dict[bool, list[float]] = {False: [], True: []}
        start: dict[bool, list[float]] = {False: [], True: []}
        times = None
        env = {"P4PMU_ACCESS_TIMES": "1"}
        for rep in range(self.repeat):
            self.say(f"bench: round {rep + 1}/{self.repeat}: random programming")
            for plugin in (False, True):
                key = f"stress-{'plugin' if plugin else 'plain'}"
                t, _ = self.one(key, plugin, text, env=env if plugin else None)
                work[plugin].append(t)
                if plugin:
                    times = bench_stress.access_times(self.last_stderr) or times
                t, _ = self.one(key + "-start", plugin, empty)
                start[plugin].append(t)
        g = {p: min(work[p]) - min(start[p]) for p in (False, True)}
        per = [(a - min(start[True])) / (b - min(start[False]))
               for a, b in zip(work[True], work[False]) if b - min(start[False]) > 0]
        ratio = g[True] / g[False] if g[False] > 0 else float("nan")
        res["stress"] = {"accesses": bench_stress.ACCESSES, "work": bench_stress.WORK,
                         "seed": bench_stress.SEED, "plain_s": g[False], "plugin_s": g[True],
                         "ratio": ratio, "ratio_median": statistics.median(per) if per else
                         float("nan"), "target": bench_stress.RATIO_TARGET,
                         "access_times": times,
                         "median_target_us": bench_stress.MEDIAN_TARGET_US}


def _round_ratios(plain: dict, g: dict, scale: float) -> list[float]:
    """Per-round ratios of a configuration's guest work to plain QEMU's in the same round."""
    ps, gs = plain["start_min_s"], g["start_min_s"]
    out = []
    pw = plain["work_all_s"]
    # (a configuration scaled down during the run has only its last rounds)
    for a, b in zip(g["work_all_s"], pw[len(pw) - len(g["work_all_s"]):]):
        if b - ps > 0:
            out.append((a - gs) * scale / (b - ps))
    return out


def report(res: dict) -> str:
    g = res["guest"]
    out = [f"p4pmu bench: model {res['model']}, guest loop {res['iterations']:,} iterations "
           f"({res['instructions']:,} instructions), best of {res['repeat']} (CPU time of "
           f"QEMU's {res.get('timing', 'process')}, start-up run subtracted); median: of the "
           "per-round ratios to the same round's plain run; a target is met when both ratios "
           "meet it"]
    if res.get("plugin_opts"):
        out.append("plugin options: " + ",".join(f"{k}={v}" for k, v in
                                                 res["plugin_opts"].items()))
    out.append("")
    out.append(f"{'configuration':<44} {'guest work':>11} {'ns/insn':>8} {'ratio':>7} "
               f"{'median':>7} {'target':>7}")
    names = {"plain": "(a) plain QEMU (no plugin)",
             "none": "(b) plugin loaded, nothing enabled",
             "all18": "(c) all 18 counters counting",
             "pmi": f"(d) PMI every {PMI_PERIOD:,} instructions"}
    for key, name in names.items():
        x = g[key]
        tgt = f"<= {x['target']}" if "target" in x else ""
        mark = "" if "met" not in x else (" ok" if x["met"] else " MISSED")
        if "timed_out_s" in x:
            above = ">" + format(x["ratio_above"], ".0f")
            out.append(f"{name:<44} {'stopped':>11} {'':>8} {above:>7} {'':>7} "
                       f"{tgt:>7}{mark} (run stopped after {x['timed_out_s']:.0f} s)")
            continue
        note = ""
        if x.get("iterations", res["iterations"]) != res["iterations"]:
            note = f" (measured on {x['iterations']:,} iterations, scaled)"
        out.append(f"{name:<44} {x['guest_s']:>10.3f}s {x['ns_per_insn']:>8.2f} "
                   f"{x['ratio']:>7.2f} {x['ratio_median']:>7.2f} {tgt:>7}{mark}{note}")
    if "interrupts" in g.get("pmi", {}):
        n = g["pmi"]["interrupts"]
        insns = g["pmi"].get("iterations", res["iterations"]) * INSNS_PER_ITER
        per = insns / n if n else float("inf")
        out.append(f"    (d) took {n:,} interrupts: one per {per:,.0f} loop instructions")
    c = g["all18"].get("counts", {})
    if c:
        zero = [k for k, v in c.items() if v == 0]
        out.append(f"    (c) counters that stayed 0: {zero or 'none'}")
    f = res.get("floor")
    if f:
        out.append(f"(f) plain QEMU, a self-NMI every ~{PMI_PERIOD:,} instructions with (d)'s "
                   f"handler: {f['ratio']:.2f} x the same loop without ({f['interrupts']:,} "
                   f"NMIs, {f['us_per_interrupt']:.2f} us each): QEMU's own part of (d)")
    out.append("")
    out.append(f"MSR microbenchmark (loop of K = {res['msr_k'][0]:,} vs {res['msr_k'][1]:,} "
               "accesses, median of per-access cost):")
    out.append(f"{'access':<36} {'plain QEMU':>11} {'plugin':>11} {'target':>9}")
    names = {"rdmsr": "RDMSR 300h (PMU counter)", "wrmsr": "WRMSR 300h (PMU counter)",
             "rdmsr_counting": "RDMSR 300h, 18 counters counting",
             "rdmsr_other": "RDMSR 174h (not a PMU MSR)"}
    for key, name in names.items():
        x = res["msr"][key]
        tgt = f"<= {x['target_ns'] / 1000:.0f} us" if "target_ns" in x else ""
        mark = "" if "met" not in x else (" ok" if x["met"] else " MISSED")
        out.append(f"{name:<36} {x['plain_ns_median']:>9.0f}ns {x['plugin_ns_median']:>9.0f}ns "
                   f"{tgt:>9}{mark}")
    out += _stress_report(res.get("stress"))
    return "\n".join(out)


def _stress_report(st: dict | None) -> list[str]:
    if not st:
        return []
    met = st["ratio"] <= st["target"] and st["ratio_median"] <= st["target"]
    out = ["", f"(g) random programming ({st['accesses']:,} accesses of every counter, CCCR "
               f"and ESCR, FORCE_OVF with the LVT masked, near-overflow presets; "
               f"{st['work']} loop iterations after each; seed {st['seed']}):",
           f"    guest work {st['plain_s']:.3f} s plain QEMU, {st['plugin_s']:.3f} s with the "
           f"plugin: ratio {st['ratio']:.2f} (median {st['ratio_median']:.2f}), target <= "
           f"{st['target']:.0f}{' ok' if met else ' MISSED'}"]
    t = st.get("access_times")
    if t:
        ok = t["median_us"] <= st["median_target_us"]
        out.append(f"    host time per PMU access ({t['accesses']:,} accesses): median < "
                   f"{t['median_us']} us (target <= {st['median_target_us']} us"
                   f"{', ok' if ok else ', MISSED'}), 90% < {t['p90_us']} us, largest < "
                   f"{t['largest_us']} us")
    else:
        out.append("    host time per PMU access: not reported by the plugin")
    return out


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="0F_04", help="CPU model (default 0F_04)")
    p.add_argument("--repeat", type=int, default=5,
                   help="runs per configuration (minimum / median taken; default 5)")
    p.add_argument("--iterations", type=int, default=100_000_000,
                   help="benchmark loop iterations, about 17.5 instructions each "
                        "(default 100,000,000)")
    p.add_argument("--msr-accesses", type=int, nargs=2, default=(10_000, 200_000),
                   metavar=("K1", "K2"), help="MSR loop lengths (default 10000 200000)")
    p.add_argument("--quick", action="store_true",
                   help="a fast, rougher run: --repeat 2 --iterations 20000000")
    p.add_argument("--max-ratio", type=float, default=20.0,
                   help="stop a configuration whose run takes longer than this many times "
                        "plain QEMU's (reported as stopped; default 20)")
    p.add_argument("--plugin-opt", action="append", default=[], metavar="K=V",
                   help="plugin option for every run with the plugin (repeatable), e.g. "
                        "mirror=off to measure without the C-side register mirror")
    from p4pmu.qemu_glue.run_options import add_timing_argument
    add_timing_argument(p)
    p.add_argument("--linux", action="store_true",
                   help="measure real programs in the Linux guest instead (qemu_glue/"
                        "bench_linux.py: plain QEMU, then L1-L5 with perf and the references "
                        "R4, R0, R2; each workload timed inside perf's command; --quick: "
                        "one round over 1 MB)")
    p.add_argument("--rounds", type=int, default=3,
                   help="--linux: rounds of all configurations (default 3)")
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    p.add_argument("--show-commands", action="store_true",
                   help="print one QEMU command line of each kind")


def main(a: argparse.Namespace) -> int:
    model_from_arg(a.model)  # before anything is provisioned
    if a.linux:
        from p4pmu.qemu_glue import bench_linux
        return bench_linux.main(a)
    if a.quick:
        a.repeat, a.iterations = 2, 20_000_000
    opts = parse_plugin_opts(a.plugin_opt)  # the plugin's option table: a UsageError
    apply_timing(a.timing, opts)
    b = Bench(a.model, a.repeat, a.iterations, tuple(a.msr_accesses),
              max_ratio=a.max_ratio, plugin_opts=opts)
    res = b.run()
    print(report(res))
    if a.show_commands:
        print("\nQEMU command lines (work runs; the guest script and the serial port are "
              "in-memory files, /dev/fd/N):")
        for k in ("plain-work", "none-work", "all18-work", "pmi-work"):
            if k in res["commands"]:
                print(f"  {k}: {res['commands'][k]}")
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=2))
    return 0
