"""GDB sessions on the emulated PMU (docs/gdb.md): Debian's gdb, through pygdbmi
(`p4pmu.qemu_glue.gdb_session.GdbSession`), attached to the real QEMU gdbstub of a real guest
started by `p4pmu qemu --gdb` / `p4pmu linux --gdb`, with the extension's commands and the
plugin's control channel.

The bare-metal guest samples: counter 12 (IQ_COUNTER0) counts user instructions through
CRU_ESCR0, reloaded with -(P-1) by its NMI handler, which clears OVF and unmasks the LVT
entry.  Its serial output (the counter at the end, each PMI's place and counter) is compared
with the same guest run without gdb: a stop must change nothing the guest sees.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from p4pmu.emulator import decode
from p4pmu.plugin import bookkeeping_errors
from p4pmu.qemu_glue import sessions
from p4pmu.qemu_glue.gdb_launch import free_port
from p4pmu.qemu_glue.gdb_session import GdbError, GdbSession, GdbTimeout
from p4pmu.qemu_glue.guests import build as guest_build

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
    parse_events,
    preset,
)

pytestmark = pytest.mark.guest

CTR, ESCR, PERIOD, ITERS = 12, "MSR_CRU_ESCR0", 2000, 2000
MACHINE = ["-machine", "pc", "-m", "64", "-nodefaults", "-display", "none", "-no-reboot",
           "-device", "isa-debug-exit,iobase=0xf4,iosize=0x04"]


def _sampling_script(path: Path) -> Path:
    s = EvScript()
    cccr = cccr_value(CTR, ESCR, pmi_t0=True)
    s.pmi_config(PMI_CLEAR_OVF | PMI_RELOAD | PMI_UNMASK, counter=CTR,
                 reload=preset(PERIOD - 1), cccr=cccr, max_unmask=0, lvt=LVT_NMI | VEC_PMI)
    s.pmi_reset()
    s.lvt(LVT_NMI | VEC_PMI)
    s.wrmsr(escr_msr(ESCR), escr_value("instr_retired", "NBOGUSNTAG", t0_usr=True))
    s.wrmsr(counter_msr(CTR), preset(PERIOD - 1))
    s.wrmsr(cccr_msr(CTR), cccr)
    s.loop("alu", ITERS, user=True)
    s.wrmsr(cccr_msr(CTR), 0)
    s.rdmsr(counter_msr(CTR), "ctr_after")
    s.pmi_log()
    return s.write(path)


@pytest.fixture(scope="module")
def guest(guests, tmp_path_factory):
    """(ELF, script, the serial output of a run without gdb)."""
    work = tmp_path_factory.mktemp("gdb-guest")
    script = _sampling_script(work / "script.bin")
    elf = guest_build.guest_path("events32")
    serial = work / "plain.txt"
    subprocess.run([sys.executable, "-m", "p4pmu.qemu_glue.cli", "qemu", "--", *MACHINE,
                    "-serial", f"file:{serial}", "-kernel", str(elf), "-initrd", str(script)],
                   check=False, timeout=120, stdin=subprocess.DEVNULL)
    plain = serial.read_text()
    assert len(parse_events(plain.splitlines()).pmis) >= 5  # one per PERIOD instructions
    return elf, script, plain


def _session(guest, serial: Path, plugin_opts=()) -> GdbSession:
    elf, script, _ = guest
    return GdbSession.bare_metal(str(elf), qemu_args=["-serial", f"file:{serial}",
                                                      "-initrd", str(script)],
                                 plugin_opts=list(plugin_opts), start_timeout=60)


def _finish(s: GdbSession, serial: Path) -> str:
    stop = s.cont(timeout=60)
    assert stop.exited, stop
    deadline = time.monotonic() + 10
    while s.proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    return serial.read_text()


def test_info_shows_what_the_guest_programmed_as_the_trace_does(guest, tmp_path):
    trace = tmp_path / "trace.jsonl"
    with _session(guest, tmp_path / "serial.txt", [f"trace={trace}"]) as s:
        s.console("p4pmu break access IQ_CCCR0")
        stop = s.cont(timeout=30)
        assert stop.p4pmu["kind"] == "access" and stop.p4pmu["reg"] == "IQ_CCCR0", stop
        text = s.console("info p4pmu counters")
        state = s.pmu_state()
        s.console("p4pmu delete")
    ctr = state["counters"][CTR]
    written = [json.loads(ln) for ln in trace.read_text().splitlines()]
    wr = [r for r in written if r.get("k") == "wrmsr" and r.get("reg") == "MSR_IQ_CCCR0"][0]
    assert ctr["cccr"]["value"] == int(wr["value"], 16), (ctr["cccr"], wr)
    assert ctr["cccr"]["fields"] == wr["fields"], (ctr["cccr"]["fields"], wr["fields"])
    esc = [r for r in written if r.get("k") == "wrmsr" and r.get("reg") == "MSR_CRU_ESCR0"][0]
    assert ctr["escr"]["value"] == int(esc["value"], 16) and \
        ctr["escr"]["fields"] == esc["fields"], (ctr["escr"], esc)
    assert ctr["counting"] and ctr["escr"]["event"] == "instr_retired"
    assert ctr["cccr"]["text"] == decode.describe(0x36C, int(wr["value"], 16))
    assert "IQ_COUNTER0" in text and "instr_retired" in text, text
    assert "ENABLE" in text and "OVF_PMI_T0" in text, text


def test_set_changes_what_the_guest_then_reads_and_a_faulting_write_is_refused(guest,
                                                                              tmp_path):
    serial = tmp_path / "serial.txt"
    with _session(guest, serial) as s:
        s.pmu_break("access", reg="IQ_CCCR0")
        for _ in range(40):  # the handler reads and writes it too: until the final write of 0
            stop = s.cont(timeout=30)
            assert stop.p4pmu and stop.p4pmu["reg"] == "IQ_CCCR0", stop
            if stop.p4pmu["op"] == "wrmsr" and stop.p4pmu["value"] == 0:
                break
        assert stop.p4pmu["op"] == "wrmsr" and stop.p4pmu["value"] == 0, stop.p4pmu
        s.pmu_delete()
        out = s.console("p4pmu set IQ_COUNTER0 0x123456")
        assert "0x123456" in out, out
        assert s.pmu_counter(CTR) == 0x123456
        with pytest.raises(GdbError) as refused:
            s.console("p4pmu set IQ_CCCR0 0xffffffffffffffff")
        assert "refused" in str(refused.value) and "reserved" in str(refused.value).lower(), \
            refused.value
        with pytest.raises(GdbError, match="no PMU register"):
            s.pmu_write("NO_SUCH_CCCR", 0)
        got = _finish(s, serial)
    assert parse_events(got.splitlines())["ctr_after"] == 0x123456


def test_a_cccr_of_all_ones_set_from_gdb_storms_the_guest_and_undoing_it_lets_it_finish(
        guest, tmp_path):
    """docs/gdb.md's example: `p4pmu set IQ_CCCR0 0xffffffff` is accepted without strict=on
    (the reserved bits ignored, as the PMU model's lenient policy does) and makes the counter
    overflow on every clock (FORCE_OVF, a threshold every clock passes): the guest's handler
    is interrupted again as soon as it returns.  Writing the CCCR back lets the guest finish;
    the plugin's bookkeeping stays right throughout (no bookkeeping error at exit)."""
    serial = tmp_path / "serial.txt"
    with _session(guest, serial) as s:
        s.pmu_break("overflow", counter="IQ_COUNTER0")
        s.cont(timeout=30)
        s.pmu_delete()
        out = s.console("p4pmu set IQ_CCCR0 0xffffffff")
        assert "0x84039000 -> 0xffffffff" in out and "FORCE_OVF" in out, out
        pmis = s.pmu_break("pmi")
        for _ in range(5):  # the storm: interrupt after interrupt, the handler never done
            stop = s.cont(timeout=30)
            assert stop.p4pmu and stop.p4pmu["kind"] == "pmi", stop
        assert s.pmu_state()["counters"][CTR]["ovf"]
        s.pmu_delete(pmis)
        s.console(f"p4pmu set IQ_CCCR0 {cccr_value(CTR, ESCR, pmi_t0=True):#x}")
        got = _finish(s, serial)
        output = s.output()
    assert bookkeeping_errors(output) == [], output
    assert "ctr_after" in got


@pytest.mark.parametrize("kind", ["overflow", "pmi"])
def test_break_stops_within_a_block_and_continue_keeps_every_count(guest, tmp_path, kind):
    serial = tmp_path / "serial.txt"
    elf, _, plain = guest
    isr2 = _symbol(elf, "isr2")  # the NMI handler
    with _session(guest, serial) as s:
        s.console(f"p4pmu break {kind}" + (" IQ_COUNTER0" if kind == "overflow" else ""))
        pcs = []
        for _ in range(3):
            stop = s.cont(timeout=30)
            assert stop.signal == "SIGINT" and stop.p4pmu["kind"] == kind, stop
            pcs.append((stop.pc, stop.p4pmu["pc"]))
            st = s.pmu_state()  # before the handler clears it, OVF is set either way
            assert st["counters"][CTR]["ovf"] and st["counters"][CTR]["counting"], st
            assert s.register("rip") == stop.pc
        why = s.console("p4pmu why")
        assert "P4PMU breakpoint 1" in why, why
        s.console("p4pmu delete")
        got = _finish(s, serial)
    for stop_pc, event_pc in pcs:
        if kind == "overflow":
            # at the entry of the block where the overflow was found, or, when its PMI was
            # delivered at that same entry, at the handler's first instruction
            assert stop_pc in (event_pc, isr2), (hex(stop_pc), hex(event_pc))
        else:  # the interrupt is taken: the handler's first instruction
            assert stop_pc == isr2, hex(stop_pc)
    assert got == plain  # counts, PMI places and counters: as without gdb


def _symbol(elf: Path, name: str) -> int:
    out = subprocess.run(["nm", str(elf)], capture_output=True, text=True, check=True).stdout
    return next(int(ln.split()[0], 16) for ln in out.splitlines() if ln.split()[-1] == name)


def test_monitor_commands_convenience_functions_and_the_trace_switch_work(guest, tmp_path):
    trace = tmp_path / "between.jsonl"
    with _session(guest, tmp_path / "serial.txt") as s:
        assert "11.1" in s.console("monitor info version")
        s.wait_for("overflow", counter=CTR, timeout=30)
        value = s.pmu_counter(CTR)
        out = s.console(f"print $p4pmu_counter({CTR})")
        assert out.strip().endswith(f"= {value}"), out
        assert s.console(f"print $p4pmu_ovf({CTR})").strip().endswith("= 1")
        s.console(f"p4pmu trace on {trace}")
        s.wait_for("pmi", timeout=30)
        s.wait_for("pmi", timeout=30)  # one handler's accesses in between
        s.console("p4pmu trace off")
    records = [json.loads(ln) for ln in trace.read_text().splitlines()]
    assert records[0]["k"] == "header" and records[-1]["k"] == "end"
    kinds = {r["k"] for r in records}
    assert {"rdmsr", "wrmsr", "pmi"} <= kinds, kinds
    reload = [r for r in records if r["k"] == "wrmsr" and r.get("reg") == "MSR_IQ_COUNTER0"]
    assert reload and int(reload[0]["value"], 16) == preset(PERIOD - 1)


def test_a_failing_script_leaves_nothing_behind(guest, tmp_path):
    kept = {}
    with pytest.raises(AssertionError, match="on purpose"):
        with _session(guest, tmp_path / "serial.txt") as s:
            kept.update(pid=s.proc.pid, qemu=s.session["qemu_pid"], dir=s.session["dir"],
                        gdb=s.gdb.gdb_process.pid)
            s.wait_for("pmi", timeout=30)
            raise AssertionError("on purpose")
    for pid in (kept["pid"], kept["qemu"], kept["gdb"]):
        assert not _alive(pid), f"process {pid} left behind"
    assert not Path(kept["dir"]).exists()
    assert not any(x["p4pmu_pid"] == kept["pid"] for x in sessions.live_sessions())


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


# --------------------------------------------------------------------------------------------
# the control channel's robustness (docs/gdb.md, "Framing")


def _raw(path: str, data: bytes, read: bool = True) -> bytes:
    with socket.socket(socket.AF_UNIX) as c:
        c.settimeout(10)
        c.connect(path)
        c.sendall(data)
        if not read:
            return b""
        out = b""
        while not out.endswith(b"\n"):
            chunk = c.recv(65536)
            if not chunk:
                break
            out += chunk
        return out


def test_the_channel_answers_garbage_and_oversize_and_survives_a_vanishing_client(guest,
                                                                                   tmp_path):
    with _session(guest, tmp_path / "serial.txt") as s:
        path = s.session["control"]
        assert os.stat(s.session["dir"]).st_mode & 0o777 == 0o700
        for junk in (b"\xff\xfe garbage\n", b"[1, 2]\n", b'{"op": "fly"}\n',
                     b'{"op": "write", "reg": "IQ_CCCR0"}\n'):
            answer = json.loads(_raw(path, junk))
            assert answer["ok"] is False and answer["error"], answer
        big = b'{"op": "hello", "pad": "' + b"x" * (10 * 1024 * 1024) + b'"}\n'
        try:
            answer = json.loads(_raw(path, big))
            assert answer["ok"] is False and "too large" in answer["error"], answer
        except (BrokenPipeError, ConnectionResetError):
            pytest.fail("the channel closed without an answer to a 10 MB request")
        _raw(path, b'{"op": "state", "vcp', read=False)  # gone midway
        with socket.socket(socket.AF_UNIX) as c:  # gone before its answer
            c.connect(path)
            c.sendall(b'{"op": "state"}\n')
        assert s.control.request("hello")["version"] == 1
        assert s.pmu_state()["counters"][CTR]["value"] == 0


def test_the_channel_refuses_another_user(guest, tmp_path):
    with _session(guest, tmp_path / "serial.txt") as s:
        path, d = s.session["control"], s.session["dir"]
        os.chmod(d, 0o711)  # let the other uid reach the socket: the server must refuse it
        os.chmod(path, 0o777)
        # (the refusal comes at once: the answer is read before anything is sent)
        code = ("import socket,sys; c=socket.socket(socket.AF_UNIX); c.connect(sys.argv[1]); "
                "print(c.makefile('rb').readline().decode())")
        r = subprocess.run(["/usr/bin/python3", "-c", code, path], user="nobody",
                           capture_output=True, text=True, timeout=30)
        answer = json.loads(r.stdout)
        assert answer["ok"] is False and "may not use this channel" in answer["error"], r
        os.chmod(d, 0o700)
        r = subprocess.run(["/usr/bin/python3", "-c", code, path], user="nobody",
                           capture_output=True, text=True, timeout=30)
        assert r.returncode != 0 and "Permission denied" in r.stderr, r
        assert s.control.request("hello")["ok"]


# --------------------------------------------------------------------------------------------
# a Linux guest (`p4pmu linux --gdb`: one TCG thread, the virtual clock)

LINUX_CMD = ("perf record -e instructions:u -c 100000 -o /tmp/p.data busybox md5sum "
             "/usr/bin/perf >/dev/null 2>&1; perf script -i /tmp/p.data 2>/dev/null | wc -l")


@pytest.mark.slow
def test_linux_perf_record_stops_at_its_overflows_and_pmis_and_every_sample_is_kept():
    r = subprocess.run([sys.executable, "-m", "p4pmu.qemu_glue.cli", "linux", "--", LINUX_CMD],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    samples = int(r.stdout.split()[-1])
    assert samples > 500  # md5sum of a 9 MB file: about 10^8 user instructions
    with GdbSession.linux(LINUX_CMD, start_timeout=300) as s:
        stop = s.wait_for("overflow", timeout=120)  # any counter: perf's comes first
        assert stop.signal == "SIGINT" and stop.p4pmu["kind"] == "overflow", stop
        state = s.pmu_state()
        first = state["counters"][stop.p4pmu["counter"]]
        assert first["ovf"] and first["escr"]["event"] == "instr_retired", first
        # the LVT entry is known at every stop, also when QEMU stops the vCPU before the
        # block entry where it would hold (-icount: no idle callback reads it then)
        assert state["lvt"] is not None and state["lvt"] >> 8 & 7 == 4, state["lvt"]  # NMI
        for _ in range(3):
            stop = s.wait_for("pmi", timeout=120)
            assert stop.signal == "SIGINT" and stop.pc >= 0xFFFFFFFF80000000, stop  # the kernel
            assert stop.p4pmu["vector"] >> 8 & 7 == 4  # perf's PMI is an NMI
            assert stop.p4pmu["pc"] < 0x800000000000  # interrupted in user space (md5sum)
            lvt = s.pmu_state()["lvt"]
            assert lvt is not None and lvt & 1 << 16, lvt  # masked as it delivered (SDM 10.5.1)
        state = s.pmu_state()
        events = {c["escr"]["event"]: c for c in state["counters"] if c["counting"]}
        assert set(events) == {"instr_retired", "global_power_events"}, events  # + watchdog
        perf = [events["instr_retired"]]
        assert perf[0]["ovf"] and state["pmi_pending"] and state["lvt"] & 1 << 16  # masked
        text = s.console("info p4pmu")
        assert perf[0]["name"] in text and "instr_retired" in text, text
        end = s.cont(timeout=300)
        assert end.exited, end
        deadline = time.monotonic() + 10
        while s.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert s.proc.returncode == 0, s.output()[-2000:]
        assert int(s.output().split()[-1]) == samples  # as many samples as without the stops


def test_a_killed_p4pmu_takes_qemu_along_and_its_files_go_at_the_next_look(guest, tmp_path):
    s = _session(guest, tmp_path / "serial.txt")
    try:
        s.start()
        qemu, d = s.session["qemu_pid"], s.session["dir"]
        os.kill(s.proc.pid, 9)  # no chance to clean up
        s.proc.wait(timeout=10)
        deadline = time.monotonic() + 10
        while _alive(qemu) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(qemu), "QEMU outlived the p4pmu that started it"
        assert Path(d).exists()
        assert all(x["p4pmu_pid"] != s.proc.pid for x in sessions.live_sessions())
        assert not Path(d).exists(), "the dead session's sockets are left behind"
    finally:
        s.close()


def test_p4pmu_gdb_attaches_to_the_running_session_with_the_extension_and_symbols(guest,
                                                                                  tmp_path):
    """The interactive path as a user types it: `p4pmu qemu --gdb`, then `p4pmu gdb`."""
    elf, script, _ = guest
    port = free_port()
    qemu = subprocess.Popen(
        [sys.executable, "-m", "p4pmu.qemu_glue.cli", "qemu", f"--gdb={port}", "--", *MACHINE,
         "-serial", f"file:{tmp_path / 'serial.txt'}", "-kernel", str(elf), "-initrd",
         str(script)], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not any(x["p4pmu_pid"] == qemu.pid for x in sessions.live_sessions()):
            assert qemu.poll() is None, qemu.stdout.read()
            assert time.monotonic() < deadline, "no session recorded within 60 s"
            time.sleep(0.1)
        r = subprocess.run(
            [sys.executable, "-m", "p4pmu.qemu_glue.cli", "gdb", "--port", str(port),
             "--batch", "-ex", "p4pmu break pmi", "-ex", "continue", "-ex", "info p4pmu",
             "-ex", "kill"], stdin=subprocess.DEVNULL, capture_output=True, text=True,
            timeout=120)
        out = r.stdout + r.stderr
        assert "1 vCPU," in out, out  # (QEMU's -smp, also before the vCPU thread started)
        assert "in isr2 ()" in out, out  # the ELF's symbols (the session's -kernel)
        assert "stopped by P4PMU breakpoint 1: PMI delivered (NMI)" in out, out
        assert "IQ_COUNTER0" in out and "instr_retired" in out, out
        assert qemu.wait(timeout=30) == 0  # gdb's kill ends QEMU, p4pmu cleans up
        assert "the guest waits for gdb" in qemu.stdout.read()
        assert all(x["p4pmu_pid"] != qemu.pid for x in sessions.live_sessions())
    finally:
        if qemu.poll() is None:
            os.killpg(qemu.pid, 9)


def test_two_logical_processors_sharing_a_pmu(guest, tmp_path):
    """-smp 2,threads=2: both vCPUs parked at a stop, `info p4pmu` of gdb's selected thread
    (thread N is vCPU N-1) shows its logical processor of the one PMU, and the run's output
    equals that of the same run without gdb."""
    elf, script, _ = guest
    plain = tmp_path / "plain.txt"
    subprocess.run([sys.executable, "-m", "p4pmu.qemu_glue.cli", "qemu", "--", *MACHINE,
                    "-smp", "2,threads=2", "-serial", f"file:{plain}", "-kernel", str(elf),
                    "-initrd", str(script)], check=False, timeout=120, stdin=subprocess.DEVNULL)
    serial = tmp_path / "serial.txt"
    with GdbSession.bare_metal(str(elf), qemu_args=["-smp", "2,threads=2", "-serial",
                                                    f"file:{serial}", "-initrd", str(script)],
                               start_timeout=60) as s:
        assert s.control.request("hello")["vcpus"] == 2
        stop = s.wait_for("overflow", counter=CTR, timeout=30)
        assert stop.p4pmu["vcpu"] == 0
        both = s.control.request("state")["vcpus"]
        assert [(v["vcpu"], v["core"], v["lp"]) for v in both] == [(0, 0, 0), (1, 0, 1)]
        assert both[0]["counters"][CTR]["value"] == both[1]["counters"][CTR]["value"]
        s.console("thread 2")
        assert "vCPU 1 (core 0, logical processor 1)" in s.console("info p4pmu")
        s.console("thread 1")
        assert "vCPU 0 (core 0, logical processor 0)" in s.console("info p4pmu")
        got = _finish(s, serial)
    assert got == plain.read_text()


def test_state_is_refused_while_the_guest_runs_and_breakpoints_can_be_set_meanwhile(guests,
                                                                                   tmp_path):
    s_path = tmp_path / "long.txt"
    s_path.write_text("w 0x3b8 0x4000204\nw 0x36c 0x39000\nloop alu 2000000000 u\n")
    elf = guest_build.guest_path("events32")
    with GdbSession.bare_metal(str(elf), qemu_args=["-initrd", str(s_path)],
                               start_timeout=60) as s:
        deadline = time.monotonic() + 60
        while True:  # until the guest has made its two writes (late on a busy host)
            s._mi("-exec-continue")  # and do not wait
            time.sleep(0.2)
            assert s.interrupt(), "gdb's stop was not seen"
            if s.pmu_state()["counters"][CTR]["counting"]:
                break
            assert time.monotonic() < deadline, "the guest never programmed its counter"
        s._mi("-exec-continue")  # and do not wait
        deadline = time.monotonic() + 10
        while s.control.request("status")["stopped"]:  # until the vCPU runs
            assert time.monotonic() < deadline
            time.sleep(0.01)
        with pytest.raises(GdbError, match="the guest is running"):
            s.pmu_state()
        with pytest.raises(GdbError, match="the guest is running"):
            s.pmu_write("IQ_COUNTER0", 1)
        number = s.pmu_break("access")  # served at any time
        assert s.interrupt(), "gdb's stop was not seen"  # (it can come with the answer)
        assert s.control.request("status")["stopped"]
        assert s.pmu_state()["counters"][CTR]["counting"]
        step = s.stepi()
        assert step.reason == "end-stepping-range" and step.p4pmu is None, step
        assert s.control.request("breaks")["breaks"][0]["number"] == number
        with pytest.raises(GdbTimeout, match="did not stop within 1 s"):
            s.cont(timeout=1)  # the loop makes no PMU access
        assert s.control.request("status")["stopped"]  # interrupted: still usable
        assert s.pmu_counter(CTR) > 0
