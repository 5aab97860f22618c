"""Self-tests of the guest harness: the build, the guest runtime (faults survived, ring 3,
CS.base, flags and registers, prefixes, long mode) and the checking machinery itself (it
must be able to fail).

The guest runs here use the bare QEMU, without the plugin (plugin=False), and only touch
what QEMU itself implements (IA32_APIC_BASE, RDPMC's #UD), so they test the harness, not the
bridge; test_bridge_*.py do the latter.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from p4pmu.emulator.models import MODELS
from p4pmu.qemu_glue.guests import build as guest_build
from p4pmu.qemu_glue.guests import layout as L
from p4pmu.qemu_glue.guests.script import GP, UD, Answer, GuestOutput, Script, parse_serial

from guests.oracle import Expect, Oracle, compare, format_problems

APIC_BASE = 0x1B  # IA32_APIC_BASE: QEMU implements it; bit 8 = BSP, base FEE00000h
BITS = (32, 64)


# --------------------------------------------------------------------------------------------
# build


def test_build_all_skips_up_to_date_guests(guests, capsys):
    before = {n: p.stat().st_mtime_ns for n, p in guests.items()}
    again = guest_build.build_all(progress=True)
    assert again == guests
    assert {n: p.stat().st_mtime_ns for n, p in again.items()} == before
    assert "up to date" in capsys.readouterr().out
    for name, path in guests.items():
        assert guest_build.guest_path(name) == path
        assert path.is_relative_to(Path(__file__).resolve().parents[1] / "build" / "guests")


def test_build_reports_missing_gcc(monkeypatch, tmp_path):
    monkeypatch.setattr(guest_build, "_toolchain_checked", None)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(guest_build.GuestBuildError, match="gcc not found.*gcc-multilib"):
        guest_build.build_all(progress=False)


def test_guest_path_unknown():
    with pytest.raises(KeyError, match="probe32"):
        guest_build.guest_path("nope")


def test_stub_table_layout():
    """The generated stub source has one table row per (insn, prefix, fsetup)."""
    for bits in BITS:
        asm = L.stubs_asm(bits)
        word = ".quad" if bits == 64 else ".long"
        rows = [ln for ln in asm.splitlines() if ln.strip().startswith(word)]
        assert len(rows) == len(L.INSNS) * len(L.PREFIXES) * len(L.FSETUPS)


# --------------------------------------------------------------------------------------------
# the checking machinery, without a guest


def _fake(script: Script, answers: dict[int, Answer]) -> GuestOutput:
    g = GuestOutput("", [])
    g.answers = answers
    return g


def test_compare_reports_wrong_value_fault_and_guest_checks():
    s = Script(32)
    s.wrmsr(0x300, 0x1234)
    s.rdmsr(0x300)
    s.rdmsr(0x3BF)
    s.rdmsr(0x301)
    exp = Oracle("0F_04").expect(s)
    assert exp[1] == Expect("ok", val=0x1234)
    assert exp[2].res == "fault" and exp[2].vector == GP and "0x3BF" in exp[2].why
    good = {0: Answer(0, "ok", None, None, None, 0x2, ()),
            1: Answer(1, "ok", None, None, 0x1234, 0x2, ()),
            2: Answer(2, "fault", GP, 0, None, 0x2, ()),
            3: Answer(3, "ok", None, None, 0, 0x2, ())}
    assert compare(s, _fake(s, good), exp) == []
    bad = dict(good)
    bad[1] = Answer(1, "ok", None, None, 0x1235, 0x2, ())
    bad[2] = Answer(2, "ok", None, None, 0, 0x2, ())
    bad[3] = Answer(3, "ok", None, None, 0, 0x2, ("flags", "bx"))
    problems = compare(s, _fake(s, bad), exp)
    assert len(problems) == 3, format_problems(problems)
    assert "expected ok 0x1234, guest got ok 0x1235" in problems[0]
    assert "expected #GP(0)" in problems[1] and "no such MSR" in problems[1]
    assert "flags,bx" in problems[2]
    del bad[3]
    assert "no answer" in compare(s, _fake(s, bad), exp)[-1]


def test_oracle_architectural_rules():
    s = Script(64)
    s.rdpmc(0, mode="ring3")
    s.set_pce(True)
    s.rdpmc(0, mode="ring3")
    s.rdmsr(0x300, mode="ring3")
    s.rdmsr(0x300, prefix="lock")
    s.rdmsr(0x300, prefix="rex48")
    exp = Oracle("0F_04").expect(s)
    assert (exp[0].res, exp[0].vector) == ("fault", GP)
    assert exp[2] == Expect("ok", val=0)
    assert (exp[3].res, exp[3].vector) == ("fault", GP)
    assert (exp[4].res, exp[4].vector) == ("fault", UD)
    assert exp[5] == Expect("ok", val=0)


def test_parse_serial():
    text = ("BOOT p4pmu-guest bits=64\nSCRIPT n=3\n"
            "R 0 res=ok val=000000ff00000001 fl=846 chk=ok\n"
            "R 1 res=f13:00000000 val=- fl=2 chk=f.ip,flags\n"
            "R 2 res=ok val=00000001.756e6547.6c65746e.49656e69 fl=0 chk=ok\nDONE 3\n")
    g = parse_serial(text)
    assert g.booted and g.bits == 64 and g.done and g.script_len == 3 and not g.panic
    assert g.answers[0].val == 0xFF_0000_0001 and g.answers[0].flags == 0x846
    assert (g.answers[1].res, g.answers[1].vector, g.answers[1].error) == ("fault", 13, 0)
    assert g.answers[1].chk == ("f.ip", "flags")
    assert g.answers[2].val == (1, 0x756E6547, 0x6C65746E, 0x49656E69)


def test_script_rejects_impossible_records():
    with pytest.raises(ValueError):
        Script(32).rdmsr(0x300, prefix="rex48")
    with pytest.raises(ValueError):
        Script(64).rdmsr(0x300, mode="cs_base")
    with pytest.raises(ValueError):
        Script(32).rdmsr(0x300, hi=1)


# --------------------------------------------------------------------------------------------
# the guest runtime on bare QEMU


@pytest.mark.guest
@pytest.mark.parametrize("bits", BITS)
def test_smoke_without_script(run_guest, bits):
    r = run_guest(f"probe{bits}", plugin=False).require_completed()
    assert r.out.bits == bits
    assert r.out.smoke[-1] == "ok", r.describe()


def _runtime_script(bits: int) -> tuple[Script, list[Expect]]:
    """IA32_APIC_BASE through every stub: all flag setups with several operands, every mode,
    every prefix; RDPMC (which bare QEMU does not implement: #UD at CPL 0 / with PCE, #GP at
    CPL 3 without PCE).  Expectations are x86 architecture, written out here."""
    s, exp = Script(bits), []
    ok = Expect("ok")  # value checked below
    modes = ["ring0", "ring3"] + (["cs_base"] if bits == 32 else [])
    cases = ((0, 1, 0x8D5), (0x8000_0000, 1, 0), (0x7FFF_FFFF, 0xFFFF_FFFF, 0x845),
             (5, 5, 0x094))
    for mode in modes:
        for fs, _ in L.FSETUPS:
            for fmem, ebx, fl in cases:
                s.rdmsr(APIC_BASE, mode=mode, fsetup=fs, fmem=fmem, ebx=ebx, eflags=fl)
                exp.append(Expect("fault", GP, 0) if mode == "ring3" else ok)
                s.rdpmc(0, mode=mode, fsetup=fs, fmem=fmem, ebx=ebx, eflags=fl)
                exp.append(Expect("fault", GP, 0) if mode == "ring3" else Expect("fault", UD, 0))
    for mode in modes:
        for pname, _, arches, kind in L.PREFIXES:
            if bits not in arches:
                continue
            s.rdmsr(APIC_BASE, mode=mode, prefix=pname, fsetup="cmp", fmem=1, ebx=2)
            exp.append(Expect("fault", UD, 0) if kind == "ud"
                       else Expect("fault", GP, 0) if mode == "ring3" else ok)
    s.set_pce(True)
    exp.append(ok)
    s.rdpmc(0, mode="ring3", fsetup="stc_inc", fmem=0xFFFF_FFFF)
    exp.append(Expect("fault", UD, 0))
    s.set_pce(False)
    exp.append(ok)
    if bits == 64:
        s.rdmsr(APIC_BASE, hi=0xFFFF_FFFF, fsetup="neg", fmem=0x8000_0000)
        exp.append(ok)
    return s, exp


@pytest.mark.guest
@pytest.mark.parametrize("bits", BITS)
def test_runtime_faults_modes_flags_prefixes(run_guest, bits):
    s, exp = _runtime_script(bits)
    r = run_guest(f"probe{bits}", plugin=False, script=s).require_completed()
    problems = compare(s, r.out, exp)
    for i, a in r.out.answers.items():
        if s.ops[i].op == "RDMSR" and a.res == "ok":
            if (a.val & 0xFFFF_F000, a.val >> 8 & 1) != (0xFEE0_0000, 1):
                problems.append(f"#{i} {s.ops[i].describe()}: APIC base 0x{a.val:x}")
    assert not problems, format_problems(problems) + "\n" + r.describe()
    # the flag setups really produced both values of every checked flag
    seen = {f: set() for f in L.FLAG_BITS}
    for a in r.out.answers.values():
        for f, b in L.FLAG_BITS.items():
            seen[f].add(a.flags >> b & 1)
    assert all(v == {0, 1} for v in seen.values()), seen


@pytest.mark.guest
@pytest.mark.parametrize("bits", BITS)
def test_guest_checks_can_fail(run_guest, bits):
    """A probe whose real run gets different EBX/EFLAGS than its reference run must be
    reported by the guest (in both the success and the fault path), and so must memory below
    the stack pointer that changed."""
    s = Script(bits)
    s.add("SELFCHECK", ecx=APIC_BASE, value=(0x1 << 32) | 0x10)  # CF, EBX bit 4
    s.add("SELFCHECK", ecx=APIC_BASE, value=0, mode="ring3")  # no perturbation: clean
    s.add("SELFCHECK", ecx=APIC_BASE, value=(0x800 << 32) | 0x1, mode="ring3")  # OF, EBX bit 0
    s.add("SELFCHECK", ecx=APIC_BASE, value=0, prefix="lock")  # #UD in ring 0: frame below SP
    r = run_guest(f"probe{bits}", plugin=False, script=s).require_completed()
    a = r.out.answers
    assert set(a[0].chk) == {"bx", "flags"}, r.describe()
    assert a[1].chk == () and a[1].vector == GP, r.describe()
    assert {"bx", "flags", "f.bx", "f.flags"} <= set(a[2].chk), r.describe()
    assert a[3].vector == UD and a[3].chk == ("stack",), r.describe()


@pytest.mark.guest
@pytest.mark.parametrize("bits", BITS)
def test_unexpected_exception_panics(run_guest, bits):
    s = Script(bits)
    s.add("ECHO", ecx=0x1234)
    s.add("UD2")
    s.add("ECHO", ecx=0x5678)
    r = run_guest(f"probe{bits}", plugin=False, script=s)
    assert r.status == L.EXIT_PANIC, r.describe()
    assert r.out.panic and "vector=6" in r.out.panic, r.describe()
    assert 0 in r.out.answers and 2 not in r.out.answers


@pytest.mark.guest
def test_truncated_script_panics(run_guest, tmp_path):
    s = Script(32)
    for _ in range(4):
        s.rdmsr(APIC_BASE)
    data = s.to_bytes()[:-40]
    p = tmp_path / "short.bin"
    p.write_bytes(data)
    r = run_guest("probe32", plugin=False, qemu_args=("-initrd", str(p)))
    assert r.status == L.EXIT_PANIC and "truncated" in (r.out.panic or ""), r.describe()


@pytest.mark.guest
def test_64bit_guest_needs_long_mode(run_guest):
    no_lm = next(k for k, m in MODELS.items() if not m.long_mode)
    r = run_guest("probe64", model=no_lm, plugin=False)
    assert r.status == L.EXIT_NO_LONG_MODE and r.out.no_long_mode, r.describe()



@pytest.mark.guest
def test_hung_guest_is_killed_at_the_timeout(run_guest):
    r = run_guest("probe32", plugin=False, qemu_args=("-S",), timeout=2)  # never starts
    assert r.timed_out and r.status is None and not r.completed
    assert r.seconds < 30
