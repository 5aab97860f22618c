"""`p4pmu trace FILE --plot OUT.png|OUT.svg` (qemu_glue/trace_plot.py; docs/trace.md
"Pictures"), rendered from real traces: a bare-metal guest whose counter overflows and starts
a cascaded counter, the probe guest's faults, and Linux's perf record on the emulated PMU.  Each
picture's markers,
counted from the figure itself, match the trace's records kind by kind; the files are real
PNG and SVG."""
from __future__ import annotations

import collections
import json
import subprocess
from pathlib import Path

import pytest
from conftest import P4PMU

from guests.evscript import (
    EvScript,
    cccr_msr,
    cccr_value,
    counter_msr,
    escr_msr,
    escr_value,
    preset,
)

pytestmark = pytest.mark.guest
USR_INSTR = escr_value("instr_retired", "NBOGUSNTAG", t0_usr=True)


def expected(trace: Path) -> collections.Counter:
    """What the picture must show, counted from the trace's records directly."""
    n: collections.Counter = collections.Counter()
    for line in trace.read_text().splitlines():
        rec = json.loads(line)
        k = rec["k"]
        if k in ("rdmsr", "wrmsr", "rdpmc"):
            n["fault" if "fault" in rec else k] += 1
        elif k in ("overflow", "cascade", "finding", "pmi"):
            n[k] += 1
    return n


def plot(trace: Path, out: Path, *args: str) -> collections.Counter:
    """Run p4pmu trace --plot; the markers it reports (kind -> count)."""
    r = subprocess.run([str(P4PMU), "trace", str(trace), "--plot", str(out), *args],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    drawn = collections.Counter()
    for part in r.stderr.strip().rsplit(": ", 1)[1].split(", "):
        count, kind = part.split()
        drawn[kind] = int(count)
    return +drawn


def check_files(tmp: Path, trace: Path) -> None:
    want = +expected(trace)
    png, svg = tmp / "t.png", tmp / "t.svg"
    assert plot(trace, png) == want
    assert plot(trace, svg, "--x", "clocks") == want
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    text = svg.read_text()
    assert text.lstrip().startswith("<?xml") and "<svg" in text
    assert "clocks of the logical processor" in text or "clocks" in text


def test_a_bare_metal_cascade_trace(run_guest, tmp_path):
    """SDM 18.15.5.6: counter 12 overflows and starts counter 14 (CASCADE)."""
    s = EvScript()
    s.wrmsr(escr_msr("MSR_CRU_ESCR0"), USR_INSTR)
    s.wrmsr(escr_msr("MSR_CRU_ESCR1"), USR_INSTR)
    s.wrmsr(counter_msr(12), preset(1000))
    s.wrmsr(counter_msr(14), 0)
    s.wrmsr(cccr_msr(14), cccr_value(14, "MSR_CRU_ESCR1", enable=False, cascade=True))
    s.wrmsr(cccr_msr(12), cccr_value(12, "MSR_CRU_ESCR0"))
    s.loop("alu", 2000, user=True)
    s.rdmsr(counter_msr(14), "y")
    s.wrmsr(cccr_msr(12), 0)
    s.wrmsr(cccr_msr(14), 0)
    trace = tmp_path / "cascade.jsonl"
    run_guest("events32", script=s, plugin_opts=(f"trace={trace}",),
              timeout=120).require_completed()
    want = expected(trace)
    assert want["overflow"] >= 1 and want["cascade"] >= 1, want
    check_files(tmp_path, trace)


def test_a_trace_full_of_faults(run_guest, tmp_path):
    """The probe guest's whole suite: every register, reserved bits, bad RDPMC indexes, CPL 3
    (faults the plugin and QEMU raise)."""
    from conftest import bridge_script
    trace = tmp_path / "faults.jsonl"
    run_guest("probe32", script=bridge_script(32), plugin_opts=(f"trace={trace}",),
              timeout=120).require_completed()
    assert expected(trace)["fault"] > 50
    check_files(tmp_path, trace)


def test_a_linux_perf_record_trace(tmp_path):
    trace = tmp_path / "linux.jsonl"
    r = subprocess.run([str(P4PMU), "linux", "--timeout", "1500", "--plugin-opt",
                        f"trace={trace}", "--",
                        "perf record -q -c 100000 -e instructions -o /tmp/p.data -- "
                        "sh -c 'head -c 200000 /usr/bin/perf | gzip -c | wc -c'"],
                       capture_output=True, text=True, timeout=1620, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr[-3000:]
    want = expected(trace)
    assert want["pmi"] > 10 and want["overflow"] > 10 and want["finding"] >= 1, want
    check_files(tmp_path, trace)


def test_refusals(tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text(json.dumps({"k": "header", "format": "p4pmu-trace", "version": 1,
                                 "model": "0F_04"}) + "\n")
    for args, msg in ((["--plot", str(tmp_path / "t.jpg")], "must end in .png or .svg"),
                      (["--plot", str(tmp_path / "t.png"), "--json"],
                       "cannot go with --summary or --json"),
                      (["--plot", str(tmp_path / "no" / "t.png")], "no such folder")):
        r = subprocess.run([str(P4PMU), "trace", str(trace), *args], capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 2 and msg in r.stderr, (args, r.stderr)
    assert not list(tmp_path.glob("*.png"))
