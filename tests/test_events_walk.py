"""A guest walks the whole event table (emulator/events.py, SDM Tables 19-28/29/30 and
18-63): on every CPU model, every event the model has, on every ESCR of the model it is
documented on, through every counter
that ESCR feeds, with all its mask bits, OS and USR.  The writes are accepted (no #GP: the
script runs to its end), the ESCR reads back as written, and over a short integer loop the
counter reads exactly 0 for an event this emulator does not model (emulator/coverage.py says
why) and more than 0 for an event whose bits count what that loop does (instructions, uops,
taken branches, clocks).  Real guest, real QEMU, real plugin."""
from __future__ import annotations

import pytest

from p4pmu.emulator import coverage as COV
from p4pmu.emulator import events as EV
from p4pmu.emulator import tables as T

from guests.evscript import EvScript, cccr_msr, cccr_value, counter_msr, escr_msr, parse_events

pytestmark = pytest.mark.guest

LOOP, N = "alu", 200
# features the `alu` loop surely drives (8 integer instructions and a taken conditional
# branch per iteration; docs/guest-events.md I3)
_ALU_FEATURES = ("retired instructions", "uops per instruction", "branches taken, predicted",
                 "clocks of the logical processor", "conditional branches",
                 "uops of the other instructions", "retired instructions not front-end")


def _walk(model: int):
    """(event, ESCR, counter) for every documented combination on `model`."""
    for ev in EV.EVENTS:
        if model not in ev.models:
            continue
        for escr in ev.escrs:
            if model not in T.ESCR_BY_NAME[escr].models:
                continue
            for ctr in T.ESCR_BY_NAME[escr].feeds():
                yield ev, escr, ctr


def _expect(ev) -> str:
    """'zero', 'counts' or 'any' for the event with all its mask bits on the alu loop."""
    sts = [COV.bit_status(ev.name, b) for b in sorted(ev.mask)]
    if all(s.status == COV.ZERO for s in sts):
        return "zero"
    if any(s.status != COV.ZERO and s.text.startswith(_ALU_FEATURES) for s in sts):
        return "counts"
    return "any"


@pytest.mark.parametrize("model", sorted(EV.ALL_MODELS))
def test_every_event_on_every_escr_and_counter(run_guest, model):
    s = EvScript()
    combos = list(_walk(model))
    assert len(combos) > 150, len(combos)
    for i, (ev, escr, ctr) in enumerate(combos):
        esv = ev.escr_value(*sorted(ev.mask), t0_os=True, t0_usr=True)
        s.wrmsr(cccr_msr(ctr), 0)
        s.wrmsr(counter_msr(ctr), 0)
        s.wrmsr(escr_msr(escr), esv)
        s.wrmsr(cccr_msr(ctr), cccr_value(ctr, escr))
        s.loop(LOOP, N)
        s.wrmsr(cccr_msr(ctr), 0)
        s.rdmsr(counter_msr(ctr), f"c{i}")
        s.rdmsr(escr_msr(escr), f"e{i}")
        s.wrmsr(escr_msr(escr), 0)
    r = run_guest("events32", model=f"0F_{model:02X}", script=s, timeout=300)
    r.require_completed()
    out = parse_events(r.out.lines)
    bad = []
    for i, (ev, escr, ctr) in enumerate(combos):
        esv = ev.escr_value(*sorted(ev.mask), t0_os=True, t0_usr=True)
        got, want = out[f"c{i}"], _expect(ev)
        if out[f"e{i}"] != esv:
            bad.append(f"{ev.name} on {escr}: ESCR reads 0x{out[f'e{i}']:X}, wrote 0x{esv:X}")
        if (want == "zero" and got != 0) or (want == "counts" and got == 0):
            bad.append(f"{ev.name} on {escr} through counter {ctr}: {got} ({want} expected)")
    assert not bad, "\n".join(bad)
    counted = {ev.name for i, (ev, _, _) in enumerate(combos) if out[f"c{i}"]}
    assert {"instr_retired", "uops_retired", "branch_retired", "global_power_events",
            "retired_branch_type", "uop_queue_writes"} <= counted, counted
    assert ("instr_completed" in counted) == (model in EV.EVENT_BY_NAME["instr_completed"]
                                              .models), counted
