"""The C-side register mirror (plugin/mirror.c; docs/bridge.md "The register mirror") must
never change results.

Every guest script here runs twice, with `mirror=on` (the default) and `mirror=off` (every
access and deadline through Python, as before the mirror), each with `log=`: everything the
guest printed (register values, PMI records: vector, LVT, OVF flags, interrupted IP, counter
value) and every access line of the log must be identical (per vCPU: with several vCPUs the
lines of different vCPUs may interleave differently).  The log's `# mirror:` line says
what C served, so each test also checks that the path it is about was taken: the simple
programmings must be served in C (reads, RDPMC, writes, deadlines, overflow walks), the
others (cascading, extended cascading, FORCE_OVF, EDGE, Hyper-Threading) must fall back to
Python for everything done while they are programmed.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import pytest
from test_events_seeds import halting_script

from p4pmu.emulator import tables as T
from p4pmu.qemu_glue import bench

from guests.evplan import Ctr, Plan, Setup
from guests.evscript import (
    LVT_MASK,
    LVT_NMI,
    PMI_CLEAR_OVF,
    PMI_RELOAD,
    PMI_UNMASK,
    VEC_PMI,
    EvScript,
    cccr_msr,
    cccr_value,
    counter_msr,
    escr_msr,
    escr_value,
    parse_events,
    preset,
)
from guests.suite import full_script

pytestmark = pytest.mark.guest

C0, C1, C2, C3 = "MSR_CRU_ESCR0", "MSR_CRU_ESCR1", "MSR_CRU_ESCR2", "MSR_CRU_ESCR3"
USR_INSTR = escr_value("instr_retired", "NBOGUSNTAG", t0_usr=True)
ALL_INSTR = escr_value("instr_retired", "NBOGUSNTAG", t0_os=True, t0_usr=True)
USR_BRANCH = escr_value("branch_retired", "MMNP", "MMNM", "MMTP", "MMTM", t0_usr=True)

_STATS = re.compile(r"# mirror: (\d+) RDMSR, (\d+) WRMSR, (\d+) RDPMC, (\d+) deadlines "
                    r"served in C \((\d+) overflow walks\); (\d+) declined; fast path on (\d+) "
                    r"times, off (\d+) times; (\d+) programming switches in C \((\d+) "
                    r"programmings registered\); (\d+) declined for an overflow in a batch not "
                    r"in clock order")


@dataclass
class Served:
    """What the C mirror did in the mirror=on run (the log's `# mirror:` line)."""
    rdmsr: int
    wrmsr: int
    rdpmc: int
    deadlines: int
    walks: int
    declined: int
    fast_path_on: int
    fast_path_off: int
    switches: int
    registered: int
    unordered: int


def _run(run_guest, tmp_path, guest, script, mirror, opts=(), model="0F_04", qemu_args=()):
    log = tmp_path / f"log-{mirror}.txt"
    r = run_guest(guest, model=model, script=script,
                  plugin_opts=(*opts, f"mirror={mirror}", f"log={log}"),
                  qemu_args=qemu_args, timeout=120)
    r.require_completed()
    return r, log.read_text().splitlines()


def both(run_guest, tmp_path, script, guest="events32", **kw) -> tuple[Served, list[str]]:
    """Run `script` with the mirror on and off; require identical guest output and access
    log; return what C served and the guest's serial lines."""
    on, log_on = _run(run_guest, tmp_path, guest, script, "on", **kw)
    off, log_off = _run(run_guest, tmp_path, guest, script, "off", **kw)
    assert on.out.lines == off.out.lines, "guest output differs:\n" + "\n".join(
        f"  mirror=on  {a!r}\n  mirror=off {b!r}"
        for a, b in zip(on.out.lines, off.out.lines) if a != b)
    # the access lines of each vCPU in order (lines of accesses served in C are written at
    # the vCPU's next Python call, so different vCPUs' lines may interleave differently) and
    # the other lines (the feeder/mirror statistics differ by design)
    def split(log):
        per: dict[str, list[str]] = {}
        for ln in log:
            if ln.startswith(("# feeder", "# mirror")):
                continue
            key = " ".join(ln.split()[:2]) if ln.startswith("vcpu ") else "#"
            per.setdefault(key, []).append(ln)
        return per
    acc_on, acc_off = split(log_on), split(log_off)
    assert acc_on.keys() == acc_off.keys()
    for k in acc_on:
        a, b = acc_on[k], acc_off[k]
        assert a == b, f"access logs of {k} differ:\n" + "\n".join(
            f"  on:  {x}\n  off: {y}" for x, y in zip(a, b) if x != y) + \
            f"\n  ({len(a)} and {len(b)} lines)"
    assert "# mirror: off" in log_off
    stats = [ln for ln in log_on if ln.startswith("# mirror:")]
    assert len(stats) == 1, log_on[-5:]
    m = _STATS.match(stats[0])
    assert m, stats[0]
    return Served(*map(int, m.groups())), on.out.lines


# --------------------------------------------------------------------------------------------
# simple programmings: served in C


def _all18(s: EvScript):
    """The benchmark's 18 counters (qemu_glue/bench.py ALL18), OS and USR, from 0."""
    for _ctr, escr, ev, bits in bench.ALL18:
        s.wrmsr(escr_msr(escr), bench._escr(ev, bits))
    for ctr, escr, _ev, _bits in bench.ALL18:
        s.wrmsr(counter_msr(ctr), 0)
        s.wrmsr(cccr_msr(ctr), bench._cccr(ctr, escr))


def _read_all(s: EvScript, prefix: str):
    for n in range(18):
        s.rdmsr(counter_msr(n), f"{prefix}c{n}")
        s.rdmsr(cccr_msr(n), f"{prefix}k{n}")
        s.rdpmc(n, f"{prefix}p{n}")
        s.rdpmc(n | 1 << 31, f"{prefix}f{n}")


@pytest.mark.parametrize("bits", (32, 64))
def test_reads_writes_and_rdpmc_of_every_counter_while_counting(run_guest, tmp_path, bits):
    """All 18 counters count; every counter and CCCR is read, RDPMC normal and fast, in ring
    0 and 3 loops; counter values are written and CCCRs rewritten unchanged (OVF clear and
    set); a configuration change and an ESCR read go through Python in between."""
    s = EvScript()
    _all18(s)
    s.loop("bench", 300)
    _read_all(s, "a.")
    s.loop("alt", 200, user=True)
    _read_all(s, "b.")
    for n in range(18):
        s.wrmsr(counter_msr(n), 0x1000 * n + 7)
    ctr, escr, *_ = bench.ALL18[5]
    s.wrmsr(cccr_msr(ctr), bench._cccr(ctr, escr) | 1 << 31)  # software sets OVF
    s.rdmsr(escr_msr(C0), "escr")                              # Python: not mirrored
    s.loop("callret", 100)
    _read_all(s, "c.")
    s.wrmsr(cccr_msr(ctr), bench._cccr(ctr, escr))             # OVF cleared again
    s.wrmsr(cccr_msr(12), cccr_value(12, C0, compare=True, threshold=1))  # new programming
    s.loop("sse", 100, user=True)
    _read_all(s, "d.")
    served, lines = both(run_guest, tmp_path, s, guest=f"events{bits}")
    out = parse_events(lines)
    assert out["b.c12"] > out["a.c12"] > 0 and out["c.k5"] >> 31 & 1
    assert served.rdmsr >= 3 * 36 and served.rdpmc >= 3 * 36, served
    assert served.wrmsr >= 18, served
    assert served.declined > 0, served  # the ESCR read and the new programming


@pytest.mark.parametrize("bits,noticed", ((32, "escr"), (64, "cccr")))
def test_context_switch_programmings_are_switched_in_c(run_guest, tmp_path, bits, noticed):
    """A driver multiplexing the PMU as Linux perf does at every context switch: disable the
    counters, program their ESCRs for the next task's events, preset and enable, count, read
    back -- two alternating sets of programmings, one with a PMI counter near overflow.
    After Python has seen each programming once, the CCCR and ESCR writes that lead back to
    it are served in C (programs.c), with the same counts, interrupts and log as Python; a
    write that would raise a notice (an ESCR reprogrammed under its enabled counter, a CCCR
    reprogrammed while enabled) still goes to Python, which says so (once per run: the two
    notices share their key, so each run checks one)."""
    lvt = VEC_PMI
    pmi_cccr = cccr_value(12, C0, pmi_t0=True)
    s = EvScript()
    s.pmi_config(PMI_CLEAR_OVF | PMI_RELOAD | PMI_UNMASK, counter=12, reload=preset(1500),
                 cccr=pmi_cccr, lvt=lvt)
    s.pmi_reset()
    s.lvt(lvt)
    task_a = [(12, C0, USR_INSTR, pmi_cccr), (14, C3, USR_BRANCH, cccr_value(14, C3))]
    task_b = [(12, C0, ALL_INSTR, cccr_value(12, C0)),
              (15, C1, escr_value("instr_retired", "BOGUSNTAG", "NBOGUSNTAG", t0_usr=True),
               cccr_value(15, C1))]
    for i in range(12):
        for name, task in (("a", task_a), ("b", task_b)):
            for ctr, escr, ev, cccr in task:
                s.wrmsr(escr_msr(escr), ev)
                s.wrmsr(counter_msr(ctr), preset(1500) if cccr == pmi_cccr else 0)
                s.wrmsr(cccr_msr(ctr), cccr)
            s.loop("alt" if name == "a" else "alu", 400, user=True, intr=True)
            for ctr, *_ in task:
                s.rdpmc(ctr, f"{name}{i}.p{ctr}")
                s.wrmsr(cccr_msr(ctr), 0)
            s.rdmsr(escr_msr(task[0][1]), f"{name}{i}.escr")
    # a notice: an ESCR reprogrammed under its enabled counter, or a CCCR reprogrammed while
    # enabled.  The programming the noticed write leads to is registered first (reached
    # with the counter disabled in between, no notice), so only the notice rule of
    # programs.c keeps that write from being served silently in C.
    plain, other_escr = cccr_value(12, C0), escr_value("instr_retired", "BOGUSNTAG",
                                                        t0_usr=True)
    other_cccr = cccr_value(12, C0, compare=True, threshold=0)
    target = (other_escr, plain) if noticed == "escr" else (USR_INSTR, other_cccr)
    for escr, cccr in (target, (USR_INSTR, plain)):
        s.wrmsr(cccr_msr(12), 0)
        s.wrmsr(escr_msr(C0), escr)
        s.wrmsr(cccr_msr(12), cccr)
        s.loop("alt", 50, user=True)
    if noticed == "escr":
        s.wrmsr(escr_msr(C0), other_escr)
    else:
        s.wrmsr(cccr_msr(12), other_cccr)
    s.loop("alt", 100, user=True)
    s.rdmsr(counter_msr(12), "last")
    s.wrmsr(cccr_msr(12), 0)
    s.pmi_log()
    served, lines = both(run_guest, tmp_path, s, guest=f"events{bits}")
    out = parse_events(lines)
    assert out.pmi_counts[0][0] >= 10, out.pmi_counts
    assert all(out[f"b{i}.p15"] > 0 and out[f"a{i}.p14"] > 0 for i in range(12))
    # per task switch at least 4 writes change the programming (2 CCCRs on, 2 off)
    assert served.switches >= 8 * 2 * 4, served
    assert served.registered >= 4, served
    logs = {m: (tmp_path / f"log-{m}.txt").read_text() for m in ("on", "off")}
    said = ("MSR_CRU_ESCR0 was reprogrammed from" if noticed == "escr" else
            "(MSR_IQ_COUNTER0) was reprogrammed while enabled")
    for text in logs.values():
        assert said in text


def test_replay_tagging_change_drops_the_registered_programmings(run_guest, tmp_path):
    """replay_event counts the tagged mispredicted branches while MSR_PEBS_ENABLE and
    MSR_PEBS_MATRIX_VERT select that metric (SDM Table 19-33), nothing once PEBS_ENABLE is
    cleared.  The CCCR and ESCR images that enable the counter are the same both times, so
    C, which finds a registered programming by those images alone, must not switch back to
    the per-kind table made under the old tagging: Python drops the registered programmings
    when the replay-tagging MSRs change.  Counts equal with and without the mirror."""
    replay = escr_value("replay_event", "NBOGUS", t0_os=True, t0_usr=True)
    s = EvScript()
    # counter 12 counts mispredicted branches all along: the plugin stays at its full level
    # (with only replay_event and no metric it may drop to the outcome-free level, where a
    # stale table would count nothing either)
    s.wrmsr(escr_msr(C0), escr_value("mispred_branch_retired", "NBOGUS", t0_os=True,
                                     t0_usr=True))
    s.wrmsr(counter_msr(12), 0)
    s.wrmsr(cccr_msr(12), cccr_value(12, C0))
    s.wrmsr(0x3F1, 0x0101_8000)
    s.wrmsr(0x3F2, 0x10)
    s.wrmsr(escr_msr(C2), replay)
    s.wrmsr(counter_msr(13), 0)
    # PEBS_ENABLE in each phase; the first phase runs every code path once (no new clock
    # kinds after it: C would switch to a registered programming's table without asking)
    pebs = (0x0101_8000, 0x0101_8000, 0, 0x0101_8000)
    for phase, _value in enumerate(pebs):
        for _ in range(3):  # enable and disable again: the images C switches between
            s.wrmsr(cccr_msr(13), cccr_value(13, C2))
            s.loop("alt", 300, user=True)
            s.wrmsr(cccr_msr(13), 0)
        s.rdmsr(counter_msr(13), f"after{phase}")
        s.wrmsr(0x3F1, pebs[(phase + 1) % len(pebs)])
    served, lines = both(run_guest, tmp_path, s)
    out = parse_events(lines)
    d = [out["after0"]] + [out[f"after{i}"] - out[f"after{i - 1}"] for i in range(1, 4)]
    assert min(d[0], d[1], d[3]) >= 3 * 300 // 2, d  # alt mispredicts every other branch
    assert d[2] == 0, d  # no metric: nothing tagged
    assert served.switches > 0, served


def test_compare_threshold_complement_without_edge_are_mirrored(run_guest, tmp_path):
    """COMPARE/THRESHOLD/COMPLEMENT without EDGE are exact per-clock functions of the clock
    kind: the mirror serves them (clocks-and-filters setup of test_events_clocks, without its
    EDGE counters)."""
    plan = Plan([Setup("clk2", [
        Ctr(12, C0, "instr_retired", ("NBOGUSNTAG",), os=True, usr=True, compare=True,
            threshold=1),
        Ctr(14, C1, "instr_retired", ("BOGUSNTAG",), os=True, usr=True, compare=True,
            threshold=2),
        Ctr(15, C3, "branch_retired", ("MMTM", "MMNM"), os=True, usr=True, compare=True,
            threshold=0),
        Ctr(0, "MSR_FSB_ESCR0", "global_power_events", ("RUNNING",), os=True, usr=True),
        Ctr(3, "MSR_FSB_ESCR1", "global_power_events", ("RUNNING",), os=True, compare=True,
            complement=True, threshold=0),
    ])], ["alu", "alt", "callret"], rings=(0, 3), ns=(120, 1200))
    served, _ = both(run_guest, tmp_path, plan.script())
    assert served.rdmsr > 0, served


@pytest.mark.parametrize("bits", (32, 64))
@pytest.mark.parametrize("mode", ("fixed", "nmi"))
def test_overflow_interrupts_fixed_and_nmi(run_guest, tmp_path, mode, bits):
    """Periodic interrupts on a ring-3 loop (test_events_pmi's periodic sampling: the
    handler reads all 18 CCCRs and the counter, clears OVF, reloads, unmasks), then one on
    the 1000th event: the overflow clock, OVF, the arming by the next event and the
    interrupt's place are the mirror's (overflow walks, deadlines in C)."""
    lvt = VEC_PMI if mode == "fixed" else (LVT_NMI | VEC_PMI)
    s = EvScript()
    cccr = cccr_value(12, C0, pmi_t0=True)
    s.pmi_config(PMI_CLEAR_OVF | PMI_RELOAD | PMI_UNMASK, counter=12, reload=preset(1999),
                 cccr=cccr, lvt=lvt)
    s.pmi_reset()
    s.lvt(lvt)
    s.wrmsr(escr_msr(C0), USR_INSTR)
    s.wrmsr(counter_msr(12), preset(1999))
    s.wrmsr(cccr_msr(12), cccr)
    s.loop("alu", 3000, user=True, intr=True)
    s.wrmsr(cccr_msr(12), 0)
    s.pmi_log()
    s.pmi_config(PMI_CLEAR_OVF, counter=12, cccr=cccr, lvt=lvt)
    s.pmi_reset()
    s.lvt(lvt)
    s.wrmsr(counter_msr(12), preset(999))
    s.wrmsr(cccr_msr(12), cccr)
    s.loop("alt", 400, user=True, intr=True)
    s.wrmsr(cccr_msr(12), 0)
    s.lvt_read("lvt_after")
    s.rdmsr(counter_msr(12), "ctr_after")
    s.pmi_log()
    served, lines = both(run_guest, tmp_path, s, guest=f"events{bits}")
    out = parse_events(lines)
    n = out.pmi_counts[0][0]
    assert n >= 10 and out.pmi_counts[1][0] == 1, out.pmi_counts
    assert served.walks >= n + 1 and served.deadlines > n, served
    assert served.rdmsr >= 19 * n, served  # the handler's reads


@pytest.mark.parametrize("bits", (32, 64))
def test_shortest_period_in_the_handler_is_walked_in_c(run_guest, tmp_path, bits):
    """Linux's shortest sampling period (perf test 24, "exit events": a period of 2 on a
    counter that counts every clock): the NMI handler's reload of -2 overflows the counter
    two clocks later, in the rest of the handler's own block after its WRMSR.  That batch is
    given in clock order like a whole block execution (plugin/fold.c, one_execution_seq),
    so the overflow clock and the arming are walked in C: nothing is declined for want of
    clock order, and both paths give the same PMIs, counts and access log."""
    s = EvScript()
    cccr = cccr_value(0, "MSR_FSB_ESCR0", pmi_t0=True)
    s.pmi_config(PMI_CLEAR_OVF | PMI_RELOAD | PMI_UNMASK, counter=0, reload=preset(2),
                 cccr=cccr, max_unmask=60, lvt=LVT_NMI | VEC_PMI)
    s.pmi_reset()
    s.lvt(LVT_NMI | VEC_PMI)
    s.wrmsr(escr_msr("MSR_FSB_ESCR0"),
            escr_value("global_power_events", "RUNNING", t0_os=True, t0_usr=True))
    s.wrmsr(counter_msr(0), preset(200))
    s.wrmsr(cccr_msr(0), cccr)
    s.loop("alu", 2000, user=True)
    s.wrmsr(cccr_msr(0), 0)
    s.rdmsr(counter_msr(0), "ctr_after")
    s.pmi_log()
    served, lines = both(run_guest, tmp_path, s, guest=f"events{bits}")
    out = parse_events(lines)
    n = out.pmi_counts[0][0]
    assert n >= 60, out.pmi_counts  # the storm ran until the handler stopped unmasking
    assert served.walks >= 60 and served.unordered == 0, served


def test_benchmark_handler(run_guest, tmp_path):
    """`p4pmu bench`'s configuration (d): counter 12 counts OS and USR instructions,
    interrupts every 10,000 (NMI), the minimal handler reloads it, rewrites its CCCR (OVF
    clear) and unmasks the LVT -- all of it in C."""
    s = EvScript()
    s._add(bench.script("pmi", "bench", 20_000).replace("pmilog\n", "").strip())
    s.rdmsr(counter_msr(12), "ctr")
    s.rdmsr(cccr_msr(12), "cccr")
    s.pmi_log()
    served, lines = both(run_guest, tmp_path, s)
    out = parse_events(lines)
    n = out.pmi_counts[-1][0]
    assert n >= 30, out.pmi_counts
    assert served.wrmsr >= 2 * n and served.walks >= n, served


def test_masked_lvt_and_unmasking_with_ovf_still_set(run_guest, tmp_path):
    """A masked LVT entry: OVF set, nothing delivered; unmasking (an APIC write, not a PMU
    access) while OVF is set delivers it at the next look at the LVT (64 clocks or a PMU
    access); a handler that unmasks without clearing OVF is interrupted again."""
    s = EvScript()
    cccr = cccr_value(12, C0, pmi_t0=True)
    s.pmi_config(PMI_CLEAR_OVF, counter=12, cccr=cccr, lvt=LVT_NMI | VEC_PMI)
    s.pmi_reset()
    s.lvt(LVT_MASK | LVT_NMI | VEC_PMI)
    s.wrmsr(escr_msr(C0), USR_INSTR)
    s.wrmsr(counter_msr(12), preset(499))
    s.wrmsr(cccr_msr(12), cccr)
    s.loop("alu", 200, user=True)
    s.pmi_log()
    s.rdmsr(cccr_msr(12), "cccr_masked")
    s.lvt(LVT_NMI | VEC_PMI)
    s.loop("nop4", 50)
    s.pmi_log()
    s.lvt_read("lvt_after")
    s.wrmsr(cccr_msr(12), 0)
    s.pmi_config(PMI_UNMASK, counter=12, cccr=cccr, max_unmask=4, lvt=LVT_NMI | VEC_PMI)
    s.pmi_reset()
    s.lvt(LVT_NMI | VEC_PMI)
    s.wrmsr(counter_msr(12), preset(499))
    s.wrmsr(cccr_msr(12), cccr)
    s.loop("alu", 200, user=True)
    s.loop("nop4", 50)
    s.pmi_log()
    served, lines = both(run_guest, tmp_path, s)
    out = parse_events(lines)
    assert out.pmi_counts[0][0] == 0 and out.pmi_counts[1][0] == 1, out.pmi_counts
    assert out["cccr_masked"] >> 31 & 1
    assert out.pmi_counts[2][0] == 4, out.pmi_counts
    assert served.walks >= 2 and served.rdmsr > 0, served


@pytest.mark.parametrize("bits", (32, 64))
def test_probe_suite(run_guest, tmp_path, bits):
    """The bridge's probe script (tests/guests/suite.py: every PMU instruction with prefixes,
    ring 0/3, faults, RDPMC at and not at a block start, long mode) with nothing counting:
    counter and CCCR accesses are served in C, faults and the rest by Python, the same."""
    served, _ = both(run_guest, tmp_path, full_script(bits), guest=f"probe{bits}")
    assert served.rdmsr > 0 and served.wrmsr > 0 and served.rdpmc > 0, served


def test_probe_suite_strict(run_guest, tmp_path):
    """Strict mode: the fault masks the mirror checks are the strict ones."""
    served, _ = both(run_guest, tmp_path, full_script(32), guest="probe32",
                     opts=("strict=on",))
    assert served.wrmsr > 0 and served.declined > 0, served


def test_two_vcpus_each_with_its_own_mirror(run_guest, tmp_path):
    """-smp 2 with threads=1: each vCPU has its own PMU and mirror.  Both count their own
    loop inside the measured call (straight-line enabling/disabling WRMSRs: nothing of the
    guest's command hand-over between the processors is counted) and interrupt every 200
    instructions; reads and RDPMC on each."""
    s = EvScript()
    s.ap_start()
    cccr = cccr_value(12, C0, pmi_t0=True)
    s.pmi_config(PMI_CLEAR_OVF | PMI_RELOAD | PMI_UNMASK, counter=12, reload=preset(199),
                 cccr=cccr, lvt=LVT_NMI | VEC_PMI)
    s.pmi_reset()
    for cpu in (0, 1):
        s.lvt(LVT_NMI | VEC_PMI, cpu=cpu)
        s.wrmsr(escr_msr(C0), ALL_INSTR, cpu=cpu)
        s.wrmsr(counter_msr(12), preset(199), cpu=cpu)
        s.measure_table([(cccr_msr(12), cccr)],
                        [(cccr_msr(12), cccr_value(12, C0, enable=False))], cpu=cpu)
        s.measure("alt" if cpu else "alu", 1500, cpu=cpu)
        s.rdmsr(counter_msr(12), f"c{cpu}", cpu=cpu)
        s.rdmsr(cccr_msr(12), f"k{cpu}", cpu=cpu)
        s.rdpmc(12, f"p{cpu}", cpu=cpu)
    s.pmi_log()
    served, lines = both(run_guest, tmp_path, s, qemu_args=("-smp", "2"))
    out = parse_events(lines)
    bsp, ap, _ = out.pmi_counts[-1]
    assert bsp >= 20 and ap >= 20, out.pmi_counts
    assert served.walks >= bsp + ap and served.rdmsr > 18 * (bsp + ap), served


# --------------------------------------------------------------------------------------------
# programmings the mirror must leave to Python


def _cascade_script():
    """The SDM's halting of a counter and a cascaded counter (SDM Vol. 3B 18.18.6.5, with the
    cascades of 18.15.5.6) as test_events_seeds runs it, then RDPMC of the counters involved."""
    s = halting_script()
    for n in (12, 13, 14, 15, 16):
        s.rdpmc(n, f"p{n}")
    return s


def test_cascade_and_halting_fall_back_to_python(run_guest, tmp_path):
    served, lines = both(run_guest, tmp_path, _cascade_script())
    out = parse_events(lines)
    assert out["a.c14"] > 0 and out["b.c14"] == out["a.c14"]
    assert (served.rdmsr, served.rdpmc, served.deadlines, served.walks) == (0, 0, 0, 0), served


@pytest.mark.parametrize("model,opts", [("0F_04", ()), ("0F_02", ()),
                                        ("0F_02", ("errata=off",))])
def test_extended_cascade_and_the_pmi_erratum_fall_back_to_python(run_guest, tmp_path, model,
                                                                  opts):
    """Extended cascading (SDM Vol. 3B 18.15.5.7, Example 18-2): counter 12 started by
    counter 16's overflow (bit 11), with OVF_PMI; 0F_02's cascade-PMI erratum suppresses the
    interrupt (errata=off: it is back)."""
    s = EvScript()
    s.pmi_config(0, counter=12)
    s.pmi_reset()
    s.lvt(LVT_NMI | VEC_PMI)
    s.wrmsr(escr_msr(C0), USR_INSTR)
    s.wrmsr(counter_msr(12), preset(100))
    s.wrmsr(cccr_msr(12), cccr_value(12, C0, enable=False, ext_cascade=True, pmi_t0=True))
    s.wrmsr(counter_msr(16), preset(300))
    s.wrmsr(cccr_msr(16), cccr_value(16, C0))
    s.loop("alu", 200, user=True)
    s.loop("nop4", 20)
    s.rdmsr(cccr_msr(12), "cccr_y")
    s.rdmsr(counter_msr(12), "ctr_y")
    s.pmi_log()
    served, lines = both(run_guest, tmp_path, s, model=model, opts=opts)
    out = parse_events(lines)
    assert out["cccr_y"] >> 31 & 1
    assert out.pmi_counts[-1][0] == (0 if (model, opts) == ("0F_02", ()) else 1)
    assert (served.rdmsr, served.deadlines, served.walks) == (0, 0, 0), served


def test_force_ovf_and_edge_fall_back_to_python(run_guest, tmp_path):
    """FORCE_OVF (an overflow on every event) and EDGE (rising edges need adjacent clocks):
    Python for everything done while they are programmed; the mirror again afterwards."""
    s = EvScript()
    s.pmi_config(PMI_CLEAR_OVF | PMI_UNMASK, counter=12, max_unmask=3, lvt=LVT_NMI | VEC_PMI)
    s.pmi_reset()
    s.lvt(LVT_NMI | VEC_PMI)
    s.wrmsr(escr_msr(C0), USR_INSTR)
    s.wrmsr(escr_msr(C2), USR_BRANCH)
    s.wrmsr(counter_msr(12), 0)
    s.wrmsr(cccr_msr(12), cccr_value(12, C0, force_ovf=True, pmi_t0=True))
    s.wrmsr(counter_msr(13), 0)
    s.wrmsr(cccr_msr(13), cccr_value(13, C2, compare=True, threshold=0, edge=True))
    s.loop("alt", 50, user=True)
    s.loop("nop4", 20)
    s.read_counters((12, 13), "a.").read_cccrs((12, 13), "a.")
    s.rdpmc(13, "a.p13")
    s.pmi_log()
    s.wrmsr(cccr_msr(12), 0)
    s.wrmsr(cccr_msr(13), 0)
    s.wrmsr(cccr_msr(13), cccr_value(13, C2))  # simple again
    s.loop("alt", 50, user=True)
    s.read_counters((12, 13), "b.")
    served, lines = both(run_guest, tmp_path, s)
    out = parse_events(lines)
    assert out.pmi_counts[0][0] == 3 and out["a.c13"] > 0
    # the first reads happened under FORCE_OVF/EDGE (Python); only the last two are C's
    assert served.rdmsr == 2 and served.rdpmc == 0 and served.walks == 0, served


def test_hyper_threading_never_hands_over(run_guest, tmp_path):
    """threads=2: the two logical processors share a register file; the mirror is off."""
    s = EvScript()
    s.ap_start()
    s.wrmsr(escr_msr(C0), escr_value("instr_retired", "NBOGUSNTAG", t0_os=True, t1_os=True))
    s.wrmsr(counter_msr(12), 0)
    s.wrmsr(cccr_msr(12), cccr_value(12, C0))
    s.loop("alu", 100)
    s.rdmsr(counter_msr(12), "c12")
    s.rdmsr(counter_msr(12), "c12_ap", cpu=1)
    r, log = _run(run_guest, tmp_path, "events32", s, "on", qemu_args=("-smp", "2,threads=2"))
    stats = [ln for ln in log if ln.startswith("# mirror:")]
    assert stats == ["# mirror: off"], stats
    assert parse_events(r.out.lines)["c12"] > 0


def test_interrupts_discarded_before_they_were_raised_are_reported(run_guest, tmp_path):
    """OVF set (by software here, as an overflow would) asks for a PMI that comes with the
    next counted event (SDM 18.15.5.8); a CCCR write clearing OVF before that discards it.
    The log's summary counts those per counter -- the same whether C or Python served the
    writes: three discarded, then one raised first (a USR loop) and cleared: not counted."""
    s = EvScript()
    cccr = cccr_value(12, C0, pmi_t0=True)
    ovf = T.CCCR_FIELD["OVF"].mask
    s.lvt(LVT_MASK | LVT_NMI | VEC_PMI)  # a raised request stays pending, undelivered
    s.wrmsr(escr_msr(C0), USR_INSTR)  # counts nothing while the script runs at CPL 0
    s.wrmsr(counter_msr(12), 0)
    s.wrmsr(cccr_msr(12), cccr)
    for _ in range(3):
        s.wrmsr(cccr_msr(12), cccr | ovf)
        s.wrmsr(cccr_msr(12), cccr)
    s.wrmsr(cccr_msr(12), cccr | ovf)
    s.loop("alu", 10, user=True)
    s.rdmsr(cccr_msr(12), "raised")
    s.wrmsr(cccr_msr(12), cccr)
    s.wrmsr(cccr_msr(12), 0)
    served, lines = both(run_guest, tmp_path, s)
    assert parse_events(lines)["raised"] & ovf
    log = (tmp_path / "log-on.txt").read_text()
    assert "# core 0: interrupts discarded before they were raised (OVF cleared before the " \
           "next counted event): counter 12: 3\n" in log, log[-1500:]
    assert served.wrmsr >= 6, served  # the OVF writes were C's in the mirror=on run
