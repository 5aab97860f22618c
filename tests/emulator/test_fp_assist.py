"""The SSE input assists' model (emulator/fp_assist.py): which encodings are denormal, which
instructions read floating-point inputs, MXCSR.DAZ; and the guest-side replay that the event
tests compute their expectations with (tests/guests/sse_inputs.py)."""
from __future__ import annotations

import struct

import pytest

from p4pmu.emulator import clockmodel as CM
from p4pmu.emulator import coverage as COV
from p4pmu.emulator import fp_assist as FA
from p4pmu.emulator import insn_classes as IC


@pytest.mark.parametrize("raw, bits, want", [
    (0x00000001, 32, True), (0x007FFFFF, 32, True), (0x80000001, 32, True),  # - denormal
    (0x00800000, 32, False), (0x00000000, 32, False), (0x80000000, 32, False),  # -0
    (0x3F800000, 32, False), (0x7F800000, 32, False), (0x7FC00000, 32, False),  # inf, NaN
    (0x0000000000000001, 64, True), (0x000FFFFFFFFFFFFF, 64, True),
    (0x0010000000000000, 64, False), (0x3FF0000000000000, 64, False),
    (0x8000000000000002, 64, True),
])
def test_denormal_encodings(raw, bits, want):
    assert FA.is_denormal(raw, bits) is want


def test_the_smallest_normals_are_not_denormal_and_below_them_are():
    tiny32 = struct.unpack("<I", struct.pack("<f", 1.1754943508222875e-38))[0]
    tiny64 = struct.unpack("<Q", struct.pack("<d", 2.2250738585072014e-308))[0]
    assert not FA.is_denormal(tiny32, 32) and FA.is_denormal(tiny32 - 1, 32)
    assert not FA.is_denormal(tiny64, 64) and FA.is_denormal(tiny64 - 1, 64)


def test_only_the_elements_read_count_and_daz_reads_them_as_zeros():
    ss = FA.SSE_DENORMAL_INPUTS["addss"]
    ps = FA.SSE_DENORMAL_INPUTS["addps"]
    high_denormal = struct.pack("<4I", 0x3F800000, 0x3F800000, 0x3F800000, 0x00000001)
    assert not FA.requests_assist(ss, [high_denormal], 0x1F80)  # addss reads element 0
    assert FA.requests_assist(ps, [high_denormal], 0x1F80)
    assert not FA.requests_assist(ps, [high_denormal], 0x1F80 | FA.MXCSR_DAZ)
    assert FA.denormal_elements(struct.pack("<2Q", 1, 2), FA.SSE_DENORMAL_INPUTS["maxpd"]) == 2


def test_every_row_is_an_sse_arithmetic_instruction_capstone_names():
    """The plugin maps Capstone's instruction names to the rows: a name Capstone does not
    have would never match; each row is one of the clock model's SSE arithmetic classes."""
    md = IC._md(32)
    names = {md.insn_name(i) for i in range(1, 2000)} - {None, ""}
    for name, row in FA.SSE_DENORMAL_INPUTS.items():
        assert name in names, name
        cls = IC.row_for(name, True).cls if name != "cmpsd" else "sdp"  # (string CMPSD's row)
        assert cls in ("psp", "pdp", "ssp", "sdp"), (name, cls)
        if not name.startswith("cvt"):
            assert row.bits == (32 if name.endswith(("ps", "ss")) else 64), name
        assert f'"{name}", {row.bits}, {row.count}, {int(row.dest_read)}' in FA.c_table()


def test_cmpccsd_is_a_scalar_double_compare_not_the_string_instruction():
    (i,) = IC.classify(bytes.fromhex("f20fc2c100"), 0, 32)  # cmpeqsd xmm0, xmm1
    assert i.fp == {"sdp": 1} and not i.rep


def test_the_conversions_read_their_source_format():
    assert FA.SSE_DENORMAL_INPUTS["cvtps2pd"] == FA.SseInputs(32, 2, False)
    assert FA.SSE_DENORMAL_INPUTS["cvtsd2ss"] == FA.SseInputs(64, 1, False)
    # conversions to integers take no denormal-operand exception (SDM Vol. 2: Invalid,
    # Precision only)
    assert "cvttps2dq" not in FA.SSE_DENORMAL_INPUTS and "cvtss2si" not in FA.SSE_DENORMAL_INPUTS


def test_x87_loads_of_singles_and_doubles():
    assert FA.x87_requests_assist(struct.pack("<I", 1))
    assert not FA.x87_requests_assist(struct.pack("<f", 1.0))
    assert FA.x87_requests_assist(struct.pack("<Q", 0x000FFFFFFFFFFFFF))
    assert not FA.x87_requests_assist(bytes(10))  # double extended: loaded exactly
    assert FA.X87_DENORMAL_LOADS == {"fld", "fadd", "fsub", "fsubr", "fmul", "fdiv", "fdivr",
                                     "fcom", "fcomp"}
    assert CM.is_modelled("x87_assist", "PREA") and not CM.is_modelled("x87_assist", "FPSU")
    assert CM.is_modelled("x87_assist", "POAU") and FA.X87_DENORMAL_STORES == {"fst", "fstp"}


def test_the_replay_follows_the_x87_stack_to_its_stores():
    from guests import sse_inputs as SI
    img = _Img(struct.pack("<4I", 0x3F800000, 1, 0x3F800000, 0x3F800000))
    insns = [_I(0, "mov", "$0x1000,%ebx"), _I(1, "flds", "0x4(%ebx)"),  # a denormal single
             _I(2, "fsts", "(%esi)"), _I(3, "fstl", "(%esi)"),          # single: denormal
             _I(4, "fadds", "(%ebx)"), _I(5, "fstp", "%st(0)")]
    assert SI.assists(img, insns) == {1: "x87_prea", 2: "x87_poau", 3: None, 4: None}
    with pytest.raises(SI.SseReplayError):  # a sum the replay does not compute
        SI.assists(img, insns[:5] + [_I(6, "fstps", "(%esi)")])


def test_the_event_counts_the_assists_field():
    assert CM.is_modelled("SSE_input_assist", "ALL")
    st = COV.bit_status("SSE_input_assist", 15)
    assert st.status == COV.MODELLED and "denormal input" in st.text
    assert "sse_assist" in CM.OPERAND_FEATURES and "sse_assist" in CM.MEMORY_FIELDS


class _Img:
    """A stand-in image: read-only data at 0x1000 (the replay reads nothing else)."""

    def __init__(self, data: bytes):
        self.blob = data

    def data(self, addr: int, n: int) -> bytes:
        return self.blob[addr - 0x1000:addr - 0x1000 + n]


class _I:
    def __init__(self, addr, mnemonic, operands):
        self.addr, self.mnemonic, self.operands = addr, mnemonic, operands


def test_the_replay_follows_loads_and_refuses_unknown_inputs():
    from guests import sse_inputs as SI
    data = struct.pack("<4I", 0x3F800000, 1, 0x3F800000, 0x3F800000) + \
        struct.pack("<4I", *([0x3F800000] * 4)) + struct.pack("<2I", 0x1FC0, 0x1F80)
    img = _Img(data)
    insns = [_I(0, "mov", "$0x1000,%ebx"), _I(1, "movaps", "(%rbx),%xmm0"),
             _I(2, "addps", "0x10(%rbx),%xmm0"),   # its destination has the denormal
             _I(3, "movaps", "0x10(%rbx),%xmm1"), _I(4, "mulps", "%xmm1,%xmm1"),
             _I(5, "ldmxcsr", "0x20(%rbx)"), _I(6, "movss", "0x4(%rbx),%xmm2"),
             _I(7, "sqrtss", "%xmm2,%xmm3")]       # denormal, DAZ set
    assert SI.assists(img, insns) == {2: "sse_assist", 4: None, 7: None}
    x87 = [_I(0, "mov", "$0x1000,%ebx"), _I(1, "flds", "0x4(%ebx)"),   # a denormal single
           _I(2, "faddl", "0x10(%ebx)"),                               # two 1.0s: a normal double
           _I(3, "fldt", "(%ebx)"), _I(4, "fadd", "%st(1),%st")]       # not single/double loads
    assert SI.assists(img, x87) == {1: "x87_prea", 2: None}
    with pytest.raises(SI.SseReplayError):
        SI.assists(img, insns + [_I(8, "addps", "%xmm0,%xmm0")])  # xmm0 is a result
