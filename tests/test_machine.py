"""QEMU's life under p4pmu (qemu_glue/machine.py's P4Machine), on the real QEMU:

- a SIGKILLed `p4pmu linux` / `p4pmu qemu` takes its QEMU with it and leaves no file;
- no command leaves a temporary file behind (each runs with TMPDIR an empty folder);
- an in-memory file given to QEMU as /dev/fd/N is read and written by QEMU;
- the p4pmu plugin among QEMU's own arguments is refused, with or without --no-plugin;
- every command rejects an unknown --model with the same message;
- `./p4pmu.sh --help` prints its usage and nothing of its code.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from p4pmu.emulator.models import get_model
from p4pmu.qemu_glue.machine import P4Machine
from p4pmu.qemu_glue.provision import ensure_qemu

REPO_ROOT = Path(__file__).resolve().parents[1]
P4PMU = [sys.executable, "-m", "p4pmu.qemu_glue.cli"]


@pytest.fixture(scope="session")
def qemu():
    return ensure_qemu(progress=False)


@pytest.fixture
def private_tmp(tmp_path):
    """An empty folder for TMPDIR: what a run leaves there is what it leaked (every
    temporary file of p4pmu's comes from Python's tempfile, which follows TMPDIR; /tmp
    itself is shared with other runs on the machine)."""
    d = tmp_path / "tmpdir"
    d.mkdir()
    return d


def _env(tmpdir: Path) -> dict[str, str]:
    return {**os.environ, "TMPDIR": str(tmpdir)}


def _qemu_children(pid: int) -> list[int]:
    """The live QEMU processes whose parent is ``pid`` (from /proc)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z" and b"qemu-system" in cmdline:
            out.append(int(entry))
    return out


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _qemu_child(p: subprocess.Popen, timeout: float = 120) -> int:
    """The pid of the QEMU that p4pmu ``p`` started, once it runs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert p.poll() is None, p.communicate()
        kids = _qemu_children(p.pid)
        if kids:
            return kids[0]
        time.sleep(0.1)
    raise AssertionError("p4pmu started no QEMU")


def _kill_and_check(p: subprocess.Popen, tmpdir: Path) -> None:
    qpid = _qemu_child(p)
    time.sleep(2)  # QEMU well into its run (the plugin loaded, the guest running)
    assert _alive(qpid)
    p.kill()
    p.wait(timeout=10)
    deadline = time.monotonic() + 5
    while _alive(qpid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if _alive(qpid):
        os.kill(qpid, signal.SIGKILL)
        pytest.fail("QEMU outlived the SIGKILLed p4pmu")
    assert list(tmpdir.iterdir()) == []


@pytest.mark.guest
@pytest.mark.parametrize("args", [
    ["linux", "--", "sleep 60"],
    # -S: QEMU waits forever with its vCPU stopped
    ["qemu", "--", "-machine", "pc", "-display", "none", "-nodefaults", "-S"],
], ids=["linux", "qemu"])
def test_sigkilled_p4pmu_takes_qemu_with_it(private_tmp, args):
    p = subprocess.Popen([*P4PMU, *args], env=_env(private_tmp),
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        _kill_and_check(p, private_tmp)
    finally:
        if p.poll() is None:
            p.kill()
        p.stderr.close()


@pytest.mark.guest
@pytest.mark.parametrize("args", [
    ["linux", "--", "echo hello"],
    ["demo", "--replay"],
    ["qemu", "--", "-machine", "pc", "-display", "none", "-nodefaults", "-no-reboot",
     "-kernel", "/nonexistent-kernel"],
])
def test_no_run_leaves_a_temporary_file(private_tmp, args):
    r = subprocess.run([*P4PMU, *args], env=_env(private_tmp), capture_output=True, text=True,
                       timeout=300)
    if args[0] == "qemu":
        assert r.returncode == 1 and "nonexistent-kernel" in r.stderr, r.stderr
    else:
        assert r.returncode == 0, r.stderr[-3000:]
    assert list(private_tmp.iterdir()) == []


@pytest.mark.guest
@pytest.mark.slow
def test_bench_leaves_nothing_behind(private_tmp):
    """`p4pmu bench`'s guest scripts and serial ports live in memory: no folder stays."""
    r = subprocess.run([*P4PMU, "bench", "--repeat", "1", "--iterations", "20000",
                        "--msr-accesses", "100", "200"], env=_env(private_tmp),
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "MSR microbenchmark" in r.stdout
    assert list(private_tmp.iterdir()) == []


def test_memfd_is_read_and_written_by_qemu(qemu):
    """A guest-side file and a serial port in memory: QEMU loads the one as -bios (it must
    be 64 KiB) and writes nothing to the other; both go away with the machine."""
    firmware = bytes(0x10000)
    fds_before = sorted(os.listdir("/proc/self/fd"))
    with P4Machine(qemu, get_model("0F_04"), stdout=subprocess.DEVNULL,
                   stderr=subprocess.PIPE) as m:
        bios = m.add_memfd("bios", firmware)
        log = m.add_memfd("log", b"stale")
        m.qemu_args = ["-machine", "pc", "-display", "none", "-nodefaults", "-bios", bios,
                       "-chardev", f"file,id=c,path={log}", "-serial", "chardev:c",
                       "-no-reboot", "-S"]
        m.launch()
        time.sleep(1)
        assert m.exitcode is None, m.process.stderr.read()
        assert m.memfd_bytes(log) == b""  # QEMU opened it for writing (and truncated it)
        assert m.memfd_bytes(bios) == firmware
    assert m.exitcode is not None
    assert sorted(os.listdir("/proc/self/fd")) == fds_before  # every descriptor closed


# --------------------------------------------------------------------------------------------
# Usage errors


@pytest.mark.parametrize("spelling", ["{lib},model=0F_04", "file={lib},model=0F_02",
                                      "{lib}"])
def test_raw_p4pmu_plugin_argument_is_refused(tmp_path, spelling):
    lib = "/somewhere/build/plugin/libp4pmu_plugin.so"
    r = subprocess.run([*P4PMU, "qemu", "--", "-display", "none",
                        "-plugin", spelling.format(lib=lib)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert "QEMU's arguments load the p4pmu plugin" in r.stderr
    assert "--plugin-opt" in r.stderr and "Traceback" not in r.stderr


def test_raw_p4pmu_plugin_argument_with_no_plugin_is_refused():
    r = subprocess.run([*P4PMU, "qemu", "--no-plugin", "--", "-display", "none",
                        "-plugin=/x/libp4pmu_plugin.so"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert "but --no-plugin runs without it" in r.stderr


def test_a_plugin_given_with_plugin_is_recognised_under_another_name(tmp_path):
    mine = tmp_path / "my-build.so"
    mine.write_bytes(b"")
    r = subprocess.run([*P4PMU, "qemu", "--plugin", str(mine), "--dry-run", "--",
                        "-plugin", f"{mine},model=0F_04"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "load the p4pmu plugin" in r.stderr, r.stderr


def test_other_qemu_plugins_pass(tmp_path):
    r = subprocess.run([*P4PMU, "qemu", "--dry-run", "--", "-plugin", "/x/libinsn.so"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("-plugin") == 2 and "/x/libinsn.so" in r.stdout


def test_help_documents_the_plugin_refusal():
    r = subprocess.run([*P4PMU, "qemu", "--help"], capture_output=True, text=True, timeout=60)
    flat = " ".join(r.stdout.split())
    assert "must not load the p4pmu plugin with -plugin" in flat
    assert "With --no-plugin such a -plugin is refused too" in flat


@pytest.mark.parametrize("command", [["qemu"], ["linux"], ["demo"], ["demo", "--replay"],
                                     ["bench"]])
def test_every_command_rejects_a_bad_model_the_same_way(command):
    tail = {"qemu": ["--", "-display", "none"], "linux": ["--", "true"]}.get(command[0], [])
    r = subprocess.run([*P4PMU, *command, "--model", "foo", *tail], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith(f"p4pmu {command[0]}: error: --model: unknown CPU model 'foo'"), last


def test_p4pmu_sh_help_prints_the_usage_only():
    r = subprocess.run([str(REPO_ROOT / "p4pmu.sh"), "--help"], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("p4pmu.sh: set up everything")
    for word in ("./p4pmu.sh demo", "./p4pmu.sh test", "./p4pmu.sh setup", "needs no privileges"):
        assert word in r.stdout
    assert "set -euo" not in r.stdout and "#" not in r.stdout
