"""pytest fixtures for the guest tests (docs/architecture.md, contract 3).

- `guests` (session): builds every bare-metal guest (p4pmu.qemu_glue.guests.build) once per
  session.
- `run_guest` (session): a callable
      run_guest(name, model="0F_04", plugin_opts=(), qemu_args=(), timeout=60,
                script=None, plugin=True, env=None) -> GuestRun
  that boots a guest through ``<repo>/.venv/bin/p4pmu qemu --model M [--plugin-opt K=V]...
  -- <QEMU args>`` (plugin=True) or through the bare provisioned QEMU with the model's -cpu
  (plugin=False: no PMU emulation; used to test the guest runtime itself), with COM1 going to
  a file, and returns the exit status and the parsed serial output; a run whose plugin reports
  a counting bookkeeping error fails the test (require_consistent_counting).  `script` (a
  p4pmu.qemu_glue.guests.script.Script) is passed as a multiboot module (-initrd); `env`:
  extra environment variables for QEMU (e.g. P4PMU_BRANCH_TRACE).
- `bridge_run` (session): bridge_run(bits, model, strict=False) -> BridgeRun, the full bridge
  test script (guests/suite.py) run once per (bits, model, strict) and shared by every test
  that looks at a part of it, with the oracle's expectations.

Tests that need the plugin fail when it is not built (`p4pmu setup` builds it); set
P4PMU_ALLOW_NO_PLUGIN=1 to skip them instead, e.g. while working on the emulator alone.
"""
from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from p4pmu.qemu_glue.guests import build as guest_build
from p4pmu.qemu_glue.guests import layout
from p4pmu.qemu_glue.guests.script import GuestOutput, Script, parse_serial

TESTS_DIR = Path(__file__).resolve().parent
REPO_ROOT = TESTS_DIR.parent
if str(TESTS_DIR) not in sys.path:
    sys.path.insert(0, str(TESTS_DIR))

from guests.oracle import Oracle  # noqa: E402

P4PMU = REPO_ROOT / ".venv" / "bin" / "p4pmu"
QEMU_MACHINE_ARGS = ("-machine", "pc", "-m", "64", "-nodefaults", "-display", "none",
                     "-no-reboot", "-device", "isa-debug-exit,iobase=0xf4,iosize=0x04")


# --------------------------------------------------------------------------------------------
# results


@dataclass
class GuestRun:
    name: str
    model: str
    plugin: bool
    cmd: list[str]
    status: int | None  # QEMU's exit status; None on timeout
    out: GuestOutput
    stderr: str
    seconds: float
    timed_out: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def completed(self) -> bool:
        return self.status == layout.EXIT_DONE and self.out.done

    def describe(self, tail: int = 15) -> str:
        last = "\n    ".join(self.out.lines[-tail:]) or "(nothing)"
        err = "\n    ".join(self.stderr.strip().splitlines()[-tail:]) or "(nothing)"
        st = "timed out" if self.timed_out else f"exit status {self.status}"
        return (f"guest {self.name} (model {self.model}, "
                f"{'with' if self.plugin else 'without'} plugin): {st} after "
                f"{self.seconds:.1f} s\n  command: {' '.join(self.cmd)}\n"
                f"  last serial lines:\n    {last}\n  stderr:\n    {err}")

    def require_completed(self) -> GuestRun:
        if not self.completed:
            why = ""
            if self.out.panic:
                why = f"guest panicked: {self.out.panic}\n"
            elif self.status == layout.EXIT_NO_LONG_MODE:
                why = "the CPU has no long mode\n"
            elif not self.out.booted:
                why = "the guest printed nothing: did QEMU start it?\n"
            pytest.fail(f"{why}{self.describe()}", pytrace=False)
        return self


# --------------------------------------------------------------------------------------------
# plugin / QEMU availability


def plugin_missing_reason() -> str | None:
    if not P4PMU.exists():
        return f"{P4PMU} is missing (pip install -e . in the venv)"
    if importlib.util.find_spec("p4pmu.plugin.build") is None:
        return "the plugin (p4pmu.plugin.build) does not exist yet"
    return None


def need_plugin():
    why = plugin_missing_reason()
    if why:
        if os.environ.get("P4PMU_ALLOW_NO_PLUGIN") == "1":
            pytest.skip(why)
        pytest.fail(f"the plugin is required but unavailable: {why} (run `p4pmu setup`)",
                    pytrace=False)


def _plain_qemu_prefix(model: str) -> list[str]:
    from p4pmu.qemu_glue.provision import find_qemu
    q = find_qemu()
    if q is None:
        pytest.fail("no plugin-capable QEMU provisioned (run `p4pmu setup`)", pytrace=False)
    try:
        from p4pmu.qemu_glue.cpu import cpu_args
        cpu = cpu_args(model)
    except ImportError:
        cpu = []
    return q.argv("-accel", "tcg", *cpu)


def require_consistent_counting(stderr: str, context: str = "") -> None:
    """Fail the test if the plugin reported a counting bookkeeping error (p4pmu.plugin.
    BOOKKEEPING_ERROR: a plugin bug whose repaired batches do not show in results that only
    look at totals), whatever else the test checks."""
    from p4pmu.plugin import bookkeeping_errors
    bad = bookkeeping_errors(stderr)
    if bad:
        pytest.fail("the plugin's batch bookkeeping was inconsistent:\n  " + "\n  ".join(bad)
                    + (f"\n{context}" if context else ""), pytrace=False)


# --------------------------------------------------------------------------------------------
# fixtures


@pytest.fixture(scope="session")
def guests():
    try:
        return guest_build.build_all(progress=True)
    except guest_build.GuestBuildError as e:
        pytest.fail(f"cannot build the test guests: {e}", pytrace=False)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the group this helper created, nothing else
    except ProcessLookupError:
        pass


@pytest.fixture(scope="session")
def run_guest(guests, tmp_path_factory):
    counter = [0]

    def run(name: str, model: str = "0F_04", plugin_opts=(), qemu_args=(), timeout: float = 60,
            script: Script | None = None, plugin: bool = True, env=None) -> GuestRun:
        if plugin:
            need_plugin()
        counter[0] += 1
        work = tmp_path_factory.mktemp(f"{name}-{model}-{counter[0]}")
        serial = work / "serial.txt"
        args = [*QEMU_MACHINE_ARGS, "-serial", f"file:{serial}",
                "-kernel", str(guest_build.guest_path(name))]
        if script is not None:
            args += ["-initrd", str(script.write(work / "script.bin"))]
        args += list(qemu_args)
        if plugin:
            cmd = [str(P4PMU), "qemu", "--model", model]
            for opt in plugin_opts:
                cmd += ["--plugin-opt", opt]
            cmd += ["--", *args]
        else:
            cmd = [*_plain_qemu_prefix(model), *args]
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True,
                                cwd=str(work), env={**os.environ, **(env or {})})
        timed_out = False
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc)
            stdout, stderr = proc.communicate()
        seconds = time.monotonic() - t0
        text = serial.read_text(errors="replace") if serial.exists() else ""
        gr = GuestRun(name, model, plugin, cmd, None if timed_out else proc.returncode,
                      parse_serial(text), (stdout or "") + (stderr or ""), seconds, timed_out)
        if plugin:
            require_consistent_counting(gr.stderr, gr.describe())
        return gr

    return run


@dataclass
class BridgeRun:
    bits: int
    model: str
    strict: bool
    script: Script
    run: GuestRun
    expects: list

    @property
    def out(self) -> GuestOutput:
        return self.run.out


_SCRIPTS: dict[int, Script] = {}


def bridge_script(bits: int) -> Script:
    from guests.suite import full_script
    if bits not in _SCRIPTS:
        _SCRIPTS[bits] = full_script(bits)
    return _SCRIPTS[bits]


@pytest.fixture(scope="session")
def bridge_run(run_guest):
    cache: dict[tuple, BridgeRun] = {}

    def get(bits: int, model: str, strict: bool = False) -> BridgeRun:
        key = (bits, model, strict)
        if key not in cache:
            script = bridge_script(bits)
            opts = ("strict=on",) if strict else ()
            r = run_guest(f"probe{bits}", model=model, plugin_opts=opts, script=script)
            cache[key] = BridgeRun(bits, model, strict, script, r,
                                   Oracle(model, strict=strict).expect(script))
        br = cache[key]
        br.run.require_completed()
        return br

    return get


# --------------------------------------------------------------------------------------------
# the tiers and the order of the files (README "Tests")

# Fixtures that start QEMU: a test that uses one is a guest test whatever its marks say, so
# the quick tier (`-m "not guest and not slow"`) never boots anything.
GUEST_FIXTURES = frozenset({"run_guest", "bridge_run", "bios"})

# The files that take longest (several minutes each; `--durations=0` of a full run), given
# out first, longest first.  Order only: a file missing here still runs.
LONGEST_FILES = ("test_perf_test.py", "test_linux_perf.py", "test_timing.py",
                 "test_events_memory.py", "test_linux_guest.py", "test_gdb.py",
                 "test_guest_io.py", "test_engine_vs_reference.py")


def _file_rank(item, slow_files) -> int:
    if item.path.name in LONGEST_FILES:
        return LONGEST_FILES.index(item.path.name)
    return len(LONGEST_FILES) + (item.path not in slow_files)


def pytest_collection_modifyitems(config, items):
    """Mark the tests that use a guest fixture `guest`; then order the files longest first
    (LONGEST_FILES, then files with a `slow` test), so that `./p4pmu.sh test` (pytest-xdist,
    one file per worker, given out in collection order: --no-loadscope-reorder) does not end
    with one worker running a long file alone."""
    for item in items:
        if GUEST_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.guest)
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: _file_rank(item, slow_files))  # stable: a file stays together
