"""`p4pmu demo`: Linux's own perf on an emulated Pentium 4.

Boots the Linux guest (`p4pmu linux`: Debian 11's 5.10 kernel by default, busybox, perf) on
the emulated PMU with the bundled workloads (qemu_glue/workloads/) and shows, in one run of
the guest:

1. the kernel's PMU detection ("Netburst P4/Xeon PMU driver", the NMI watchdog);
2. `perf stat` of `branchy` (cycles, instructions, branches, branch-misses at user level)
   next to what the model says the program retires -- exactly, from its machine code
   (`p4pmu.qemu_glue.perf_p4`), from the first run after boot on (with ``--kernel 6.1``:
   what that first run reads because of Linux 6.1's p4_pmu_set_period, as on a real
   Pentium 4);
3. `perf record` / `perf report` of `hotspots`, whose two functions take 3/4 and 1/4 of the
   clocks by the clock model.

`p4pmu demo --replay` is the bare-metal demo: Linux's P4 driver MSR traffic replayed by a
bare-metal probe guest, each access decoded (qemu_glue/demo_replay.py).
"""
from __future__ import annotations

import argparse
import re
import shlex
import sys
import textwrap
import threading
import time
from pathlib import Path

from p4pmu.emulator import clockmodel as CM
from p4pmu.emulator.models import DEFAULT_MODEL
from p4pmu.qemu_glue import linux
from p4pmu.qemu_glue.linux_io import HostOutput
from p4pmu.qemu_glue.run_options import model_from_arg

N_BRANCHY = 200_000
N_HOT = 100_000
PERIOD = 100_000
STAT_EVENTS = ["cycles:u", "instructions:u", "branches:u"]
# each page fault taken from the program adds an instruction on a real Pentium 4
# (docs/fidelity.md, "Counting rules"): the demo counts them too, for the model's column
FAULTS = "page-faults:u"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--arch", choices=("amd64", "i386"), default="amd64",
                   help="the guest kernel: amd64 (default) or i386 (the 686 kernel)")
    from p4pmu.qemu_glue.linux_image.pins import DEFAULT_KERNEL, KERNELS
    p.add_argument("--kernel", choices=KERNELS, default=DEFAULT_KERNEL,
                   help=f"the guest kernel (p4pmu linux --kernel; default {DEFAULT_KERNEL}): "
                        "5.10 counts right from the first command; 6.1 shows its "
                        "p4_pmu_set_period quirk")
    p.add_argument("--model", default=None,
                   help=f"NetBurst CPU model to emulate (default {DEFAULT_MODEL}; amd64 needs "
                        "one with EM64T)")
    p.add_argument("--replay", action="store_true",
                   help="the bare-metal demo instead: Linux's P4 driver MSR sequence replayed by a "
                        "bare-metal probe guest, every access decoded (no Linux)")
    p.add_argument("--strict", action="store_true",
                   help="--replay only: every reserved bit faults")
    p.add_argument("--log", metavar="PATH",
                   help="keep the plugin's PMU access log here")
    from p4pmu.qemu_glue.run_options import add_timing_argument
    add_timing_argument(p)


def _sections() -> list[tuple[str, str]]:
    stat = f"perf stat -x, -e {','.join(STAT_EVENTS + [FAULTS])} branchy {N_BRANCHY}"
    return [
        ("boot", "dmesg | grep -e 'Performance Events' -e 'NMI watchdog'"),
        ("setup", "echo 0 > /proc/sys/kernel/watchdog"),
        ("stat_first", stat),
        ("stat", stat),
        ("misses", f"perf stat -x, -e branch-misses:u,branches:u branchy {N_BRANCHY}"),
        ("record", f"perf record -q -o /tmp/hot.data -e cycles -c {PERIOD} -- "
                   f"sh -c 'sleep 0.01; exec hotspots {N_HOT}'"),
        ("report", "perf report -i /tmp/hot.data --stdio -n --sort comm,dso,sym"),
    ]


def guest_script() -> str:
    from p4pmu.qemu_glue import workloads as W
    out = [W.guest_prelude()]
    for name, cmd in _sections():
        out.append(f"echo '@@begin {name}'; {{ {cmd} ; }} 2>&1; echo \"@@end {name} $?\"")
    return "\n".join(out)


def _n(v: int | None) -> str:
    return "<not counted>" if v is None else f"{v:,}"


class _Out:
    def __init__(self):
        self.t0 = time.monotonic()

    def say(self, text: str = "") -> None:
        print(text, flush=True)

    def elapsed(self) -> str:
        return f"{time.monotonic() - self.t0:.0f} s"


def _render_boot(out: _Out, text: str, ctx: dict) -> None:
    """1. The kernel's own PMU detection messages."""
    out.say("\n1. The kernel finds the PMU (its own messages):\n")
    for ln in text.splitlines():
        out.say("   " + ln)
    out.say("\n   Linux's own, unmodified P4 perf driver took the emulated PMU; the NMI "
            "watchdog holds a\n   counter. (Without the emulator: \"unsupported Netburst "
            "CPU model ... software events only\".)")


def _render_stat(out: _Out, text: str, ctx: dict) -> None:
    """2. perf stat's counts next to the model's, and what the first run read."""
    from p4pmu.qemu_glue import perf_p4 as P
    got, first = P.parse_stat_csv(text), ctx["first"]
    exp = ctx["branchy"][1].with_returns(got[FAULTS].value or 0)
    ctx["stat"] = got
    model = {"cycles:u": exp.clocks, "instructions:u": exp.linux_instructions,
             "branches:u": exp.linux_branches}
    out.say(f"\n2. perf stat, counting ({out.elapsed()}). Workload: branchy {N_BRANCHY:,}, "
            "a loop of 7 instructions\n   with two conditional branches, one taken every "
            "4th time (qemu_glue/workloads/branchy.S).\n   'model' = what the plugin's "
            "model retires for the program's machine code, exec to exit, plus one\n   "
            "instruction and one clock per page fault it took, as a real Pentium 4 counts "
            "(docs/fidelity.md).\n")
    out.say(f"   $ perf stat -e {','.join(STAT_EVENTS + [FAULTS])} branchy {N_BRANCHY}")
    memory = ctx["timing"] == "memory"
    for ev in STAT_EVENTS:
        v, m = got[ev].value, model[ev]
        mark = "exact" if v == m else f"differs by {(v or 0) - m:+,}"
        if memory and ev == "cycles:u":
            mark += " (the model column is core timing: no cache misses)"
        out.say(f"   {_n(v):>18}  {ev:<16} model {m:>12,}  {mark}")
    out.say(f"   {_n(got[FAULTS].value):>18}  {FAULTS:<16} (the program's page faults)")
    out.say(f"   {'':>18}  timing: {ctx['timing']} -- " + (
        "loads also cost their L2 and memory latencies and page walks (docs/timing.md)"
        if memory else "every load an L1 hit; `--timing memory` adds cache misses' "
        "latencies (docs/timing.md)"))
    ipc = got["instructions:u"].value / got["cycles:u"].value if got["cycles:u"].value \
        else 0
    out.say(f"   {'':>18}  ({ipc:.2f} instructions per cycle; cycles:u is "
            "global_power_events at user level)")
    # the model's counts of that first (cold-predictor) run
    e0 = ctx["branchy"][0].with_returns(first[FAULTS].value or 0)
    cold = {"cycles:u": e0.clocks, "instructions:u": e0.linux_instructions,
            "branches:u": e0.linux_branches}
    ex = {ev: (first[ev].value or 0) - cold[ev] for ev in STAT_EVENTS}
    same = ex["instructions:u"] == ex["branches:u"]
    exact_first = all(v == 0 for v in ex.values())
    para = ("The same command, the first perf command after boot, read "
            + ", ".join(f"{_n(first[ev].value)} {ev}" for ev in STAT_EVENTS)
            + (": the model's counts of that run (a cold branch predictor), exactly. "
               if exact_first else ": NOT the model's counts. ")
            + "Linux 5.10's P4 driver writes the period it means into the counter (twice, "
            "the work-around for erratum N15); the demo switches the lockup detector off "
            "only so that cycles:u is global_power_events at user level (with the NMI "
            "watchdog on, Linux counts cycles through an alias at every privilege level)."
            ) if not ctx.get("quirk") else ("The same command run first after boot read "
            + ", ".join(f"{_n(first[ev].value)} {ev}" for ev in STAT_EVENTS)
            + f": too high by {ex['instructions:u']:,}"
            + (" (instructions, branches)" if same else
               f" (instructions), {ex['branches:u']:,} (branches)")
            + f" and {ex['cycles:u']:,} (cycles). Linux 6.1's p4_pmu_set_period writes a "
            "counter's previous period where the new one belongs: a counter's first count "
            f"after boot reads 2^39-1 = {P.MAX_PERIOD:,} too high (cycles' counter held "
            f"the NMI watchdog's period, {P.MAX_PERIOD - ex['cycles:u']:,} clocks: 2^39-1 "
            "minus that). A real Pentium 4 reads the same; the emulator stores what the "
            "kernel writes. Later counts are exact if the task is never switched out, so "
            "the demo runs it with `rt` (SCHED_FIFO) and the lockup detector off (its "
            "stopper preempts every task every 4 s); see docs/linux-guest.md.")
    out.say("")
    out.say(textwrap.fill(para, width=98, initial_indent="   ", subsequent_indent="   "))


def _render_misses(out: _Out, text: str, ctx: dict) -> None:
    """2. (cont.) branch-misses next to the model's mispredictions."""
    from p4pmu.qemu_glue import perf_p4 as P
    got, exp = P.parse_stat_csv(text), ctx["branchy"][2]
    out.say(f"\n   $ perf stat -e branch-misses:u,branches:u branchy {N_BRANCHY}")
    for ev, m in (("branch-misses:u", exp.mispredicted), ("branches:u", exp.linux_branches)):
        v = got[ev].value
        mark = "exact" if v == m else f"differs by {(v or 0) - m:+,}"
        out.say(f"   {_n(v):>18}  {ev:<16} model {m:>12,}  {mark}")
    b, m = got["branches:u"].value, got["branch-misses:u"].value
    if b and m is not None:
        out.say(f"   {'':>18}  ({100 * m / b:.2f}% of branches mispredicted; "
                "NetBurst counts instructions and\n"
                f"   {'':>18}   branch-misses on the same ESCR: a separate run, no "
                "multiplexing)")


def _render_report(out: _Out, text: str, ctx: dict) -> None:
    """3. perf report's profile of the two hot functions."""
    from p4pmu.qemu_glue import perf_p4 as P
    rep = P.parse_report(text)
    hot = ctx["hot"]
    ca, cb = hot["hot_a"].clocks, hot["hot_b"].clocks
    out.say(f"\n3. perf record / perf report, sampling ({out.elapsed()}). Workload: "
            f"hotspots {N_HOT:,}: hot_a runs the\n   same DIV loop 3x as often as hot_b "
            f"(qemu_glue/workloads/hotspots.S): by the clock model\n   hot_a "
            f"{ca:,} and hot_b {cb:,} clocks, 75% / 25%.\n")
    out.say(f"   $ perf record -e cycles -c {PERIOD} -- sh -c 'sleep 0.01; "
            f"exec hotspots {N_HOT}'")
    out.say("   $ perf report --stdio --sort comm,dso,sym")
    m = re.search(r"^# Samples: .*$", text, re.M)
    if m:
        out.say("   " + m.group(0))
    for r in rep.rows[:6]:
        out.say(f"   {r[0]:7.2f}%  {r[1]:5d}  {r[2]:<9} {r[3]:<18} [{r[4]}] {r[5]}")
    if len(rep.rows) > 6:
        out.say(f"   ... ({len(rep.rows) - 6} more rows, 1-2 samples each)")
    sa, sb = rep.symbol_samples("hot_a", "hotspots"), rep.symbol_samples("hot_b", "hotspots")
    if sa + sb:
        para = (f"hot_a {100 * sa / (sa + sb):.1f}% and hot_b {100 * sb / (sa + sb):.1f}% "
                f"of their samples (model 75.0% / 25.0%); {sa + sb} samples for their "
                f"{ca + cb:,} clocks (model: {(ca + cb) / PERIOD:.0f}, one per {PERIOD:,}). "
                "`cycles` counts every privilege level, so interrupt handlers (and each "
                "sample's own NMI handler) get their share; and a sample whose PMI meets a "
                "timer interrupt lands at the interrupt's entry (docs/linux-guest.md).")
        out.say("")
        out.say(textwrap.fill(para, width=98, initial_indent="   ",
                              subsequent_indent="   "))
    if not ctx.get("quirk"):
        return
    para = ("Why the `sleep 0.01`: by the same 6.1 quirk a sampling event first runs for "
            "its counter's previous period, which perf record's own probe event left at "
            "2^39-1 clocks: a task never switched out would get no sample at all. One "
            "switch (the sleep) reloads the counter.")
    out.say("")
    out.say(textwrap.fill(para, width=98, initial_indent="   ", subsequent_indent="   "))


def _render(out: _Out, name: str, text: str, status: int, ctx: dict) -> None:
    """Show one section of the guest script's output (split by _Sections)."""
    from p4pmu.qemu_glue import perf_p4 as P
    if status != 0:
        out.say(f"  !! `{name}` failed in the guest (exit {status}):")
        for ln in text.splitlines()[-15:]:
            out.say("     " + ln)
        ctx["failed"] = True
        return
    if name == "stat_first":  # shown with "stat"
        ctx["first"] = P.parse_stat_csv(text)
    elif name in _RENDERERS:
        _RENDERERS[name](out, text, ctx)


_RENDERERS = {"boot": _render_boot, "stat": _render_stat, "misses": _render_misses,
              "report": _render_report}  # "setup", "record": nothing to show


def _expectations(arch: str, core: str) -> dict:
    from p4pmu.qemu_glue import perf_p4 as P
    from p4pmu.qemu_glue import workloads as W
    d = W.ensure_built(arch)
    pr = CM.Predictor()
    runs = [P.program_counts(d / "branchy", N_BRANCHY, pr, core) for _ in range(3)]
    hot = {fn: P.simulate(P.loop_insns(d / "hotspots", fn, core=core), P.count_outcomes(n),
                          CM.Predictor(), CM.core_params(core))
           for fn, n in (("hot_a", 3 * N_HOT), ("hot_b", N_HOT))}
    return {"branchy": runs, "hot": hot}


class _Sections:
    """Splits the guest script's output into its `@@begin NAME` ... `@@end NAME STATUS`
    sections and renders each as it completes (after the model's expectations are ready).
    It is fed from the thread that copies the guest's stdout: an error while rendering is
    kept (the copy goes on) and raised by `finish`."""

    def __init__(self, out: _Out, ctx: dict, expectations: threading.Thread):
        self.out, self.ctx, self.expectations = out, ctx, expectations
        self.cur: str | None = None
        self.buf: list[str] = []
        self.partial = b""
        self.error: BaseException | None = None

    def feed(self, chunk: bytes) -> None:
        lines = (self.partial + chunk).split(b"\n")
        self.partial = lines.pop()
        for line in lines:
            self._guarded(line)

    def finish(self) -> None:
        """After the run: the last partial line; a rendering error is raised here."""
        if self.partial:
            self._guarded(self.partial)
            self.partial = b""
        if self.error is not None:
            raise self.error

    def _guarded(self, line: bytes) -> None:
        if self.error is None:
            try:
                self._line(line.decode(errors="replace"))
            except BrokenPipeError:  # `p4pmu demo | head`: HostOutput stops the run
                raise
            except Exception as e:
                self.error = e

    def _line(self, line: str) -> None:
        m = re.match(r"^@@begin (\S+)$", line)
        if m:
            self.cur, self.buf = m.group(1), []
            return
        m = re.match(r"^@@end (\S+) (\d+)$", line)
        if m and m.group(1) == self.cur:
            self.expectations.join()
            _render(self.out, self.cur, "\n".join(self.buf), int(m.group(2)), self.ctx)
            self.cur = None
            return
        self.buf.append(line)


def _linux_namespace(argv: list[str]) -> argparse.Namespace:
    """`p4pmu linux`'s options for the demo's run, parsed by its own parser."""
    ap = argparse.ArgumentParser(prog="p4pmu linux")
    linux.add_arguments(ap)
    return ap.parse_args(argv)


def main(args: argparse.Namespace) -> int:
    if args.replay:
        from p4pmu.qemu_glue import demo_replay
        return demo_replay.main(args)
    from p4pmu.qemu_glue import workloads as W
    from p4pmu.qemu_glue.linux_image.cache import ensure_image
    from p4pmu.qemu_glue.plugin_lib import plugin_file
    from p4pmu.qemu_glue.provision import ensure_qemu
    out = _Out()
    ctx: dict = {}
    model = model_from_arg(args.model)
    if args.arch == "amd64" and not model.long_mode:
        print(f"p4pmu demo: --model {model.key} has no EM64T: use --arch i386", file=sys.stderr)
        return 2
    from p4pmu.qemu_glue.linux_image.pins import pin_for
    pin = pin_for(args.arch, args.kernel)
    ctx["quirk"] = pin.set_period_quirk
    out.say(f"p4pmu demo: Linux {pin.version} (Debian {pin.debian}, {args.arch}) with perf, on an "
            f"emulated {model.codename} ({model.key}, \"{model.brand}\")")
    out.say("            preparing QEMU, the plugin, the guest image and the workloads "
            "(progress on stderr; the first\n            run downloads QEMU and about 80 MB "
            "of Debian packages)")
    qemu = ensure_qemu(progress=True)
    plugin_file(build=True)
    ensure_image(args.arch, progress=True, kernel=args.kernel)
    W.ensure_built(args.arch, progress=True)
    add = W.add_argument(args.arch)
    # the model's expectations (pure Python, a few seconds) while the guest boots
    ctx["timing"] = args.timing or "core"
    exp_thread = threading.Thread(target=lambda: ctx.update(_expectations(args.arch, model.core)),
                                  daemon=True)
    exp_thread.start()
    out.say(f"            QEMU {qemu.version} TCG; the p4pmu plugin serves the guest's PMU "
            f"and counts what it executes\n            booting the guest ({out.elapsed()}) ...")
    # --clock host: the guest's timer interrupts come only between translated blocks, so
    # the clock model's schedule of each block is the one perf_p4 replays, to the clock
    # (docs/linux-guest.md, "The guest's clock"); the demo samples with -c, not a frequency
    linux_args = ["--arch", args.arch, "--kernel", args.kernel, "--clock", "host",
                  "--model", model.key, "--add", add, "--timeout", "300"]
    if args.log:
        linux_args += ["--plugin-opt", f"log={Path(args.log).absolute()}"]
    if args.timing:
        linux_args += ["--timing", args.timing]
    sections = _Sections(out, ctx, exp_thread)
    err = bytearray()
    output = HostOutput(stdout=sections.feed, stderr=err.extend)
    rc = linux.main(_linux_namespace(linux_args), [guest_script()], output)
    if output.stdout_closed.is_set():  # `p4pmu demo | head`: stopped, as a pipeline would
        return 0
    sections.finish()
    err = err.decode(errors="replace")
    if rc != 0 or ctx.get("failed"):
        sys.stderr.write(err[-3000:])
        print(f"p4pmu demo: the guest failed (p4pmu linux exit status {rc})", file=sys.stderr)
        return 1
    out.say(f"\nDone in {out.elapsed()}. Try it yourself:\n  .venv/bin/p4pmu linux --add "
            f"{shlex.quote(add)} -- \\\n    'export PATH=/opt/workloads:$PATH; "
            "perf stat -e instructions:u,branches:u count 1000'\n"
            "docs/linux-guest.md: what perf does on this PMU; docs/events.md: NetBurst events "
            "by name.")
    return 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser(prog="p4pmu demo")
    add_arguments(ap)
    sys.exit(main(ap.parse_args()))
