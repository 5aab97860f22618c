"""The trace cache's build mode in the clock model (clockmodel.block_clocks, features,
line_matrix; docs/memory-model.md "The trace cache and self-modifying code"): a block execution
whose fetch missed is built in every clock after its bubble; its non-ROM uops count as
uop_queue_writes FROM_TC_BUILD; TC_deliver_mode counts each clock in the bit of the two
logical processors' modes (SDM Vol. 3B Table 19-28)."""
import pytest

from p4pmu.emulator import clockmodel as CM
from p4pmu.emulator import insn_classes as IC


def _block(code: bytes, addr: int = 0x1000):
    return IC.classify(code, addr, 32)


NOP2_JMP = bytes.fromhex("90 90 eb fc")  # nop; nop; jmp back
REP_MOVSB = bytes.fromhex("f3 a4")  # rep movsb: the microcode ROM


def test_a_miss_builds_every_clock_after_the_bubble():
    insns = _block(NOP2_JMP)
    hit = CM.block_clocks(insns, (True, True))
    miss = CM.block_clocks(insns, (True, True), mem={0: {"tc_miss": 1}})
    assert len(hit) == len(miss)  # building adds no clocks
    assert [c["tc_build"] for c in miss] == [0] + [1] * (len(miss) - 1)
    assert not any(c["tc_build"] for c in hit)
    lines = [CM.clock_lines(c) for c in miss]
    built = sum(v.get(("uop_queue_writes", "FROM_TC_BUILD"), 0) for v in lines)
    assert built == sum(i.uops for i in insns)
    assert sum(v.get(("uop_queue_writes", "FROM_TC_DELIVER"), 0) for v in lines) == 0
    # one LP: the bubble delivers (DI), the rest builds (BI)
    assert [("BI" if ("TC_deliver_mode", "BI") in v else "DI") for v in lines] == \
        ["DI"] + ["BI"] * (len(miss) - 1)
    assert all(("TC_deliver_mode", "DI") in v for v in map(CM.clock_lines, hit))


def test_a_misprediction_penalty_is_delivered():
    insns = _block(NOP2_JMP[:2] + bytes.fromhex("75 fc"))  # nop; nop; jnz back
    clocks = CM.block_clocks(insns, (True, False), mem={0: {"tc_miss": 1}})
    penalty = clocks[-CM.PARAMS["bp_penalty"]:]
    assert not any(c["tc_build"] for c in penalty)
    assert all(CM.clock_lines(c).get(("TC_deliver_mode", "DI")) == 1 for c in penalty)


def test_microcode_rom_clocks_are_inactive():
    insns = _block(REP_MOVSB)
    for mem in (None, {0: {"tc_miss": 1}}):
        clocks = CM.block_clocks(insns, None, mem=mem)
        rom = [c for c in clocks if c["ms_uops"]]
        assert rom
        for c in rom:  # I with I (one LP): no bit
            assert not any(e == "TC_deliver_mode" for e, _ in CM.clock_lines(c))
            assert not CM.clock_lines(c).get(("uop_queue_writes", "FROM_TC_BUILD"))


@pytest.mark.parametrize("pair, d, b, i", [
    ((0, False), "DI", "BI", None), ((0, True), "DD", "BD", "ID"),
    ((1, False), "ID", "IB", None), ((1, True), "DD", "DB", "DI")])
def test_the_pair_modes(pair, d, b, i):
    """LP 0's mode is the first letter; the other LP is I when absent or halted, D when
    active (its own clocks are in its own batch); BB is never formed."""
    bits = CM.deliver_mode_bits(pair)
    assert (bits.get("mode_d"), bits.get("mode_b"), bits.get("mode_i")) == (d, b, i)
    c = CM.Clock()
    c.f[CM.FI["tc_build"]] = 1
    lp, other = pair
    kind = CM.clock_kind(c, lp=lp, other_active=other)
    assert {(e, bit) for (e, bit, _) in kind.lines if e == "TC_deliver_mode"} == \
        {("TC_deliver_mode", b)}
    assert "BB" not in {v for p in CM.PAIRS for v in CM.deliver_mode_bits(p).values()}
