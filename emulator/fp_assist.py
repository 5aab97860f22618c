"""Input assists: which SSE/SSE2/SSE3 and x87 instructions read floating-point inputs that a
denormal makes the processor take a microcode assist for, and whether an execution's inputs do
(SDM Vol. 3B Table 19-28, SSE_input_assist: "assists requested for SSE and SSE2 input
operands, most notably denormal source operands when the DAZ bit is not set"; Table 19-30,
x87_assist PREA: "input assist").

The instructions are those whose "SIMD Floating-Point Exceptions" list in SDM Vol. 2 includes
Denormal (the denormal-operand exception, #D): arithmetic, square roots, minimum and maximum,
compares, and the conversions between single and double precision.  The conversions to
integers, the reciprocal estimates and the moves and logic take no denormal input.  With MXCSR
DAZ (bit 6) set, denormal inputs are read as zeros and need no assist (SDM Vol. 1 10.2.3.4).

The x87 instructions are those that load a single- or double-precision operand from memory and
whose "FPU exceptions" in SDM Vol. 2 include #D for a denormal source (FLD, the arithmetic and
FCOM/FCOMP with a memory operand): input assists (x87_assist PREA); and FST/FSTP to a single or
double, whose result too small for the format (#U) is denormalized: an output assist (POAU) when
the value stored is a denormal (a result that rounds to zero is not seen). A denormal single or
double becomes a normal number in the x87 registers' double extended format, so the registers
hold a denormal only below 2^-16382: the model looks at the memory inputs alone.

Decisions where the sources are silent (docs/events.md, "Assists"): an execution requests one
assist however many of its inputs are denormal (silicon splits a 128-bit operation into two
64-bit uops; no source says whether each asks); the wrong path requests none (this model
executes no wrong path).  Pure Python: the plugin's C (plugin/fp_assist.c) decides the same
from tables generated out of SSE_DENORMAL_INPUTS and X87_DENORMAL_LOADS.
"""
from __future__ import annotations

from dataclasses import dataclass

MXCSR_DAZ = 1 << 6  # SDM Vol. 1 10.2.3: denormals are zeros


@dataclass(frozen=True)
class SseInputs:
    """What one instruction reads as floating-point inputs: `count` elements of `bits` bits
    (32 single, 64 double) from the low end of its source operand, and of its destination
    register too when `dest_read` (the two-operand arithmetic)."""
    bits: int
    count: int
    dest_read: bool


def _rows(names: str, row: SseInputs) -> dict:
    return {n: row for n in names.split()}


PS, SS = SseInputs(32, 4, True), SseInputs(32, 1, True)
PD, SD = SseInputs(64, 2, True), SseInputs(64, 1, True)
# Capstone 5 instruction names (the compares by their insn_classes.sse_compare_name)
SSE_DENORMAL_INPUTS: dict[str, SseInputs] = {
    **_rows("addps subps mulps divps maxps minps cmpps", PS),
    **_rows("addss subss mulss divss maxss minss cmpss comiss ucomiss", SS),
    **_rows("addpd subpd mulpd divpd maxpd minpd cmppd", PD),
    **_rows("addsd subsd mulsd divsd maxsd minsd cmpsd comisd ucomisd", SD),
    **_rows("addsubps haddps hsubps", PS),  # SSE3 (models 0F_03 and later)
    **_rows("addsubpd haddpd hsubpd", PD),
    "sqrtps": SseInputs(32, 4, False), "sqrtss": SseInputs(32, 1, False),
    "sqrtpd": SseInputs(64, 2, False), "sqrtsd": SseInputs(64, 1, False),
    "cvtps2pd": SseInputs(32, 2, False), "cvtss2sd": SseInputs(32, 1, False),
    "cvtpd2ps": SseInputs(64, 2, False), "cvtsd2ss": SseInputs(64, 1, False),
}


# Capstone 5 names of the x87 instructions whose single or double memory operand takes #D
X87_DENORMAL_LOADS = frozenset("fld fadd fsub fsubr fmul fdiv fdivr fcom fcomp".split())
# ... and of those that store ST(0) as a single or double: a result too small for the format
# (#U, SDM Vol. 2 FST) is denormalized by an output assist
X87_DENORMAL_STORES = frozenset("fst fstp".split())


def is_denormal(raw: int, bits: int) -> bool:
    """Is the IEEE 754 single (32) or double (64) encoding `raw` a denormal: exponent 0,
    fraction not 0?"""
    frac = bits - (9 if bits == 32 else 12)
    return (raw >> frac) & ((1 << (bits - 1 - frac)) - 1) == 0 and raw & ((1 << frac) - 1) != 0


def denormal_elements(data: bytes, inputs: SseInputs) -> int:
    """How many of the first inputs.count elements of the little-endian operand `data` are
    denormal."""
    size = inputs.bits // 8
    return sum(is_denormal(int.from_bytes(data[k * size:(k + 1) * size], "little"), inputs.bits)
               for k in range(inputs.count))


def requests_assist(inputs: SseInputs, sources, mxcsr: int) -> bool:
    """Does an execution whose source operands hold `sources` (the bytes of each: the
    destination register first when it is read, then the source operand) request an
    assist under MXCSR value `mxcsr`?"""
    if mxcsr & MXCSR_DAZ:
        return False
    return any(denormal_elements(bytes(s), inputs) for s in sources)


def x87_requests_assist(data: bytes) -> bool:
    """Does an X87_DENORMAL_LOADS instruction whose memory operand holds `data` (4 bytes: a
    single, 8: a double; 10, a double extended, is loaded exactly) request an assist?"""
    return len(data) in (4, 8) and is_denormal(int.from_bytes(data, "little"), 8 * len(data))


def x87_output_assist(data: bytes) -> bool:
    """Does an X87_DENORMAL_STORES instruction that stored `data` (4 or 8 bytes) request an
    output assist (the value stored is a denormal)?"""
    return x87_requests_assist(data)


def c_table() -> str:
    """The plugin's table (plugin/fp_assist.c): one row per instruction name, sorted."""
    rows = ",\n".join(f'    {{"{n}", {r.bits}, {r.count}, {int(r.dest_read)}}}'
                      for n, r in sorted(SSE_DENORMAL_INPUTS.items()))
    return ("/* SSE instructions with floating-point inputs (p4pmu.emulator.fp_assist): name, "
            "element bits, elements, destination read */\n#ifndef P4_SSE_INPUTS\n"
            "struct p4_sse_inputs { const char *name; unsigned char bits, count, dest_read; };\n"
            f"#define P4_SSE_INPUTS {len(SSE_DENORMAL_INPUTS)}\n"
            f"#define P4_MXCSR_DAZ {MXCSR_DAZ}\n"
            f"static const struct p4_sse_inputs p4_sse_inputs[P4_SSE_INPUTS] = {{\n{rows}\n}};\n"
            "/* x87 instructions whose single or double memory input takes #D (sorted) */\n"
            f"#define P4_X87_DENORMAL_LOADS {len(X87_DENORMAL_LOADS)}\n"
            "static const char *const p4_x87_denormal_loads[P4_X87_DENORMAL_LOADS] = {"
            + ", ".join(f'"{n}"' for n in sorted(X87_DENORMAL_LOADS)) + "};\n"
            "/* x87 instructions that store ST(0) as a single or double (sorted) */\n"
            f"#define P4_X87_DENORMAL_STORES {len(X87_DENORMAL_STORES)}\n"
            "static const char *const p4_x87_denormal_stores[P4_X87_DENORMAL_STORES] = {"
            + ", ".join(f'"{n}"' for n in sorted(X87_DENORMAL_STORES)) + "};\n#endif\n")


__all__ = ["SseInputs", "SSE_DENORMAL_INPUTS", "X87_DENORMAL_LOADS", "X87_DENORMAL_STORES",
           "MXCSR_DAZ", "is_denormal", "denormal_elements", "requests_assist",
           "x87_requests_assist", "x87_output_assist", "c_table"]
