"""The bridge's RDMSR/WRMSR on the PMU range, seen from bare-metal guests (32-bit and long
mode) through `p4pmu qemu`.

One guest run per (guest width, model, mode) executes the whole script of guests/suite.py;
each test here looks at its part.  Expected answers come from replaying the same script on the
emulator's register file (guests.oracle.Oracle); some tests also state the property directly
from the tables (which addresses exist, which bits fault, write-then-read-back), so that a bug
shared by the emulator and the bridge still shows.
"""
from __future__ import annotations

import pytest

from p4pmu.emulator import tables as T
from p4pmu.emulator.models import MODELS, get_model
from p4pmu.qemu_glue.guests.script import GP

from guests.bridge import CONFIGS, STRICT_CONFIGS, check, config_id
from guests.bridge import write_read_pairs as _pairs
from guests.suite import other_msr_script, present_msrs, register_kind

pytestmark = pytest.mark.guest


@pytest.fixture(params=CONFIGS, ids=config_id)
def br(request, bridge_run):
    return bridge_run(*request.param)


@pytest.fixture(params=STRICT_CONFIGS, ids=config_id)
def br_strict(request, bridge_run):
    return bridge_run(*request.param, strict=True)


def test_power_on_values(br):
    check(br, "msr.initial")


def test_present_addresses_are_the_tables(br):
    """Every address of 300h-3FFh answers RDMSR iff the tables give the model a register
    there; the rest (holes, SSU_ESCR1 3BFh, IQ_ESCR0/1 on models 3+) is #GP(0)."""
    model = get_model(br.model)
    present = present_msrs(model)
    wrong = []
    for i in br.script.indices("msr.initial"):
        msr, a = br.script.ops[i].ecx, br.out.answers[i]
        got = "ok" if a.res == "ok" else f"#{a.vector}({a.error})"
        want = "ok" if msr in present else f"#{GP}(0)"
        if got != want:
            wrong.append(f"RDMSR 0x{msr:x}: {got}, tables say {want}")
    assert not wrong, "\n".join(wrong)
    iq = [e.msr for e in T.ESCRS if e.name.startswith("MSR_IQ_ESCR")]
    assert all((m in present) == model.has_iq_escr for m in iq)


def test_iq_escr_differs_between_models(bridge_run):
    """IQ_ESCR0/1 (3BAh/3BBh) answer on models with has_iq_escr and fault on the others."""
    with_iq = next(k for k, m in MODELS.items() if m.has_iq_escr)
    without = next(k for k, m in MODELS.items() if not m.has_iq_escr)
    iq = {e.msr for e in T.ESCRS if e.name.startswith("MSR_IQ_ESCR")}
    seen = {}
    for key in (with_iq, without):
        b = bridge_run(32, key)
        seen[key] = {b.script.ops[i].ecx: b.out.answers[i].res
                     for i in b.script.indices("msr.initial") if b.script.ops[i].ecx in iq}
    assert set(seen[with_iq].values()) == {"ok"}, seen
    assert set(seen[without].values()) == {"fault"}, seen


def test_write_read_back(br):
    check(br, "msr.write", "msr.readback")
    wrong = [f"WRMSR 0x{w.ecx:x} = 0x{w.value:x} then RDMSR: 0x{ra.val:x}"
             for w, wa, r, ra in _pairs(br, "msr.write", ("msr.readback",))
             if wa.res == "ok" and ra.val != w.value]
    assert not wrong, "\n".join(wrong)
    # every register of the model took at least one pattern
    took = {w.ecx for w, wa, _, _ in _pairs(br, "msr.write", ("msr.readback",)) if wa.res == "ok"}
    assert took == present_msrs(get_model(br.model))


def test_reserved_bits_fault_and_leave_state(br):
    check(br, "msr.reserved", "msr.after_fault")
    # straight from RESERVED_POLICY: these writes fault, and the register keeps its value
    last = {}
    ops, ans = br.script.ops, br.out.answers
    wrong = []
    for i, o in enumerate(ops):
        if o.op == "RDMSR" and o.tag in ("msr.readback", "msr.after_fault") and \
                ans[i].res == "ok":
            if o.tag == "msr.after_fault" and ans[i].val != last.get(o.ecx):
                wrong.append(f"0x{o.ecx:x}: 0x{ans[i].val:x} after a faulting write, was "
                             f"0x{last.get(o.ecx, 0):x}")
            last[o.ecx] = ans[i].val
        if o.tag == "msr.reserved":
            kind = register_kind(o.ecx)
            if o.value & T.RESERVED_POLICY[kind][0] and (ans[i].res, ans[i].vector) != \
                    ("fault", GP):
                wrong.append(f"WRMSR 0x{o.ecx:x} = 0x{o.value:x} ({T.RESERVED_POLICY[kind][1]}"
                             f"): {ans[i].show()}, want #GP(0)")
    assert not wrong, "\n".join(wrong)


def test_absent_addresses_fault_on_write_too(br):
    present = present_msrs(get_model(br.model))
    wrong = [f"WRMSR 0x{o.ecx:x}: {br.out.answers[i].show()}"
             for i in br.script.indices("msr.write")
             for o in [br.script.ops[i]]
             if o.ecx not in present and br.out.answers[i].vector != GP]
    assert not wrong, "\n".join(wrong)


def test_counters_are_40_bits(br):
    check(br, prefix="c40.")
    ops, ans = br.script.ops, br.out.answers
    for i in br.script.indices("c40.read_max") + br.script.indices("c40.after_fault"):
        assert ans[i].val == T.COUNTER_MASK, f"{ops[i].describe()}: 0x{ans[i].val:x}"
    for i in br.script.indices("c40.bit40"):
        assert (ans[i].res, ans[i].vector, ans[i].error) == ("fault", GP, 0), ops[i].describe()
    for w, wa, _r, ra in _pairs(br, "c40.write", ("c40.read",)):
        assert wa.res == "ok" and ra.val == w.value, f"{w.describe()} -> {ra.show()}"


def test_cleanup(br):
    check(br, "msr.cleanup")


def test_strict_mode(br_strict):
    check(br_strict, prefix="msr.")
    check(br_strict, prefix="c40.")
    # in strict mode the all-low-bits patterns of CCCRs/ESCRs (undocumented bits) fault
    ops, ans = br_strict.script.ops, br_strict.out.answers
    faulted = [ops[i] for i in br_strict.script.indices("msr.write")
               if register_kind(ops[i].ecx) == "escr" and ops[i].value == 0xFFFF_FFFF
               and ans[i].res == "fault"]
    assert faulted, "strict mode accepted undocumented ESCR bits"


@pytest.mark.parametrize("bits", (32, 64))
def test_non_pmu_msrs_match_bare_qemu(run_guest, bits):
    """MSRs outside 300h-3FFh (except 1A0h) answer exactly as without the plugin."""
    s = other_msr_script(bits)
    plain = run_guest(f"probe{bits}", plugin=False, script=s).require_completed()
    plug = run_guest(f"probe{bits}", script=s).require_completed()
    diff = []
    for i, o in enumerate(s.ops):
        a, b = plain.out.answers[i], plug.out.answers[i]
        if (a.res, a.vector, a.error, a.val) != (b.res, b.vector, b.error, b.val) or b.chk:
            diff.append(f"#{i} {o.describe()}: without plugin {a.show()}, with plugin "
                        f"{b.show()} {','.join(b.chk)}")
    assert not diff, "\n".join(diff)
