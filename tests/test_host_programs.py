"""Programs built on this machine, dynamically linked, run in the Linux guest unchanged
(qemu_glue/guest_libraries.py, docs/linux-guest.md "Your own programs").

dyncount and dyncount++ (tests/host_programs/) are built here with the machine's gcc and g++,
without -static, so they need this machine's glibc (newer than the 5.10 guest's 2.31) and,
for C++, its libstdc++ and libgcc_s.  Their loop is the `count` workload's: two runs that
differ only in the loop's length differ by the model's counts of count.S's loop
(perf_p4.program_counts), exactly -- everything else a dynamic program does (the loader,
glibc's start-up, printf) is the same in both runs, with address-space randomisation off.
One guest boot (the default 5.10 amd64 guest, as a newcomer runs it) serves every test here;
the refusals are checked before any boot.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from p4pmu.emulator import clockmodel as CM
from p4pmu.qemu_glue import perf_p4 as P
from p4pmu.qemu_glue import workloads as W

HERE = Path(__file__).parent / "host_programs"
P4PMU_LINUX = [sys.executable, "-m", "p4pmu.qemu_glue.cli", "linux",
               *shlex.split(os.environ.get("P4PMU_LINUX_TEST_ARGS", ""))]
N1, N2 = 100000, 300000  # loop lengths (the same number of digits: the same strtoul path)
PERIOD = 50000  # perf record -c
NBOGUS = "instr_retired:NBOGUSNTAG:u"  # non-bogus instructions: no predictor dependence
PROGRAMS = ("dyncount", "dyncount++")
_SECTION_RE = re.compile(r"^@@begin (\S+)\n(.*?)^@@end \1 (\d+)$", re.M | re.S)


def _build(tmp: Path) -> Path:
    out = tmp / "bin"
    out.mkdir()
    for cc, src, exe in (("gcc", "dyncount.c", "dyncount"), ("g++", "dyncount.cc", "dyncount++")):
        if shutil.which(cc) is None:
            pytest.fail(f"{cc} is not installed (./p4pmu.sh setup installs it)", pytrace=False)
        subprocess.run([cc, "-O2", "-g", "-o", str(out / exe), str(HERE / src)], check=True)
    return out


def _stat(prog: str, n: int) -> str:
    return f"perf stat -x, -e $(p4event {NBOGUS}),branches:u ./{prog} {n}"


def _script() -> list[tuple[str, str]]:
    s = [("aslr_off", "echo 0 > /proc/sys/kernel/randomize_va_space")]
    for prog in PROGRAMS:
        s.append((f"warm_{prog}", f"./{prog} 1000"))
        for i, n in enumerate((N1, N2, N1)):
            s.append((f"stat_{prog}_{i}", _stat(prog, n)))
    for prog in PROGRAMS:
        s += [(f"record_{prog}", f"perf record -q -o /root/{prog}.data -e instructions:u "
                                 f"-c {PERIOD} ./{prog} {N2} > /dev/null"),
              (f"report_{prog}", f"perf report -i /root/{prog}.data --stdio -n --sort dso,sym "
                                 "2>&1")]
    return s


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("host_programs")
    bindir = _build(tmp)
    script = "\n".join(f"echo '@@begin {k}'; {{ {c} ; }} 2>&1; echo \"@@end {k} $?\""
                       for k, c in _script())
    cmd = [*P4PMU_LINUX, "--timeout", "1500", "--add", f"{bindir}/dyncount",
           "--add", f"{bindir}/dyncount++", "--", script]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1620,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return {m.group(1): (int(m.group(3)), m.group(2)) for m in _SECTION_RE.finditer(r.stdout)}


def _counts(text: str) -> list[int]:
    """perf stat -x, values in the order of -e."""
    vals = []
    for ln in text.splitlines():
        parts = ln.split(",")
        if len(parts) >= 5 and parts[2] and parts[0].isdigit():
            vals.append(int(parts[0]))
    return vals


@pytest.mark.guest
@pytest.mark.parametrize("prog", PROGRAMS)
def test_a_host_built_program_runs_under_perf_stat(session, prog):
    status, text = session[f"warm_{prog}"]
    assert status == 0 and f"{prog} 1000: " in text, text
    for i in range(3):
        status, text = session[f"stat_{prog}_{i}"]
        assert status == 0, text
        assert "not found" not in text and "error while loading" not in text, text
        assert len(_counts(text)) == 2, text


@pytest.mark.guest
@pytest.mark.parametrize("prog", PROGRAMS)
def test_its_loop_counts_exactly_the_models_count_loop(session, prog):
    """run(N2) - run(N1) == the model's count.S loop of N2 - of N1: instructions (non-bogus)
    and retired branches; two runs of N1 agree to the event."""
    a, b, c = (_counts(session[f"stat_{prog}_{i}"][1]) for i in range(3))
    assert a == c, f"two runs of {prog} {N1} differ: {a} {c}"
    path = W.ensure_built("amd64") / "count"
    m1, m2 = (P.program_counts(path, n, CM.Predictor()) for n in (N1, N2))
    want_insns = m2.instructions - m1.instructions
    want_branches = sum(getattr(m2, k) - getattr(m1, k) for k in ("MMNP", "MMNM", "MMTP", "MMTM"))
    assert want_insns == 4 * (N2 - N1)  # count.S's own formula: the model agrees with it
    assert (b[0] - a[0], b[1] - a[1]) == (want_insns, want_branches)


@pytest.mark.guest
@pytest.mark.parametrize("prog", PROGRAMS)
def test_perf_record_of_a_host_built_program_names_its_functions(session, prog):
    status, text = session[f"record_{prog}"]
    assert status == 0, text
    status, text = session[f"report_{prog}"]
    assert status == 0, text
    rows = [ln.split() for ln in text.splitlines() if re.match(r"\s*[\d.]+%", ln)]
    spin = [r for r in rows if r[-1] == "spin" and r[2] == prog]
    assert spin, text
    # a sample every PERIOD instructions: the loop's 4 * N2 of them hold 4 * N2 / PERIOD
    # samples (one more or less where the loop's ends fall between two samples)
    assert abs(int(spin[0][1]) - 4 * N2 / PERIOD) <= 1, text


# -- refused before boot ----------------------------------------------------------------------


def _linux(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*P4PMU_LINUX, *args], capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL)


def test_a_program_for_the_other_architecture_is_refused_before_boot(tmp_path):
    exe = tmp_path / "hello"
    (tmp_path / "hello.c").write_text("int main(void) { return 0; }\n")
    subprocess.run(["gcc", "-O2", "-o", str(exe), str(tmp_path / "hello.c")], check=True)
    r = _linux("--arch", "i386", "--add", str(exe), "--", "./hello")
    assert r.returncode == 2, r.stderr
    assert "64-bit x86 (x86-64) program" in r.stderr and "--arch amd64" in r.stderr, r.stderr


def _program_with_own_library(tmp: Path) -> Path:
    """tmp/main, which returns 42 from libanswer.so (in tmp, found through no standard
    path)."""
    (tmp / "lib.c").write_text("int answer(void) { return 42; }\n")
    (tmp / "main.c").write_text("int answer(void);\nint main(void) { return answer(); }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(tmp / "libanswer.so"),
                    str(tmp / "lib.c")], check=True)
    subprocess.run(["gcc", "-o", str(tmp / "main"), str(tmp / "main.c"), f"-L{tmp}",
                    "-lanswer"], check=True)
    return tmp / "main"


def test_a_library_nobody_has_is_refused_before_boot(tmp_path):
    _program_with_own_library(tmp_path)
    r = _linux("--add", str(tmp_path / "main"), "--", "./main")
    assert r.returncode == 2, r.stderr
    assert "libanswer.so" in r.stderr and "--add" in r.stderr, r.stderr


@pytest.mark.guest
def test_the_users_own_library_goes_with_the_program(tmp_path):
    """A library found through LD_LIBRARY_PATH on the host goes into the guest with it."""
    _program_with_own_library(tmp_path)
    env = {**os.environ, "LD_LIBRARY_PATH": str(tmp_path)}
    r = subprocess.run([*P4PMU_LINUX, "--clock", "host", "--add", str(tmp_path / "main"), "--",
                        "./main"], capture_output=True, text=True, timeout=600, env=env,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 42, r.stdout + r.stderr
