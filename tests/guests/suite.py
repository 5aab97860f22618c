"""The bridge test script: one script per guest width, the same for every CPU model.

The script walks the whole PMU range and exercises RDMSR/WRMSR/RDPMC in every way the bridge
must handle; which answers are right depends on the model and the mode and comes from
`oracle.Oracle` (the emulator), never from here.  Test patterns are derived from the tables
(field masks, reserved-bit policy, counter width); the only literals are arbitrary data
patterns and x86 architecture facts.

Tags (Op.tag) let each test look at its part of the one guest run:

    msr.initial      RDMSR of every address 300h-3FFh at power-on
    msr.write        WRMSR of a pattern to every address
    msr.readback     RDMSR after each of those writes
    msr.reserved     WRMSR setting one reserved bit (RESERVED_POLICY) of a present register
    msr.after_fault  RDMSR right after a faulting WRMSR (state must be unchanged)
    msr.cleanup      zero every CCCR, ESCR and counter again
    c40.*            40-bit counter width
    rdpmc.setup      counter values for the RDPMC tests
    rdpmc.normal / rdpmc.fast / rdpmc.fault / rdpmc.hi
    cpl3.*           ring-3 RDPMC with and without CR4.PCE, ring-3 RDMSR/WRMSR
    flags.<insn>     EFLAGS/register transparency: every flag setup, several operands, modes
    hi.*             64-bit: garbage in the upper halves of RAX/RCX/RDX
    prefix.<name>    legal and illegal prefixes (and prefix.readback after prefixed writes)
    misc_enable      RDMSR 1A0h
    cpuid            CPUID leaves
"""
from __future__ import annotations

from p4pmu.emulator import tables as T
from p4pmu.emulator.decode import register_kind
from p4pmu.qemu_glue.guests import layout as L
from p4pmu.qemu_glue.guests.script import Script

PMU_LO, PMU_HI = T.PMU_RANGE
U32 = 0xFFFF_FFFF

# Bits of a CCCR that would make a counter run: never set by this script, so that read-back
# values are not changed by counting (the script tests the register file, not the engine).
CCCR_RUN_BITS = (T.CCCR_FIELD["ENABLE"].mask | T.CCCR_FIELD["CASCADE"].mask
                 | T.CCCR_EXT_CASCADE.mask)

# operand cases of the flag setups: (fmem, ebx, eflags before).  Chosen so that every checked
# flag comes out both set and clear over the set (the test checks this coverage).
FLAG_CASES = (
    (0x0000_0000, 0x0000_0001, 0x8D5),
    (0x8000_0000, 0x0000_0001, 0x000),
    (0x7FFF_FFFF, 0xFFFF_FFFF, 0x845),
    (0x1234_5678, 0x1234_5678, 0x094),
)


def present_msrs(model) -> set[int]:
    """Addresses in 300h-3FFh that exist on `model`, straight from the tables."""
    out = {c.counter_msr for c in T.COUNTERS} | {c.cccr_msr for c in T.COUNTERS}
    out |= {e.msr for e in T.ESCRS if model.model in e.models}
    out |= {T.MSR_TC_PRECISE_EVENT, T.MSR_PEBS_ENABLE, T.MSR_PEBS_MATRIX_VERT}
    return out


def patterns(msr: int) -> tuple[int, int]:
    """Two write patterns per address: A = documented fields only (accepted in strict mode
    too), B = every bit of the low word (accepted in default mode only, for CCCR/ESCR).
    Absent addresses get 0 and all-ones-low-word (both must fault)."""
    k = register_kind(msr)
    if k == "counter":
        return T.COUNTER_MASK, 0xA5_5A5A_A5A5 & T.COUNTER_MASK
    if k == "cccr":
        return T.fields_mask(T.CCCR_FIELDS, ht=False) & ~CCCR_RUN_BITS, U32 & ~CCCR_RUN_BITS
    if k == "escr":
        return T.fields_mask(T.ESCR_FIELDS, ht=False), U32
    if k == "pebs_enable":
        return T.fields_mask(T.PEBS_ENABLE_FIELDS, ht=False), U32
    if k == "pebs_matrix_vert":
        return T.fields_mask(T.PEBS_MATRIX_VERT_FIELDS, ht=False), U32
    if k == "tc_precise_event":
        return 0x5A5A_5A5A, U32
    return 0, U32


def reserved_bits(kind: str) -> list[int]:
    """Lowest, highest and a middle bit of the kind's default-mode fault mask."""
    mask = T.RESERVED_POLICY[kind][0]
    bits = [b for b in range(64) if mask >> b & 1]
    return sorted({bits[0], bits[len(bits) // 2], bits[-1]})


def add_msr_section(s: Script) -> None:
    addrs = range(PMU_LO, PMU_HI + 1)
    for a in addrs:
        s.rdmsr(a, tag="msr.initial")
    for a in addrs:
        pa, pb = patterns(a)
        s.wrmsr(a, pa, tag="msr.write")
        s.rdmsr(a, tag="msr.readback")
        s.wrmsr(a, pb, tag="msr.write")
        s.rdmsr(a, tag="msr.readback")
    for a in addrs:
        k = register_kind(a)
        if k is None:
            continue
        _, pb = patterns(a)
        for bit in reserved_bits(k):
            s.wrmsr(a, pb | (1 << bit), tag="msr.reserved")
            s.rdmsr(a, tag="msr.after_fault")
    cleanup(s)


def cleanup(s: Script) -> None:
    """Everything back to zero (CCCRs first: nothing may run)."""
    for c in T.COUNTERS:
        s.wrmsr(c.cccr_msr, 0, tag="msr.cleanup")
    for e in T.ESCRS:
        s.wrmsr(e.msr, 0, tag="msr.cleanup")  # absent ones fault: fine, the oracle knows
    for c in T.COUNTERS:
        s.wrmsr(c.counter_msr, 0, tag="msr.cleanup")


def add_counter40_section(s: Script) -> None:
    top = 1 << T.COUNTER_BITS
    for c in (T.COUNTERS[0], T.COUNTERS[9], T.COUNTERS[-1]):
        a = c.counter_msr
        s.wrmsr(a, T.COUNTER_MASK, tag="c40.write_max")
        s.rdmsr(a, tag="c40.read_max")
        s.wrmsr(a, top, tag="c40.bit40")
        s.rdmsr(a, tag="c40.after_fault")
        s.wrmsr(a, top | 0x1234, tag="c40.bit40")
        s.rdmsr(a, tag="c40.after_fault")
        s.wrmsr(a, 2**64 - 1, tag="c40.bit40")
        s.rdmsr(a, tag="c40.after_fault")
        s.wrmsr(a, 1 << 32, tag="c40.write")  # no truncation to 32 bits
        s.rdmsr(a, tag="c40.read")
        s.wrmsr(a, 1 << 31, tag="c40.write")  # no sign extension from bit 31 (P6 would)
        s.rdmsr(a, tag="c40.read")
        s.wrmsr(a, 0, tag="c40.write")


def counter_value(n: int) -> int:
    """Distinct per-counter values with bits 39:32 and bit 31 set."""
    return ((0xA0 + n) << 32) | 0x9000_0000 | (n << 16) | 0x1234


def add_rdpmc_section(s: Script) -> None:
    for c in T.COUNTERS:
        s.wrmsr(c.counter_msr, counter_value(c.index), tag="rdpmc.setup")
    for c in T.COUNTERS:
        s.rdpmc(c.index, tag="rdpmc.normal")
        s.rdpmc(c.index | 1 << 31, tag="rdpmc.fast")
    n = T.NUM_COUNTERS
    for ecx in (n, n + 1, 25, 31, 32, 0x100, 1 << 30, (1 << 30) | 1, 0x7FFF_FFFF,
                (1 << 31) | n, 0xFFFF_FFFF):
        s.rdpmc(ecx, tag="rdpmc.fault")
    if s.bits == 64:  # RCX[63:32] must be ignored
        for hi in (1, 0xFFFF_FFFF):
            s.rdpmc(3, hi=hi, tag="rdpmc.hi")
            s.rdpmc(4 | 1 << 31, hi=hi, tag="rdpmc.hi")
    # ring 3
    m = T.COUNTERS[5].counter_msr
    s.set_pce(False, tag="cpl3.setpce")
    for ecx in (0, 5, n - 1, 5 | 1 << 31, n):
        s.rdpmc(ecx, mode="ring3", tag="cpl3.rdpmc_nopce")
    s.rdmsr(m, mode="ring3", tag="cpl3.msr")
    s.wrmsr(m, 0x77, mode="ring3", tag="cpl3.msr")
    s.rdmsr(m, tag="cpl3.after_fault")
    s.rdmsr(T.MSR_IA32_MISC_ENABLE, mode="ring3", tag="cpl3.msr")
    s.set_pce(True, tag="cpl3.setpce")
    for ecx in (0, 5, n - 1, 5 | 1 << 31, (n - 1) | 1 << 31, n, 1 << 30):
        s.rdpmc(ecx, mode="ring3", tag="cpl3.rdpmc_pce")
    # after the faulting ones CR4.PCE must still be set and ring-3 RDPMC still work
    s.add("CR4", tag="cpl3.cr4_pce")
    for fs in ("popf", "cmp"):  # at a block start and after another instruction
        s.rdpmc(n, mode="ring3", fsetup=fs, tag="cpl3.rdpmc_pce")
        s.rdpmc(2, mode="ring3", fsetup=fs, tag="cpl3.rdpmc_pce")
    s.add("CR4", tag="cpl3.cr4_pce")
    s.rdmsr(m, mode="ring3", tag="cpl3.msr")
    s.wrmsr(m, 0x77, mode="ring3", tag="cpl3.msr")
    s.rdmsr(m, tag="cpl3.after_fault")
    s.set_pce(False, tag="cpl3.setpce")
    s.rdpmc(0, mode="ring3", tag="cpl3.rdpmc_nopce")
    s.add("CR4", tag="cpl3.cr4_nopce")


def _instances():
    """(name, op, ecx, value) of the instructions whose transparency is checked: each
    intercepted instruction, succeeding and faulting."""
    absent = next(a for a in range(PMU_LO, PMU_HI + 1) if register_kind(a) is None)
    c1, c2 = T.COUNTERS[1].counter_msr, T.COUNTERS[2].counter_msr
    return (
        ("rdmsr_ok", "RDMSR", T.COUNTERS[0].counter_msr, 0),
        ("rdmsr_gp", "RDMSR", absent, 0),
        ("wrmsr_ok", "WRMSR", c1, 0x12_3456_789A),
        ("wrmsr_gp", "WRMSR", c2, (1 << T.COUNTER_BITS) | 5),
        ("rdpmc_ok", "RDPMC", 0, 0),
        ("rdpmc_fast", "RDPMC", 1 | 1 << 31, 0),
        ("rdpmc_gp", "RDPMC", T.NUM_COUNTERS, 0),
        ("misc_enable", "RDMSR", T.MSR_IA32_MISC_ENABLE, 0),
    )


def add_flags_section(s: Script) -> None:
    modes = [("ring0", FLAG_CASES), ("ring3", FLAG_CASES[1:3])]
    if s.bits == 32:
        modes.append(("cs_base", FLAG_CASES[::3]))
    s.set_pce(True, tag="flags.setpce")  # RDPMC at ring 3 allowed: the success path runs
    for mode, cases in modes:
        for name, op, ecx, value in _instances():
            for fs, _ in L.FSETUPS:
                for fmem, ebx, fl in cases:
                    s.add(op, ecx=ecx, value=value, mode=mode, fsetup=fs, fmem=fmem, ebx=ebx,
                          eflags=fl, tag=f"flags.{name}")
    s.set_pce(False, tag="flags.setpce")
    if s.bits == 64:
        for hi in (1, 0x8000_0001, 0xFFFF_FFFF):
            for name, op, ecx, value in _instances():
                s.add(op, ecx=ecx, value=value, hi=hi, fsetup="cmp", fmem=3, ebx=5,
                      tag=f"hi.{name}")
                if op == "WRMSR":
                    s.rdmsr(ecx, tag="hi.readback")


def add_prefix_section(s: Script) -> None:
    modes = ["ring0"] + (["cs_base"] if s.bits == 32 else [])
    for mode in modes:
        for pi, (pname, _, arches, _) in enumerate(L.PREFIXES):
            if s.bits not in arches:
                continue
            for name, op, ecx, value in _instances():
                if name == "wrmsr_ok":  # a different value per prefix: did it land?
                    value = (value + (pi << 8)) & T.COUNTER_MASK
                s.add(op, ecx=ecx, value=value, mode=mode, prefix=pname, fsetup="sub_stc",
                      fmem=0x8000_0000, ebx=1, eflags=0x8D5, tag=f"prefix.{pname}")
                if op == "WRMSR":
                    s.rdmsr(ecx, tag="prefix.readback")


def add_cpu_section(s: Script) -> None:
    s.rdmsr(T.MSR_IA32_MISC_ENABLE, tag="misc_enable")
    if s.bits == 32:
        s.rdmsr(T.MSR_IA32_MISC_ENABLE, mode="cs_base", tag="misc_enable")
    s.rdmsr(T.MSR_IA32_MISC_ENABLE, prefix="opsize66", tag="misc_enable")
    for leaf in (0, 1, 0x8000_0000, 0x8000_0001, 0x8000_0002, 0x8000_0003, 0x8000_0004):
        s.cpuid(leaf, tag="cpuid")


# MSRs the bridge must leave to QEMU: neighbours of the PMU range, MSRs QEMU implements, and
# addresses whose low bits look like PMU registers (a bridge that masks ECX would take them).
OTHER_MSRS = (0x1B, 0x277, 0x2FE, PMU_LO - 1, PMU_HI + 1, PMU_HI + 2, 0x1_0000 + PMU_LO,
              0x1_0000 + T.CCCR_BASE, 0x8000_0000 | PMU_LO, 0xC000_0000 | PMU_LO,
              0x4000_0000, 0xC000_0080)


def other_msr_script(bits: int) -> Script:
    """Compared between a run without and a run with the plugin: must be identical."""
    s = Script(bits)
    for m in OTHER_MSRS:
        s.rdmsr(m, tag="other.read")
        s.rdmsr(m, mode="ring3", tag="other.read")
    s.wrmsr(0x277, 0x0007_0406_0007_0406, tag="other.write")  # IA32_PAT, its reset value
    s.rdmsr(0x277, tag="other.read")
    for m in (0x1_0000 + PMU_LO, 0x8000_0000 | T.CCCR_BASE):
        s.wrmsr(m, 0x5, tag="other.write")
        s.rdmsr(m, tag="other.read")
    return s


def full_script(bits: int) -> Script:
    s = Script(bits)
    add_msr_section(s)
    add_counter40_section(s)
    add_rdpmc_section(s)
    add_flags_section(s)
    add_prefix_section(s)
    add_cpu_section(s)
    cleanup(s)
    return s
