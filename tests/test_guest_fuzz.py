"""A hostile guest (docs/hostile-guests.md): the events guest's fuzzer performs a seeded
stream of random RDMSR, WRMSR and RDPMC over 300h-3FFh, 1A0h and the RDPMC index space --
random values with reserved bits, at CPL 0 and 3, CR4.PCE both ways -- while the counters it
programs count, cascade and interrupt (NMI delivery; the handler clears OVF, the fuzzer
unmasks the LVT entry every 1,000 operations).
Every result the guest got equals what the emulator alone gives for the same stream
(tests/guests/fuzz.py: a digest every CHUNK operations), #GP exactly where the policy says,
no other exception, the guest completes, QEMU exits normally, stderr holds the rate-limited
fault summary and no traceback.  On a mismatch the guest runs again and dumps the
operations of the first differing chunk, and the test names the first differing operation.
"""
from __future__ import annotations

import pytest

from guests import fuzz as F
from guests.evscript import LVT_NMI, PMI_CLEAR_OVF, EvScript

pytestmark = pytest.mark.guest

SEED = 0x5EED_0F_04
N = 25_000  # per guest width in the README's test command
SOAK_N = 1_000_000  # the soak (`./p4pmu.sh test -m soak`)
CHUNK = 25_000


def script(seed: int, n: int, every: int, dump_from: int = 0, dump_n: int = 0) -> EvScript:
    s = EvScript()
    s.pmi_config(PMI_CLEAR_OVF, lvt=LVT_NMI)
    s.lvt(LVT_NMI)
    return s.fuzz(seed, n, every, dump_from, dump_n)


def _explain(run_guest, bits: int, seed: int, bad: F.Checkpoint, every: int) -> str:
    start = bad.done - every if bad.done % every == 0 else bad.done - bad.done % every
    r = run_guest(f"events{bits}", script=script(seed, bad.done, every, start, every),
                  timeout=1800)
    _, dumped, _ = F.parse(r.out.lines)
    return F.first_difference(seed, dumped) or (
        "every dumped operation agrees with the emulator alone, so the guest's digest "
        "(qemu_glue/guests/common/fuzz.c) and tests/guests/fuzz.py disagree on what it covers")


def _fuzz(run_guest, bits: int, n: int) -> None:
    seed = SEED + bits
    want = F.expected(seed, n, CHUNK)
    # about 0.2 ms per operation; ten times that before a run counts as hung
    r = run_guest(f"events{bits}", script=script(seed, n, CHUNK), timeout=max(300, n / 500))
    r.require_completed()
    got, _, other = F.parse(r.out.lines)
    assert not other, "\n".join(other[:20])
    assert [c.done for c in got] == [c.done for c in want], r.describe()
    for g, w in zip(got, want):
        if (g.digest, g.gp) != (w.digest, w.gp):
            why = _explain(run_guest, bits, seed, g, CHUNK)
            pytest.fail(f"{bits}-bit guest, seed 0x{seed:x}: results differ in the operations "
                        f"before {g.done} ({g.gp} #GP, the emulator alone {w.gp}): {why}")
    last = got[-1]
    assert last.gp > n // 10, last  # the policy's faults were exercised ...
    assert last.pmis > 0, last  # ... and so were performance interrupts
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    # faults on stderr: a few lines per kind, then the totals (not one line each)
    assert r.stderr.count("#GP") < 200, r.stderr[-3000:]


@pytest.mark.parametrize("bits", (32, 64))
def test_random_pmu_accesses_agree_with_the_emulator_alone(run_guest, bits):
    _fuzz(run_guest, bits, N)


@pytest.mark.soak
def test_a_million_random_pmu_accesses_agree_with_the_emulator_alone(run_guest):
    _fuzz(run_guest, 64, SOAK_N)
