"""The programming checker on the model alone (emulator/checker.py; docs/checker.md): every
rule is raised by the programming that makes its mistake and by nothing in the correct
version of the same programming, SDM Example 18-2 as printed gives the findings that explain
its three mistakes (docs/checker.md), and the corrected example gives none."""
from __future__ import annotations

import pytest

from p4pmu.emulator import checker as K
from p4pmu.emulator.models import get_model
from p4pmu.emulator.pmu import PMU

from guests.evscript import cccr_value, escr_value, preset
from guests.mistakes import CASES, IDLE_WRONG, Case


def run(writes, model="0F_04", ht=False) -> list[K.Finding]:
    """Apply `writes` to a fresh PMU as the bridge does; every finding, then the idle ones."""
    pmu = PMU(get_model(model), ht=ht)
    checker = K.Checker()
    found = []
    for msr, value in writes:
        reg = pmu.registers[msr]
        counting = reg.kind == "counter" and bool(pmu.running()[reg.index])
        pmu.wrmsr(0, msr, value)
        found += checker.write(pmu, msr, value, counting)
    return found + checker.idle(pmu)


def rules(found) -> set[str]:
    return {f.rule.key for f in found}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.rule)
def test_each_mistake_is_found_and_its_correct_form_is_clean(case: Case):
    wrong = run(case.wrong, case.model)
    assert case.rule in rules(wrong), [f.line() for f in wrong]
    right = run(case.right, case.model)
    assert right == [], [f.line() for f in right]


def test_every_rule_has_a_case():
    """The rules a guest or the model can show: every rule of the table but the LVT's (run
    time only: tests/test_lint.py) and the idle ESCR's (below)."""
    covered = {c.rule for c in CASES} | {"pmi-lvt", "escr-unselected", "unmodelled"}
    assert covered == {r.key for r in K.RULES}


def test_an_escr_nothing_selects_is_found_at_the_end():
    assert rules(run(IDLE_WRONG)) == {"escr-unselected"}


def test_unmodelled_event():
    """A programming that reads 0 here (a bus-queue event whose mask selects none of the
    modelled bus requests) is said, not hidden, with the masks that count."""
    bus = escr_value("IOQ_allocation", "ALL_READ", "ALL_WRITE", t0_usr=True)
    found = run([(0x3A2, bus), (0x360, cccr_value(0, "MSR_FSB_ESCR0"))])
    assert "unmodelled" in rules(found), [f.line() for f in found]
    f = next(f for f in found if f.rule.key == "unmodelled")
    assert "2841h" in f.text and "Bus requests" in f.fix


EXAMPLE_18_2 = [(0x30C, 0), (0x3B8, 0x04000603), (0x36C, 0x04038800), (0x310, 0xFFFFF000),
                (0x3CC, 0x0400060C), (0x370, 0x00039000)]


@pytest.mark.parametrize("ht", (False, True), ids=("no HT", "HT"))
def test_sdm_example_18_2_as_printed(ht):
    """The three mistakes of the printed example (docs/checker.md): counter 16's CCCR selects
    CRU_ESCR0 (ESCR_SELECT 4) so the programmed CRU_ESCR2 is unused; select 02h on CRU_ESCR2
    is machine_clear, whose mask has no bit 1 (instr_retired is 02h on CRU_ESCR0/1); FFFFF000h
    in a 40-bit counter is 00_FFFF_F000h.  Without HT, CRU_ESCR0's T1 bits count nothing."""
    found = run(EXAMPLE_18_2, ht=ht)
    by = {f.rule.key: f for f in found}
    assert "MSR_CRU_ESCR0" in by["escr-unselected"].text + by["escr-unselected"].register
    assert by["escr-unselected"].register == "MSR_CRU_ESCR2"
    assert "ESCR_SELECT=5" in by["escr-unselected"].fix
    assert "machine_clear" in by["mask-bits-undefined"].text
    assert "instr_retired on MSR_CRU_ESCR0, MSR_CRU_ESCR1" in by["mask-bits-undefined"].text
    assert by["counter-preset-32bit"].fix.startswith("write 0xfffffff000")
    expected = {"escr-unselected", "mask-bits-undefined", "counter-preset-32bit"}
    if not ht:
        expected |= {"no-lp1", "reserved-bits"}
    assert rules(found) == expected, [f.line() for f in found]


def test_sdm_example_18_2_corrected_is_clean():
    """The working form (tests/test_events_ht.py): LP 1 instructions after 4096 LP 0
    branches, counter 16 through CRU_ESCR2 (select 5), a 40-bit preset."""
    c0, c2 = "MSR_CRU_ESCR0", "MSR_CRU_ESCR2"
    writes = [(0x30C, 0),
              (0x3B8, escr_value("instr_retired", "NBOGUSNTAG", t1_usr=True)),
              (0x36C, cccr_value(12, c0, enable=False, ext_cascade=True)),
              (0x3CC, escr_value("branch_retired", "MMNP", "MMNM", "MMTP", "MMTM",
                                 t0_usr=True)),
              (0x310, preset(4096)),
              (0x370, cccr_value(16, c2))]
    found = run(writes, ht=True)
    assert found == [], [f.line() for f in found]


def test_track_many_is_track_in_order():
    """The vectorised bookkeeping of the writes C served (Checker.track_many) leaves the
    same ESCRs pending as the writes one by one (Checker.track), on random sequences of ESCR
    and CCCR writes."""
    import random

    from p4pmu.emulator import tables as T
    rng = random.Random(2026)
    pmu = PMU(get_model("0F_04"))
    msrs = [e.msr for e in pmu.escrs[:8]] + [T.CCCR_BASE + n for n in range(T.NUM_COUNTERS)]
    values = [0, INSTR_VALUE, 0x3000, 0x0003_9000, 0x0003_B000, 0x4003_8000, 0x0002_9000]
    for _ in range(200):
        seq = [(rng.choice(msrs), rng.choice(values)) for _ in range(rng.randint(1, 30))]
        one, many = K.Checker(), K.Checker()
        for msr, value in seq:
            one.track(pmu, msr, value)
        many.track_many(pmu, [m for m, _ in seq], [v for _, v in seq])
        assert one._pending.get(id(pmu), set()) == many._pending.get(id(pmu), set()), seq


INSTR_VALUE = escr_value("instr_retired", "NBOGUSNTAG", t0_usr=True)


def test_cascade_from_16_names_the_rule():
    """SDM 18.15.5.6: counter 14 cannot be cascaded from counter 16 with the CASCADE bit.
    A driver that enables 16 and sets CASCADE on 14 is told so when 14's cascade ends."""
    c1 = "MSR_CRU_ESCR1"
    found = run([(0x3B8, escr_value("instr_retired", "NBOGUSNTAG", t0_usr=True)),
                 (0x3B9, escr_value("instr_retired", "NBOGUSNTAG", t0_usr=True)),
                 (0x370, cccr_value(16, "MSR_CRU_ESCR0")),
                 (0x36E, cccr_value(14, c1, enable=False, cascade=True)),
                 (0x36E, 0)])
    f = [x for x in found if x.rule.key == "cascade-source-idle"]
    assert f and "cannot be cascaded from counter 16" in f[0].text, [x.line() for x in found]


def test_p4pmu_lint_on_a_written_trace(tmp_path, capsys):
    """`p4pmu lint` replays a trace's writes (here Example 18-2's, as the plugin would write
    them): exit 1 with the findings; a file that is not a trace: exit 2 and why."""
    import json

    from p4pmu.qemu_glue import cli
    path = tmp_path / "t.jsonl"
    lines = [{"k": "header", "format": "p4pmu-trace", "version": 1, "model": "0F_04",
              "stepping": 3, "threads": 2, "vcpus": 1, "strict": False}]
    for i, (msr, value) in enumerate(EXAMPLE_18_2):
        lines.append({"k": "wrmsr", "vcpu": 0, "core": 0, "lp": 0, "cpl": 0, "pc": "0x1000",
                      "insns": i, "clk": i, "msr": f"{msr:#x}", "value": f"{value:#x}",
                      "by": "python"})
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert cli.main(["lint", str(path)]) == 1
    out = capsys.readouterr().out
    for rule in ("escr-unselected", "mask-bits-undefined", "counter-preset-32bit"):
        assert f"[{rule}]" in out, out
    assert "3 findings" in out
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"k": "wrmsr"}\n')
    assert cli.main(["lint", str(bad)]) == 2
    assert "not a p4pmu trace" in capsys.readouterr().err
