"""The decoder reads everything from the tables (SDM Fig. 18-43 ESCR, Fig. 18-45 CCCR)."""
import pytest

from p4pmu.emulator import events as E
from p4pmu.emulator import tables as T
from p4pmu.emulator.decode import describe, register_name
from p4pmu.emulator.models import MODELS, get_model


@pytest.mark.parametrize("key", list(MODELS))
def test_every_register_has_its_table_name(key):
    m = get_model(key)
    for c in T.COUNTERS:
        assert register_name(c.counter_msr, m) == c.counter_name
        assert register_name(c.cccr_msr, m) == c.cccr_name
    for e in T.ESCRS:
        assert register_name(e.msr, m) == (e.name if m.model in e.models else None)


def test_linux_instructions_event_decodes_to_its_table_entry():
    # arch/x86/events/intel/p4.c (p4_general_events): instructions = instr_retired
    # NBOGUSNTAG+BOGUSNTAG on CRU_ESCR0
    ev = E.EVENT_BY_NAME["instr_retired"]
    value = ev.escr_value("NBOGUSNTAG", "BOGUSNTAG", t0_os=True, t0_usr=True)
    assert value == 0x04000A0C
    text = describe(0x3B8, value)
    assert text.startswith("MSR_CRU_ESCR0 = 0x4000a0c: instr_retired [NBOGUSNTAG|BOGUSNTAG]")
    assert "T0_OS T0_USR" in text and "T1_" not in text


def test_cccr_fields_and_escr_select():
    text = describe(0x36D, 0x04039000)
    assert "ENABLE" in text and "ESCR_SELECT=4 (MSR_CRU_ESCR0)" in text
    assert "OVF_PMI_T0" in text and "CASCADE" not in text
    # Linux's cycles alias: count-every-clock filter with ESCR select 0 (absent on 0F_04)
    alias = describe(0x36C, 0x04FF1000, get_model("0F_04"))
    assert "ESCR_SELECT=0 (no ESCR)" in alias and "COMPARE(input <= 15)" in alias
    assert "ESCR_SELECT=0 (MSR_IQ_ESCR0)" in describe(0x36C, 0x04FF1000, get_model("0F_02"))


def test_extended_cascade_bit_only_where_the_model_has_it():
    # SDM 18.15.5.7, Table 18-65: bit 11 of IQ_CCCR4 is CASCNT5INTO4 on 0F_02/03/04/06
    assert "CASCNT5INTO4" in describe(0x370, 0x39800, get_model("0F_04"))
    assert "bit 11 (reserved here)" in describe(0x370, 0x39800, get_model("0F_01"))
    assert "bit 11 (reserved here)" in describe(0x361, 0x800, get_model("0F_04"))


def test_counter_presets_show_the_period():
    assert "(= -100000 as a 40-bit preset)" in describe(0x30D, (-100000) & T.COUNTER_MASK)
    assert describe(0x300, 5).endswith(": 5")
