"""Programming mistakes the checker must find (emulator/checker.py; docs/checker.md), each with
the correct version of the same programming, which must give no finding at all.

Each case is a list of WRMSRs (MSR, value) on a part without Hyper-Threading (model 0F_04
unless it says otherwise), ending with the registers it used cleared, so that cases can run
one after another in one guest.  Used by tests/test_checker.py (the model alone) and
tests/test_lint.py (a real guest, the plugin's run-time report and `p4pmu lint`).
"""
from __future__ import annotations

from dataclasses import dataclass

from p4pmu.emulator import tables as T

from guests.evscript import cccr_msr, cccr_value, counter_msr, escr_msr, escr_value, preset

C0, C1 = "MSR_CRU_ESCR0", "MSR_CRU_ESCR1"
INSTR = escr_value("instr_retired", "NBOGUSNTAG", t0_usr=True)
F, E = T.CCCR_FIELD, T.ESCR_FIELD


@dataclass(frozen=True)
class Case:
    rule: str                          # the checker rule the wrong version must raise
    wrong: tuple[tuple[int, int], ...]
    right: tuple[tuple[int, int], ...]
    model: str = "0F_04"


def _counting(escr_val: int, cccr_val: int, counter: int = 12, escr: str = C0):
    """ESCR, counter 0, CCCR; then (clean-up) CCCR, ESCR cleared."""
    return ((escr_msr(escr), escr_val), (counter_msr(counter), 0), (cccr_msr(counter), cccr_val),
            (cccr_msr(counter), 0), (escr_msr(escr), 0))


def _cascade(cccr14: int, enable12: bool, model: str = "0F_04"):
    """Counter 14 (CRU_ESCR1) with `cccr14`, counter 12 (CRU_ESCR0) enabled or not."""
    return ((escr_msr(C0), INSTR), (escr_msr(C1), INSTR),
            (cccr_msr(12), cccr_value(12, C0, enable=enable12)), (cccr_msr(14), cccr14),
            (cccr_msr(14), 0), (cccr_msr(12), 0), (escr_msr(C0), 0), (escr_msr(C1), 0))


RIGHT = _counting(INSTR, cccr_value(12, C0))
UNWIRED = F["ENABLE"].mask | 3 << F["ACTIVE_THREAD"].lo  # ESCR_SELECT 0: IQ_ESCR0, gone on 4
NO_EVENT = 0x3F << E["EVENT_SELECT"].lo | 1 << E["EVENT_MASK"].lo | E["T0_USR"].mask

CASES: tuple[Case, ...] = (
    Case("escr-select-unwired", _counting(INSTR, UNWIRED), RIGHT),
    Case("no-event", _counting(NO_EVENT, cccr_value(12, C0)), RIGHT),
    Case("mask-bits-undefined", _counting(INSTR | 1 << (E["EVENT_MASK"].lo + 15),
                                          cccr_value(12, C0)), RIGHT),
    Case("mask-empty", _counting(escr_value("instr_retired", t0_usr=True), cccr_value(12, C0)),
         RIGHT),
    Case("no-cpl", _counting(escr_value("instr_retired", "NBOGUSNTAG"), cccr_value(12, C0)),
         RIGHT),
    Case("no-lp1", _counting(escr_value("instr_retired", "NBOGUSNTAG", t1_usr=True),
                             cccr_value(12, C0)), RIGHT),
    Case("active-thread", _counting(INSTR, cccr_value(12, C0, active_thread=1)), RIGHT),
    Case("cascade-source-idle", _cascade(cccr_value(14, C1, enable=False, cascade=True), False),
         _cascade(cccr_value(14, C1, enable=False, cascade=True), True)),
    Case("cascade-and-enable", _cascade(cccr_value(14, C1, cascade=True), True),
         _cascade(cccr_value(14, C1, enable=False, cascade=True), True)),
    Case("ext-cascade-unavailable",
         _counting(INSTR, cccr_value(13, C0) | T.CCCR_EXT_CASCADE.mask, counter=13),
         _counting(INSTR, cccr_value(13, C0), counter=13)),
    Case("reserved-bits", _counting(INSTR, cccr_value(12, C0) | 1), RIGHT),
    Case("counter-written-while-counting",
         ((escr_msr(C0), INSTR), (cccr_msr(12), cccr_value(12, C0)), (counter_msr(12), 5),
          (cccr_msr(12), 0), (escr_msr(C0), 0)),
         ((escr_msr(C0), INSTR), (cccr_msr(12), cccr_value(12, C0)), (cccr_msr(12), 0),
          (counter_msr(12), 5), (escr_msr(C0), 0))),
    Case("counter-preset-32bit",
         ((counter_msr(12), 0xFFFF_F000),), ((counter_msr(12), preset(4096)),)),
    Case("pmi-cascade-erratum",
         _cascade(cccr_value(14, C1, enable=False, cascade=True, pmi_t0=True), True),
         _cascade(cccr_value(14, C1, pmi_t0=True), True), model="0F_02"),
)
# a programmed ESCR nothing selects: found at the end of a run (checker.check_idle)
IDLE_WRONG = ((escr_msr(C1), INSTR),)
