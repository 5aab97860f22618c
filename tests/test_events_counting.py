"""Guest activity drives the counters: instructions, uops, branches by type and
outcome, mispredictions, bogus instructions, FP/SIMD classes, front-end and execution
tagging -- counted from hand-written loops in bare-metal guests (qemu_glue/guests/common/loops.S),
OS and USR separately, 32-bit and long mode.

Method (tests/guests/evplan.py): every loop runs with two lengths N1 < N2 after the same
warm-up, with the same code around it; the difference of the counts is the loop's own
contribution for N2 - N1 more iterations, which must equal what the documented models give
for the same instructions (tests/guests/evexpect.py: the trace of the loop from the ELF,
`insn_classes`, the reference predictor).  Exact equality, no tolerance.
"""
from __future__ import annotations

import pytest

from p4pmu.qemu_glue.guests import build as guest_build

from guests.evexpect import LoopModel, expect_delta
from guests.evplan import Ctr, Plan, Setup
from guests.evscript import escr_value, parse_events
from guests.loops import TRACEABLE, TRACEABLE_CPL0

pytestmark = pytest.mark.guest

C0, C1, C2, C3 = "MSR_CRU_ESCR0", "MSR_CRU_ESCR1", "MSR_CRU_ESCR2", "MSR_CRU_ESCR3"
TB0, TB1, F0, F1 = "MSR_TBPU_ESCR0", "MSR_TBPU_ESCR1", "MSR_FIRM_ESCR0", "MSR_FIRM_ESCR1"
ALL4 = ("MMNP", "MMNM", "MMTP", "MMTM")
BT = ("CONDITIONAL", "CALL", "RETURN", "INDIRECT")

SETUPS = [
    # instructions, branches and branch types, per CPL
    Setup("basic", [
        Ctr(12, C0, "instr_retired", ("NBOGUSNTAG",), os=True),
        Ctr(14, C1, "instr_retired", ("NBOGUSNTAG",), usr=True),
        Ctr(13, C2, "branch_retired", ALL4, os=True, usr=True),
        Ctr(15, C3, "branch_retired", ALL4, usr=True),
        Ctr(4, TB0, "retired_branch_type", ("CONDITIONAL",), os=True, usr=True),
        Ctr(6, TB1, "retired_branch_type", ("INDIRECT",), os=True, usr=True),
        Ctr(8, F0, "x87_FP_uop", ("ALL",), os=True, usr=True),
        Ctr(10, F1, "packed_SP_uop", ("ALL",), os=True, usr=True),
    ]),
    Setup("uops", [
        Ctr(12, C0, "uops_retired", ("NBOGUS",), os=True),
        Ctr(14, C1, "uops_retired", ("NBOGUS",), usr=True),
        Ctr(13, C2, "branch_retired", ("MMTP", "MMTM"), os=True, usr=True),
        Ctr(15, C3, "branch_retired", ("MMNP", "MMNM"), os=True, usr=True),
        Ctr(4, TB0, "retired_branch_type", ("CALL",), os=True, usr=True),
        Ctr(6, TB1, "retired_branch_type", ("RETURN",), os=True, usr=True),
        Ctr(8, F0, "packed_DP_uop", ("ALL",), os=True, usr=True),
        Ctr(10, F1, "scalar_SP_uop", ("ALL",), os=True, usr=True),
    ]),
    Setup("types", [
        Ctr(4, TB0, "retired_branch_type", ("UNCONDITIONAL",), os=True, usr=True),
        Ctr(6, TB1, "retired_branch_type", BT, usr=True),
        Ctr(8, F0, "scalar_DP_uop", ("ALL",), os=True, usr=True),
        Ctr(10, F1, "64bit_MMX_uop", ("ALL",), os=True, usr=True),
        Ctr(12, C0, "instr_retired", ("NBOGUSNTAG",), os=True, usr=True),
        Ctr(14, C1, "uops_retired", ("NBOGUS",), os=True, usr=True),
    ]),
    Setup("simd", [
        Ctr(8, F0, "128bit_MMX_uop", ("ALL",), os=True, usr=True),
        Ctr(10, F1, "x87_SIMD_moves_uop", ("ALLP0",), os=True, usr=True),
    ]),
    Setup("moves", [
        Ctr(8, F0, "x87_SIMD_moves_uop", ("ALLP2",), os=True, usr=True),
        Ctr(10, F1, "x87_SIMD_moves_uop", ("ALLP0", "ALLP2"), usr=True),
    ]),
    # the front end: transfers to the microcode ROM and the uop queue's writes by source;
    # instructions completed
    Setup("ucode", [
        Ctr(4, "MSR_MS_ESCR0", "tc_ms_xfer", ("CISC",), os=True, usr=True),
        Ctr(6, "MSR_MS_ESCR1", "uop_queue_writes", ("FROM_ROM",), usr=True),
        Ctr(12, C0, "instr_completed", ("NBOGUS",), os=True, usr=True),
    ]),
    Setup("ucode2", [
        Ctr(4, "MSR_MS_ESCR0", "uop_queue_writes", ("FROM_TC_DELIVER",), os=True, usr=True),
        Ctr(6, "MSR_MS_ESCR1", "uop_queue_writes",
            ("FROM_TC_BUILD", "FROM_TC_DELIVER", "FROM_ROM"), os=True),
    ]),
    # predicted / mispredicted, bogus instructions
    Setup("mispred", [
        Ctr(12, C0, "instr_retired", ("NBOGUSNTAG", "NBOGUSTAG", "BOGUSNTAG", "BOGUSTAG"),
            os=True, usr=True),
        Ctr(14, C1, "mispred_branch_retired", ("NBOGUS",), os=True, usr=True),
        Ctr(13, C2, "branch_retired", ("MMNP",), os=True, usr=True),
        Ctr(15, C3, "branch_retired", ("MMTM",), os=True, usr=True),
        Ctr(6, TB1, "retired_mispred_branch_type", BT, os=True, usr=True),
    ]),
    Setup("mispred2", [
        Ctr(12, C0, "uops_retired", ("NBOGUS", "BOGUS"), os=True, usr=True),
        Ctr(14, C1, "instr_retired", ("BOGUSNTAG",), os=True, usr=True),
        Ctr(13, C2, "branch_retired", ("MMNM",), os=True, usr=True),
        Ctr(15, C3, "branch_retired", ("MMTP",), os=True, usr=True),
        Ctr(4, TB0, "retired_mispred_branch_type", ("CONDITIONAL",), os=True, usr=True),
        Ctr(6, TB1, "retired_mispred_branch_type", ("INDIRECT",), os=True, usr=True),
    ]),
    Setup("mispred3", [
        Ctr(12, C0, "uops_retired", ("BOGUS",), usr=True),
        Ctr(14, C1, "instr_completed", ("NBOGUS", "BOGUS"), os=True, usr=True),
        Ctr(13, C2, "branch_retired", ("MMNP", "MMTP"), os=True, usr=True),
        Ctr(15, C3, "branch_retired", ("MMNM", "MMTM"), os=True),
        Ctr(4, TB0, "retired_mispred_branch_type", ("CALL",), os=True, usr=True),
        Ctr(6, TB1, "retired_mispred_branch_type", ("RETURN",), os=True, usr=True),
    ]),
    # replay tagging (MSR_PEBS_ENABLE, MSR_PEBS_MATRIX_VERT; SDM Table 19-33): the tagged
    # mispredicted-branch metric as Linux's driver writes it, and a cache metric (no model)
    Setup("replay", [
        Ctr(13, C2, "replay_event", ("NBOGUS",), os=True, usr=True),
        Ctr(14, C1, "mispred_branch_retired", ("NBOGUS",), os=True, usr=True),
    ], msr_writes=[(0x3F1, 0x0101_8000), (0x3F2, 0x10)]),
    Setup("replay2", [
        Ctr(13, C2, "replay_event", ("NBOGUS", "BOGUS"), usr=True),
        Ctr(15, C3, "replay_event", ("NBOGUS",), os=True),
    ], msr_writes=[(0x3F1, 0x0100_0001), (0x3F2, 0x1)]),
    # tagging: front-end (uop_type) and execution (FIRM tag enable)
    Setup("tagload", [
        Ctr(12, C0, "instr_retired", ("NBOGUSTAG",), os=True, usr=True),
        Ctr(14, C1, "instr_retired", ("NBOGUSNTAG",), os=True, usr=True),
        Ctr(13, C2, "front_end_event", ("NBOGUS",), os=True, usr=True),
        Ctr(15, C3, "front_end_event", ("BOGUS",), os=True, usr=True),
    ], escr_writes=[("MSR_RAT_ESCR0",
                     escr_value("uop_type", "TAGLOADS", t0_os=True, t0_usr=True))]),
    Setup("tagstore", [
        Ctr(12, C0, "instr_retired", ("NBOGUSTAG", "BOGUSTAG"), os=True, usr=True),
        Ctr(14, C1, "instr_retired", ("NBOGUSNTAG",), os=True, usr=True),
        Ctr(13, C2, "front_end_event", ("NBOGUS",), os=True, usr=True),
    ], escr_writes=[("MSR_RAT_ESCR1", escr_value("uop_type", "TAGSTORES", t0_usr=True))]),
    Setup("exectag", [
        Ctr(8, F0, "x87_FP_uop", ("ALL",), os=True, usr=True, tag_enable=True, tag_value=1),
        Ctr(10, F1, "packed_SP_uop", ("ALL",), usr=True, tag_enable=True, tag_value=2),
        Ctr(13, C2, "execution_event", ("NBOGUS0",), os=True, usr=True),
        Ctr(15, C3, "execution_event", ("NBOGUS1",), os=True, usr=True),
        Ctr(12, C0, "instr_retired", ("NBOGUSNTAG", "NBOGUSTAG"), os=True, usr=True),
    ]),
]
STAGE2 = ("basic", "uops", "types", "simd", "moves", "tagload", "tagstore", "exectag", "ucode",
          "ucode2")
STAGE3 = ("mispred", "mispred2", "mispred3", "replay", "replay2")

PLAN = Plan(SETUPS, list(TRACEABLE), rings=(0, 3), ns=(120, 1200))


@pytest.fixture(scope="module")
def counting(run_guest):
    return _runs(run_guest, PLAN)


def _runs(run_guest, plan):
    """bits -> (the guest's output, its LoopModel) of `plan`'s script, each run once."""
    cache = {}

    def get(bits: int):
        if bits not in cache:
            r = run_guest(f"events{bits}", script=plan.script(), timeout=300)
            r.require_completed()
            elf = guest_build.BUILD_DIR / f"events{bits}.elf"
            cache[bits] = (parse_events(r.out.lines), LoopModel(elf, bits))
        return cache[bits]

    return get


def _check(counting, bits: int, setup_names, loop: str, plan: Plan = PLAN):
    out, model = counting(bits)
    bad, rows = [], []
    n1, n2 = plan.ns
    for st in SETUPS:
        if st.name not in setup_names:
            continue
        for ring in plan.rings:
            for c in st.counters:
                got = plan.delta(out, st.name, loop, ring, c.n)
                want = expect_delta(model, st, c, loop, ring, n1, n2)
                row = (f"  {st.name:<9} ring {ring} counter {c.n:>2} {c.event}"
                       f"{'/'.join(c.bits)} {'OS' if c.os else ''}{'USR' if c.usr else ''}: "
                       f"guest {got}, model {want}")
                rows.append(row)
                if got != want:
                    bad.append(row)
    assert not bad, (f"{bits}-bit guest, loop {loop}, {n2} - {n1} iterations: "
                     f"{len(bad)} of {len(rows)} counts differ:\n" + "\n".join(bad))


@pytest.mark.parametrize("loop", TRACEABLE)
@pytest.mark.parametrize("bits", (32, 64))
def test_instructions_uops_branches_classes_per_cpl(counting, bits, loop):
    """Counting without outcomes: instr_retired, uops_retired, branch_retired (taken / not taken),
    retired_branch_type, the FP/SIMD uop classes, front-end and execution tagging."""
    _check(counting, bits, STAGE2, loop)


@pytest.mark.parametrize("loop", TRACEABLE)
@pytest.mark.parametrize("bits", (32, 64))
def test_predicted_mispredicted_and_bogus(counting, bits, loop):
    """Branch outcomes: MMNP/MMNM/MMTP/MMTM, mispred_branch_retired, retired_mispred_branch_type
    and the bogus instructions/uops after a misprediction, against the reference predictor
    replayed over the same branch sequence."""
    _check(counting, bits, STAGE3, loop)


def test_same_guest_twice_gives_identical_counts(run_guest, counting):
    """Everything the guest read in the counting run, again in a second run."""
    first, _ = counting(32)
    r = run_guest("events32", script=PLAN.script(), timeout=300)
    r.require_completed()
    second = parse_events(r.out.lines)
    diff = [k for k in first.values if first.values[k] != second.values.get(k)]
    assert not diff, f"{len(diff)} of {len(first.values)} values differ, e.g. " + \
        ", ".join(f"{k}: {first.values[k]} vs {second.values.get(k)}" for k in diff[:10])


PLAN_CPL0 = Plan([st for st in SETUPS if st.name in ("basic", "uops", "types")],
                 list(TRACEABLE_CPL0), rings=(0,), ns=(120, 1200))


@pytest.mark.parametrize("bits", (32, 64))
def test_served_pmu_instructions_retire(run_guest, bits):
    """The rdpmc loop: an RDPMC at a block start (the bridge skips it with set_pc) and one
    inside a block (the bridge's #UD round trip, which QEMU reports as an exception and then
    as an interrupt: its delivery) retire once each, like any instruction (I3).  (A served
    RDPMC that ended its block was once cut again at the delivery and lost.)"""
    _check(_runs(run_guest, PLAN_CPL0), bits, ("basic", "uops", "types"), "rdpmc", PLAN_CPL0)


def test_the_loops_are_what_the_expectations_assume():
    """Self-check of the test design: loop bodies do not cross a page (QEMU would end a
    block there, I6) and the instruction count per iteration is what loops.S says."""
    guest_build.build_all(progress=False)
    for bits in (32, 64):
        model = LoopModel(guest_build.BUILD_DIR / f"events{bits}.elf", bits)
        for loop in TRACEABLE + TRACEABLE_CPL0:
            body = model.img.body(loop)
            first, last = body[0].addr, body[-1].addr + body[-1].size - 1
            assert first >> 12 == last >> 12, f"{bits}-bit loop {loop} crosses a page"
        assert len(model.img.body("alu")) == 8
        assert len(model.img.body("nop4")) == 4


@pytest.mark.parametrize("bits", (32, 64))
def test_rep_string_instructions_come_from_the_microcode_rom(run_guest, bits):
    """A REP MOVSB of 16 bytes per iteration (loop `repmov`, which ends its translated block
    at the REP: not in TRACEABLE): one transfer to the microcode ROM per REP instruction and
    all its uops from the ROM -- its base uops and 16 iterations' (insn_classes: REP string
    instructions, uop_table.REP_UOPS) --, the other instructions' uops from the trace
    cache; instructions retired and completed count the REP once."""
    setups = [
        Setup("rep", [
            Ctr(4, "MSR_MS_ESCR0", "tc_ms_xfer", ("CISC",), os=True, usr=True),
            Ctr(6, "MSR_MS_ESCR1", "uop_queue_writes", ("FROM_ROM",), os=True, usr=True),
            Ctr(12, C0, "instr_retired", ("NBOGUSNTAG",), os=True, usr=True),
            Ctr(14, C1, "instr_completed", ("NBOGUS",), os=True, usr=True),
        ]),
        Setup("rep2", [
            Ctr(4, "MSR_MS_ESCR0", "uop_queue_writes", ("FROM_TC_DELIVER",), os=True,
                usr=True),
        ]),
    ]
    plan = Plan(setups, ["repmov"], rings=(0, 3), ns=(50, 250))
    r = run_guest(f"events{bits}", script=plan.script(), timeout=120)
    r.require_completed()
    out = parse_events(r.out.lines)
    model = LoopModel(guest_build.BUILD_DIR / f"events{bits}.elf", bits)
    body = [model.ic(i) for i in model.img.body("repmov")]
    (rep,) = [i for i in body if i.rep]
    others = [i for i in body if not i.rep]
    assert rep.rep_iter10 > 0 and not any(i.uops > 4 for i in others), body
    n = 250 - 50
    want = {("rep", 4): n, ("rep", 6): n * rep.rep_uops(16),
            ("rep", 12): n * len(body), ("rep", 14): n * len(body),
            ("rep2", 4): n * sum(i.uops for i in others)}
    for ring in (0, 3):
        got = {(st, c): plan.delta(out, st, "repmov", ring, c) for st, c in want}
        assert got == want, (ring, got, want)
