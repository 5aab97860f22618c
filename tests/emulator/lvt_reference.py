"""Reference model, for the tests, of the interrupt side of a counter overflow: the local-APIC
LVT performance-counter entry.  The plugin implements this rule in C (plugin/pmi.c); the
guest tests check it there, this model checks the PMU's request level against it.

The PMU gives a *level* per logical processor (`PMU.pmi_request(lp)`: some counter with OVF
set, its OVF_PMI_T<lp> bit set, that has counted an event since it overflowed; it stays
asserted while OVF is set -- SDM 18.15.5.8).  Whoever owns the guest's local APIC turns that
level into interrupts with `pmi_delivery`, which models NetBurst's rule that delivering a PMI
sets the LVT entry's mask bit (SDM 10.5.1 "Mask", Fig. 10-8 footnote):
one interrupt per unmask, and a second one if software unmasks before it clears OVF
(Linux `p4_pmu_handle_irq` comment).
"""
from __future__ import annotations

LVT_MASK = 1 << 16
LVT_RESET = 0x0001_0000  # masked (SDM 10.5.1)
DELIVERY_MODES = {0b000: "fixed", 0b010: "smi", 0b100: "nmi"}  # others excluded/reserved


def pmi_delivery(request: bool, lvt: int) -> tuple[bool, int]:
    """One look at one LP's interrupt line: (deliver now?, new LVT entry value).

    Deliver when the request level is high and the entry is unmasked; delivery sets the mask
    bit.  Call it whenever the request may have risen (after an advance step whose
    `pmi_raised` is set) and whenever the guest writes the LVT entry."""
    if request and not lvt & LVT_MASK:
        return True, lvt | LVT_MASK
    return False, lvt


def lvt_decode(lvt: int) -> tuple[str, int]:
    """(delivery mode, vector) of an LVT performance-counter entry (bits 10:8, 7:0)."""
    mode = (lvt >> 8) & 0b111
    return DELIVERY_MODES.get(mode, f"reserved({mode:03b})"), lvt & 0xFF
