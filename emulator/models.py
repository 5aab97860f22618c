"""CPU models: one declarative table (SDM Vol. 3B 18.15.5.7, Table 18-63, Table 35-41).

Each row is a CPUID family 0Fh DisplayModel with a default stepping.  The PMU differences
between models (which ESCRs exist, extended cascading, instr_completed, the cascade-PMI
erratum) and what the guest sees in CPUID (brand string, long mode, SSE3) are all here; the
QEMU command line, the register model, `p4pmu info` and the tests read this table.
"""
from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class MemoryGeometry:
    """The memory side of one part, from its CPUID leaf 2 descriptors (SDM Vol. 2A, CPUID,
    "Encoding of Cache and TLB Descriptors"): 50h ITLB and 5Bh DTLB, 64 entries each (fully
    associative here); 66h (8 KB, 4-way) or 60h (16 KB, 8-way) the L1 data cache; 7Ah-7Dh
    the unified L2 (256 KB to 2 MB, 8-way, 64-byte lines; 7Ah-7Ch "2 lines per sector", and
    the model keeps NetBurst's 128-byte sectors on every part).  The code-line record of
    self-modifying-code detection stands for the trace cache (12 K uops on every part, SDM
    Vol. 1 2.2.2; taken as about 32 KB of x86 code: 512 lines, 8-way), an assumption of the
    model, not a CPUID fact.  docs/memory-model.md says how emulator/memmodel.py uses them.  None
    of the parts in MODELS has an L3 (the Xeon MP
    and Extreme Edition parts that do are not modelled)."""
    l1d_kb: int
    l1d_ways: int
    l2_kb: int
    l2_ways: int = 8
    dtlb_entries: int = 64
    itlb_entries: int = 64
    line: int = 64  # bytes per cache line (L1 and L2)
    sector_lines: int = 2  # L2: lines per sector (one tag, replaced together)
    page: int = 4096  # every translation is treated as a 4 KB page
    code_lines: int = 512  # the code-line record (self-modifying code): lines ...
    code_ways: int = 8  # ... and ways (true LRU per set)
    store_buffers: int = 24  # NetBurst's store buffers (Optimization Reference Manual)

    def c_row(self) -> str:
        """The row of the plugin's generated table (plugin/memmodel.h struct mm_params)."""
        return "{%d, %d, %d, %d, %d, %d, %d, %d, %d}" % (
            self.l1d_kb, self.l1d_ways, self.l2_kb, self.l2_ways, self.dtlb_entries,
            self.itlb_entries, self.code_lines, self.code_ways, self.store_buffers)


# the four geometries of the six parts (CPUID leaf 2: 66h + 7Ah, 66h + 7Bh, 60h + 7Ch,
# 60h + 7Dh)
_WILLAMETTE = MemoryGeometry(l1d_kb=8, l1d_ways=4, l2_kb=256)
_NORTHWOOD = MemoryGeometry(l1d_kb=8, l1d_ways=4, l2_kb=512)
_PRESCOTT = MemoryGeometry(l1d_kb=16, l1d_ways=8, l2_kb=1024)
_PRESCOTT_2M = MemoryGeometry(l1d_kb=16, l1d_ways=8, l2_kb=2048)


@dataclass(frozen=True)
class CpuModel:
    key: str  # "0F_04"
    model: int  # CPUID DisplayModel
    stepping: int  # default stepping
    codename: str
    brand: str  # CPUID brand string (QEMU model-id)
    has_iq_escr: bool  # IQ_ESCR0/1 present (models 0-2 only; SDM Table 18-63 footnote)
    extended_cascade: bool  # CCCR bit 11 CASCNTxINTOy (0F_02/03/04/06; SDM 18.15.5.7)
    instr_completed: bool  # event instr_completed (0F_03/04/06; SDM Table 19-30)
    long_mode: bool  # EM64T (Prescott/Nocona and later parts)
    sse3: bool
    memory: MemoryGeometry  # TLBs and caches (emulator/memmodel.py)
    # Every model reports PEBS unavailable (IA32_MISC_ENABLE bit 12 = 1): p4pmu models no PEBS
    # record writer yet, so advertising PEBS would promise what the emulator cannot deliver.
    pebs_unavailable: bool = True
    bts_unavailable: bool = True  # no branch-trace store either (MISC_ENABLE bit 11)
    # Real 0F_00-0F_02 report CPUID max leaf 2, but a glibc user space hangs under QEMU with
    # level=2 (shared/notes/qemu-plugin-api-v7.md), so the minimum used is 3.
    cpuid_level: int = 5
    # Emulate this model's PMU errata (today: the cascade-PMI erratum below).  On by default
    # for the models that have them; `without_errata()` switches them off.
    emulate_errata: bool = True

    @property
    def signature(self) -> int:
        """CPUID.1:EAX (family 0Fh, no extended family/model)."""
        return (0xF << 8) | (self.model << 4) | self.stepping

    @property
    def core(self) -> str:
        """The core whose per-instruction uop counts apply (insn_classes.CORES): Agner Fog's
        instruction tables measured a model 2 ("northwood") and a Prescott, and say the
        Prescott values fit model 3 better; models 0-1 share Northwood's microcode, models 3,
        4 and 6 Prescott's."""
        return "northwood" if self.model <= 2 else "prescott"

    @property
    def cascade_pmi_erratum(self) -> bool:
        """No PMI in cascade or extended-cascade mode: 0F_02, and 0F_00/0F_01 with stepping
        above 09h (SDM Vol. 3B 18.15.5.7)."""
        if self.model == 2:
            return True
        return self.model in (0, 1) and self.stepping > 9

    @property
    def cascade_pmi_suppressed(self) -> bool:
        """The cascade-PMI erratum is in effect: the model has it and errata are emulated."""
        return self.cascade_pmi_erratum and self.emulate_errata

    def without_errata(self) -> CpuModel:
        return replace(self, emulate_errata=False)

    def with_stepping(self, stepping: int) -> CpuModel:
        if not 0 <= stepping <= 15:
            raise ValueError(f"stepping must be 0-15, got {stepping}")
        return replace(self, stepping=stepping)


MODELS: dict[str, CpuModel] = {m.key: m for m in (
    CpuModel("0F_00", 0, 7, "Willamette", "Intel(R) Pentium(R) 4 CPU 1500MHz",
             has_iq_escr=True, extended_cascade=False, instr_completed=False,
             long_mode=False, sse3=False, memory=_WILLAMETTE, cpuid_level=3),
    CpuModel("0F_01", 1, 2, "Willamette", "Intel(R) Pentium(R) 4 CPU 2.00GHz",
             has_iq_escr=True, extended_cascade=False, instr_completed=False,
             long_mode=False, sse3=False, memory=_WILLAMETTE, cpuid_level=3),
    CpuModel("0F_02", 2, 9, "Northwood", "Intel(R) Pentium(R) 4 CPU 3.06GHz",
             has_iq_escr=True, extended_cascade=True, instr_completed=False,
             long_mode=False, sse3=False, memory=_NORTHWOOD, cpuid_level=3),
    CpuModel("0F_03", 3, 4, "Prescott", "Intel(R) Pentium(R) 4 CPU 3.00GHz",
             has_iq_escr=False, extended_cascade=True, instr_completed=True,
             long_mode=False, sse3=True, memory=_PRESCOTT),
    CpuModel("0F_04", 4, 3, "Prescott 2M", "Intel(R) Pentium(R) 4 CPU 3.40GHz",
             has_iq_escr=False, extended_cascade=True, instr_completed=True,
             long_mode=True, sse3=True, memory=_PRESCOTT_2M),
    CpuModel("0F_06", 6, 5, "Cedar Mill", "Intel(R) Pentium(R) 4 CPU 3.60GHz",
             has_iq_escr=False, extended_cascade=True, instr_completed=True,
             long_mode=True, sse3=True, memory=_PRESCOTT_2M),
)}

DEFAULT_MODEL = "0F_04"  # has extended cascading and long mode


def get_model(key: str | None = None, stepping: int | None = None) -> CpuModel:
    """Look a model up by key ("0F_04", also "0f_04", "0F04", "4"); optional stepping."""
    key = key or DEFAULT_MODEL
    k = key.strip().upper().replace("-", "_")
    if k not in MODELS:
        if k.startswith("0F") and "_" not in k:
            k = "0F_" + k[2:]
        elif k.isdigit():
            k = f"0F_{int(k):02d}"
    if k not in MODELS:
        raise KeyError(f"unknown CPU model {key!r}; known: {', '.join(MODELS)}")
    m = MODELS[k]
    return m.with_stepping(stepping) if stepping is not None else m
