"""`p4pmu demo --replay`: boot the bundled probe guest on an emulated Pentium 4 and show its
PMU traffic.

The guest (p4pmu.qemu_glue.guests, probe32, a bare-metal 32-bit multiboot kernel) replays the MSR
sequence that Linux's P4 perf driver issues at boot and for `perf stat -e instructions`
(docs/linux-guest.md), then three typical driver mistakes.  Every access goes through
the real plugin to the Python PMU model; the demo prints each one decoded from the register
tables, what the guest got back, and for each #GP the emulator's reason.
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from p4pmu.emulator import tables as T
from p4pmu.emulator.decode import describe, register_name
from p4pmu.emulator.models import DEFAULT_MODEL, CpuModel
from p4pmu.plugin import bookkeeping_errors
from p4pmu.qemu_glue.machine import P4Machine
from p4pmu.qemu_glue.plugin_lib import plugin_file
from p4pmu.qemu_glue.provision import ensure_qemu
from p4pmu.qemu_glue.run_options import model_from_arg, parse_plugin_opts

MASK40 = T.COUNTER_MASK


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=DEFAULT_MODEL,
                   help=f"NetBurst CPU model to emulate (default {DEFAULT_MODEL})")
    p.add_argument("--strict", action="store_true",
                   help="strict reserved-bit policy: every reserved bit faults")
    p.add_argument("--log", metavar="PATH",
                   help="keep the plugin's access log here (default: a temporary file)")


def linux_sequence(S):
    """The demo script: (Script, [(index, caption)]).  Values from docs/linux-guest.md."""
    s = S.Script(32)
    steps = []

    def step(idx, caption):
        steps.append((idx, caption))

    step(s.rdmsr(T.MSR_IA32_MISC_ENABLE), "p4_pmu_init: is performance monitoring available?")
    for n in range(T.NUM_COUNTERS):
        i = s.wrmsr(T.CCCR_BASE + n, 0)
        if n == 0:
            step(i, "p4_pmu_init: zero all 18 CCCRs (17 more writes not shown)")
    ctr5 = T.COUNTER_BASE + 17
    step(s.rdmsr(ctr5), "hardware check: read IQ_COUNTER5 ...")
    step(s.wrmsr(ctr5, 0 ^ 0xFFFF), "... write value ^ 0xffff ...")
    step(s.rdmsr(ctr5), "... and read the same value back")
    preload = (-(10 * 3_400_000_000)) & MASK40
    step(s.wrmsr(T.COUNTER_BASE + 0, preload), "NMI watchdog: counter 0 preset for 10 s of cycles")
    step(s.wrmsr(0x3A2, 0x2600020C), "NMI watchdog: cycles = global_power_events RUNNING")
    step(s.wrmsr(T.CCCR_BASE + 0, 0x0403D000), "NMI watchdog: enable counter 0, PMI as NMI")
    period = (-100000) & MASK40
    step(s.wrmsr(T.COUNTER_BASE + 13, period), "perf stat -e instructions: preset counter 13")
    step(s.wrmsr(0x3B8, 0x04000A0C), "perf: instructions = instr_retired (untagged)")
    step(s.wrmsr(T.CCCR_BASE + 13, 0x04039000), "perf: enable counter 13")
    step(s.rdpmc(13), "perf: read counter 13 with RDPMC (full 40 bits): instructions so far")
    step(s.rdpmc(13 | 1 << 31), "RDPMC fast read: low 32 bits, EDX = 0")
    step(s.rdmsr(T.CCCR_BASE + 13), "read back the CCCR")
    step(s.wrmsr(T.CCCR_BASE + 13, 0x1_0403_9000), "driver bug: a reserved bit (32) in a CCCR")
    step(s.rdmsr(0x3BA), "driver bug: IQ_ESCR0 does not exist on Prescott and later")
    step(s.rdpmc(18), "driver bug: RDPMC index 18")
    step(s.rdpmc(13, mode="ring3"), "user space: RDPMC at CPL 3 without CR4.PCE")
    step(s.rdpmc(0), "NMI watchdog counter: clocks the guest ran since it was enabled")
    step(s.wrmsr(T.CCCR_BASE + 13, 0x04039000 & ~0x1000), "perf: disable counter 13")
    step(s.rdpmc(13), "counter 13 stopped: reads the same until enabled again")
    step(s.rdpmc(13), "... and again")
    return s, steps


def _what(op, model) -> str:
    if op.op == "RDMSR":
        name = register_name(op.ecx, model) or "absent"
        return f"RDMSR {op.ecx:#05x} ({name})"
    if op.op == "WRMSR":
        return f"WRMSR {describe(op.ecx, op.value, model)}"
    idx = op.ecx & 0x7FFFFFFF
    fast = " fast" if op.ecx >> 31 else ""
    where = " at CPL 3" if op.mode == "ring3" else ""
    return f"RDPMC{fast} counter {idx}{where}"


@dataclass
class _Run:
    """What the probe guest printed, QEMU's stderr and exit status, the plugin's log."""
    serial: str
    stderr: str
    status: int
    log: str


def _boot(model: CpuModel, kernel: Path, script_bytes: bytes, strict: bool,
          log_path: str | None) -> _Run:
    """Boot the probe guest with the demo script; the plugin's log in memory unless
    ``log_path`` (--log, checked and absolute) names a file."""
    qemu = ensure_qemu(progress=True)
    with P4Machine(qemu, model, plugin=plugin_file(build=True), stdout=subprocess.PIPE,
                   stderr=subprocess.PIPE) as m:
        log = log_path or m.add_memfd("log")
        m.plugin_opts = {"log": log, **({"strict": "on"} if strict else {})}
        m.qemu_args = ["-machine", "pc", "-m", "64", "-nodefaults", "-display", "none",
                       "-no-reboot", "-serial", "stdio",
                       "-device", "isa-debug-exit,iobase=0xf4,iosize=0x04",
                       "-kernel", str(kernel), "-initrd", m.add_memfd("script", script_bytes)]
        m.launch()
        out, err = m.process.communicate(timeout=120)
        if log_path:
            text = Path(log).read_text() if Path(log).exists() else ""
        else:
            text = m.memfd_bytes(log).decode(errors="replace")
        return _Run(out.decode(errors="replace"), err.decode(errors="replace"),
                    m.process.returncode, text)


def main(args: argparse.Namespace) -> int:
    model = model_from_arg(args.model)
    log_path = parse_plugin_opts([f"log={args.log}"])["log"] if args.log else None
    from p4pmu.qemu_glue.guests import build
    from p4pmu.qemu_glue.guests import script as S
    guests = build.build_all(progress=False)
    kernel = guests.get("probe32") or build.guest_path("probe32")
    script, steps = linux_sequence(S)
    print(f"p4pmu demo: booting {kernel.name} on an emulated {model.codename} "
          f"({model.key}, CPUID {model.signature:#x}, \"{model.brand}\")", flush=True)
    r = _boot(model, kernel, script.to_bytes(), args.strict, log_path)
    for line in bookkeeping_errors(r.stderr):
        print(line, file=sys.stderr, flush=True)
    out = S.parse_serial(r.serial)
    log_text = r.log
    if not out.done:
        sys.stderr.write(r.serial[-2000:] + r.stderr[-2000:])
        print(f"p4pmu demo: the guest did not finish (QEMU exit status {r.status})",
              file=sys.stderr)
        return 1
    reasons = [m.group(1) for m in re.finditer(r"#GP\(0\): (.*)", log_text)]
    print("\nWhat the guest programmed and what it got back (decoded from the register tables):\n")
    written = {}  # counter -> the value the guest last wrote
    for idx, op in enumerate(script.ops):
        if op.op == "WRMSR" and T.COUNTER_BASE <= op.ecx < T.COUNTER_BASE + T.NUM_COUNTERS:
            written[op.ecx - T.COUNTER_BASE] = (idx, op.value & MASK40)
    for n, (idx, caption) in enumerate(steps, 1):
        op, ans = script.ops[idx], out.answers.get(idx)
        print(f"{n:2d}. {caption}")
        print(f"    {_what(op, model)}")
        if ans is None:
            print("    -> no answer")
        elif ans.res == "fault":
            vec = {13: "#GP", 6: "#UD"}.get(ans.vector, f"vector {ans.vector}")
            why = ""
            if op.mode != "ring3" and reasons:
                why = f"\n       emulator: {reasons.pop(0)}"
            elif op.mode == "ring3":
                why = "\n       (CPL 3 without CR4.PCE: QEMU raises it, the PMU is not asked)"
            print(f"    -> {vec}({ans.error}){why}")
        elif op.op == "WRMSR":
            print("    -> ok")
        else:
            val = ans.val if isinstance(ans.val, int) else 0
            shown = describe(op.ecx, val, model) if op.op == "RDMSR" else f"{val:#x}"
            ctr = op.ecx & 0x7FFFFFFF
            if op.op == "RDPMC" and not op.ecx >> 31 and ctr in written and written[ctr][0] < idx:
                shown += f" = written value + {(val - written[ctr][1]) & MASK40} counted"
            print(f"    -> {shown}")
    counts = re.search(r"# end: (.*)", log_text)
    print(f"\nPMU accesses served by the emulator: {counts.group(1) if counts else '?'}")
    print("Counts come from what the guest really executed (its script interpreter between the "
          "accesses), through the plugin's instruction classification and clock model "
          "(docs/guest-events.md); the same run gives the same counts every time.")
    return 0


if __name__ == "__main__":
    p = argparse.ArgumentParser(prog="p4pmu demo")
    add_arguments(p)
    sys.exit(main(p.parse_args()))
