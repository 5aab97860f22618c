"""Python errors inside QEMU are never silent (plugin/errors.py, plugin/bridge.py).

A real guest run in which the bridge raises: a folder given with the plugin's pypath= option
holds a .pth file that imports a module replacing `Bridge.rdmsr` and `Bridge.wrmsr` with
versions that raise for one register each (nothing in the product knows about it).  The run
must report each place once with its traceback (stderr and the log= file), count every
error, summarise them at QEMU's exit, and complete the accesses as the bridge's docstring
says: RDMSR gives the register's last known value, WRMSR is dropped.
"""
from __future__ import annotations

import sysconfig

import pytest

from p4pmu.emulator import tables as T
from p4pmu.qemu_glue.guests.script import Script

pytestmark = pytest.mark.guest

COUNTER = T.COUNTERS[0].counter_msr  # RDMSR raises
ESCR = T.ESCRS[0].msr                # WRMSR raises

INJECT = f'''
"""Test only: makes the bridge raise on RDMSR 0x{COUNTER:X} and WRMSR 0x{ESCR:X}."""
from p4pmu.plugin import bridge

_rdmsr, _wrmsr = bridge.Bridge.rdmsr, bridge.Bridge.wrmsr


def rdmsr(self, vcpu, msr):
    if msr == {COUNTER}:
        raise RuntimeError("injected RDMSR failure")
    return _rdmsr(self, vcpu, msr)


def wrmsr(self, vcpu, msr, value):
    if msr == {ESCR}:
        raise RuntimeError("injected WRMSR failure")
    return _wrmsr(self, vcpu, msr, value)


bridge.Bridge.rdmsr, bridge.Bridge.wrmsr = rdmsr, wrmsr
'''


def test_python_errors_are_reported_counted_and_summarised(run_guest, tmp_path):
    inject = tmp_path / "inject"
    inject.mkdir()
    (inject / "p4pmu_test_inject.py").write_text(INJECT)
    (inject / "p4pmu_test_inject.pth").write_text("import p4pmu_test_inject\n")
    log = tmp_path / "pmu.log"
    s = Script(32)
    s.wrmsr(COUNTER, 0x1234)
    reads = [s.rdmsr(COUNTER), s.rdmsr(COUNTER)]         # two errors, one place
    write = s.wrmsr(ESCR, 0x0C)                          # one error: dropped
    after = s.rdmsr(ESCR)
    site = sysconfig.get_paths()["purelib"]
    r = run_guest("probe32", script=s, plugin_opts=(
        f"pypath={site}:{inject}", f"log={log}", "mirror=off"))
    r.require_completed()
    out = r.out.answers
    assert [out[i].res for i in reads] == ["ok", "ok"], r.describe()
    assert [out[i].val for i in reads] == [0x1234, 0x1234]  # the last known value
    assert out[write].res == "ok" and (out[after].res, out[after].val) == ("ok", 0)  # dropped

    err = r.stderr
    for kind, msr in (("RDMSR", COUNTER), ("WRMSR", ESCR)):
        head = f"p4pmu: Python error in {kind} 0x{msr:X}"
        assert err.count(head) == 1, err  # once per place
        assert f"RuntimeError: injected {kind} failure" in err
    assert "Traceback (most recent call last)" in err
    summary = f"p4pmu: 3 Python errors during the run (RDMSR: 2, WRMSR: 1); see {log}"
    assert summary in err, err

    text = log.read_text()
    assert text.count("# Python error in RDMSR") == 1 and "#   Traceback" in text
    assert "#   RuntimeError: injected WRMSR failure" in text
    assert f"# {summary}" in text
    end = [ln for ln in text.splitlines() if ln.startswith("# end:")]
    assert len(end) == 1 and end[0].endswith(", 3 Python errors"), end


# Failures in the other callbacks of counting: a fold (Feeder.consume, at a deadline or an
# access), the PMI decision after it (Feeder.after) and a deadline itself (Bridge.deadline),
# raising once, at the Nth call, while a counter counts a ring-0 loop and interrupts every
# PERIOD instructions
INJECT_COUNTING = '''
"""Test only: one failure in {target}, at its {at}th call."""
from p4pmu.plugin import bridge, feeder

calls = [0]
_fn = {target}


def wrapped(*a, **k):
    calls[0] += 1
    if calls[0] == {at}:
        raise RuntimeError("injected {kind} failure")
    return _fn(*a, **k)


{target} = wrapped
'''
TARGETS = {"fold": "feeder.Feeder.consume", "PMI": "feeder.Feeder.after",
           "deadline": "bridge.Bridge.deadline"}
PERIOD = 2000


def _interrupting_run(run_guest, plugin_opts=()):
    """A ring-0 loop of 400,000 instructions under a counter that interrupts every PERIOD
    of them (the handler reloads it): (the run, the interrupts taken)."""
    from guests.evscript import (
        LVT_NMI,
        PMI_CLEAR_OVF,
        PMI_RELOAD,
        PMI_UNMASK,
        EvScript,
        cccr_value,
        escr_value,
        parse_events,
        preset,
    )
    s = EvScript()
    s.pmi_config(PMI_CLEAR_OVF | PMI_RELOAD | PMI_UNMASK, counter=12, reload=preset(PERIOD),
                 lvt=LVT_NMI)
    s.lvt(LVT_NMI)
    s.program(12, "MSR_CRU_ESCR0", escr_value("instr_retired", "NBOGUSNTAG", t0_os=True),
              cccr_value(12, "MSR_CRU_ESCR0", pmi_t0=True), start=preset(PERIOD))
    s.loop("nop4", 100_000)
    s.pmi_log()
    r = run_guest("events64", script=s, timeout=300, plugin_opts=("mirror=off", *plugin_opts))
    r.require_completed()
    (n, _, _), = parse_events(r.out.lines).pmi_counts
    return r, n


@pytest.fixture(scope="module")
def interrupts_without_failures(run_guest):
    r, n = _interrupting_run(run_guest)
    assert "Python error" not in r.stderr and n > 150, (n, r.stderr[-2000:])
    return n


@pytest.mark.parametrize("kind", TARGETS)
def test_a_failure_in_a_fold_a_pmi_decision_or_a_deadline_is_reported_and_counting_goes_on(
        run_guest, tmp_path, kind, interrupts_without_failures):
    inject = tmp_path / "inject"
    inject.mkdir()
    (inject / "p4pmu_test_inject2.py").write_text(
        INJECT_COUNTING.format(target=TARGETS[kind], at=50, kind=kind))
    (inject / "p4pmu_test_inject2.pth").write_text("import p4pmu_test_inject2\n")
    site = sysconfig.get_paths()["purelib"]
    r, n = _interrupting_run(run_guest, (f"pypath={site}:{inject}",))
    err = r.stderr
    assert f"RuntimeError: injected {kind} failure" in err, err[-3000:]
    assert err.count("Traceback (most recent call last)") == 1, err[-3000:]
    assert "p4pmu: 1 Python error during the run" in err, err[-3000:]
    # counting and interrupts went on: at most a period or two lost to the failed step
    n0 = interrupts_without_failures
    assert n0 - 2 <= n <= n0 + 1, (n, n0, err[-2000:])


# --------------------------------------------------------------------------------------------
# The fallbacks and the report, without QEMU


@pytest.fixture
def bridge(tmp_path):
    from p4pmu.plugin.bridge import Bridge, parse_options
    b = Bridge(parse_options(["model=0F_04", f"log={tmp_path / 'pmu.log'}"]))
    b.wrmsr(0, COUNTER, 0x55)
    b.wrmsr(0, ESCR, 0x0C)
    return b


def _exc_info(message="boom"):
    try:
        raise RuntimeError(message)
    except RuntimeError:
        import sys
        return sys.exc_info()


def test_fallbacks_complete_accesses_as_the_hardware_would(bridge, capsys):
    from p4pmu.plugin.bridge import FAULT, OK
    assert bridge.rdmsr_failed(0, COUNTER, _exc_info()) == (OK, 0x55)
    assert bridge.rdmsr_failed(0, ESCR, _exc_info()) == (OK, 0x0C)
    assert bridge.rdmsr_failed(0, 0x3FF, _exc_info())[0] == FAULT  # no such register
    assert bridge.wrmsr_failed(0, ESCR, 0x1C, _exc_info()) == OK
    assert bridge.rdmsr(0, ESCR) == (OK, 0x0C)                     # the write was dropped
    assert bridge.rdpmc_failed(0, 0, _exc_info()) == (OK, 0x55)
    assert bridge.rdpmc_failed(0, 1 << 31, _exc_info()) == (OK, 0x55)  # fast read: low half
    assert bridge.rdpmc_failed(0, T.NUM_COUNTERS, _exc_info())[0] == FAULT
    assert bridge.misc_enable_failed(0, 0x81, _exc_info()) == (0, 0x81)  # QEMU's value
    assert bridge.deadline_failed(0, _exc_info()) == 0
    err = capsys.readouterr().err
    # one place (this file's _exc_info) per kind of call: each reported once
    assert err.count("p4pmu: Python error in RDMSR 0x3") == 1
    assert err.count("p4pmu: Python error in RDPMC") == 1
    assert bridge.n_errors == 9
    bridge.close()
    assert ("p4pmu: 9 Python errors during the run (RDMSR: 3, WRMSR: 1, RDPMC: 3, "
            "RDMSR IA32_MISC_ENABLE: 1, deadline: 1); see") in capsys.readouterr().err


def test_summary_without_log_points_at_the_tracebacks(capsys):
    from p4pmu.plugin.errors import RunErrors, is_error_line
    e = RunErrors(lambda line: None)
    assert e.summary() is None
    e.record("WRMSR", "WRMSR 0x300", _exc_info(), "dropped")
    assert e.summary() == "p4pmu: 1 Python error during the run (WRMSR: 1); see the " \
        "tracebacks above"
    assert is_error_line(e.summary()) and is_error_line("p4pmu: Python error in WRMSR 0x300")
    assert not is_error_line("p4pmu: warning: vcpu 0: something")
