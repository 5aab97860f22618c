"""`p4pmu events` and the guest's `p4event` script (no QEMU needed).

The listing agrees with the event table, `--perf` with `perf_p4.raw_event`, the generated sh
script (run with the host's /bin/sh, and with busybox when the host has one) with the Python
command byte for byte, bad input fails cleanly in both, and docs/events.md's examples are
what the commands print.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from p4pmu.emulator import bus_requests as BR
from p4pmu.emulator import clockmodel as CM
from p4pmu.emulator import events as EV
from p4pmu.emulator import tables as T
from p4pmu.emulator.models import MODELS
from p4pmu.qemu_glue import cli
from p4pmu.qemu_glue import events_cmd as E
from p4pmu.qemu_glue import perf_p4 as P

P4PMU = [sys.executable, "-m", "p4pmu.qemu_glue.cli"]
DOC = Path(__file__).resolve().parents[1] / "docs" / "events.md"
SHELLS = [("sh", ["/bin/sh"])] + ([("busybox", [shutil.which("busybox"), "sh"])]
                                   if shutil.which("busybox") else [])


def p4pmu(*args: str) -> subprocess.CompletedProcess:
    """`p4pmu ARGS` run in this process: cli.main, so the same parsing, output and exit
    status as the command without a Python start per call (the examples of docs/events.md
    below, and tests/test_cli.py, run the installed command itself)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
            _columns(80):
        try:
            status = cli.main(list(args))
        except SystemExit as e:
            status = e.code if isinstance(e.code, int) else int(e.code is not None)
    return subprocess.CompletedProcess(["p4pmu", *args], status, out.getvalue(),
                                       err.getvalue())


@contextlib.contextmanager
def _columns(n: int):
    """argparse's help width as in a pipe, whatever terminal pytest runs in."""
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(n)
    try:
        yield
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old


@pytest.fixture(scope="module")
def script(tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("guest") / "p4event"
    p.write_text(E.guest_script())
    return p


def p4event(script: Path, *args: str, shell=("/bin/sh",)) -> subprocess.CompletedProcess:
    return subprocess.run([*shell, str(script), *args], capture_output=True, text=True,
                          timeout=60)


def strip_prog(stderr: str) -> list[str]:
    """stderr lines without the program name (`p4pmu events: ` / `p4event: `)."""
    return [ln.split(": ", 1)[1] for ln in stderr.splitlines()]


def usable(ev: EV.Event) -> list[str]:
    return [ev.mask[k] for k in sorted(ev.mask) if E.linux_accepts(ev, k)]


LINUX_EVENTS = [e for e in EV.EVENTS if E.linux_index(e) is not None and usable(e)]


# --------------------------------------------------------------------------------------------
# Listing


def test_every_event_is_listed():
    r = p4pmu("events")
    assert r.returncode == 0, r.stderr
    heads = re.findall(r"^(\S+)  \((?:non-retirement|at-retirement), ", r.stdout, re.M)
    assert heads == [e.name for e in EV.EVENTS] and len(heads) == 47


@pytest.mark.parametrize("pattern, want", [
    ("branch", lambda n: "branch" in n),
    ("BRANCH", lambda n: "branch" in n),
    ("*_uop", lambda n: n.endswith("_uop")),
    ("x87*", lambda n: n.startswith("x87")),
    ("?sq_*", lambda n: n[1:4] == "sq_"),
    ("Branch_Retired", lambda n: n == "branch_retired"),  # a name: that event only
    ("128", lambda n: "128" in n),
])
def test_pattern_filters(pattern, want):
    r = p4pmu("events", pattern, "--json")
    assert r.returncode == 0, r.stderr
    names = [e["name"] for e in json.loads(r.stdout)]
    assert names == [e.name for e in EV.EVENTS if want(e.name.lower())] and names


def test_json_agrees_with_the_tables():
    r = p4pmu("events", "--json")
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert [g["name"] for g in got] == [e.name for e in EV.EVENTS]
    for g, ev in zip(got, EV.EVENTS):
        assert g["kind"] == {"NR": "non-retirement", "AR": "at-retirement"}[ev.kind]
        assert g["event_select"] == ev.select and g["counts"] == ev.counts
        assert g["models"] == [k for k, m in MODELS.items() if m.model in ev.models]
        assert [x["name"] for x in g["escrs"]] == list(ev.escrs)
        for x in g["escrs"]:
            escr = T.ESCR_BY_NAME[x["name"]]
            assert x["msr"] == escr.msr
            assert [(c["index"], c["name"]) for c in x["counters"]] == \
                [(i, T.COUNTERS[i].counter_name) for i in escr.feeds()]
        assert [(b["bit"], b["name"]) for b in g["mask"]] == sorted(ev.mask.items())
        for b in g["mask"]:
            assert b["modelled"] == CM.is_modelled(ev.name, b["bit"])
            assert b["escr_bit"] == 9 + b["bit"]
        idx = g["linux_index"]
        assert idx == (P.LINUX_EVENT_ORDER.index(ev.name)
                       if ev.name in P.LINUX_EVENT_ORDER else None)


def test_the_listing_marks_exactly_the_bits_that_count_0():
    r = p4pmu("events")
    assert r.returncode == 0, r.stderr
    for block, ev in zip(r.stdout.split("\n\n"), EV.EVENTS):
        bits = dict(re.findall(r"^ +(\d+) (\S+)", block.split("mask bits:\n")[1], re.M))
        assert {int(k): n for k, n in bits.items()} == ev.mask
        dead = {int(k) for k, _ in re.findall(r"^ +(\d+) (\S+) .*not modelled", block, re.M)}
        want = {k for k in ev.mask if ev.counts and not CM.is_modelled(ev.name, k)}
        assert dead == want, ev.name
        assert ("never counts" in block) == (not ev.counts)


def test_brief_listing_stars_the_bits_that_count_0():
    r = p4pmu("events", "--brief")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[-1] == E.LEGEND and len(lines) == 48
    for line, ev in zip(lines, EV.EVENTS):
        name, desc = line.split(None, 1)
        assert name == ev.name
        if desc.startswith("("):
            assert not usable(ev)
            continue
        want = [n + ("" if CM.is_modelled(ev.name, ev.bit(n)) else "*") for n in usable(ev)]
        assert desc.split() == want


def test_no_match_exits_1():
    r = p4pmu("events", "no_such_event")
    assert (r.returncode, r.stdout) == (1, "")
    assert r.stderr == "p4pmu events: error: no event matches 'no_such_event'\n"


def test_help_documents_the_interface():
    r = p4pmu("events", "--help")
    assert r.returncode == 0, r.stderr
    for word in ("PATTERN", "--perf", "SPEC", "--brief", "--json", "--guest-script",
                 "exit status", "examples:", "perf stat -e"):
        assert word in r.stdout


# --------------------------------------------------------------------------------------------
# --perf


@pytest.mark.parametrize("spec, event, masks, modifier", [
    ("branch_retired:MMTP:MMTM:u", "branch_retired", ("MMTP", "MMTM"), "u"),
    ("BRANCH_RETIRED:mmnm:k", "branch_retired", ("MMNM",), "k"),
    ("instr_retired:NBOGUSNTAG:BOGUSNTAG:uk", "instr_retired", ("NBOGUSNTAG", "BOGUSNTAG"),
     "uk"),
    ("mispred_branch_retired:NBOGUS", "mispred_branch_retired", ("NBOGUS",), ""),
    ("global_power_events:RUNNING:u", "global_power_events", ("RUNNING",), "u"),
    ("retired_branch_type:CONDITIONAL:CALL:RETURN:INDIRECT:u", "retired_branch_type",
     ("CONDITIONAL", "CALL", "RETURN", "INDIRECT"), "u"),
    ("x87_FP_uop:ALL:ku", "x87_FP_uop", ("ALL",), "ku"),
    ("execution_event:NBOGUS0:NBOGUS3:h", "execution_event", ("NBOGUS0", "NBOGUS3"), "h"),
    ("branch_retired:MMTP:MMTP", "branch_retired", ("MMTP",), ""),
])
def test_perf_encoding_is_raw_event(spec, event, masks, modifier):
    r = p4pmu("events", "--perf", spec)
    assert r.returncode == 0, r.stderr
    assert r.stdout == P.raw_event(event, *masks, modifier=modifier) + "\n"
    assert r.stderr == ""


def test_several_specs_one_a_line_and_json():
    specs = ["branch_retired:MMTM:u", "instr_retired:NBOGUSNTAG:k"]
    r = p4pmu("events", "--perf", *specs)
    assert r.stdout.splitlines() == [P.raw_event("branch_retired", "MMTM", modifier="u"),
                                     P.raw_event("instr_retired", "NBOGUSNTAG", modifier="k")]
    j = json.loads(p4pmu("events", "--perf", *specs, "--json").stdout)
    assert [x["perf"] for x in j] == r.stdout.splitlines()
    assert j[0]["config"] == hex(P.raw_config("branch_retired", "MMTM"))
    assert (j[1]["spec"], j[1]["event"], j[1]["mask"], j[1]["modifier"]) == \
        (specs[1], "instr_retired", ["NBOGUSNTAG"], "k")


@pytest.mark.parametrize("event, want", [
    ("branch_retired", ("MMNP", "MMNM", "MMTP", "MMTM")),
    ("retired_branch_type", ("CONDITIONAL", "CALL", "RETURN", "INDIRECT")),  # no UNCOND.
    ("instr_retired", ("NBOGUSNTAG", "NBOGUSTAG", "BOGUSNTAG")),  # BOGUSTAG counts 0
    ("ITLB_reference", ("HIT", "MISS")),  # HIT_UC counts 0
    ("FSB_data_activity", ("DRDY_DRV", "DRDY_OWN", "DBSY_DRV", "DBSY_OWN")),  # no OTHER
    ("TC_misc", ("FLUSH",)),  # (none counts: every bit Linux accepts, and a warning)
])
def test_no_mask_bits_means_the_bits_that_count(event, want):
    r = p4pmu("events", "--perf", event + ":u")
    assert r.returncode == 0, r.stderr
    assert r.stdout == P.raw_event(event, *want, modifier="u") + "\n"
    assert ("not modelled" in r.stderr) == (event == "TC_misc")


@pytest.mark.parametrize("event", ["IOQ_active_entries", "bsq_active_entries"])
def test_occupancy_events_default_to_the_read_and_say_they_need_memory_timing(event):
    """The bus queues' occupancy counts the reads loads wait for, at timing=memory only."""
    r = p4pmu("events", "--perf", event + ":u")
    assert r.returncode == 0, r.stderr
    read = BR.canonical_mask(event, BR.REQUEST_BY_NAME["read"])
    assert r.stdout == f"r{(P.linux_index(event) << 25 | read << 9) << 32:x}:u\n"
    assert r.stderr == f"p4pmu events: warning: {event} counts only with timing=memory " \
        "(p4pmu linux --timing memory): with timing=core it reads 0\n"


def test_unmodelled_bits_are_encoded_with_a_warning():
    r = p4pmu("events", "--perf", "BSQ_cache_reference:RD_3rdL_MISS:u")
    assert r.returncode == 0
    assert r.stdout == P.raw_event("BSQ_cache_reference", "RD_3rdL_MISS", modifier="u") + "\n"
    assert r.stderr == ("p4pmu events: warning: BSQ_cache_reference: not modelled by this "
                        "emulator, counts 0: RD_3rdL_MISS\n")


BAD = [  # (spec, a part of the message); every one exits 2 with nothing on stdout
    ("branch_retird:MMTP", "unknown event 'branch_retird'"),
    ("branch_retired:MMXX", "unknown mask bit 'MMXX' of branch_retired; its bits: "
                            "MMNP MMNM MMTP MMTM"),
    ("x87_SIMD_moves_uop:ALLP0", "x87_SIMD_moves_uop is not an event of Linux's P4 driver"),
    ("retired_branch_type:UNCONDITIONAL", "retired_branch_type:UNCONDITIONAL is rejected by "
                                          "Linux's P4 driver"),
    ("b2b_cycles", "Linux's P4 driver accepts no mask bit of b2b_cycles"),
    ("b2b_cycles:BIT1", "b2b_cycles:BIT1 is rejected by Linux's P4 driver"),
    ("branch_retired::u", "empty component in 'branch_retired::u'"),
    ("branch_retired:", "empty component"),
    (":u", "empty component"),
    ("branch_retired:MMTP:uu", "modifier 'uu' repeats a letter"),
    ("branch_retired:MMTP:U", "unknown mask bit 'U' of branch_retired"),
    ("branch_retired:u:MMTP", "unknown mask bit 'u' of branch_retired"),
]


@pytest.mark.parametrize("spec, message", BAD)
def test_bad_specs_fail_cleanly(spec, message):
    r = p4pmu("events", "--perf", "branch_retired:MMTP", spec)
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr.startswith("p4pmu events: error: ") and r.stderr.count("\n") == 1
    assert message in r.stderr


def test_unknown_event_suggests_close_names():
    r = p4pmu("events", "--perf", "brnch_retired")
    assert "did you mean branch_retired" in r.stderr


@pytest.mark.parametrize("args", [["x", "--perf", "branch_retired"], ["--brief", "--json"],
                                  ["--guest-script", "--json"], ["--perf", "bnr", "--brief"]])
def test_conflicting_options_exit_2(args):
    r = p4pmu("events", *args)
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr.startswith("p4pmu events: error: ") and r.stderr.count("\n") == 1


def test_no_mask_name_looks_like_a_modifier():
    for ev in EV.EVENTS:
        for n in ev.mask.values():
            assert not set(n.lower()) <= set(E.PRIV_LETTERS), (ev.name, n)


def test_linux_emask_table_names_linux_events_and_narrows_them():
    for name, emask in P.LINUX_EMASK_NARROWER.items():
        ev = EV.EVENT_BY_NAME[name]
        assert name in P.LINUX_EVENT_ORDER
        assert emask & sum(1 << k for k in ev.mask) != sum(1 << k for k in ev.mask), name


# --------------------------------------------------------------------------------------------
# The guest script against the Python command


def test_guest_script_is_printed_by_the_command(script):
    r = p4pmu("events", "--guest-script")
    assert r.returncode == 0 and r.stdout == script.read_text()


def test_the_escr_half_fits_32_bit_shell_arithmetic():
    """The script computes (Linux index << 25 | mask << 9) with $(( )): below 2^31 for every
    event, whatever its bits (busybox ash on i386 may have 32-bit arithmetic only)."""
    for ev in LINUX_EVENTS:
        assert P.raw_config(ev.name, *ev.mask.values()) >> 32 < 2**31


def _differential_specs() -> list[str]:
    specs = []
    for ev in LINUX_EVENTS:
        bits = usable(ev)
        specs += [ev.name, ev.name.upper() + ":u", ev.name + ":" + ":".join(bits) + ":k",
                  ev.name.lower() + ":" + bits[-1].lower() + ":uk"]
        specs += [f"{ev.name}:{b}" for b in bits]
    return specs + ["branch_retired:MMTP:MMTM:u", "branch_retired:MMTM:MMTP:ku",
                    "instr_retired:BOGUSTAG:h", "execution_event:BOGUS3:NBOGUS0:hku"]


@pytest.mark.parametrize("shell", [s for _, s in SHELLS], ids=[n for n, _ in SHELLS])
def test_script_encodes_every_event_like_the_command(script, shell):
    specs = _differential_specs()
    py = p4pmu("events", "--perf", *specs)
    sh = p4event(script, *specs, shell=shell)
    assert py.returncode == sh.returncode == 0, (py.stderr, sh.stderr)
    assert sh.stdout == py.stdout and len(sh.stdout.splitlines()) == len(specs)
    assert strip_prog(sh.stderr) == strip_prog(py.stderr)
    assert [E.encode(s).perf for s in specs] == py.stdout.splitlines()


@pytest.mark.parametrize("shell", [s for _, s in SHELLS], ids=[n for n, _ in SHELLS])
@pytest.mark.parametrize("spec, message", BAD)
def test_script_rejects_what_the_command_rejects(script, shell, spec, message):
    r = p4event(script, "branch_retired:MMTP", spec, shell=shell)
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr.startswith("p4event: error: ") and r.stderr.count("\n") == 1
    assert message in r.stderr
    with pytest.raises(E.SpecError) as err:
        E.encode(spec)
    if not message.startswith("unknown event"):  # (the script's suggestions are simpler)
        assert strip_prog(r.stderr) == [f"error: {err.value}"]


@pytest.mark.parametrize("shell", [s for _, s in SHELLS], ids=[n for n, _ in SHELLS])
@pytest.mark.parametrize("pattern", [None, "branch", "UOP", "*_uop", "x87*", "?sq_*",
                                     "[bc]*", "b2b", "instr_completed", "BRANCH_RETIRED",
                                     "128", "64bit", "nomatch", "[x"])
def test_script_lists_like_brief(script, shell, pattern):
    args = [pattern] if pattern is not None else []
    py = p4pmu("events", "--brief", *args)
    for opt in ("-l", "--list"):
        sh = p4event(script, opt, *args, shell=shell)
        assert (sh.returncode, sh.stdout) == (py.returncode, py.stdout)
        assert strip_prog(sh.stderr) == strip_prog(py.stderr)


@pytest.mark.parametrize("shell", [s for _, s in SHELLS], ids=[n for n, _ in SHELLS])
def test_script_usage(script, shell):
    for opt in ("-h", "--help"):
        r = p4event(script, opt, shell=shell)
        assert r.returncode == 0 and r.stdout.startswith("usage: p4event ")
    r = p4event(script, shell=shell)
    assert (r.returncode, r.stdout) == (2, "") and r.stderr.startswith("usage: p4event ")
    r = p4event(script, "-x", shell=shell)
    assert r.returncode == 2 and r.stderr == "p4event: error: unknown option '-x' " \
                                             "(p4event -h for help)\n"
    r = p4event(script, "-l", "a", "b", shell=shell)
    assert r.returncode == 2 and "at most one PATTERN" in r.stderr


# --------------------------------------------------------------------------------------------
# docs/events.md


def doc_examples() -> list[tuple[str, str, str]]:
    """(prompt, command, expected output) of every `$ p4pmu events ...` and `guest$ p4event
    ...` line in docs/events.md's fenced blocks; the output is the lines up to the next
    prompt line or the block's end."""
    out, cur, fenced = [], None, False
    for line in DOC.read_text().splitlines():
        if line.startswith("```"):
            fenced, cur = not fenced, None
            continue
        if not fenced:
            continue
        m = re.match(r"^(\$|guest\$) (.*)$", line)
        if m:
            cur = None
            if re.match(r"(p4pmu events|p4event)( |$)", m.group(2)):
                cur = [m.group(1), m.group(2), ""]
                out.append(cur)
        elif cur is not None:
            cur[2] += line + "\n"
    return [tuple(x) for x in out]


def test_the_doc_has_host_and_guest_examples():
    ex = doc_examples()
    assert any(p == "$" and "--perf" in c for p, c, _ in ex)
    assert any(p == "guest$" for p, _, _ in ex)
    assert any(c == "p4pmu events --brief" for _, c, _ in ex)


@pytest.mark.parametrize("prompt, command, output", doc_examples(),
                         ids=[c for _, c, _ in doc_examples()])
def test_doc_example(script, prompt, command, output):
    argv = shlex.split(command)
    cmd = [*P4PMU, *argv[1:]] if prompt == "$" else ["/bin/sh", str(script), *argv[1:]]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=60)
    assert r.stdout == output


def test_the_docs_list_of_modelled_bits_is_is_modelled():
    """The doc's `p4pmu events --brief` block stars exactly the bits that count 0 here."""
    block = next(o for _, c, o in doc_examples() if c == "p4pmu events --brief")
    lines = block.splitlines()
    assert lines[-1] == E.LEGEND
    seen = set()
    for line in lines[:-1]:
        name, desc = line.split(None, 1)
        ev = EV.EVENT_BY_NAME[name]
        seen.add(name)
        for word in ([] if desc.startswith("(") else desc.split()):
            bit = ev.bit(word.rstrip("*"))
            assert word.endswith("*") == (not CM.is_modelled(name, bit)), (name, word)
    assert seen == set(EV.EVENT_BY_NAME)


def test_the_reference_section_of_docs_events_md_is_current():
    """docs/events.md's table of every event and mask bit is emulator/coverage.py's output."""
    from p4pmu.emulator import coverage
    text = (Path(__file__).resolve().parent.parent / "docs" / "events.md").read_text()
    begin = "<!-- generated by `python -m p4pmu.emulator.coverage`: do not edit -->\n"
    end = "<!-- end of generated section -->"
    assert text.count(begin) == 1 and text.count(end) == 1
    section = text[text.index(begin) + len(begin):text.index(end)]
    assert section == coverage.markdown(), \
        "docs/events.md is out of date: python -m p4pmu.emulator.coverage"
