"""An intercepted RDMSR/WRMSR/RDPMC must look like the real instruction to the guest:

- EFLAGS exactly as produced by the instruction(s) just before it (QEMU computes flags
  lazily: an intercept that skips the instruction can lose them), in the success and in the
  fault path (the #GP frame's EFLAGS too);
- every general register other than EDX:EAX (reads) unchanged, also as the #GP handler sees
  them, and the fault reported at the instruction's own address;
- in long mode the upper halves of RAX/RDX cleared by a read, and the upper halves of
  RAX/RCX/RDX ignored;
- the same behaviour from a code segment whose base is not 0 (32-bit guest) and at CPL 3;
- legal prefixes (66, segment overrides, 67, REX) change nothing; LOCK is #UD.

The guest compares every probe with a reference run of the same flag setup without the
instruction (qemu_glue/guests/common/rt.c, probe_exec) and reports differences in chk=; the
values and faults are compared with the oracle as everywhere else.
"""
from __future__ import annotations

import pytest

from p4pmu.qemu_glue.guests import layout as L

from guests import suite
from guests.bridge import CONFIGS, check, config_id

pytestmark = pytest.mark.guest

INSTANCES = [name for name, *_ in suite._instances()]


@pytest.fixture(params=CONFIGS, ids=config_id)
def br(request, bridge_run):
    return bridge_run(*request.param)


@pytest.mark.parametrize("instance", INSTANCES)
def test_flags_and_registers_preserved(br, instance):
    check(br, f"flags.{instance}")


def test_flag_setups_cover_every_flag(br):
    """The flag setups before the probes produced both values of CF, PF, AF, ZF, SF, OF."""
    seen = {f: set() for f in L.FLAG_BITS}
    for i in br.script.indices(prefix="flags."):
        a = br.out.answers[i]
        if br.script.ops[i].op in L.PROBED_OPS:
            for f, b in L.FLAG_BITS.items():
                seen[f].add(a.flags >> b & 1)
    assert all(v == {0, 1} for v in seen.values()), seen


def test_every_mode_and_setup_ran(br):
    ran = {(br.script.ops[i].mode, br.script.ops[i].fsetup)
           for i in br.script.indices(prefix="flags.")
           if br.script.ops[i].op in L.PROBED_OPS and br.out.answers[i].res != "skip"}
    modes = {"ring0", "ring3"} | ({"cs_base"} if br.bits == 32 else set())
    assert ran == {(m, f) for m in modes for f, _ in L.FSETUPS}


def test_nonzero_cs_base(bridge_run):
    """All probes run from the ring-0 code segment with base CS_BASE (32-bit guest)."""
    for model in ("0F_02", "0F_04"):
        br = bridge_run(32, model)
        idx = [i for i, o in enumerate(br.script.ops) if o.mode == "cs_base"]
        assert len(idx) > 50
        check(br, indices=idx)


@pytest.mark.parametrize("model", [k for b, k in CONFIGS if b == 64])
def test_long_mode_upper_halves(bridge_run, model):
    br = bridge_run(64, model)
    check(br, prefix="hi.")
    # every successful read cleared RAX[63:32] and RDX[63:32] (guest check "axhi"/"dxhi")
    reads = [i for i, o in enumerate(br.script.ops) if o.op in ("RDMSR", "RDPMC")
             and br.out.answers[i].res == "ok"]
    assert len(reads) > 500
    bad = [f"#{i} {br.script.ops[i].describe()}: {','.join(br.out.answers[i].chk)}"
           for i in reads if {"axhi", "dxhi"} & set(br.out.answers[i].chk)]
    assert not bad, "\n".join(bad[:30])


PREFIX_CASES = [(bits, model, p[0]) for bits, model in CONFIGS for p in L.PREFIXES
                if bits in p[2]]


@pytest.mark.parametrize("case", PREFIX_CASES, ids=lambda c: f"{c[0]}bit-{c[1]}-{c[2]}")
def test_prefixes(bridge_run, case):
    bits, model, prefix = case
    br = bridge_run(bits, model)
    check(br, f"prefix.{prefix}")
    # the prefixed writes landed (read back without prefix right after)
    idx = br.script.indices(f"prefix.{prefix}")
    reads = [i + 1 for i in idx if br.script.ops[i].op == "WRMSR"]
    check(br, indices=reads)
