"""The access trace (option trace=FILE; docs/trace.md) from real guests on the real QEMU and
plugin: every line parses, every write's decoded fields re-encode to its value, the trace
agrees access by access with the text log (`log=`), times only grow per vCPU, and
overflows, interrupts and faults appear where the guest made them."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import P4PMU

from p4pmu.emulator import decode

from guests.evscript import (
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
    preset,
)

pytestmark = pytest.mark.guest

C0 = "MSR_CRU_ESCR0"
USR_INSTR = escr_value("instr_retired", "NBOGUSNTAG", t0_usr=True)
ACCESS = ("rdmsr", "wrmsr", "rdpmc")


def records(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def check_round_trip(recs: list[dict]) -> None:
    """The trace's invariants (docs/trace.md)."""
    assert recs[0]["k"] == "header" and recs[0]["format"] == "p4pmu-trace", recs[0]
    assert recs[-1]["k"] == "end", recs[-1]
    last: dict[int, tuple[int, int]] = {}
    for r in recs[1:-1]:
        if r["k"] in ACCESS and "fields" in r:
            msr = int(r["msr"], 16)
            assert decode.encode(msr, r["fields"]) == int(r["value"], 16), r
        if r["k"] == "wrmsr" and "old" in r and decode.register_kind(int(r["msr"], 16)):
            msr = int(r["msr"], 16)
            assert r["changed"] == decode.changed(msr, int(r["old"], 16),
                                                  int(r["value"], 16)), r
        if "vcpu" in r and r.get("insns") is not None:
            t = (r["insns"], r["clk"])
            prev = last.get(r["vcpu"], (0, 0))
            assert t[0] >= prev[0] and t[1] >= prev[1], (prev, r)
            last[r["vcpu"]] = t


def log_accesses(lines: list[str]) -> list[tuple[str, int, int]]:
    """(op, register or ECX, value) of the text log's access lines."""
    out = []
    for ln in lines:
        if ln.startswith("#") or ": " not in ln:
            continue
        f = ln.split(": ", 1)[1].split()
        if f[0] in ("RDMSR", "WRMSR") and f[1].startswith("0x") and f[1] != "0x1A0":
            out.append((f[0].lower(), int(f[1], 16), int(f[-1], 16)))
        elif f[0] == "RDPMC":
            out.append(("rdpmc", int(f[1].split("=")[1], 16), int(f[-1], 16)))
    return out


def trace_accesses(recs: list[dict]) -> list[tuple[str, int, int]]:
    return [(r["k"], int(r["ecx"] if r["k"] == "rdpmc" else r["msr"], 16),
             int(r["value"], 16)) for r in recs
            if r["k"] in ACCESS and "fault" not in r]


def p4pmu_trace(path, *args) -> str:
    """`p4pmu trace PATH ARGS...`'s output (status 0 required)."""
    p = subprocess.run([str(P4PMU), "trace", str(path), *args], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stdout


def pmi_script() -> EvScript:
    """Counter 12 counts ring-3 instructions and interrupts every 2,000 (the handler reads
    the CCCRs, clears OVF, reloads, unmasks)."""
    s = EvScript()
    cccr = cccr_value(12, C0, pmi_t0=True)
    s.pmi_config(PMI_CLEAR_OVF | PMI_RELOAD | PMI_UNMASK, counter=12, reload=preset(1999),
                 cccr=cccr, lvt=LVT_NMI | VEC_PMI)
    s.pmi_reset()
    s.lvt(LVT_NMI | VEC_PMI)
    s.wrmsr(escr_msr(C0), USR_INSTR)
    s.wrmsr(counter_msr(12), preset(1999))
    s.wrmsr(cccr_msr(12), cccr)
    s.loop("alu", 3000, user=True, intr=True)
    s.wrmsr(cccr_msr(12), 0)
    s.rdpmc(12, "pmc")
    s.pmi_log()
    return s


@pytest.mark.parametrize("mirror", ("on", "off"))
def test_bare_metal_trace_agrees_with_the_log(run_guest, tmp_path, mirror):
    trace, log = tmp_path / "t.jsonl", tmp_path / "log.txt"
    r = run_guest("events32", script=pmi_script(), timeout=120,
                  plugin_opts=(f"trace={trace}", f"log={log}", f"mirror={mirror}"))
    r.require_completed()
    recs = records(trace)
    check_round_trip(recs)
    assert trace_accesses(recs) == log_accesses(log.read_text().splitlines())
    kinds = {k: sum(1 for x in recs if x["k"] == k) for k in
             ("overflow", "pmi", "wrmsr", "rdmsr", "rdpmc")}
    assert kinds["pmi"] >= 10 and kinds["overflow"] >= kinds["pmi"], kinds
    by = {x["by"] for x in recs if x["k"] in ACCESS}
    assert by == ({"c", "python"} if mirror == "on" else {"python"}), by
    pc = [x for x in recs if x["k"] == "wrmsr" and x["reg"] == "MSR_IQ_CCCR0"][0]
    assert pc["fields"]["escr"] == C0 and pc["fields"]["OVF_PMI_T0"] == 1, pc
    shown = p4pmu_trace(trace)
    assert shown.count("\n") == len(recs), shown[-500:]  # one line per record


def _pmu_op(op) -> bool:
    return op.op == "RDPMC" or (op.op in ("RDMSR", "WRMSR") and
                                0x300 <= op.ecx & 0xFFFF_FFFF <= 0x3FF)


@pytest.mark.parametrize("strict", (False, True), ids=("default", "strict"))
def test_every_fault_is_traced_with_its_reason(run_guest, tmp_path, strict):
    """The probe guest's whole suite (every register, reserved bits, bad RDPMC indexes,
    CPL 3 with and without CR4.PCE): one trace record with `fault` per PMU access that took
    #GP, the CPL 3 ones by QEMU with the privilege reason."""
    from conftest import bridge_script

    from p4pmu.qemu_glue.guests.script import GP
    script = bridge_script(32)
    trace = tmp_path / "t.jsonl"
    opts = (f"trace={trace}",) + (("strict=on",) if strict else ())
    r = run_guest("probe32", script=script, plugin_opts=opts, timeout=120)
    r.require_completed()
    recs = records(trace)
    check_round_trip(recs)
    faulted = [(o.op.lower(), o.ecx & 0xFFFF_FFFF, o.mode) for i, o in enumerate(script.ops)
               if _pmu_op(o) and r.out.answers.get(i) is not None and
               r.out.answers[i].res == "fault" and r.out.answers[i].vector == GP]
    traced = [(x["k"], int(x["ecx"] if x["k"] == "rdpmc" else x["msr"], 16), x["cpl"])
              for x in recs if "fault" in x]
    assert len(traced) == len(faulted), (len(traced), len(faulted))
    assert [t[:2] for t in traced] == [f[:2] for f in faulted]
    priv = [x for x in recs if x.get("by") == "qemu"]
    assert priv and all(x["cpl"] == 3 and "CPL 3" in x["fault"] for x in priv), priv[:3]
    assert len(priv) <= sum(1 for f in faulted if f[2] != "ring0")  # (PCE set: Python's)
    if strict:
        assert any("not a docu" in x.get("fault", "") for x in recs if x.get("by") == "python")


def test_a_killed_qemu_leaves_a_readable_trace(tmp_path, guests):
    """SIGKILL in the middle of a run with interrupts: every complete line parses."""
    from conftest import QEMU_MACHINE_ARGS

    from p4pmu.qemu_glue.guests import build as guest_build
    s = EvScript()
    s._add(pmi_script().text().replace("loop alu 3000", "loop alu 3000000"))
    trace = tmp_path / "t.jsonl"
    cmd = [str(P4PMU), "qemu", "--plugin-opt", f"trace={trace}", "--", *QEMU_MACHINE_ARGS,
           "-serial", "null", "-kernel", str(guest_build.guest_path("events32")),
           "-initrd", str(s.write(tmp_path / "script.bin"))]
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (not trace.exists() or
                                               trace.stat().st_size < 200_000):
            time.sleep(0.05)
        assert proc.poll() is None, "the guest ended before it was killed"
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    text = trace.read_text()
    lines = text.split("\n")
    complete = lines[:-1]  # the last element: "" or a partial line
    assert len(complete) > 100
    recs = [json.loads(ln) for ln in complete]
    assert recs[0]["k"] == "header" and not any(r["k"] == "end" for r in recs)
    assert sum(r["k"] == "pmi" for r in recs) > 10


def _processes_with(arg: str) -> list[int]:
    """The processes whose command line holds `arg`."""
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if arg.encode() in (d / "cmdline").read_bytes():
                    found.append(int(d.name))
            except OSError:
                pass
    return found


@pytest.mark.parametrize("kind", [0, 1], ids=["keyboard-controller-reset", "triple-fault"])
def test_a_guest_reset_or_triple_fault_ends_the_run_with_complete_files(tmp_path, guests,
                                                                        kind):
    """A guest that resets (port 64h) or triple-faults in the middle of a counting run with
    interrupts: with -no-reboot QEMU shuts down with status 0 (a bare-metal guest's own exit
    through isa-debug-exit gives an odd status), the trace ends with its end record and reads,
    the log has its summary, nothing is reported as an error, no QEMU is left."""
    from conftest import QEMU_MACHINE_ARGS

    from p4pmu.qemu_glue.guests import build as guest_build
    s = EvScript()
    s._add(pmi_script().text())
    s._add(f"reset {kind}")
    trace, log, pidfile = tmp_path / "t.jsonl", tmp_path / "pmu.log", tmp_path / "qemu.pid"
    serial = tmp_path / "serial.txt"
    cmd = [str(P4PMU), "qemu", "--plugin-opt", f"trace={trace}", "--plugin-opt", f"log={log}",
           "--", *QEMU_MACHINE_ARGS, "-serial", f"file:{serial}", "-pidfile", str(pidfile),
           "-kernel", str(guest_build.guest_path("events32")),
           "-initrd", str(s.write(tmp_path / "script.bin"))]
    r = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert f"M reset{kind}" in serial.read_text()  # it got that far, and no further
    assert "DONE" not in serial.read_text()
    assert "error" not in r.stderr.lower(), r.stderr[-2000:]
    assert not _processes_with(str(pidfile)), "a QEMU is left"
    recs = records(trace)
    assert recs[0]["k"] == "header" and recs[-1]["k"] == "end", recs[-1]
    assert sum(rec["k"] == "pmi" for rec in recs) > 10
    summary = subprocess.run([str(P4PMU), "trace", str(trace), "--summary"],
                             capture_output=True, text=True, timeout=120)
    assert summary.returncode == 0, summary.stderr[-2000:]
    assert "# end:" in log.read_text()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=lambda s: s.name)
def test_a_stop_signal_ends_the_run_with_complete_files(tmp_path, guests, sig):
    """SIGINT or SIGTERM to `p4pmu qemu` in the middle of a run with interrupts: QEMU shuts
    down, the trace ends with its end record and `p4pmu trace --summary` reads it, the log
    has its summary, the status is 128 + the signal, and no QEMU is left."""
    from conftest import QEMU_MACHINE_ARGS

    from p4pmu.qemu_glue.guests import build as guest_build
    s = EvScript()
    s._add(pmi_script().text().replace("loop alu 3000", "loop alu 3000000"))
    trace, log, pidfile = tmp_path / "t.jsonl", tmp_path / "pmu.log", tmp_path / "qemu.pid"
    cmd = [str(P4PMU), "qemu", "--plugin-opt", f"trace={trace}", "--plugin-opt", f"log={log}",
           "--", *QEMU_MACHINE_ARGS, "-serial", "null", "-pidfile", str(pidfile),
           "-kernel", str(guest_build.guest_path("events32")),
           "-initrd", str(s.write(tmp_path / "script.bin"))]
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (not trace.exists() or
                                               trace.stat().st_size < 200_000):
            time.sleep(0.05)
        assert proc.poll() is None, "the guest ended before the signal"
        qpid = int(pidfile.read_text())
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    assert proc.returncode == 128 + sig, err[-2000:]
    assert f"stopped by signal {int(sig)}" in err
    with pytest.raises(ProcessLookupError):
        os.kill(qpid, 0)
    recs = records(trace)  # every line parses
    assert recs[0]["k"] == "header" and recs[-1]["k"] == "end", recs[-1]
    assert sum(r["k"] == "pmi" for r in recs) > 10
    check_round_trip(recs)
    summary = subprocess.run([str(P4PMU), "trace", str(trace), "--summary"],
                             capture_output=True, text=True, timeout=120)
    assert summary.returncode == 0, summary.stderr[-2000:]
    assert "# end:" in log.read_text()


@pytest.mark.slow
def test_linux_perf_trace_agrees_with_the_log(tmp_path):
    """Linux's P4 driver from boot through `perf stat` and `perf record` (the default 5.10
    guest): the same invariants, the accesses C served among them, and the interrupts."""
    trace, log = tmp_path / "t.jsonl", tmp_path / "log.txt"
    cmd = [str(P4PMU), "linux", "--timeout", "400", "--plugin-opt", f"trace={trace}",
           "--plugin-opt", f"log={log}", "--",
           "perf stat -e instructions,cycles -- ls / >/dev/null && "
           "perf record -q -c 100000 -e instructions -o /tmp/p.data -- "
           "sh -c 'head -c 300000 /usr/bin/perf | gzip -c | wc -c'"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    recs = records(trace)
    check_round_trip(recs)
    assert trace_accesses(recs) == log_accesses(log.read_text().splitlines())
    assert {x["by"] for x in recs if x["k"] in ACCESS} == {"c", "python"}
    assert sum(x["k"] == "pmi" for x in recs) > 10
    assert any(x["k"] == "wrmsr" and x["reg"] == "MSR_CRU_ESCR2" and
               x["fields"]["event"] == "execution_event" for x in recs)
    summary = p4pmu_trace(trace, "--summary")
    assert "MSR_IQ_COUNTER0" in summary or "IQ_COUNTER0" in summary, summary


def test_insns_is_the_instructions_between_accesses(run_guest, tmp_path):
    """Between two reads of counter 12 counting every retired instruction (OS and USR,
    SDM Vol. 3B 18.15 instr_retired), `insns` advances by what the counter counted: a ring-0
    loop with no interrupt or exception in between."""
    all_instr = escr_value("instr_retired", "NBOGUSNTAG", t0_os=True, t0_usr=True)
    s = EvScript()
    s.wrmsr(escr_msr(C0), all_instr)
    s.wrmsr(counter_msr(12), 0)
    s.wrmsr(cccr_msr(12), cccr_value(12, C0))
    s.rdmsr(counter_msr(12), "a")
    s.loop("alu", 5000)
    s.rdmsr(counter_msr(12), "b")
    s.wrmsr(cccr_msr(12), 0)
    trace = tmp_path / "t.jsonl"
    r = run_guest("events32", script=s, plugin_opts=(f"trace={trace}",), timeout=120)
    r.require_completed()
    reads = [x for x in records(trace) if x["k"] == "rdmsr" and x["reg"] == "MSR_IQ_COUNTER0"]
    assert len(reads) == 2, reads
    counted = int(reads[1]["value"], 16) - int(reads[0]["value"], 16)
    assert counted > 5000 * 5, counted
    assert reads[1]["insns"] - reads[0]["insns"] == counted, (reads, counted)


def test_overflow_then_cascade_start(run_guest, tmp_path):
    """SDM 18.15.5.6 (Example 18-1): X (counter 12) overflows after 1,000 instructions and
    starts Y (counter 14, CASCADE): the trace has X's overflow, then Y's cascade start."""
    s = EvScript()
    s.wrmsr(escr_msr(C0), USR_INSTR)
    s.wrmsr(escr_msr("MSR_CRU_ESCR1"), USR_INSTR)
    s.wrmsr(counter_msr(12), preset(1000))
    s.wrmsr(counter_msr(14), 0)
    s.wrmsr(cccr_msr(14), cccr_value(14, "MSR_CRU_ESCR1", enable=False, cascade=True))
    s.wrmsr(cccr_msr(12), cccr_value(12, C0))
    s.loop("alu", 2000, user=True)
    s.rdmsr(counter_msr(14), "y")
    s.wrmsr(cccr_msr(12), 0)
    s.wrmsr(cccr_msr(14), 0)
    trace = tmp_path / "t.jsonl"
    r = run_guest("events32", script=s, plugin_opts=(f"trace={trace}",), timeout=120)
    r.require_completed()
    recs = records(trace)
    check_round_trip(recs)
    events = [(x["k"], x["counter"]) for x in recs if x["k"] in ("overflow", "cascade")]
    assert events[:2] == [("overflow", 12), ("cascade", 14)], events
    y = [x for x in recs if x["k"] == "rdmsr" and x["reg"] == "MSR_IQ_COUNTER2"][0]
    assert int(y["value"], 16) > 0


@pytest.mark.slow
def test_linux_hyper_threading_trace(tmp_path):
    """Two logical processors sharing one PMU (--smp 2 --threads 2): both vCPUs' records,
    each with its own time, the same invariants, and `p4pmu lint` reads it."""
    trace = tmp_path / "t.jsonl"
    cmd = [str(P4PMU), "linux", "--smp", "2", "--threads", "2", "--timeout", "400",
           "--plugin-opt", f"trace={trace}", "--",
           "perf stat -e instructions,cycles -- ls / >/dev/null"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    recs = records(trace)
    check_round_trip(recs)
    assert recs[0]["threads"] == 2
    lps = {(x["core"], x["lp"]) for x in recs if x["k"] in ACCESS}
    assert lps == {(0, 0), (0, 1)}, lps
    lint = subprocess.run([str(P4PMU), "lint", str(trace)], capture_output=True, text=True,
                          timeout=120)
    # the cycles alias's unwired ESCR select, on either sibling (docs/checker.md, Linux)
    assert lint.returncode == 1 and "[escr-select-unwired]" in lint.stdout, lint.stdout
