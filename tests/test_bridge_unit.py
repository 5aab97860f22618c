"""Unit tests of the bridge's Python side and of the plugin build (no QEMU needed).

The guest-level behaviour of the plugin (EFLAGS, faults, long mode) is covered by the guest
suite under tests/guests and by the experiments described in docs/bridge.md.
"""
from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import threading
import time

import pytest

from p4pmu.plugin import build
from p4pmu.plugin.bridge import FAULT, OK, Bridge, OptionError, parse_options

# --------------------------------------------------------------------------------------------
# Options
# --------------------------------------------------------------------------------------------


def test_options_defaults():
    o = parse_options([])
    assert (o.model, o.stepping, o.strict, o.log, o.threads, o.pypath) == \
        (None, None, False, None, 1, None)


def test_options_all():
    o = parse_options(["model=0F_03", "stepping=0x5", "strict=on", "log=/tmp/x.log",
                       "threads=2", "pypath=/a:/b", "verbose=off"])
    assert o.model == "0F_03" and o.stepping == 5 and o.strict is True
    assert o.log == "/tmp/x.log" and o.threads == 2 and o.pypath == "/a:/b"


def test_option_mirror():
    assert parse_options([]).mirror is True
    assert parse_options(["mirror=off"]).mirror is False
    assert parse_options(["mirror=on"]).mirror is True


@pytest.mark.parametrize("arg, words", [
    ("bogus=1", "unknown plugin option 'bogus'"),
    ("model", "not key=value"),
    ("threads=3", "expected 1 or 2"),
    ("stepping=16", "0-15"),
    ("stepping=x", "0-15"),
    ("strict=maybe", "expected on or off"),
    ("log=", "needs a file name"),
    ("mirror=sometimes", "expected on or off"),
])
def test_options_errors(arg, words):
    with pytest.raises(OptionError, match=words):
        parse_options([arg])


def test_bad_model_is_an_option_error():
    with pytest.raises(OptionError, match="model='0F_99'.*known"):
        Bridge(parse_options(["model=0F_99"]))


def test_unwritable_log_is_an_option_error(tmp_path):
    with pytest.raises(OptionError, match="log="):
        Bridge(parse_options([f"log={tmp_path}/no/such/dir/x.log"]))


# --------------------------------------------------------------------------------------------
# Bridge with a stand-in PMU: mapping of vCPUs to cores and logical processors, statuses
# --------------------------------------------------------------------------------------------


class FakeFault(Exception):
    pass


class FakePMU:
    instances: list = []

    def __init__(self):
        self.calls = []
        FakePMU.instances.append(self)

    def name_of(self, msr):
        return "MSR_FAKE" if msr == 0x300 else None

    def rdmsr(self, lp, msr):
        self.calls.append(("rdmsr", lp, msr))
        if msr == 0x3BA:
            raise self.fault("absent", "absent")
        return 0x1234

    def wrmsr(self, lp, msr, value):
        self.calls.append(("wrmsr", lp, msr, value))
        if value >> 32:
            raise self.fault("bits 63:32 reserved", "reserved")

    def rdpmc(self, lp, ecx):
        self.calls.append(("rdpmc", lp, ecx))
        if ecx == 18:
            raise self.fault("bad index", "rdpmc_index")
        return 0x55_4433_2211

    def misc_enable(self, q):
        return q | 0x80

    fault = None  # set per test to the bridge's PMUFault class


def make_bridge(threads=1, log=None, n=4):
    FakePMU.instances = []
    opts = parse_options([f"threads={threads}"] + ([f"log={log}"] if log else []))
    b = Bridge(opts, n, n, pmu_factory=lambda core: FakePMU())
    FakePMU.fault = b.PMUFault
    return b


@pytest.mark.parametrize("threads, expect", [
    (1, {0: (0, 0), 1: (1, 0), 2: (2, 0), 3: (3, 0)}),
    (2, {0: (0, 0), 1: (0, 1), 2: (1, 0), 3: (1, 1)}),
])
def test_vcpu_to_core_and_lp(threads, expect):
    b = make_bridge(threads)
    for vcpu, (core, lp) in expect.items():
        assert b.core_lp(vcpu) == (core, lp)
        assert b.rdmsr(vcpu, 0x300) == (OK, 0x1234)
        assert b.pmus[core].calls[-1] == ("rdmsr", lp, 0x300)
    assert len(FakePMU.instances) == 4 // threads



class SlowPMU(FakePMU):
    """A PMU whose step gives the GIL away in the middle (as numpy does), counting how many
    threads are inside it at once."""

    def __init__(self):
        super().__init__()
        self.inside = self.most_inside = 0

    def rdmsr(self, lp, msr):
        self.inside += 1
        self.most_inside = max(self.most_inside, self.inside)
        time.sleep(0.0005)  # releases the GIL
        self.inside -= 1
        return super().rdmsr(lp, msr)


@pytest.mark.parametrize("threads", (1, 2))
def test_the_two_threads_of_a_core_step_its_pmu_one_at_a_time(threads):
    """With threads=2 the two vCPUs of a core share one PMU model; their vCPU threads call
    the bridge at once (multi-threaded TCG) and the GIL passes between them inside a step:
    the bridge serves one step per core at a time (plugin/bridge.py, _one_step_per_core)."""
    opts = parse_options([f"threads={threads}"])
    b = Bridge(opts, 2, 2, pmu_factory=lambda core: SlowPMU())
    workers = [threading.Thread(target=lambda v=v: [b.rdmsr(v, 0x300) for _ in range(100)])
               for v in (0, 1)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert {c: p.most_inside for c, p in b.pmus.items()} == {c: 1 for c in range(2 // threads)}
    assert sum(len(p.calls) for p in b.pmus.values()) == 200


def test_statuses():
    b = make_bridge()
    assert b.wrmsr(0, 0x300, 5) == OK
    assert b.wrmsr(0, 0x300, 1 << 32) == FAULT
    assert b.rdmsr(0, 0x3BA) == (FAULT, 0)
    assert b.rdpmc(0, 4) == (OK, 0x55_4433_2211)
    assert b.rdpmc(0, 18) == (FAULT, 0)
    assert b.misc_enable(0, 1) == (OK, 0x81)


def test_log_has_accesses_faults_and_summary(tmp_path):
    log = tmp_path / "pmu.log"
    b = make_bridge(threads=2, log=str(log))
    b.wrmsr(1, 0x300, 0xAB)
    b.rdmsr(1, 0x300)
    b.wrmsr(3, 0x360, 1 << 32)
    b.rdpmc(2, 18)
    b.note(0, "hello")
    b.log_error("RDMSR", "Traceback...\nRuntimeError: x")
    b.close()
    text = log.read_text()
    assert "vcpu 1 core 0 lp 1: WRMSR 0x300 MSR_FAKE <- 0xAB" in text
    assert "vcpu 1 core 0 lp 1: RDMSR 0x300 MSR_FAKE -> 0x1234" in text
    assert "vcpu 3 core 1 lp 1: WRMSR 0x360 <- 0x100000000: #GP(0): bits 63:32 reserved" in text
    assert "vcpu 2 core 1 lp 0: RDPMC ECX=0x12: #GP(0): bad index" in text
    assert "note: hello" in text and "#   RuntimeError: x" in text
    assert "# end: 1 RDMSR, 2 WRMSR, 1 RDPMC, 0 MISC_ENABLE reads, 2 faults, 1 Python errors" \
        in text


def test_faults_go_to_stderr_without_log(capsys):
    b = make_bridge()
    b.rdpmc(0, 18)
    assert "RDPMC ECX=0x12: #GP(0): bad index" in capsys.readouterr().err


def test_a_fault_flood_is_shown_a_few_times_per_kind_then_totalled(capsys, tmp_path):
    from p4pmu.plugin.bridge import FAULTS_SHOWN
    b = make_bridge()
    for _ in range(1000):
        b.wrmsr(0, 0x360, 1 << 32)
        b.rdmsr(0, 0x3BA)
    b.rdpmc(0, 18)
    err = capsys.readouterr().err
    assert err.count("WRMSR 0x360 <- 0x100000000: #GP(0)") == FAULTS_SHOWN
    assert err.count("RDMSR 0x3BA: #GP(0)") == FAULTS_SHOWN
    assert err.count("RDPMC ECX=0x12: #GP(0)") == 1
    assert err.count("faults are counted, not shown") == 2
    b.close()
    err = capsys.readouterr().err
    assert ("#GP(0) for PMU accesses: 2001 (RDMSR #GP(0) (no such MSR on this model) 1000, "
            "WRMSR #GP(0) (reserved bits set) 1000, RDPMC #GP(0) (counter index not 0-17) 1)"
            in err)
    # with a log, every fault is in it, stderr gets none of them, the log gets the totals
    log = tmp_path / "pmu.log"
    b = make_bridge(log=str(log))
    for _ in range(50):
        b.rdmsr(0, 0x3BA)
    b.close()
    assert "#GP" not in capsys.readouterr().err
    text = log.read_text()
    assert text.count("RDMSR 0x3BA: #GP(0): absent") == 50
    assert "# #GP(0) for PMU accesses: 50 (RDMSR #GP(0) (no such MSR on this model) 50)" in text


def test_a_few_faults_print_no_totals(capsys):
    b = make_bridge()
    b.rdpmc(0, 18)
    b.close()
    assert "for PMU accesses" not in capsys.readouterr().err


def test_every_model_fault_has_a_kind():
    from p4pmu.emulator.models import get_model
    from p4pmu.emulator.pmu import FAULT_KINDS, PMU, PMUFault
    pmu = PMU(get_model("0F_04"))
    kinds = set()
    for op in (lambda: pmu.rdmsr(0, 0x3BA), lambda: pmu.wrmsr(0, 0x360, 1 << 40),
               lambda: pmu.rdpmc(0, 18), lambda: pmu.rdmsr(0, 0x10)):
        with pytest.raises(PMUFault) as e:
            op()
        kinds.add(e.value.kind)
    assert kinds == set(FAULT_KINDS)


# --------------------------------------------------------------------------------------------
# Bridge with the real register file (Contract 1)
# --------------------------------------------------------------------------------------------


def test_real_pmu_round_trip_and_fault(tmp_path):
    log = tmp_path / "pmu.log"
    b = Bridge(parse_options(["model=0F_04", f"log={log}"]))
    assert b.wrmsr(0, 0x300, 0x12_3456_789A) == OK
    assert b.rdmsr(0, 0x300) == (OK, 0x12_3456_789A)
    assert b.rdpmc(0, 0) == (OK, 0x12_3456_789A)
    assert b.rdpmc(0, 0x8000_0000) == (OK, 0x3456_789A)
    assert b.wrmsr(0, 0x360, 1 << 32) == FAULT
    assert b.rdmsr(0, 0x360) == (OK, 0)  # a fault leaves the state unchanged
    assert b.rdpmc(0, 18)[0] == FAULT
    status, misc = b.misc_enable(0, 0)
    assert status == OK and misc & 0x80
    b.close()
    text = log.read_text()
    assert "MSR_BPU_CCCR0" in text and "reserved" in text


# --------------------------------------------------------------------------------------------
# Build
# --------------------------------------------------------------------------------------------


def test_plugin_path_in_source_tree():
    root = build._source_tree()
    assert root is not None
    assert build.plugin_path() == root / "build" / "plugin" / "libp4pmu_plugin.so"


def test_plugin_path_outside_source_tree(monkeypatch, tmp_path):
    monkeypatch.setattr(build, "_source_tree", lambda: None)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    p = build.plugin_path()
    assert p.name == "libp4pmu_plugin.so"
    assert str(p).startswith(str(tmp_path / "p4pmu" / "plugin"))


def test_not_shared_libpython_is_explained(monkeypatch):
    real = sysconfig.get_config_var
    monkeypatch.setattr(sysconfig, "get_config_var",
                        lambda k: 0 if k == "Py_ENABLE_SHARED" else real(k))
    with pytest.raises(build.BuildError, match="shared-libpython.*libpython3"):
        build.python_build_info()


def test_missing_headers_are_explained(monkeypatch, tmp_path):
    real = sysconfig.get_paths
    monkeypatch.setattr(sysconfig, "get_paths",
                        lambda *a, **k: {**real(), "include": str(tmp_path)})
    with pytest.raises(build.BuildError, match=r"Python\.h.*libpython3\.\d+-dev"):
        build.python_build_info()


@pytest.fixture(scope="module")
def plugin():
    return build.ensure_built(progress=False)  # a build error fails the tests that need it


def test_built_plugin_exports_the_qemu_entry_points(plugin):
    lib = ctypes.CDLL(str(plugin), mode=os.RTLD_LAZY | os.RTLD_LOCAL)
    assert ctypes.c_int.in_dll(lib, "qemu_plugin_version").value == 7
    assert hasattr(lib, "qemu_plugin_install")


def test_built_plugin_keeps_runpath_to_its_libpython(plugin):
    if not shutil.which("readelf"):
        pytest.skip("readelf not installed")
    out = subprocess.run(["readelf", "-d", str(plugin)], capture_output=True, text=True).stdout
    info = build.python_build_info()
    assert "RUNPATH" in out and info["libdir"] in out
    assert "libpython" in out


def test_stamp_tracks_interpreter(plugin, monkeypatch):
    assert not build.is_stale(plugin)
    monkeypatch.setattr(sys, "executable", "/some/other/python3")
    assert build.is_stale(plugin)


def test_an_unchanged_source_tree_is_checked_without_generating_the_headers(plugin, tmp_path,
                                                                         monkeypatch):
    """`p4pmu qemu` checks the plugin at every run: while no input file changed, by the
    digest of the inputs alone (generating the headers imports numpy and the instruction
    tables); a digest that differs falls back to the full stamp, which records the new one."""
    copy = tmp_path / plugin.name
    stamp = copy.with_name(copy.name + build.STAMP_SUFFIX)
    shutil.copyfile(plugin, copy)
    shutil.copyfile(plugin.with_name(plugin.name + build.STAMP_SUFFIX), stamp)
    calls = []
    real = build.generated_header
    monkeypatch.setattr(build, "generated_header", lambda: calls.append(1) or real())
    assert not build.is_stale(copy) and calls == []
    full, fp, _digest = stamp.read_text().split()
    stamp.write_text(f"{full}\n{fp}\n{'0' * 64}\n")  # as after an edit that changes no stamp
    assert not build.is_stale(copy) and calls == [1]
    assert stamp.read_text().split()[2] != "0" * 64  # the new digest recorded
    assert not build.is_stale(copy) and calls == [1]
    stamp.write_text(f"{'1' * 64}\n{fp}\n{'0' * 64}\n")  # the stamp itself differs
    assert build.is_stale(copy)


@pytest.mark.slow
def test_a_damaged_plugin_is_built_again(tmp_path, monkeypatch):
    """A plugin truncated or overwritten after its build (a full disk, a crash, a stray
    write) no longer matches its stamp: is_stale says so and ensure_built builds it again."""
    plugin = build.ensure_built(progress=False)
    copy = tmp_path / plugin.name
    shutil.copyfile(plugin, copy)
    shutil.copyfile(plugin.with_name(plugin.name + build.STAMP_SUFFIX),
                    copy.with_name(copy.name + build.STAMP_SUFFIX))
    assert not build.is_stale(copy)
    with open(copy, "r+b") as f:  # half-written
        f.truncate(copy.stat().st_size // 2)
    assert build.is_stale(copy)
    shutil.copyfile(plugin, copy)
    with open(copy, "r+b") as f:  # a page of zeros at its end
        f.seek(-4096, 2)
        f.write(bytes(4096))
    assert build.is_stale(copy)
    monkeypatch.setattr(build, "plugin_path", lambda: copy)
    assert build.ensure_built(progress=False) == copy
    assert not build.is_stale(copy)
    assert copy.read_bytes()[-4096:] != bytes(4096)  # (a new build: its RUNPATH is its folder)


def test_embedding_api_matches_header():
    api = build._embedding_api()
    for name in ("p4pmu_py_init", "p4pmu_py_rdmsr", "p4pmu_py_wrmsr", "p4pmu_py_rdpmc",
                 "p4pmu_py_misc_enable", "p4pmu_py_note", "p4pmu_py_exit"):
        assert name in api
    from p4pmu.plugin.entry_points import ENTRY_POINTS
    registered = {"p4pmu_py_init"} | {c_name for c_name, _, _ in ENTRY_POINTS}
    assert "def p4pmu_py_init(" in build.BOOTSTRAP
    declared = set(re.findall(r"\b(p4pmu_py_\w+)\s*\(", api))
    assert declared == registered, declared ^ registered


# --------------------------------------------------------------------------------------------
# The C mirror's rule (plugin/feeder.py Feeder.mirror_rule; docs/bridge.md)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fields, simple", [
    ({}, True),
    ({"compare": True, "threshold": 2, "complement": True}, True),
    ({"pmi_t0": True}, True),
    ({"compare": True, "edge": True}, False),
    ({"edge": True}, True),             # EDGE without COMPARE does nothing (SDM 18.15.5.2)
    ({"force_ovf": True}, False),
    ({"cascade": True, "enable": False}, False),
    ({"ext_cascade": True, "enable": False}, False),
])
def test_mirror_rule(fields, simple):
    from p4pmu.emulator import tables as T
    from p4pmu.emulator.models import get_model
    from p4pmu.emulator.pmu import PMU
    from p4pmu.plugin.feeder import Feeder

    from guests.evscript import cccr_value
    pmu = PMU(get_model("0F_04"))
    counter = 12
    pmu.wrmsr(0, T.COUNTERS[counter].cccr_msr, cccr_value(counter, "MSR_CRU_ESCR0", **fields))
    assert Feeder.mirror_rule(pmu) is simple
    assert Feeder.mirror_rule(PMU(get_model("0F_04"), ht=True)) is False


# --------------------------------------------------------------------------------------------
# The entry points the C side calls (plugin/entry_points.py), on a bridge without QEMU
# --------------------------------------------------------------------------------------------


class _RecordingFfi:
    """Stands in for cffi's ffi: def_extern records what would be registered."""

    def __init__(self):
        self.registered = {}

    def def_extern(self, name, onerror):
        def register(fn):
            self.registered[name] = (fn, onerror)
            return fn
        return register


def test_entry_points_serve_accesses_through_the_bridge():
    from p4pmu.plugin.entry_points import EntryPoints
    points = EntryPoints(Bridge(parse_options(["model=0F_04"])))
    assert points.wrmsr(0, 0x3B8, 0x0400020C) == OK  # CRU_ESCR0: instr_retired
    out = [None]
    assert points.rdmsr(0, 0x3B8, out) == OK and out[0] == 0x0400020C
    assert points.rdmsr(0, 0x3B9 + 0x100, out) == FAULT  # 0x4B9: not a PMU register
    assert points.rdpmc(0, 12, out) == OK and out[0] == 0
    assert points.note(0, "from a test") == 1


def test_an_entry_point_whose_bridge_raises_completes_the_access_and_counts_it(capsys):
    from p4pmu.plugin.entry_points import EntryPoints
    b = Bridge(parse_options(["model=0F_04"]))
    b.wrmsr(0, 0x30C, 0x1234)

    def broken(*_):
        raise RuntimeError("model broke")
    b.rdmsr = broken
    points = EntryPoints(b)
    out = [None]
    assert points.rdmsr(0, 0x30C, out) == OK and out[0] == 0x1234  # the last known value
    assert "model broke" in capsys.readouterr().err
    assert b.errors.counts.get("RDMSR") == 1


def test_install_registers_every_entry_point_and_says_the_plugin_loaded(tmp_path,
                                                                      monkeypatch):
    from p4pmu.plugin import entry_points
    marker = tmp_path / "loaded"
    monkeypatch.setenv(entry_points.LOADED_FILE_ENV, str(marker))
    # the bridge without the C side's native part (no QEMU here)
    monkeypatch.setattr(Bridge, "from_args", classmethod(
        lambda cls, args, smp, mx, native=None: cls(parse_options(args), smp, mx)))
    ffi = _RecordingFfi()
    assert entry_points.install(ffi, None, ["model=0F_02"], 1, 1) == 1
    assert set(ffi.registered) == {c for c, _, _ in entry_points.ENTRY_POINTS}
    assert marker.read_text() == "loaded\n"
    marker.unlink()
    assert entry_points.install(ffi, None, ["model=0F_99"], 1, 1) == 0  # refused: no marker
    assert not marker.exists()


@pytest.mark.parametrize("timing, warned", [("core", True), ("memory", False)])
def test_occupancy_counted_without_memory_timing_gets_a_notice(tmp_path, timing, warned):
    """bsq_active_entries reads 0 unless the clocks charge the memory's latency: the bridge
    says so once, from the plugin option timing= it was given (emulator/notices.py)."""
    from p4pmu.emulator import bus_requests as BR
    from p4pmu.emulator import tables as T
    b = Bridge(parse_options(["model=0F_04", f"timing={timing}", f"log={tmp_path}/p.log"]))
    read = BR.REQUEST_BY_NAME["read"].bsq
    assert b.wrmsr(0, T.ESCR_BY_NAME["MSR_BSU_ESCR1"].msr, 0x06 << 25 | read << 9 | 0xC) == OK
    cccr = 1 << 12 | 7 << 13 | 3 << 16  # ENABLE, ESCR_SELECT 7 (BSU_ESCR1), ACTIVE_THREAD 3
    assert b.wrmsr(0, T.CCCR_BASE + 2, cccr) == OK
    b.close()
    assert (("needs_memory_timing", "bsq_active_entries") in b._said) is warned
    assert ("only timing=memory charges" in (tmp_path / "p.log").read_text()) is warned
