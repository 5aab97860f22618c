"""REP string instructions in the Linux guest count per instruction, not per execution of
their translated block.

Under the virtual clock QEMU runs one iteration of a REP string instruction per execution of
its block (icount), under the host clock up to 65,536: the counts must not depend on that.
The `strings` workload (qemu_glue/workloads/strings.S) runs rounds of five REP instructions
of 16,384 iterations each; per round, `uops_retired` counts the loop's uops with each REP's
base uops once and its iterations' (insn_classes.Insn.rep_uops, the published per-iteration
uops: docs/fidelity.md), and `instr_retired` each REP once (docs/guest-events.md I4).
"""
from __future__ import annotations

import pytest
from test_linux_perf import run_session

from p4pmu.emulator.models import get_model
from p4pmu.qemu_glue import events_cmd as E
from p4pmu.qemu_glue import perf_p4 as P
from p4pmu.qemu_glue import workloads as W

MODEL = "0F_04"
ROUNDS = (1, 3)
ITERATIONS = 16384  # strings.S BYTES
EVENTS = {"uops": "uops_retired:NBOGUS:u", "instr": "instr_retired:NBOGUSNTAG:u"}


def expected_per_round() -> dict[str, int]:
    path = W.build_dir("amd64") / "strings"
    insns = P.loop_insns(path, "strings_loop", "strings_loop_end", get_model(MODEL).core)
    reps = [i for i in insns if i.rep]
    assert len(reps) == 5, [i.mnemonic for i in insns]
    uops = sum(i.rep_uops(ITERATIONS) if i.rep else i.uops for i in insns)
    return {"uops": uops, "instr": len(insns)}


@pytest.fixture(scope="module", params=["virtual", "host"])
def strings_session(request, tmp_path_factory):
    clock = request.param
    sections = [("off", "echo 0 > /proc/sys/kernel/nmi_watchdog")]
    # (the two events share the CRU ESCRs: one perf stat each)
    sections += [(f"{k}{n}", f"perf stat -x, -e {E.encode(e).perf} -- strings {n}")
                 for n in ROUNDS for k, e in EVENTS.items()]
    return run_session(tmp_path_factory.mktemp(f"strings-{clock}"), f"strings-{clock}",
                       "amd64", sections, kernel="5.10", recipe=False, clock=clock,
                       timeout=600, plugin_opts=(f"model={MODEL}",))


@pytest.mark.guest
def test_rep_strings_count_per_instruction_whatever_the_clock(strings_session):
    want = expected_per_round()
    got = {}
    for k in EVENTS:
        for n in ROUNDS:
            text = strings_session.sec(f"{k}{n}").text
            (line,) = P.parse_stat_csv(text).values()
            assert line.value, text
            got[k, n] = line.value
    a, b = ROUNDS
    per = {k: (got[k, b] - got[k, a]) / (b - a) for k in EVENTS}
    assert per == want, (per, want, got)
