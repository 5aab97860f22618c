"""What a guest sees of the CPU model: CPUID signature/brand/features and IA32_MISC_ENABLE
(1A0h) bits 7, 11, 12, per model, from models.py and tables.py."""
from __future__ import annotations

import struct

import pytest

from p4pmu.emulator import tables as T
from p4pmu.emulator.models import MODELS, get_model
from p4pmu.qemu_glue.guests import layout as L

from guests.bridge import CONFIGS, check, config_id

pytestmark = pytest.mark.guest


@pytest.fixture(params=CONFIGS, ids=config_id)
def br(request, bridge_run):
    return bridge_run(*request.param)


def _cpuid(br) -> dict[int, tuple[int, int, int, int]]:
    return {br.script.ops[i].ecx: br.out.answers[i].val for i in br.script.indices("cpuid")}


def test_cpuid_identity(br):
    m = get_model(br.model)
    c = _cpuid(br)
    eax0, ebx0, ecx0, edx0 = c[0]
    assert struct.pack("<III", ebx0, edx0, ecx0) == b"GenuineIntel"
    assert eax0 == m.cpuid_level
    eax1, _, ecx1, _ = c[1]
    assert eax1 == m.signature, f"CPUID.1:EAX 0x{eax1:x}, want 0x{m.signature:x}"
    family, model, stepping = eax1 >> 8 & 0xF, eax1 >> 4 & 0xF, eax1 & 0xF
    assert (family, model, stepping) == (0xF, m.model, m.stepping)
    assert eax1 >> 16 == 0  # no extended family/model for family 0Fh models 0-6
    assert bool(ecx1 & 1) == m.sse3  # SSE3
    brand = b"".join(struct.pack("<IIII", *c[leaf]) for leaf in
                     (0x8000_0002, 0x8000_0003, 0x8000_0004)).rstrip(b"\0").decode().strip()
    assert brand == m.brand
    assert bool(c[0x8000_0001][3] >> 29 & 1) == m.long_mode  # LM


def test_cpuid_differs_between_models(bridge_run):
    a, b = bridge_run(32, "0F_02"), bridge_run(32, "0F_04")
    assert _cpuid(a)[1][0] != _cpuid(b)[1][0]


def test_misc_enable(br):
    m = get_model(br.model)
    check(br, "misc_enable")
    for i in br.script.indices("misc_enable"):
        v = br.out.answers[i].val
        assert v & T.MISC_PERFMON_AVAILABLE, f"1A0h = 0x{v:x}: bit 7 clear"
        assert bool(v & T.MISC_PEBS_UNAVAILABLE) == m.pebs_unavailable, f"1A0h = 0x{v:x}"
        assert bool(v & T.MISC_BTS_UNAVAILABLE) == m.bts_unavailable, f"1A0h = 0x{v:x}"


@pytest.mark.parametrize("model", [k for k, m in MODELS.items() if not m.long_mode])
def test_64bit_guest_refused_without_long_mode(run_guest, model):
    r = run_guest("probe64", model=model)
    assert r.status == L.EXIT_NO_LONG_MODE and r.out.no_long_mode, r.describe()
