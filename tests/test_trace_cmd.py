"""`p4pmu trace`, the reader of the PMU access trace (docs/trace.md; no QEMU needed).

The tests write their own traces, with `fields` from emulator/decode.py as the plugin's
writer does: every filter, the human lines (worded by `decode.describe`), the summary, and
the files that are not (whole) traces.
"""
from __future__ import annotations

import json

import pytest

from p4pmu.emulator import decode as D
from p4pmu.emulator import tables as T
from p4pmu.emulator.models import get_model
from p4pmu.qemu_glue import cli
from p4pmu.qemu_glue import trace_cmd as TC

MODEL = get_model("0F_04")
CCCR0, ESCR2, COUNTER0 = 0x36C, 0x3CC, 0x30C  # MSR_IQ_CCCR0, MSR_CRU_ESCR2, MSR_IQ_COUNTER0
# branch_retired (select 06h on CRU_ESCR2) MMTP|MMTM, T0_OS T0_USR (SDM Fig. 18-43)
ESCR_VALUE = 0x06 << 25 | 0b1100 << 9 | 1 << 3 | 1 << 2
# ENABLE, ESCR_SELECT=5 (CRU_ESCR2 on counter 12), ACTIVE_THREAD=11b, OVF_PMI_T0 (Fig. 18-45)
CCCR_VALUE = 1 << 12 | 5 << 13 | 3 << 16 | 1 << 26
PRESET = (1 << 40) - 100


def where(vcpu=0, insns=None, clk=None, pc=0xFFFFFFFF81012345, cpl=0) -> dict:
    return {"vcpu": vcpu, "core": vcpu, "lp": 0, "insns": insns, "clk": clk,
            "pc": f"{pc:#x}", "cpl": cpl}


def access(k, msr, value, old=None, fault=None, **at) -> dict:
    rec = {"k": k, **where(**at), "msr": f"{msr:#x}", "reg": D.register_name(msr, MODEL)}
    if fault is not None:
        return {**rec, "value": f"{value:#x}", "fault": fault, "by": "python"}
    rec.update(value=f"{value:#x}", fields=D.fields(msr, value, MODEL), by="c")
    if k == "wrmsr":
        rec.update(old=f"{old:#x}", changed=sorted(D.changed(msr, old, value, MODEL)))
    return rec


HEADER = {"k": "header", "format": "p4pmu-trace", "version": 1, "model": "0F_04",
          "stepping": 3, "threads": 1, "vcpus": 2, "strict": False}
RECORDS = [  # line 1 is the header: RECORDS[i] is on line i + 2
    HEADER,
    access("wrmsr", ESCR2, ESCR_VALUE, old=0, insns=100, clk=200),
    access("wrmsr", COUNTER0, PRESET, old=0, insns=110, clk=220),
    access("wrmsr", CCCR0, CCCR_VALUE, old=0, insns=120, clk=240),
    access("rdmsr", CCCR0, CCCR_VALUE, insns=130, clk=260),
    access("wrmsr", CCCR0, 0x1, fault="reserved bits 0x1 set", vcpu=1, insns=50, clk=90),
    {"k": "rdpmc", **where(insns=150, clk=300, cpl=3), "ecx": "0xc", "msr": "0x30c",
     "reg": "MSR_IQ_COUNTER0", "value": f"{PRESET + 40:#x}", "by": "c"},
    {"k": "overflow", **where(insns=200, clk=400), "counter": 12, "reg": "MSR_IQ_COUNTER0"},
    {"k": "pmi", **where(insns=201, clk=402), "vector": 0xFE, "mode": "fixed"},
    {"k": "note", **where(insns=None, clk=None), "text": "a warning"},
    {"k": "end", "rdmsr": 1, "wrmsr": 4, "rdpmc": 1, "faults": 1},
]


def text_of(records) -> str:
    return "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records)


@pytest.fixture
def trace(tmp_path):
    p = tmp_path / "pmu.jsonl"
    p.write_text(text_of(RECORDS))
    return p


def run(capsys, path, *args) -> tuple[int, list[str], str]:
    """`p4pmu trace PATH ARGS` through the real CLI: (status, stdout lines, stderr)."""
    status = cli.main(["trace", str(path), *args])
    out, err = capsys.readouterr()
    return status, out.splitlines(), err


def kinds(capsys, path, *args) -> list[str]:
    """The `k` of each record printed by `--json ARGS`."""
    status, out, err = run(capsys, path, "--json", *args)
    assert status == 0, err
    return [json.loads(ln)["k"] for ln in out]


# --------------------------------------------------------------------------------------------
# Reading and the human lines


def test_read_gives_line_numbers_and_records(trace):
    got = list(TC.read(str(trace)))
    assert [n for n, _ in got] == list(range(1, len(RECORDS) + 1))
    assert [r["k"] for _, r in got] == [r["k"] for r in RECORDS]


def test_wrmsr_line_is_describe_with_changed_fields():
    line = TC.format_record(RECORDS[3], MODEL)
    tail = D.describe(CCCR0, CCCR_VALUE, MODEL).split(": ", 1)[1]
    assert line.startswith("vcpu 0 lp 0  insns 120  clk 240  cpl 0  pc 0xffffffff81012345  ")
    assert f"WRMSR MSR_IQ_CCCR0 <- {CCCR_VALUE:#x}  {tail}  [changed: " in line
    assert "ESCR_SELECT=5 (MSR_CRU_ESCR2)" in line
    assert line.endswith("[changed: ACTIVE_THREAD, ENABLE, ESCR_SELECT, OVF_PMI_T0]")


def test_escr_and_counter_values_are_decoded():
    assert "branch_retired [MMTP|MMTM] T0_OS T0_USR" in TC.format_record(RECORDS[1], MODEL)
    assert "(= -100 as a 40-bit preset)" in TC.format_record(RECORDS[2], MODEL)
    assert "RDPMC ecx=0xc MSR_IQ_COUNTER0 -> " in TC.format_record(RECORDS[6], MODEL)


def test_fast_rdpmc_is_not_decoded_as_a_counter():
    rec = {**RECORDS[6], "ecx": "0x8000000c", "value": "0x1234"}
    assert TC.format_record(rec, MODEL).endswith(
        "RDPMC ecx=0x8000000c MSR_IQ_COUNTER0 -> 0x1234  (fast read: the low 32 bits)")


def test_fault_line():
    line = TC.format_record(RECORDS[5], MODEL)
    assert line.startswith("vcpu 1 ")
    assert line.endswith("WRMSR MSR_IQ_CCCR0 <- 0x1  #GP: reserved bits 0x1 set")


def test_event_lines_and_null_times():
    assert TC.format_record(RECORDS[7], MODEL).endswith("OVERFLOW counter 12 MSR_IQ_COUNTER0"
                                                        "  OVF 0 -> 1")
    assert TC.format_record(RECORDS[8], MODEL).endswith("PMI vector 0xfe mode fixed")
    assert "insns -  clk -" in TC.format_record(RECORDS[9], MODEL)
    assert TC.format_record({"k": "note", "vcpu": 1, "text": "x"}) == \
        "vcpu 1  insns -  clk -  NOTE x"
    assert TC.format_record(RECORDS[10], MODEL) == \
        "END totals: rdmsr 1  wrmsr 4  rdpmc 1  faults 1"


def test_command_prints_one_line_per_record(capsys, trace):
    status, out, _ = run(capsys, trace)
    assert status == 0
    assert len(out) == len(RECORDS)
    assert out[0].startswith("TRACE p4pmu-trace version 1  model 0F_04")
    assert out[3] == TC.format_record(RECORDS[3], MODEL)


# --------------------------------------------------------------------------------------------
# Filters


@pytest.mark.parametrize("reg", ["IQ_CCCR0", "msr_iq_cccr0", "MSR_IQ_CCCR0", "0x36c", "0x36C"])
def test_reg_by_name_or_number(capsys, trace, reg):
    assert kinds(capsys, trace, "--reg", reg) == ["wrmsr", "rdmsr", "wrmsr"]


def test_reg_of_the_counter_matches_rdpmc(capsys, trace):
    assert kinds(capsys, trace, "--reg", "IQ_COUNTER0") == ["wrmsr", "rdpmc"]


def test_counter(capsys, trace):
    got = kinds(capsys, trace, "--counter", "12")
    assert got == ["wrmsr", "wrmsr", "rdmsr", "wrmsr", "rdpmc", "overflow"]  # not the ESCR


def test_vcpu(capsys, trace):
    status, out, _ = run(capsys, trace, "--vcpu", "1")
    assert status == 0 and len(out) == 1 and "#GP" in out[0]


@pytest.mark.parametrize("kind, expected", [
    ("wrmsr", ["wrmsr"] * 4),
    ("access", ["wrmsr", "wrmsr", "wrmsr", "rdmsr", "wrmsr", "rdpmc"]),
    ("fault", ["wrmsr"]),
    ("overflow,PMI", ["overflow", "pmi"]),
    ("header,end", ["header", "end"]),
])
def test_kind(capsys, trace, kind, expected):
    assert kinds(capsys, trace, "--kind", kind) == expected


def test_insns_range_is_inclusive_and_drops_null_insns(capsys, trace):
    got = kinds(capsys, trace, "--from", "110", "--to", "150")
    assert got == ["wrmsr", "wrmsr", "rdmsr", "rdpmc"]  # no header, note (null) or end


def test_clk_range(capsys, trace):
    assert kinds(capsys, trace, "--clk-from", "400") == ["overflow", "pmi"]
    assert kinds(capsys, trace, "--clk-to", "90") == ["wrmsr"]


def test_filters_combine(capsys, trace):
    assert kinds(capsys, trace, "--counter", "12", "--kind", "wrmsr", "--vcpu", "0",
                 "--to", "115") == ["wrmsr"]


def test_json_prints_the_lines_unchanged(capsys, trace):
    status, out, _ = run(capsys, trace, "--json", "--kind", "pmi")
    assert status == 0
    assert out == [json.dumps(RECORDS[8], separators=(",", ":"))]


# --------------------------------------------------------------------------------------------
# The summary


def test_summary(capsys, trace):
    status, out, _ = run(capsys, trace, "--summary")
    assert status == 0
    text = "\n".join(out)
    row = next(ln.split() for ln in out if "MSR_IQ_COUNTER0" in ln and "ESCR" not in ln)
    # core ctr counter CCCR-wr counter-wr reads overflows cascades faults
    assert row == ["0", "12", "MSR_IQ_COUNTER0", "1", "1", "2", "1", "0", "0"]
    assert f"ESCR MSR_CRU_ESCR2 = {ESCR_VALUE:#x}: branch_retired [MMTP|MMTM] T0_OS " \
           "T0_USR" in text
    assert "CCCR = 0x403b000: ENABLE ESCR_SELECT=5 (MSR_CRU_ESCR2)" in text
    assert "counted with (1): started 1x, 1 overflows, 0 cascades" in text
    assert "at the end: counting with (1)" in text
    pmis = out[out.index("PMIs per vCPU") + 2].split()
    assert pmis == ["0", "0", "0", "1"]
    assert any(ln.split()[:3] == ["MSR_IQ_CCCR0", "wrmsr", "1"] for ln in out)
    assert out[-1].split() == ["total", "11"]


STOPPED = [  # a driver's life of counter 12: two programmings, then stopped (as perf does)
    HEADER,
    access("wrmsr", ESCR2, ESCR_VALUE, old=0, insns=100, clk=200),
    access("wrmsr", CCCR0, CCCR_VALUE, old=0, insns=120, clk=240),
    {"k": "overflow", **where(insns=200, clk=400), "counter": 12, "reg": "MSR_IQ_COUNTER0"},
    access("wrmsr", CCCR0, 0, old=CCCR_VALUE, insns=300, clk=600),
    access("wrmsr", ESCR2, ESCR_VALUE & ~(1 << 3), old=ESCR_VALUE, insns=310, clk=620),
    access("wrmsr", CCCR0, CCCR_VALUE, old=0, insns=320, clk=640),
    access("wrmsr", CCCR0, CCCR_VALUE | 1 << 31, old=CCCR_VALUE, insns=330, clk=660),  # OVF
    {"k": "overflow", **where(insns=400, clk=800), "counter": 12, "reg": "MSR_IQ_COUNTER0"},
    {"k": "overflow", **where(insns=500, clk=1000), "counter": 12, "reg": "MSR_IQ_COUNTER0"},
    access("wrmsr", ESCR2, ESCR_VALUE, old=ESCR_VALUE & ~(1 << 3), insns=510, clk=1020),
    access("wrmsr", CCCR0, 0, old=CCCR_VALUE, insns=600, clk=1200),
    access("wrmsr", ESCR2, 0, old=ESCR_VALUE, insns=610, clk=1220),
]


def test_summary_shows_what_a_counter_counted_with_not_its_last_write(capsys, tmp_path):
    path = tmp_path / "stopped.jsonl"
    path.write_text(text_of(STOPPED))
    status, out, _ = run(capsys, path, "--summary")
    assert status == 0
    text = "\n".join(out)
    # the first programming twice (again when the ESCR came back), the second once; the OVF
    # write is not a new programming
    assert "counted with (1): started 2x, 1 overflows" in text, text
    assert "counted with (2): started 1x, 2 overflows" in text, text
    assert "counted with (3)" not in text
    assert f"ESCR MSR_CRU_ESCR2 = {ESCR_VALUE & ~(1 << 3):#x}" in text  # the second one's ESCR
    assert "at the end: stopped (CCCR = 0x0)" in text


def test_summary_as_json(capsys, tmp_path):
    path = tmp_path / "stopped.jsonl"
    path.write_text(text_of(STOPPED))
    status, out, _ = run(capsys, path, "--summary", "--json")
    assert status == 0
    got = json.loads("\n".join(out))
    (ctr,) = got["counters"]
    assert (ctr["counter"], ctr["name"], ctr["overflows"]) == (12, "MSR_IQ_COUNTER0", 3)
    assert [(p["starts"], p["overflows"]) for p in ctr["counted_with"]] == [(2, 1), (1, 2)]
    assert ctr["counted_with"][0]["escr_text"].startswith("MSR_CRU_ESCR2 = ")
    assert "branch_retired" in ctr["counted_with"][0]["escr_text"]
    assert ctr["counting_at_end"] is None and ctr["last_cccr"] == "0x0"
    assert got["model"] == "0F_04" and got["kinds"]["wrmsr"] == 9


def test_summary_omits_untouched_counters_and_keeps_faulting_core(capsys, trace):
    _, out, _ = run(capsys, trace, "--summary")
    rows = [ln.split()[:3] for ln in out if len(ln.split()) == 9 and ln.split()[0].isdigit()]
    assert rows == [["0", "12", "MSR_IQ_COUNTER0"], ["1", "12", "MSR_IQ_COUNTER0"]]


# --------------------------------------------------------------------------------------------
# Files that are not (whole) traces, no match, usage


def test_truncated_last_line_is_skipped(capsys, tmp_path):
    p = tmp_path / "killed.jsonl"
    p.write_text(text_of(RECORDS[:4]) + '{"k":"rdmsr","vcpu":0,"ms')
    status, out, err = run(capsys, p)
    assert status == 0
    assert len(out) == 4
    assert f"{p}:5: incomplete last line skipped" in err


def test_corrupt_line_in_the_middle(capsys, tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_text(text_of(RECORDS[:4]) + '{"k":"rdmsr",\n' + text_of(RECORDS[4:]))
    status, out, err = run(capsys, p)
    assert status == 2
    assert err.startswith(f"p4pmu trace: error: {p}:5: not a JSON line")
    assert len(err.splitlines()) == 1


def test_corrupt_last_line_with_line_end_is_an_error(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_text(text_of(RECORDS[:2]) + "{oops\n")
    with pytest.raises(TC.TraceError, match=r":3: not a JSON line"):
        list(TC.read(str(p)))


def test_record_without_kind(capsys, tmp_path):
    p = tmp_path / "nok.jsonl"
    p.write_text(text_of([HEADER, {"vcpu": 0}]))
    status, _, err = run(capsys, p)
    assert status == 2 and f"{p}:2: record without `k`" in err


@pytest.mark.parametrize("text", ['{"k":"rdmsr","msr":"0x36c"}\n', "hello world\n",
                                  '{"format":"p4pmu-trace"}\n'])
def test_not_a_trace(capsys, tmp_path, text):
    p = tmp_path / "other.jsonl"
    p.write_text(text)
    status, out, err = run(capsys, p)
    assert status == 2 and out == []
    assert err.startswith(f"p4pmu trace: error: {p}: not a p4pmu trace (line 1")


def test_empty_file(capsys, tmp_path):
    p = tmp_path / "empty.jsonl"
    p.write_text("")
    status, out, err = run(capsys, p)
    assert status == 1 and out == [] and "empty" in err


def test_no_match(capsys, trace):
    status, out, err = run(capsys, trace, "--vcpu", "7")
    assert status == 1 and out == []
    assert "no record" in err and "matches the filters" in err


def test_bad_value_in_a_record(capsys, tmp_path):
    p = tmp_path / "badvalue.jsonl"
    p.write_text(text_of([HEADER, {**RECORDS[4], "msr": "0xZZ"}]))
    status, _, err = run(capsys, p, "--reg", "IQ_CCCR0")
    assert status == 2 and err.startswith(f"p4pmu trace: error: {p}:2: bad rdmsr record")


def test_missing_file(capsys, tmp_path):
    status, _, err = run(capsys, tmp_path / "nope.jsonl")
    assert status == 2 and "cannot read" in err


@pytest.mark.parametrize("args, message", [
    (["--reg", "IQ_CCCR9"], "unknown register"),
    (["--counter", "18"], "counters are 0-17"),
    (["--kind", "wrmsr,bogus"], "unknown kind bogus"),
    (["--from", "9", "--to", "3"], "is empty"),
    (["--summary", "--plot", "x.png"], "cannot go with --summary or --json"),
])
def test_usage_errors(capsys, trace, args, message):
    status, out, err = run(capsys, trace, *args)
    assert status == 2 and out == []
    assert err.startswith("p4pmu trace: error: ") and message in err


def test_help_through_the_cli(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["trace", "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: p4pmu trace ")
    for word in ("--summary", "--reg", "--counter", "--kind", "examples:"):
        assert word in out
    assert "p4pmu trace pmu.jsonl --summary" in out


def test_trace_is_listed_in_the_cli_help(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    assert "trace" in capsys.readouterr().out


def test_counter_and_cccr_msrs_of_the_tables():
    assert T.COUNTERS[12].counter_msr == COUNTER0 and T.COUNTERS[12].cccr_msr == CCCR0
    assert TC.parse_reg("cru_escr2") == ESCR2
