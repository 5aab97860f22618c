"""The outcome-free level (plugin/flush.c; docs/guest-events.md "The outcome-free level")
must never change results, only what the plugin instruments.

While no enabled counter reads anything that depends on a branch's outcome or on the clocks a
misprediction adds, blocks are translated without the outcome callbacks.  Each guest script
here runs with `lite=on` (the default) and `lite=off` (always the full level): everything the
guest printed (counter values, PMI records: vector, LVT, OVF flags, interrupted IP, counter
value) must be identical.  The plugin's debug summary (P4PMU_DEBUG=1) says how often the
level was installed and removed, and how many block executions the MMIO re-execution
callback cut (cb_memi: at that level no X check finds a block QEMU left at an MMIO access).
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess

import pytest
from conftest import P4PMU, QEMU_MACHINE_ARGS
from test_events_exact import _bench_script, _sampling
from test_events_silent import TIMER_TICKS

from p4pmu.qemu_glue import bench
from p4pmu.qemu_glue.guests import build as guest_build

from guests.evscript import (
    EvScript,
    cccr_msr,
    cccr_value,
    counter_msr,
    escr_msr,
    escr_value,
    parse_events,
    preset,
)

pytestmark = pytest.mark.guest

_LITE = re.compile(r"p4pmu-debug: vCPU 0: outcome-free level (on|off), installed (\d+) "
                   r"time\(s\), removed (\d+); (\d+) executions cut at MMIO re-executions$")

# Outcome-free events on counters of `p4pmu bench`'s configuration (c) (the others there
# count clocks, directions or mispredictions)
LITE_EVENTS = tuple(c for c in bench.ALL18 if c[2] in ("retired_branch_type", "scalar_SP_uop",
                                                       "instr_retired", "uops_retired"))
LOOPS = ("alu", "alt", "pat3", "phases", "members", "callret", "indirect", "x87", "sse", "mmx",
         "mem", "bench")


def _run(run_guest, script, lite, bits=32, mirror="on"):
    r = run_guest(f"events{bits}", model="0F_04", script=script,
                  plugin_opts=(f"lite={lite}", f"mirror={mirror}"),
                  env={"P4PMU_DEBUG": "1"}, timeout=180)
    r.require_completed()
    m = [x for x in map(_LITE.match, r.stderr.splitlines()) if x]
    assert len(m) == 1, r.stderr[-2000:]
    on, inst, rem, memi = m[0].groups()
    return r.out.lines, {"on": on == "on", "installs": int(inst), "removals": int(rem),
                         "memi": int(memi)}


def _same(on, off):
    assert on == off, "guest output differs:\n" + "\n".join(
        f"  lite=on  {a!r}\n  lite=off {b!r}" for a, b in zip(on, off) if a != b)


def _program_lite_events(s: EvScript, usr_only: bool = False) -> list[int]:
    for _ctr, escr, ev, bits in LITE_EVENTS:
        s.wrmsr(escr_msr(escr), escr_value(ev, *bits, t0_os=not usr_only, t0_usr=True))
    for ctr, escr, _ev, _bits in LITE_EVENTS:
        s.wrmsr(counter_msr(ctr), 0)
        s.wrmsr(cccr_msr(ctr), cccr_value(ctr, escr))
    return [c[0] for c in LITE_EVENTS]


@pytest.mark.parametrize("bits", (32, 64))
def test_outcome_free_counts_equal_the_full_level(run_guest, bits):
    """Instructions, uops, branch types and scalar SSE uops over every loop of the events
    guest (data-dependent branches, calls and returns, indirect jumps, x87/SSE/MMX, memory),
    read after every loop: in ring 0 and ring 3 without interrupts, then in ring 3 with timer
    interrupts landing anywhere (USR counts only: how many timer interrupts a run takes
    depends on the host's speed, the ring-3 work they interrupt does not)."""
    s = EvScript()
    ctrs = _program_lite_events(s)
    for name in LOOPS:
        for user in (False, True):
            s.loop(name, 3000, user=user)
            s.read_counters(ctrs, f"{name}{'u' if user else 'k'}_")
    _program_lite_events(s, usr_only=True)
    s.timer(TIMER_TICKS)
    for name in LOOPS:
        s.loop(name, 3000, user=True, intr=True)
        s.read_counters(ctrs, f"{name}i_")
    s.timer(0)
    on, st_on = _run(run_guest, s, "on", bits)
    off, st_off = _run(run_guest, s, "off", bits)
    timer = re.compile(r"V timer_count ")
    _same([x for x in on if not timer.match(x)], [x for x in off if not timer.match(x)])
    vals = parse_events(on).values
    assert vals["benchu_c12"] > vals["benchk_c12"] > 0, vals  # (they count)
    # interrupts landed in the loops; how many follows the host's speed (the APIC timer runs
    # on the host's clock: 7-60 seen), so the test asks for one and checks whatever came
    assert vals["benchi_c12"] > 0 and vals["timer_count"] >= 1, vals
    assert st_on["on"] and st_on["installs"] == 1 and st_on["removals"] == 0, st_on
    assert not st_off["on"] and st_off["installs"] == 0, st_off


@pytest.mark.parametrize("bits,mirror", ((32, "on"), (32, "off"), (64, "on")))
def test_interrupts_and_level_changes(run_guest, bits, mirror):
    """`p4pmu bench`'s configuration (d) (an NMI every 10,000 instructions; the handler's
    local-APIC writes are MMIO accesses QEMU re-executes alone), then sampling on branches
    (directions: the full level comes back at the enabling WRMSR), then on USR instructions
    again (the outcome-free level again): the same interrupts at the same places."""
    s = _bench_script()
    _sampling(s, 13, "MSR_CRU_ESCR2",
              escr_value("branch_retired", "MMNP", "MMNM", "MMTP", "MMTM", t0_usr=True),
              500, "alt", 3000, "b_ctr")
    _sampling(s, 12, "MSR_CRU_ESCR0", escr_value("instr_retired", "NBOGUSNTAG", t0_usr=True),
              3000, "pat3", 6000, "s_ctr")
    on, st_on = _run(run_guest, s, "on", bits, mirror)
    off, st_off = _run(run_guest, s, "off", bits, mirror)
    _same(on, off)
    pmis = [c[0] for c in parse_events(on).pmi_counts]
    assert len(pmis) == 3 and pmis[0] >= 50 and min(pmis[1:]) >= 8, pmis
    # installed at the start, removed for the branch sampling, installed again after it
    assert st_on["installs"] == 2 and st_on["removals"] == 1, st_on
    # the handler's LVT write, once per interrupt at least, found by cb_memi
    assert st_on["memi"] >= pmis[0], (st_on, pmis)
    assert st_off["installs"] == 0 and st_off["memi"] == 0, st_off


def _one(counter, escr, event, bits, **cccr):
    s = EvScript()
    s.program(counter, escr, escr_value(event, *bits, t0_os=True, t0_usr=True),
              cccr_value(counter, escr, **cccr))
    s.loop("alt", 2000)
    s.rdmsr(counter_msr(counter), "v")
    return s


C0, C2 = "MSR_CRU_ESCR0", "MSR_CRU_ESCR2"
LEVELS = (
    # (what, script, outcome-free)
    ("instructions", _one(12, C0, "instr_retired", ("NBOGUSNTAG", "NBOGUSTAG")), True),
    ("uops", _one(14, "MSR_CRU_ESCR1", "uops_retired", ("NBOGUS",)), True),
    ("branch types", _one(4, "MSR_TBPU_ESCR0", "retired_branch_type",
                          ("CONDITIONAL", "CALL", "RETURN", "INDIRECT")), True),
    ("scalar SSE uops", _one(8, "MSR_FIRM_ESCR0", "scalar_SP_uop", ("ALL",)), True),
    ("branch directions", _one(13, C2, "branch_retired", ("MMTP",)), False),
    ("mispredictions", _one(12, C0, "mispred_branch_retired", ("NBOGUS",)), False),
    ("mispredicted branch types", _one(6, "MSR_TBPU_ESCR1", "retired_mispred_branch_type",
                                       ("CONDITIONAL",)), False),
    ("clocks", _one(0, "MSR_FSB_ESCR0", "global_power_events", ("RUNNING",)), False),
    ("bogus instructions", _one(12, C0, "instr_retired", ("BOGUSNTAG",)), False),
    ("bogus uops", _one(14, "MSR_CRU_ESCR1", "uops_retired", ("BOGUS",)), False),
    ("instructions per clock (COMPARE)", _one(12, C0, "instr_retired", ("NBOGUSNTAG",),
                                              compare=True, threshold=1), False),
)


@pytest.mark.parametrize("what,script,free", LEVELS, ids=[x[0] for x in LEVELS])
def test_which_programmings_are_outcome_free(run_guest, what, script, free):
    """The level follows clockmodel.OUTCOME_FEATURES: directions, mispredictions, wrong-path
    retirement, clocks and per-clock comparisons need the full level."""
    on, st = _run(run_guest, script, "on")
    off, _ = _run(run_guest, script, "off")
    _same(on, off)
    assert st["on"] == free and st["installs"] == int(free), st


def test_a_cascaded_counter_that_needs_directions_keeps_the_full_level(run_guest):
    """A CASCADE counter (ENABLE clear) starts when its partner overflows, without an MSR
    write: the level is decided on every counter that may count, so one that would count
    branch directions keeps the full level from the start, and its count is the same."""
    s = EvScript()
    c3 = "MSR_CRU_ESCR3"
    s.wrmsr(escr_msr(c3), escr_value("branch_retired", "MMTP", "MMNP", t0_usr=True))
    s.wrmsr(counter_msr(14), 0)
    s.wrmsr(cccr_msr(14), cccr_value(14, c3, enable=False, cascade=True))  # from counter 12
    s.program(12, C0, escr_value("instr_retired", "NBOGUSNTAG", t0_usr=True),
              cccr_value(12, C0), start=preset(5000))
    s.loop("alt", 3000, user=True)
    s.read_counters((12, 14), "")
    on, st = _run(run_guest, s, "on")
    off, _ = _run(run_guest, s, "off")
    _same(on, off)
    assert parse_events(on)["c14"] > 0
    assert not st["on"] and st["installs"] == 0, st


@pytest.mark.parametrize("spelling", ("off", "no", "false", "n"))
def test_every_off_spelling_the_bridge_accepts_turns_the_level_off(guests, tmp_path, spelling):
    """A boolean option's off spellings (QEMU's qemu_plugin_bool_parse: off/no/false/n;
    docs/options.md): the C side must read a raw `-plugin ...,lite=VALUE` as the bridge does
    (other spellings stop QEMU at start: tests/test_options.py).  `p4pmu qemu` normalises the
    value, so this runs the command line it prints with the raw spelling put back."""
    script = LEVELS[0][1].write(tmp_path / "script.bin")
    args = [*QEMU_MACHINE_ARGS, "-serial", f"file:{tmp_path / 'serial.txt'}",
            "-kernel", str(guest_build.guest_path("events32")), "-initrd", str(script)]
    dry = subprocess.run([str(P4PMU), "qemu", "--plugin-opt", "lite=off", "--dry-run", "--",
                          *args], capture_output=True, text=True, check=True)
    cmd = shlex.split(dry.stdout.strip().splitlines()[-1])
    k = next(i for i, a in enumerate(cmd) if a.startswith("-plugin")) + 1
    assert cmd[k].endswith(",lite=off"), cmd[k]
    cmd[k] = cmd[k][:-len("off")] + spelling
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
                       env={**os.environ, "P4PMU_DEBUG": "1"})
    m = [x for x in map(_LITE.match, r.stderr.splitlines()) if x]
    assert len(m) == 1 and "DONE" in (tmp_path / "serial.txt").read_text(), r.stderr[-2000:]
    assert m[0].group(1) == "off" and m[0].group(2) == "0", m[0].group(0)
