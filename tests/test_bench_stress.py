"""`p4pmu bench`'s random-programming stress (qemu_glue/bench_stress.py): its script and the
plugin's access-time line it reads."""
from __future__ import annotations

from p4pmu.emulator import tables as T
from p4pmu.emulator.models import MODELS, get_model
from p4pmu.emulator.pmu import PMU
from p4pmu.qemu_glue import bench_stress as S

GUEST_SCRIPT_LIMIT = 16384  # qemu_glue/guests/common/events.c: commands per script


def _writes(text: str):
    for line in text.splitlines():
        f = line.split()
        if f[0] == "w":
            yield int(f[1], 16), int(f[2], 16)


def test_the_script_is_reproducible_and_seeded():
    a, b = S.script("0F_04"), S.script("0F_04")
    assert a == b
    assert S.script("0F_04", seed=S.SEED + 1) != a
    assert len(a.splitlines()) == 1 + 2 * S.ACCESSES <= GUEST_SCRIPT_LIMIT


def test_no_write_sets_a_reserved_bit_on_any_model():
    """Plain QEMU ignores these MSRs, the plugin would #GP a reserved bit: the two runs must
    do the same work."""
    for key in MODELS:
        pmu = PMU(get_model(key))
        for msr, value in _writes(S.script(key, accesses=500)):
            reg = pmu.registers[msr]
            assert not value & reg.fault_mask, (key, hex(msr), hex(value))


def test_the_script_programs_what_the_stress_is_about():
    text = S.script("0F_04")
    assert text.splitlines()[0] == f"lvt 0x{1 << 16:x}"  # the LVT entry masked first
    F = T.CCCR_FIELD
    cccrs = [v for msr, v in _writes(text) if T.CCCR_BASE <= msr < T.CCCR_BASE + 18]
    forced = [v for v in cccrs if v & F["ENABLE"].mask and v & F["FORCE_OVF"].mask
              and v & F["OVF_PMI_T0"].mask]
    assert len(forced) > 50
    near = [v for msr, v in _writes(text) if T.COUNTER_BASE <= msr < T.COUNTER_BASE + 18
            and v >= (1 << T.COUNTER_BITS) - 5000]
    assert len(near) > 100
    touched = {msr for msr, _ in _writes(text)}
    assert {T.CCCR_BASE + n for n in range(18)} <= touched


def test_access_time_line_is_read():
    line = ("p4pmu-debug: access times: 2000 PMU accesses, median < 31 us, 90% < 120 us, "
            "largest < 4096 us (or more)")
    assert S.access_times("x\n" + line + "\n") == {
        "accesses": 2000, "median_us": 31, "p90_us": 120, "largest_us": 4096}
    assert S.access_times("nothing here") is None
