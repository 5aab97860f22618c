"""RDPMC through the bridge: normal and fast reads, bad indexes, CPL 3 with and without
CR4.PCE, and RDMSR/WRMSR at CPL 3 (always #GP).  See test_bridge_msr.py for how the runs and
the expectations are made."""
from __future__ import annotations

import pytest

from p4pmu.emulator import tables as T
from p4pmu.qemu_glue.guests.script import GP

from guests.bridge import CONFIGS, check, config_id
from guests.suite import counter_value

pytestmark = pytest.mark.guest


@pytest.fixture(params=CONFIGS, ids=config_id)
def br(request, bridge_run):
    return bridge_run(*request.param)


def test_counter_setup(br):
    check(br, "rdpmc.setup")


def test_rdpmc_normal_read(br):
    """ECX = n: EDX:EAX = the 40-bit counter (EDX = bits 39:32)."""
    check(br, "rdpmc.normal")
    for i in br.script.indices("rdpmc.normal"):
        n = br.script.ops[i].ecx
        assert br.out.answers[i].val == counter_value(n) & T.COUNTER_MASK, n


def test_rdpmc_fast_read(br):
    """ECX bit 31: EAX = bits 31:0, EDX = 0."""
    check(br, "rdpmc.fast")
    for i in br.script.indices("rdpmc.fast"):
        n = br.script.ops[i].ecx & 0x7FFF_FFFF
        assert br.out.answers[i].val == counter_value(n) & 0xFFFF_FFFF, n


def test_rdpmc_bad_index_faults(br):
    check(br, "rdpmc.fault")
    for i in br.script.indices("rdpmc.fault"):
        a = br.out.answers[i]
        assert (a.res, a.vector, a.error) == ("fault", GP, 0), br.script.ops[i].describe()


def test_rdpmc_ignores_rcx_upper_half(bridge_run):
    br = bridge_run(64, "0F_04")
    check(br, "rdpmc.hi")


def test_cpl3_rdpmc_needs_pce(br):
    check(br, "cpl3.setpce", "cpl3.rdpmc_nopce", "cpl3.rdpmc_pce")
    for i in br.script.indices("cpl3.rdpmc_nopce"):
        assert br.out.answers[i].vector == GP, br.script.ops[i].describe()
    ok = [i for i in br.script.indices("cpl3.rdpmc_pce") if br.out.answers[i].res == "ok"]
    assert len(ok) >= 4  # valid indexes read fine at CPL 3 with PCE


def test_pce_survives_faulting_rdpmc(br):
    """A ring-3 RDPMC that faults (bad index) with CR4.PCE=1 leaves CR4.PCE set; the next
    ring-3 RDPMCs work."""
    check(br, "cpl3.cr4_pce", "cpl3.cr4_nopce")
    pce = 1 << 8
    for i in br.script.indices("cpl3.cr4_pce"):
        assert br.out.answers[i].val & pce, f"CR4 = 0x{br.out.answers[i].val:x}"
    for i in br.script.indices("cpl3.cr4_nopce"):
        assert not br.out.answers[i].val & pce, f"CR4 = 0x{br.out.answers[i].val:x}"
    ops = br.script.ops
    after = [i for i in br.script.indices("cpl3.rdpmc_pce") if ops[i].ecx == 2]
    assert after and all(br.out.answers[i].val == counter_value(2) for i in after)


def test_cpl3_msr_access_always_faults(br):
    check(br, "cpl3.msr", "cpl3.after_fault")
    for i in br.script.indices("cpl3.msr"):
        a = br.out.answers[i]
        assert (a.res, a.vector, a.error) == ("fault", GP, 0), br.script.ops[i].describe()
