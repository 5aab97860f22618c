"""`p4pmu bench`'s (g): a guest that programs the PMU the way no driver should.

A seeded, reproducible script for the bare-metal events guest (qemu_glue/guests): the LVT
performance entry masked, then ACCESSES random PMU accesses over every counter, CCCR and ESCR
of the model -- CCCRs with random documented bits (ENABLE, FORCE_OVF, OVF_PMI, COMPARE,
THRESHOLD, EDGE, CASCADE, any ESCR select), ESCRs with random events, masks and T-bits,
counters preset just below 2^40, reads of any of them -- each followed by WORK iterations
of the benchmark loop (about 17.5 instructions each).  Values never set a reserved bit (they
would #GP under the plugin and not under plain QEMU, which ignores these MSRs), so the same
script runs under plain QEMU and under the plugin.

Reported: the guest work (work run minus start-up run, CPU time of the vCPU thread) under
the plugin over plain QEMU's, and the host time of each PMU access under the plugin (the
plugin's access-time histogram, P4PMU_ACCESS_TIMES=1: median, 90th percentile, largest).
"""
from __future__ import annotations

import random
import re

from p4pmu.emulator import tables as T
from p4pmu.emulator.models import get_model
from p4pmu.emulator.pmu import PMU

ACCESSES = 2000
WORK = 400  # loop iterations after each access: about 7,000 instructions
SEED = 2026
RATIO_TARGET = 3.0
MEDIAN_TARGET_US = 50
_TIMES = re.compile(r"access times: (\d+) PMU accesses, median < (\d+) us, 90% < (\d+) us, "
                    r"largest < (\d+) us")


def script(model_key: str, accesses: int = ACCESSES, work: int = WORK,
           seed: int = SEED) -> str:
    """The guest script (format: qemu_glue/guests/common/events.c)."""
    rng = random.Random(seed)
    pmu = PMU(get_model(model_key))
    regs = sorted(pmu.registers.values(), key=lambda r: r.msr)
    by_kind = {k: [r for r in regs if r.kind == k] for k in ("counter", "cccr", "escr")}
    F = T.CCCR_FIELD
    lines = [f"lvt 0x{1 << 16:x}"]  # masked, vector 0
    for _ in range(accesses):
        op = rng.random()
        if op < 0.35:
            r = rng.choice(by_kind["cccr"])
            v = rng.getrandbits(32)
            for name, p in (("ENABLE", 0.7), ("FORCE_OVF", 0.3), ("OVF_PMI_T0", 0.5),
                            ("CASCADE", 0.1), ("OVF", 0.1)):
                v = (v | F[name].mask) if rng.random() < p else (v & ~F[name].mask)
            lines.append(f"w 0x{r.msr:x} 0x{v & ~r.fault_mask:x}")
        elif op < 0.6:
            r = rng.choice(by_kind["escr"])
            lines.append(f"w 0x{r.msr:x} 0x{rng.getrandbits(32) & ~r.fault_mask:x}")
        elif op < 0.8:
            r = rng.choice(by_kind["counter"])
            v = (1 << T.COUNTER_BITS) - rng.randint(1, 5000) if rng.random() < 0.7 else \
                rng.getrandbits(T.COUNTER_BITS)
            lines.append(f"w 0x{r.msr:x} 0x{v & ~r.fault_mask:x}")
        else:
            r = rng.choice(regs if rng.random() < 0.5 else by_kind["counter"])
            lines.append(f"r 0x{r.msr:x} x")
        lines.append(f"loop bench {work}")
    return "\n".join(lines) + "\n"


def access_times(stderr: str) -> dict | None:
    """The plugin's access-time line (P4PMU_ACCESS_TIMES=1) as numbers, or None."""
    m = _TIMES.search(stderr)
    if not m:
        return None
    n, med, p90, top = map(int, m.groups())
    return {"accesses": n, "median_us": med, "p90_us": p90, "largest_us": top}
