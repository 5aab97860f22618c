"""The engine equals the per-clock reference model (pmu_reference.py) on random programming
and random activity (docs/emulator.md "Exactness").

Counts: test_exact_batches 5,000 cases + test_single_batch_when_flagged_exact 1,500 +
test_same_class_cascade_in_one_batch 1,000 = 7,500 engine-versus-reference cases per run
(about 7,480 of them compared in full: the single-batch cases the step flags as not exact
compare the counters that ran from the start only),
derandomized (the same seeds on every run).
"""
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pmu_cases import apply_write, build, diff, feed_exact, ref_state, state
from pmu_reference import Reference

from p4pmu.emulator import tables as T
from p4pmu.emulator.activity import Activity, ClockKind
from p4pmu.emulator.models import get_model
from p4pmu.emulator.pmu import PMU

SEEDS = st.integers(min_value=0, max_value=2**63 - 1)
FAST = dict(derandomize=True, deadline=None, database=None,
            suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.slow
@settings(max_examples=5000, **FAST)
@given(SEEDS)
def test_exact_batches(seed):
    """Batches shorter than the horizon (and single clocks) are exact in every respect:
    counter values, OVF, PMI arming and requests, edge history -- across cascades (SDM
    18.15.5.6), extended cascades (18.15.5.7), filters (18.15.5.2), HT qualification and
    software writes between batches (halting, 18.15.5.5)."""
    pmu, segments = build(seed)
    ref = Reference(pmu)
    for clocks, writes in segments:
        for r in feed_exact(pmu, clocks):
            assert r.exact
        ref.run(clocks)
        d = diff(state(pmu), ref_state(ref))
        assert not d, f"seed {seed}: " + "; ".join(d)
        for msr, value in writes:
            apply_write(pmu, ref, msr, value)


@pytest.mark.slow
@settings(max_examples=1500, **FAST)
@given(SEEDS)
def test_single_batch_when_flagged_exact(seed):
    """One batch for the whole segment: totals, OVF and edges are always exact; when the step
    says `exact`, everything equals the reference.  When it does not, the counters that ran
    from the start of the batch still match exactly."""
    pmu, segments = build(seed, max_clocks=40)
    ref = Reference(pmu)
    clocks, _ = segments[0]
    running = pmu.running().copy()
    r = pmu.advance(Activity.from_clocks(clocks))
    ref.run(clocks)
    e, f = state(pmu), ref_state(ref)
    if r.exact:
        d = diff(e, f)
        assert not d, f"seed {seed}: " + "; ".join(d)
    else:
        for n in range(T.NUM_COUNTERS):
            if running[n]:
                assert e["counter"][n] == f["counter"][n], (seed, n)
                assert e["cccr"][n] == f["cccr"][n], (seed, n)
        assert e["edge"] == f["edge"]


def _same_class_case(seed):
    import numpy as np
    rng = np.random.default_rng(seed)
    pmu = PMU(get_model("0F_04"), ht=bool(rng.integers(2)))
    # X = counter 12 (CRU_ESCR0), Y = counter 14 (CRU_ESCR1, CASCADE from 12): both count
    # instr_retired NBOGUSNTAG with the same T-bits and the same filter (SDM 18.15.5.6: "the
    # cascading counters mechanism can be used to count a single event").
    tbits = int(rng.choice([0xC, 0x4, 0x8, 0xF]))
    escr = (0x02 << 25) | (1 << 9) | tbits
    pmu.wrmsr(0, 0x3B8, escr)
    pmu.wrmsr(0, 0x3B9, escr)
    filt = int(rng.choice([0, 1 << 18, (1 << 18) | (1 << 24), (1 << 18) | (1 << 19) | (2 << 20)]))
    at = (3 if rng.integers(2) else int(rng.integers(4))) << 16
    pmu.wrmsr(0, 0x30C, (1 << 40) - int(rng.integers(1, 30)))
    pmu.wrmsr(0, 0x30E, (1 << 40) - int(rng.integers(1, 30)))
    pmu.wrmsr(0, 0x36C, (4 << 13) | at | filt | (1 << 12) | (1 << 26))
    pmu.wrmsr(0, 0x36E, (4 << 13) | at | filt | (1 << 30) | (1 << 26))
    value = int(rng.choice([1, 2, 3]))  # one non-zero input value per case
    kinds = [ClockKind((bool(rng.integers(2)) or True, bool(rng.integers(2))),
                       (bool(rng.integers(2)), bool(rng.integers(2))),
                       {("instr_retired", "NBOGUSNTAG", int(rng.integers(2))): value}
                       if rng.integers(3) else {}) for _ in range(3)]
    clocks = [kinds[int(rng.integers(3))] for _ in range(int(rng.integers(1, 120)))]
    return pmu, clocks


@pytest.mark.slow
@settings(max_examples=1000, **FAST)
@given(SEEDS)
def test_same_class_cascade_in_one_batch(seed):
    """Overflow inside a batch is exact when the started counter receives the same per-clock
    increments as its alternate (SDM Example 18-1 on a single event)."""
    pmu, clocks = _same_class_case(seed)
    ref = Reference(pmu)
    r = pmu.advance(Activity.from_clocks(clocks))
    ref.run(clocks)
    assert r.exact
    d = diff(state(pmu), ref_state(ref))
    assert not d, f"seed {seed}: " + "; ".join(d)
