"""Overflow interrupts from real guest activity (docs/guest-events.md I7):
fixed and NMI delivery through the local APIC's LVT performance-counter entry, the mask bit
set on delivery, a masked entry honoured, the request that stays asserted while OVF is set
(SDM Vol. 3B 18.15.5.8), the interrupt on the N-th event with a preset of -(N-1), periodic
sampling, and the cascade-PMI erratum of 0F_02 (SDM 18.15.5.7) with and without errata
emulation.

The guest's handler (qemu_glue/guests/common/evrt.c) records, per interrupt: vector, the LVT
entry as it found it, which CCCRs had OVF set, the interrupted IP and the counter's value.
The measured counter counts USR instructions of a ring-3 loop, so every counted event is an
instruction of a known stream (evexpect.user_stream).
"""
from __future__ import annotations

import pytest

from p4pmu.qemu_glue.guests import build as guest_build

from guests.evexpect import LoopModel, pmi_landing, pmi_landings, user_stream
from guests.evscript import (
    LVT_MASK,
    LVT_NMI,
    PMI_CLEAR_OVF,
    PMI_RELOAD,
    PMI_UNMASK,
    VEC_NMI,
    VEC_PMI,
    EvScript,
    cccr_msr,
    cccr_value,
    counter_msr,
    escr_msr,
    escr_value,
    parse_events,
    preset,
)

pytestmark = pytest.mark.guest

CTR, ESCR = 12, "MSR_CRU_ESCR0"
USR_INSTR = escr_value("instr_retired", "NBOGUSNTAG", t0_usr=True)
OVF_BIT = 31


def _model(bits=32):
    return LoopModel(guest_build.BUILD_DIR / f"events{bits}.elf", bits)


def _arm(s: EvScript, nth: int, lvt: int, flags: int, *, counter=CTR, escr=ESCR,
         escr_val=USR_INSTR, max_unmask=0, reload=None):
    """Counter `counter` counts USR instructions and interrupts on the nth (-(nth-1))."""
    cccr = cccr_value(counter, escr, pmi_t0=True)
    s.pmi_config(flags, counter=counter, reload=preset(nth - 1) if reload is None else reload,
                 cccr=cccr, max_unmask=max_unmask, lvt=lvt & ~LVT_MASK)
    s.pmi_reset()
    s.lvt(lvt)
    s.wrmsr(escr_msr(escr), escr_val)
    s.wrmsr(counter_msr(counter), preset(nth - 1))
    s.wrmsr(cccr_msr(counter), cccr)
    return cccr


def _run(run_guest, s, model="0F_04", bits=32, opts=()):
    r = run_guest(f"events{bits}", model=model, script=s, plugin_opts=opts, timeout=60)
    r.require_completed()
    return parse_events(r.out.lines)


@pytest.mark.parametrize("nth", (1000, 2000))
@pytest.mark.parametrize("bits", (32, 64))
@pytest.mark.parametrize("mode", ("fixed", "nmi"))
def test_interrupt_on_the_nth_event_fixed_and_nmi(run_guest, mode, bits, nth):
    """Preset -(N-1): the N-th event requests the PMI (in clock granularity: with N = 2000
    the (N-1)th and the N-th instruction retire in the same clock, so the request rises one
    counting clock later), delivered at the entry of the next block with the LVT's delivery
    mode; delivery sets the LVT mask bit; OVF is set in the CCCR (I7)."""
    iters = 400  # alu: 8 instructions per iteration
    lvt = VEC_PMI if mode == "fixed" else (LVT_NMI | VEC_PMI)
    s = EvScript()
    _arm(s, nth, lvt, PMI_CLEAR_OVF)
    s.loop("alu", iters, user=True, intr=True)
    s.wrmsr(cccr_msr(CTR), 0)
    s.lvt_read("lvt_after")
    s.rdmsr(counter_msr(CTR), "ctr_after")
    s.pmi_log()
    out = _run(run_guest, s, bits=bits)
    assert out.pmi_counts[-1][:2] == (1, 0), f"interrupts (BSP, AP, logged): {out.pmi_counts}"
    p = out.pmis[0]
    assert p.vec == (VEC_PMI if mode == "fixed" else VEC_NMI)
    assert p.masked, f"LVT entry 0x{p.lvt:x} in the handler: mask bit not set on delivery"
    assert out["lvt_after"] & LVT_MASK
    assert p.ovf == 1 << CTR, f"OVF flags in the handler: 0x{p.ovf:x}"
    assert p.cs & 3 == 3, "interrupted at CPL 3"
    m = _model(bits)
    ip, ctr = pmi_landing(m, user_stream(m, "alu", iters), nth)
    assert (p.ip, p.ctr) == (ip, ctr), (f"PMI landed at ip 0x{p.ip:x} with counter {p.ctr}; "
                                        f"documented model: ip 0x{ip:x}, counter {ctr}")


def test_masked_lvt_entry_is_honoured_and_the_request_stays_asserted(run_guest):
    """LVT masked: the overflow sets OVF but delivers nothing; unmasking while OVF is still
    set delivers it then (SDM 18.15.5.8: the request stays asserted), once, and masks the
    entry again."""
    s = EvScript()
    _arm(s, 500, LVT_MASK | LVT_NMI | VEC_PMI, PMI_CLEAR_OVF)
    s.loop("alu", 200, user=True)
    s.pmi_log()                      # nothing yet
    s.rdmsr(cccr_msr(CTR), "cccr_masked")
    s.lvt(LVT_NMI | VEC_PMI)         # unmask with OVF still set
    s.loop("nop4", 50)               # block entries: the request is seen
    s.pmi_log()
    s.lvt_read("lvt_after")
    s.rdmsr(cccr_msr(CTR), "cccr_after")
    out = _run(run_guest, s)
    assert out.pmi_counts[0][0] == 0, "an interrupt was delivered through a masked LVT entry"
    assert out["cccr_masked"] >> OVF_BIT & 1, "OVF not set after the overflow"
    assert out.pmi_counts[1][0] == 1, f"after unmasking: {out.pmi_counts[1]} interrupts"
    assert out.pmis[0].masked and out["lvt_after"] & LVT_MASK
    assert not out["cccr_after"] >> OVF_BIT & 1, "the handler cleared OVF"


def test_unmasking_before_clearing_ovf_interrupts_again(run_guest):
    """A handler that unmasks the LVT without clearing OVF gets the interrupt again (Linux's
    reason for clearing OVF first); one that clears OVF first does not."""
    s = EvScript()
    _arm(s, 500, LVT_NMI | VEC_PMI, PMI_UNMASK, max_unmask=4)
    s.loop("alu", 200, user=True)
    s.loop("nop4", 50)
    s.pmi_log()
    s.wrmsr(cccr_msr(CTR), 0)
    _arm(s, 500, LVT_NMI | VEC_PMI, PMI_CLEAR_OVF | PMI_UNMASK)
    s.loop("alu", 200, user=True)
    s.loop("nop4", 50)
    s.pmi_log()
    out = _run(run_guest, s)
    n_first = out.pmi_counts[0][0]
    assert n_first == 4, (f"unmask without clearing OVF: {n_first} interrupts (want 4: the "
                          "handler stops unmasking after the 4th)")
    assert all(p.ovf >> CTR & 1 and p.masked for p in out.pmis[:4])
    assert out.pmi_counts[1][0] == 1, f"clear OVF, then unmask: {out.pmi_counts[1]}"


@pytest.mark.parametrize("bits", (32, 64))
def test_a_cccr_of_all_ones_interrupts_the_handler_until_it_stops_unmasking(run_guest, bits):
    """WRMSR IQ_CCCR0 = FFFFFFFFh, its reserved bits ignored (strict off): ENABLE, FORCE_OVF,
    COMPARE with COMPLEMENT and THRESHOLD 15 (every clock passes, ESCR_SELECT 7 reaches no
    ESCR) and OVF_PMI_T0.  The counter overflows on every clock (SDM 18.15.5.3, FORCE_OVF), so
    a handler that clears OVF and unmasks the LVT entry is interrupted again as soon as it
    returns: the guest makes no progress while it unmasks, as on a Pentium 4, and goes on once
    it stops (after 50 here).  The plugin's bookkeeping stays right (run_guest fails on a
    bookkeeping error)."""
    s = EvScript()
    _arm(s, 2000, LVT_NMI | VEC_PMI, PMI_CLEAR_OVF | PMI_UNMASK, max_unmask=50)
    s.loop("alu", 100, user=True)  # no overflow yet: 2000 instructions are far
    s.wrmsr(cccr_msr(CTR), 0xFFFFFFFF)
    s.loop("alu", 3000, user=True)
    s.rdmsr(cccr_msr(CTR), "cccr_after")
    s.wrmsr(cccr_msr(CTR), 0)
    s.pmi_log()
    out = _run(run_guest, s, bits=bits)
    assert out.pmi_counts[0][0] == 50, out.pmi_counts
    assert all(p.ovf >> CTR & 1 for p in out.pmis), "each interrupt found counter 12's OVF"
    assert out["cccr_after"] == 0xFFFFFFFF, "OVF set again by the last overflow"


def test_periodic_sampling(run_guest):
    """Reload -(P-1) in the handler, clear OVF, unmask: every interrupt lands where the
    documented rule puts it (the same rule after each reload as after the first preset)."""
    period, iters = 2000, 5000  # 40,000 loop instructions
    s = EvScript()
    _arm(s, period, LVT_NMI | VEC_PMI, PMI_CLEAR_OVF | PMI_RELOAD | PMI_UNMASK)
    s.loop("alu", iters, user=True)
    s.wrmsr(cccr_msr(CTR), 0)
    s.pmi_log()
    out = _run(run_guest, s)
    m = _model()
    want = pmi_landings(m, user_stream(m, "alu", iters), period, period)
    got = [(p.ip, p.ctr) for p in out.pmis]
    assert out.pmi_counts[-1][0] == len(want), (out.pmi_counts[-1], len(want))
    assert got == want[:len(got)], "\n".join(
        f"  PMI {i}: guest ip 0x{g[0]:x} counter {g[1]}; model ip 0x{w[0]:x} counter {w[1]}"
        for i, (g, w) in enumerate(zip(got, want)) if g != w)
    for p in out.pmis:
        assert p.masked and p.ovf == 1 << CTR, p


# --------------------------------------------------------------------------------------------
# the cascade-PMI erratum (SDM 18.15.5.7; docs/emulator.md D11)


def _cascade_pmi_script(ext: bool):
    """X counts USR instructions and overflows after 300; Y (CASCADE, or bit 11 from counter
    16) then counts USR instructions from -100 with OVF_PMI_T0."""
    s = EvScript()
    s.pmi_config(0, counter=12)  # record only: OVF stays set, the LVT stays masked
    s.pmi_reset()
    s.lvt(LVT_NMI | VEC_PMI)
    s.wrmsr(escr_msr(ESCR), USR_INSTR)
    x, y = (16, 12) if ext else (12, 14)
    y_escr = ESCR if ext else "MSR_CRU_ESCR1"
    if not ext:
        s.wrmsr(escr_msr(y_escr), USR_INSTR)
    s.wrmsr(counter_msr(y), preset(100))
    s.wrmsr(cccr_msr(y), cccr_value(y, y_escr, enable=False, cascade=not ext,
                                    ext_cascade=ext, pmi_t0=True))
    s.wrmsr(counter_msr(x), preset(300))
    s.wrmsr(cccr_msr(x), cccr_value(x, ESCR))
    s.loop("alu", 200, user=True)
    s.loop("nop4", 20)
    s.rdmsr(cccr_msr(y), "cccr_y")
    s.rdmsr(counter_msr(y), "ctr_y")
    s.pmi_log()
    return s


@pytest.mark.parametrize("ext", (False, True), ids=("cascade", "extended_cascade"))
@pytest.mark.parametrize("model,opts,pmi", [
    ("0F_04", (), True),               # no erratum on 0F_04
    ("0F_02", (), False),              # 0F_02: no PMI in (extended) cascade mode
    ("0F_02", ("errata=off",), True),  # errata emulation off: the PMI is back
])
def test_cascade_pmi_erratum(run_guest, model, opts, pmi, ext):
    out = _run(run_guest, _cascade_pmi_script(ext), model=model, opts=opts)
    assert out["cccr_y"] >> OVF_BIT & 1, "the cascaded counter did not overflow"
    got = out.pmi_counts[-1][0]
    assert got == (1 if pmi else 0), f"model {model} {opts}: {got} interrupts"
