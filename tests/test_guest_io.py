"""Standard input in, files out, and the driver developer's tools in the Linux guest
(qemu_glue/linux_ports.py, qemu_glue/linux_image/guest_init.py; docs/linux-guest.md
"Standard input and --fetch", "A driver developer's tools").

Real guests on the real QEMU with the plugin; the checks compare with what the host sent or
computed itself (byte for byte, SHA-256), never with an earlier run.
"""
from __future__ import annotations

import hashlib
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from test_trace import _processes_with

from p4pmu.emulator import tables as T
from p4pmu.qemu_glue import linux_ports
from p4pmu.qemu_glue.linux_image import guest_init

P4PMU_LINUX = [sys.executable, "-m", "p4pmu.qemu_glue.cli", "linux",
               *shlex.split(os.environ.get("P4PMU_LINUX_TEST_ARGS", ""))]
HERE = Path(__file__).parent / "host_programs"
TIMEOUT = 1500  # a hang detector only (docs/linux-guest.md "Tests")


def linux(*args: str, stdin=subprocess.DEVNULL, cwd: Path | None = None,
          clock: str = "host") -> subprocess.CompletedProcess:
    """p4pmu linux with `args`; stdin: bytes to pipe in, or a file object / DEVNULL."""
    cmd = [*P4PMU_LINUX, "--clock", clock, "--timeout", str(TIMEOUT), *args]
    if isinstance(stdin, bytes):
        return subprocess.run(cmd, input=stdin, capture_output=True, timeout=TIMEOUT + 120,
                              cwd=cwd)
    return subprocess.run(cmd, stdin=stdin, capture_output=True, timeout=TIMEOUT + 120, cwd=cwd)


def out(r: subprocess.CompletedProcess) -> str:
    return r.stdout.decode(errors="replace") + r.stderr.decode(errors="replace")


# -- standard input ------------------------------------------------------------------------------


@pytest.mark.guest
def test_a_piped_script_runs_in_the_guests_shell():
    """The issue's own example, on the default (virtual) clock."""
    r = linux("--", "sh", stdin=b"echo hi\nexit 3\n", clock="virtual")
    assert r.returncode == 3, out(r)
    assert r.stdout == b"hi\n", out(r)


@pytest.mark.guest
def test_binary_stdin_arrives_whole_and_fetch_brings_files_and_folders_back(tmp_path):
    data = os.urandom(2_000_000) + bytes(range(256)) * 64
    script = ("cat > /tmp/in.bin && sha256sum /tmp/in.bin && mkdir -p /tmp/tree/a/b && "
              "printf 'leaf\\n' > /tmp/tree/a/b/leaf && ln -s a/b/leaf /tmp/tree/link && "
              "chmod 0750 /tmp/tree/a/b/leaf && exit 7")
    r = linux("--fetch", "/tmp/in.bin", "--fetch", "/tmp/tree:got/", "--", script,
              stdin=data, cwd=tmp_path)
    assert r.returncode == 7, out(r)  # the command's status: the fetches went well
    assert r.stdout.split()[0].decode() == hashlib.sha256(data).hexdigest(), out(r)
    assert (tmp_path / "in.bin").read_bytes() == data
    tree = tmp_path / "got" / "tree"
    assert (tree / "a" / "b" / "leaf").read_text() == "leaf\n"
    assert os.readlink(tree / "link") == "a/b/leaf"
    assert (tree / "a" / "b" / "leaf").stat().st_mode & 0o777 == 0o750  # (folders: umask's)


@pytest.mark.guest
def test_stdin_is_dev_null_with_no_stdin_and_then_no_port_is_made(tmp_path):
    probe = "ls /sys/class/virtio-ports 2>&1; cat; echo end"
    r = linux("-n", "--", probe, stdin=b"not for the guest\n")
    assert r.returncode == 0, out(r)
    assert b"not for the guest" not in r.stdout and r.stdout.endswith(b"end\n"), out(r)
    assert b"No such file" in r.stdout, out(r)  # no virtio-serial device at all


@pytest.mark.guest
def test_a_missing_fetch_is_an_error_after_the_run(tmp_path):
    r = linux("--fetch", "/no/such/file", "--", "echo ran", cwd=tmp_path)
    assert r.returncode == 125, out(r)
    assert r.stdout == b"ran\n"
    assert "--fetch /no/such/file: /no/such/file does not exist in the guest" in out(r)
    assert list(tmp_path.iterdir()) == []  # nothing half-made on the host


def test_a_fetch_into_a_missing_folder_is_refused_before_boot(tmp_path):
    r = linux("--fetch", f"/etc/hosts:{tmp_path}/a/b/hosts", "--", "true")
    assert r.returncode == 2, out(r)
    assert "is not an existing folder" in out(r)


def _spooled(tmp_path: Path, specs: list[str], stream: bytes) -> linux_ports.Ports:
    """Ports whose fetch spool holds `stream`, as QEMU would have written it."""
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        ports = linux_ports.Ports(False, [linux_ports.parse_fetch(s) for s in specs])
    finally:
        os.chdir(cwd)
    ports._spool.write(stream)
    ports._spool.flush()
    return ports


def _record(i: int, name: str, data: bytes) -> bytes:
    """One record of /init's fetch stream: its header and a tar archive of one file."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
    archive = buf.getvalue()
    return f"{guest_init.FETCH_MARKER} {i} {len(archive)}\n".encode() + archive


def test_a_fetch_record_cut_short_is_an_error_naming_it(tmp_path):
    """A record shorter than its header's size (a guest stopped mid-send) is reported for its
    --fetch, the records before it are unpacked, and nothing of it is left on the host."""
    whole = _record(0, "a.bin", b"a" * 5000)
    cut = _record(1, "b.bin", os.urandom(20000))
    ports = _spooled(tmp_path, ["/tmp/a.bin", "/tmp/b.bin", "/tmp/c.bin"],
                     whole + cut[:len(cut) // 2])
    errors = ports.unpack()
    size = int(cut.split(b"\n", 1)[0].split()[2])
    came = len(cut) // 2 - len(cut.split(b"\n", 1)[0]) - 1
    assert errors == [
        f"--fetch /tmp/b.bin: cut short ({came:,} of {size:,} bytes came back); nothing of it "
        "was unpacked",
        "--fetch /tmp/c.bin: nothing came back (the guest ended before /init sent it)"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.bin"]
    assert (tmp_path / "a.bin").read_bytes() == b"a" * 5000


def test_a_damaged_fetch_stream_is_an_error_not_a_traceback(tmp_path):
    """A header that is not /init's, an index out of range, or an archive tar cannot read:
    a message each, what came before kept."""
    good = _record(0, "a.bin", b"x" * 100)
    for tail, error in [
            (b"P4PMU-FETCH one 12\n", "the guest's fetch stream is damaged"),
            (b"P4PMU-FETCH 7 12\n" + b"z" * 12, "the guest's fetch stream is damaged"),
            (b"P4PMU-FETCH 1 1024\n" + b"\xff" * 1024, "--fetch /tmp/b.bin: cannot unpack")]:
        ports = _spooled(tmp_path, ["/tmp/a.bin", "/tmp/b.bin"], good + tail)
        errors = ports.unpack()
        assert errors and errors[0].startswith(error), (tail[:20], errors)
        assert (tmp_path / "a.bin").read_bytes() == b"x" * 100
        assert not (tmp_path / "b.bin").exists()


# -- perf record in the guest, perf report on the host -------------------------------------------


@pytest.mark.guest
def test_a_guest_recording_reads_on_the_host_with_the_guests_symbols(tmp_path):
    """perf.data and the guest's build-id cache (~/.debug: the program, its libraries and
    the kernel's kallsyms, which perf record fills) come back; the host's perf reads them
    with --buildid-dir and names the program's function and kernel functions."""
    perf = shutil.which("perf")
    if perf is None:
        pytest.fail("the host has no perf (./p4pmu.sh setup installs linux-perf)",
                    pytrace=False)
    subprocess.run(["gcc", "-O2", "-g", "-o", str(tmp_path / "dyncount"),
                    str(HERE / "dyncount.c")], check=True)
    r = linux("--add", str(tmp_path / "dyncount"), "--fetch", "perf.data",
              "--fetch", ".debug:guest-debug/", "--",
              "perf record -q -o perf.data -e cycles -c 100000 ./dyncount 3000000 > /dev/null",
              cwd=tmp_path)
    assert r.returncode == 0, out(r)
    rep = subprocess.run([perf, "--buildid-dir", str(tmp_path / "guest-debug" / ".debug"),
                          "report", "-i", str(tmp_path / "perf.data"), "--stdio",
                          "--sort", "dso,sym"], capture_output=True, text=True, timeout=120)
    assert rep.returncode == 0, rep.stderr
    rows = [ln.split() for ln in rep.stdout.splitlines() if re.match(r"\s*[\d.]+%", ln)]
    user = [r for r in rows if r[1] == "dyncount" and r[-1] == "spin"]
    kernel = [r for r in rows if r[1] == "[kernel.kallsyms]" and r[2] == "[k]"]
    assert user and float(user[0][0].rstrip("%")) > 50, rep.stdout
    assert kernel and not any(r[-1].startswith("0x") for r in kernel), rep.stdout


# -- the driver developer's tools ------------------------------------------------------------------


@pytest.mark.guest
def test_rdmsr_and_wrmsr_reach_the_emulated_pmu():
    """msr is loaded at boot; wrmsr of an ESCR reads back with rdmsr, and a reserved bit gets
    the #GP the model raises (the msr driver reports it as an I/O error)."""
    escr = T.ESCR_BY_NAME["MSR_BSU_ESCR0"]
    f = T.ESCR_FIELD
    value = (0x0C << f["EVENT_SELECT"].lo) | (0x0100 << f["EVENT_MASK"].lo) | \
        (1 << f["T0_USR"].lo)
    reserved = 1 << 32  # faults by default (T.RESERVED_POLICY; strict=on: every reserved bit)
    assert T.RESERVED_POLICY["escr"][0] & reserved
    script = (f"lsmod | grep -c '^msr '; wrmsr -p0 {escr.msr:#x} {value:#x}; "
              f"rdmsr -p0 -x {escr.msr:#x}; wrmsr -p0 {escr.msr:#x} {value | reserved:#x}; "
              "echo status=$?")
    r = linux("--", script)
    assert r.returncode == 0, out(r)
    lines = r.stdout.decode().split("\n")
    assert lines[0] == "1", out(r)
    assert int(lines[1], 16) == value, out(r)
    assert "status=" in r.stdout.decode() and "status=0" not in r.stdout.decode(), out(r)
    assert f"{escr.msr:x}" in r.stderr.decode().lower(), out(r)  # wrmsr's own complaint


@pytest.mark.guest
def test_addr2line_and_objdump_are_there_for_perf():
    r = linux("--", "addr2line --version | head -1 && objdump --version | head -1")
    assert r.returncode == 0, out(r)
    assert b"addr2line" in r.stdout and b"objdump" in r.stdout, out(r)


# -- nothing left behind -----------------------------------------------------------------------


@pytest.mark.guest
@pytest.mark.parametrize("ok", (True, False), ids=("done", "timeout"))
def test_nothing_is_left_behind(tmp_path, ok):
    """A run with standard input, --fetch and a host-built program, finished or stopped by
    its timeout: no temporary file or folder (TMPDIR points at an empty folder of its own)
    but the kernel log a failed run keeps and names, nothing beside the fetched files, no
    process of it."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    subprocess.run(["gcc", "-O2", "-o", str(tmp_path / "dyncount"), str(HERE / "dyncount.c")],
                   check=True)
    got = tmp_path / "got"
    got.mkdir()
    command = "cat > in.txt; ./dyncount 1000" + ("" if ok else "; sleep 100000")
    # (stopped by the timeout while booting or while COMMAND runs: the same is left behind)
    cmd = [*P4PMU_LINUX, "--clock", "host", "--timeout", "1500" if ok else "12",
           "--add", str(tmp_path / "dyncount"), "--fetch", f"in.txt:{got}/", "--", command]
    r = subprocess.run(cmd, input=b"some input\n", capture_output=True, timeout=1620,
                       env={**os.environ, "TMPDIR": str(tmpdir)})
    assert r.returncode == (0 if ok else 124), out(r)
    left = list(tmpdir.iterdir())
    if ok:
        assert left == []
    else:  # a failed run keeps its kernel log, and says where (docs/linux-guest.md)
        assert len(left) == 1 and left[0].name.startswith("p4pmu-linux-"), left
        assert str(left[0]) in r.stderr.decode(), out(r)
    assert [p.name for p in got.iterdir()] == (["in.txt"] if ok else []), list(got.iterdir())
    assert _processes_with(str(tmp_path)) == []
