"""What the probe guests and the Python side must agree on, defined once.

`build.py` generates from this module the C header (`layout.h`) and the instruction stubs
(`stubs32.S`, `stubs64.S`) of the guests; `script.py` uses it to write command scripts and
to read the guests' answers.  Nothing about the PMU is here: expected PMU behaviour comes from
`p4pmu.emulator` (see script.py).

Script format (a multiboot module, little endian): a 16-byte header
``magic u32 'P4GS', version u32, count u32, reserved u32`` then `count` records of 32 bytes:

    u8 op, u8 mode, u8 prefix, u8 fsetup, u32 ecx, u64 value, u32 fmem, u32 ebx, u32 eflags,
    u32 hi

- op: one of OPS.
- mode: where the instruction runs (MODES): ring 0 flat, ring 3, ring 0 in a code segment whose
  base is CS_BASE (32-bit guest only).
- prefix: index into PREFIXES (the bytes put in front of the 0F xx opcode).
- fsetup: index into FSETUPS, the instruction(s) that set EFLAGS right before the probed one.
- ecx: MSR number / RDPMC index / CPUID leaf.  value: EDX:EAX of a WRMSR, CPUID sub-leaf,
  SETPCE on/off.
- fmem, ebx: the operands of the flag-setting instruction (`op %ebx, fmem`).
- eflags: arithmetic flags loaded (popf / iret) before the flag setup runs.
- hi: 64-bit guest only: the upper halves of RAX, RCX and RDX hold this value before a WRMSR
  and RCX's upper half before a read (the CPU must ignore them); before a read RAX and RDX
  always hold garbage in their upper halves, which the read must clear.

Answer lines (COM1), one per record:

    R <index> res=<ok|f<vector>:<error code>|skip> val=<hex|-> fl=<hex> chk=<ok|names>

val is EDX:EAX (16 hex digits) for RDMSR/RDPMC, ``eax.ebx.ecx.edx`` for CPUID.  fl is the
EFLAGS after the flag setup (from the reference run).  chk lists what the guest found broken
(registers or flags that differ from the reference run, wrong fault address, memory below
the stack pointer or the stub's code bytes changed, ...).
"""
from __future__ import annotations

MAGIC = 0x53473450  # 'P4GS'
VERSION = 1
HEADER_SIZE = 16
RECORD_SIZE = 32

# op codes -------------------------------------------------------------------------------
OPS = {
    "RDMSR": 1,
    "WRMSR": 2,
    "RDPMC": 3,
    "CPUID": 4,
    "SETPCE": 5,  # value 0/1: clear/set CR4.PCE (ring 0)
    "UD2": 6,  # execute ud2 outside any probe: the guest must panic (harness self-test)
    "ECHO": 7,  # print "E <index> <ecx>" (marks a place in the output)
    # harness self-test: an RDMSR probe whose real run (not the reference run) gets
    # value[31:0] XORed into EBX and value[63:32] into EFLAGS: the guest-side checks must
    # report "bx" and "flags"; the stack check runs even after a ring-0 fault (whose frame
    # does land below the stack pointer: "stack")
    "SELFCHECK": 8,
    "CR4": 9,  # print CR4 (val=)
}
OP_NAMES = {v: k for k, v in OPS.items()}
PROBED_OPS = ("RDMSR", "WRMSR", "RDPMC")  # the instructions that run through stubs

# execution modes --------------------------------------------------------------------------
MODES = {"ring0": 0, "ring3": 1, "cs_base": 2}
MODE_NAMES = {v: k for k, v in MODES.items()}

# A deliberately odd, non-page-aligned base for the based ring-0 code segment (32-bit guest).
CS_BASE = 0x00012345

# GDT selectors (both guests use the same numbers where they exist)
SEL_KCODE = 0x08
SEL_KDATA = 0x10
SEL_UCODE = 0x1B  # 0x18 | RPL 3
SEL_UDATA = 0x23  # 0x20 | RPL 3
SEL_KCODE_BASED = 0x28  # 32-bit guest; 64-bit guest: 32-bit boot code segment
SEL_TSS = 0x30

# prefixes ---------------------------------------------------------------------------------
# (name, bytes, arches, expectation): expectation "same" = must behave exactly like the
# unprefixed instruction (legal, ignored prefix); "ud" = the instruction must raise #UD
# (LOCK is not allowed on RDMSR/WRMSR/RDPMC, SDM Vol. 2).
PREFIXES = (
    ("none", (), (32, 64), "same"),
    ("opsize66", (0x66,), (32, 64), "same"),
    ("cs2e", (0x2E,), (32, 64), "same"),
    ("ds3e", (0x3E,), (32, 64), "same"),
    ("es26", (0x26,), (32, 64), "same"),
    ("ss36", (0x36,), (32, 64), "same"),
    ("fs64", (0x64,), (32, 64), "same"),
    ("gs65", (0x65,), (32, 64), "same"),
    ("addr67", (0x67,), (32, 64), "same"),
    ("66_2e_3e", (0x66, 0x2E, 0x3E), (32, 64), "same"),
    ("lock", (0xF0,), (32, 64), "ud"),
    ("rex48", (0x48,), (64,), "same"),
    ("rex41", (0x41,), (64,), "same"),
    ("rex4f", (0x4F,), (64,), "same"),
    ("66_rex48", (0x66, 0x48), (64,), "same"),
    ("rex40", (0x40,), (64,), "same"),
)
PREFIX_INDEX = {p[0]: i for i, p in enumerate(PREFIXES)}

# flag setups ------------------------------------------------------------------------------
# (name, instructions) -- `FMEM` is replaced by the memory operand (absolute in 32-bit code,
# RIP-relative in 64-bit code).  Each leaves QEMU's condition codes in a different lazy state
# (CC_OP_SUB, ADD, INC with a carried-over CF, LOGIC, SHL, ...), which is what an intercept
# that skips the instruction can lose.
FSETUPS = (
    ("popf", ()),  # flags exactly as loaded by popf/iret (eager)
    ("cmp", ("cmpl %ebx, FMEM",)),
    ("add", ("addl %ebx, FMEM",)),
    ("sub_stc", ("subl %ebx, FMEM", "stc")),
    ("stc_inc", ("stc", "incl FMEM")),
    ("and", ("andl %ebx, FMEM",)),
    ("shl", ("shll FMEM",)),
    ("clc_dec", ("clc", "decl FMEM")),
    ("sbb", ("sbbl %ebx, FMEM",)),
    ("neg", ("negl FMEM",)),
)
FSETUP_INDEX = {f[0]: i for i, f in enumerate(FSETUPS)}

# opcode bytes of the probed instructions; index 0 of the stub table is the reference stub
# (flag setup, no instruction)
INSNS = (("REF", ()), ("RDMSR", (0x0F, 0x32)), ("WRMSR", (0x0F, 0x30)),
         ("RDPMC", (0x0F, 0x33)))

# EFLAGS bits compared by the guest: CF PF AF ZF SF OF and DF
FLAGS_CHECKED = 0xCD5
FLAG_BITS = {"CF": 0, "PF": 2, "AF": 4, "ZF": 6, "SF": 7, "OF": 11}

# guest exit statuses as QEMU reports them (isa-debug-exit: (value << 1) | 1)
EXIT_DONE = 1  # guest wrote 0: ran every record
EXIT_PANIC = 3  # guest wrote 1: unexpected exception or bad script
EXIT_NO_LONG_MODE = 5  # guest wrote 2: 64-bit guest on a CPU without long mode


def c_header() -> str:
    """The C header the guest sources include (generated into the build directory)."""
    out = ["/* generated by p4pmu.qemu_glue.guests.build from layout.py: do not edit */",
           "#pragma once",
           f"#define SCRIPT_MAGIC 0x{MAGIC:08X}u",
           f"#define SCRIPT_VERSION {VERSION}",
           f"#define CS_BASE 0x{CS_BASE:08X}u",
           f"#define SEL_KCODE 0x{SEL_KCODE:02X}",
           f"#define SEL_KDATA 0x{SEL_KDATA:02X}",
           f"#define SEL_UCODE 0x{SEL_UCODE:02X}",
           f"#define SEL_UDATA 0x{SEL_UDATA:02X}",
           f"#define SEL_KCODE_BASED 0x{SEL_KCODE_BASED:02X}",
           f"#define SEL_TSS 0x{SEL_TSS:02X}",
           f"#define FLAGS_CHECKED 0x{FLAGS_CHECKED:X}u",
           f"#define N_PREFIXES {len(PREFIXES)}",
           f"#define N_FSETUPS {len(FSETUPS)}",
           f"#define N_INSNS {len(INSNS)}"]
    for name, code in OPS.items():
        out.append(f"#define OP_{name} {code}")
    for name, code in MODES.items():
        out.append(f"#define MODE_{name.upper()} {code}")
    for i, (name, _) in enumerate(INSNS):
        out.append(f"#define INSN_{name} {i}")
    for i, p in enumerate(PREFIXES):
        out.append(f"#define PFX_{p[0].upper()} {i}")
    out.append("")
    return "\n".join(out)


def stubs_asm(bits: int) -> str:
    """The probe stubs of one guest: for every (instruction, prefix, flag setup)
    ``start: <flag setup>; insn: <prefixes> 0F xx; jmp probe_after`` and a table
    ``stub_table[insn][prefix][fsetup] = {start, insn}`` (zeros where a prefix does not exist
    in this mode)."""
    assert bits in (32, 64)
    fmem = "probe_fmem(%rip)" if bits == 64 else "probe_fmem"
    word = ".quad" if bits == 64 else ".long"
    text = ["/* generated by p4pmu.qemu_glue.guests.build from layout.py: do not edit */",
            "\t.section .text.stubs, \"ax\"",
            "\t.code64" if bits == 64 else "\t.code32"]
    table = ["\t.section .rodata.stubs, \"a\"", "\t.balign 16", "\t.globl stub_table",
             "stub_table:"]
    for ii, (iname, opcode) in enumerate(INSNS):
        for pi, (pname, pbytes, arches, _) in enumerate(PREFIXES):
            for _fi, (fname, finsns) in enumerate(FSETUPS):
                if bits not in arches or (ii == 0 and pi != 0):
                    table.append(f"\t{word} 0, 0")
                    continue
                lab = f"stub_{iname}_{pname}_{fname}"
                text.append(f"{lab}:")
                for ins in finsns:
                    text.append("\t" + ins.replace("FMEM", fmem))
                text.append(f"{lab}_insn:")
                raw = tuple(pbytes) + tuple(opcode)
                if raw:
                    text.append("\t.byte " + ", ".join(f"0x{b:02x}" for b in raw))
                text.append("\tjmp probe_after")
                table.append(f"\t{word} {lab}, {lab}_insn")
    return "\n".join(text + [""] + table + ["", '\t.section .note.GNU-stack, "", @progbits', ""])
