"""Silicon's counting rules in the guest: what a real NetBurst counts that the architecture
does not say (docs/fidelity.md, "Counting rules").

instr_retired counts some instructions twice (Weaver, Terpstra, Moore, ISPASS 2013, measured
on CPUID 0F_06); instr_completed and branch_retired count them once.  The bare-metal loop
`overcount` (qemu_glue/guests/common/loops.S) runs each of them once per iteration next to
the register form of CVTTPD2PI, which is counted once.
"""
from __future__ import annotations

import pytest

from p4pmu.emulator import insn_classes as IC
from p4pmu.qemu_glue.guests import build as guest_build

from guests.evexpect import LoopModel
from guests.evplan import Ctr, Plan, Setup
from guests.evscript import parse_events

# The published list (ISPASS 2013, section IV.B; "(mem)": the memory-operand form only)
PUBLISHED_TWICE = {"fldcw", "fldenv", "frstor", "maskmovq", "emms", "sfence", "mfence",
                   "cvtpd2pi (mem)", "cvttpd2pi (mem)"}


def test_the_table_is_the_published_list():
    """insn_classes.OVERCOUNTED says what the paper says, no more, no less."""
    got = {name + (" (mem)" if rule == IC.WITH_MEMORY else "")
           for name, rule in IC.OVERCOUNTED.items()}
    assert got == PUBLISHED_TWICE


def test_the_model_counts_the_second_count_only_in_instr_retired():
    """One execution of each: instr_retired's line reads the extra count, instr_completed's
    does not (clockmodel lines of the instruction's clock)."""
    from p4pmu.emulator import clockmodel as CM
    for name, loads in (("fldcw", 1), ("mfence", 0), ("cvtpd2pi", 1), ("cvtpd2pi", 0)):
        insn = IC.make(name, loads=loads, mm=True)
        (clock,) = [c for c in CM.schedule([insn]) if c["instr"]]
        lines = CM.clock_lines(clock)
        twice = 2 if IC.extra_retired(name, loads) else 1
        assert lines[("instr_retired", "NBOGUSNTAG")] == twice, (name, loads)
        assert lines[("instr_completed", "NBOGUS")] == 1, (name, loads)


@pytest.mark.guest
@pytest.mark.parametrize("model", ("0F_04", "0F_06"))
@pytest.mark.parametrize("bits", (32, 64))
def test_instructions_counted_twice(run_guest, bits, model):
    """Per iteration of `overcount`: instr_retired = its instructions + one per
    instruction of the published list (the objdump mnemonics, matched by name and operand
    form), instr_completed = its instructions, branch_retired = 1; at both CPLs."""
    setups = [Setup("twice", [
        Ctr(12, "MSR_CRU_ESCR0", "instr_retired", ("NBOGUSNTAG",), os=True, usr=True),
        Ctr(14, "MSR_CRU_ESCR1", "instr_completed", ("NBOGUS",), os=True, usr=True),
        Ctr(13, "MSR_CRU_ESCR2", "branch_retired", ("MMNP", "MMNM", "MMTP", "MMTM"),
            os=True, usr=True),
    ])]
    plan = Plan(setups, ["overcount"], rings=(0, 3), ns=(50, 250))
    r = run_guest(f"events{bits}", model=model, script=plan.script(), timeout=120)
    r.require_completed()
    out = parse_events(r.out.lines)
    body = LoopModel(guest_build.BUILD_DIR / f"events{bits}.elf", bits).img.body("overcount")
    twice = [i for i in body if _published(i.mnemonic, "(" in i.operands)]
    assert len(twice) == 9 and len(body) == 12, [i.text for i in body]
    n = 250 - 50
    want = {12: n * (len(body) + len(twice)), 14: n * len(body), 13: n}
    for ring in (0, 3):
        got = {c: plan.delta(out, "twice", "overcount", ring, c) for c in want}
        assert got == want, (bits, model, ring, got, want)


def _published(mnemonic: str, memory: bool) -> bool:
    return mnemonic in PUBLISHED_TWICE or (memory and f"{mnemonic} (mem)" in PUBLISHED_TWICE)
