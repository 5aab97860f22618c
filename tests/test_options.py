"""The plugin's options: one table (plugin/options.py), the same rules in C and Python.

* docs/options.md is what the table generates;
* the C parser (plugin/options.c, compiled here with gcc into a small program) and the Python
  parser accept exactly the same items with the same values, and refuse the same items with
  the same message -- table-driven, every allowed value of every option;
* a real QEMU (a raw -plugin line, not through p4pmu) stops at start on an unknown option or
  a bad value, with a message naming the option and the allowed values; so does
  `p4pmu qemu --plugin-opt` (before QEMU runs);
* a real QEMU starts with every allowed value of every option (both halves accept them).
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest

from p4pmu.plugin import build, options
from p4pmu.plugin.options import BOOL, CHOICE, FALSE_WORDS, INT, OPTIONS, TRUE_WORDS

REPO = Path(__file__).resolve().parents[1]
P4PMU = REPO / ".venv" / "bin" / "p4pmu"
SITE = sysconfig.get_paths()["purelib"]


def allowed_values(o) -> list[str]:
    if o.kind == BOOL:
        return list(TRUE_WORDS + FALSE_WORDS)
    if o.kind == CHOICE:
        return list(o.values)
    if o.kind == INT:
        return [str(o.lo), str(o.hi), hex(o.hi), str((o.lo + o.hi) // 2)]
    return ["pmu.log", "/a:/b"] + ([] if o.nonempty else [""])


def bad_values(o) -> list[str]:
    if o.kind == BOOL:
        return ["1", "0", "ON", "Off", "maybe", ""]
    if o.kind == CHOICE:
        return ["nope", o.values[0].lower() + "x", ""]
    if o.kind == INT:
        return [str(o.lo - 1), str(o.hi + 1), "x", "", "0x", " 1", "1.0", "99999999999"]
    return [""] if o.nonempty else []


ACCEPTED = [(o.name, v) for o in OPTIONS for v in allowed_values(o)]
REFUSED = [(o.name, v) for o in OPTIONS for v in bad_values(o)]


def test_docs_are_generated_from_the_table():
    assert (REPO / "docs" / "options.md").read_text() == options.markdown(), \
        "docs/options.md is out of date: python -m p4pmu.plugin.options --markdown > " \
        "docs/options.md"


# --------------------------------------------------------------------------------------------
# The C parser, compiled on its own


HARNESS = r"""
#include <stdio.h>
#include "options.h"

int main(int argc, char **argv)
{
    struct p4_options o;
    char err[1024], buf[4096];
    if (p4_options_parse(argc - 1, argv + 1, &o, err, sizeof(err)) < 0) {
        printf("error: %s\n", err);
        return 1;
    }
    for (int i = 0; i < P4_OPTION_COUNT; i++) {
        printf("%s=%s\n", p4_options_table()[i].name,
               p4_options_value_text(&o, i, buf, sizeof(buf)));
    }
    return 0;
}
"""


@pytest.fixture(scope="module")
def c_parser(tmp_path_factory):
    if shutil.which("gcc") is None:
        pytest.fail("gcc is needed to compile plugin/options.c", pytrace=False)
    d = tmp_path_factory.mktemp("options-c")
    (d / build.OPTIONS_HEADER).write_text(build.options_header())
    (d / "main.c").write_text(HARNESS)
    exe = d / "parse"
    subprocess.run(["gcc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", f"-I{d}",
                    f"-I{build.PLUGIN_DIR}", str(build.PLUGIN_DIR / "options.c"),
                    str(d / "main.c"), "-o", str(exe)], check=True)

    def parse(items: list[str]) -> str:
        return subprocess.run([str(exe), *items], capture_output=True, text=True).stdout

    return parse


def python_parse(items: list[str]) -> str:
    """The Python parser's answer in the harness's format."""
    try:
        values = options.parse(items)
    except options.OptionError as e:
        return f"error: {e}\n"
    return "".join(f"{k}={options.canonical(k, v)}\n" for k, v in values.items())


def test_c_defaults_are_the_tables(c_parser):
    assert c_parser([]) == python_parse([])


@pytest.mark.parametrize("name, value", ACCEPTED, ids=[f"{n}={v}" for n, v in ACCEPTED])
def test_every_allowed_value_is_accepted_alike(c_parser, name, value):
    item = f"{name}={value}"
    py = python_parse([item])
    assert not py.startswith("error"), py
    assert c_parser([item]) == py


@pytest.mark.parametrize("name, value", REFUSED, ids=[f"{n}={v!r}" for n, v in REFUSED])
def test_bad_values_are_refused_alike(c_parser, name, value):
    item = f"{name}={value}"
    py = python_parse([item])
    assert py.startswith(f"error: option {name}=") and options.BY_NAME[name].allowed in py
    assert c_parser([item]) == py


@pytest.mark.parametrize("items", [["colour=red"], ["strict"], ["model=0F_02", "=on"],
                                   ["pmi=off", "pmi=on", "count=off", "count=on"]])
def test_unknown_options_and_repeats_alike(c_parser, items):
    assert c_parser(items) == python_parse(items)


def test_messages_name_the_option_and_the_allowed_values():
    with pytest.raises(options.OptionError) as e:
        options.parse(["colour=red"])
    assert "unknown plugin option 'colour'" in str(e.value)
    assert all(name in str(e.value) for name in options.NAMES)
    with pytest.raises(options.OptionError, match=r"option count='sometimes': expected "
                                                  r"auto, on or off"):
        options.parse(["count=sometimes"])


# --------------------------------------------------------------------------------------------
# Real QEMU


def _qemu_argv(binary: str) -> list[str]:
    from p4pmu.qemu_glue.provision import find_qemu
    q = find_qemu()
    if q is None:
        pytest.fail("no plugin-capable QEMU provisioned (run `p4pmu setup`)", pytrace=False)
    argv = q.argv()
    argv[argv.index(str(q.binary))] = str(q.binary.with_name(binary))
    return argv


def _plugin() -> str:
    from conftest import need_plugin
    need_plugin()
    return str(build.ensure_built(progress=False))  # as p4pmu qemu does


def _start(binary: str, plugin_items: list[str], timeout: float = 60):
    """Start QEMU paused with the plugin, quit through the monitor (-d plugin: the plugin's
    messages go through QEMU's log, plugin/messages.c)."""
    cmd = [*_qemu_argv(binary), "-accel", "tcg", "-machine", "pc", "-display", "none",
           "-nodefaults", "-S", "-monitor", "stdio", "-d", "plugin",
           "-plugin", ",".join([_plugin(), *plugin_items])]
    return subprocess.run(cmd, input="quit\n", capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("item, message", [
    ("colour=red", "p4pmu: unknown plugin option 'colour'; known options: "
                   + ", ".join(options.NAMES)),
    ("strict=1", "p4pmu: option strict='1': expected " + options.BY_NAME["strict"].allowed),
    ("count=yes", "p4pmu: option count='yes': expected auto, on or off"),
    ("stepping=16", "p4pmu: option stepping='16': expected a number 0-15"),
])
def test_raw_plugin_line_stops_qemu_at_start(item, message):
    r = _start("qemu-system-i386", [item])
    assert r.returncode != 0
    assert message in r.stderr, r.stderr
    assert "Could not load plugin" in r.stderr  # QEMU stops: the plugin's install failed


@pytest.mark.parametrize("item, message", [
    ("colour=red", "unknown key 'colour'"),
    ("strict=1", "option strict='1': expected " + options.BY_NAME["strict"].allowed),
    ("lite=ON", "option lite='ON': expected on or off"),
    ("bp_penalty=61", "option bp_penalty='61': expected a number 0-60"),
])
def test_p4pmu_qemu_refuses_before_qemu_runs(item, message):
    r = subprocess.run([str(P4PMU), "qemu", "--plugin-opt", item, "--dry-run", "--",
                        "-display", "none"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and message in r.stderr, r.stderr


def test_p4pmu_qemu_passes_one_spelling():
    r = subprocess.run([str(P4PMU), "qemu", "--plugin-opt", "lite=n", "--plugin-opt",
                        "strict=true", "--plugin-opt", "stepping=0x3", "--dry-run", "--",
                        "-display", "none"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert ",stepping=3," in r.stdout and ",strict=on," in r.stdout and ",lite=off" in r.stdout


def _value_for_run(o, k: int, tmp_path: Path) -> str:
    if o.name in ("log", "trace"):
        return str(tmp_path / f"pmu{k}.{o.name}")
    if o.name in ("control", "qmp"):  # sockets: the channel's is made, QMP's used lazily
        return str(tmp_path / f"{o.name}{k}.sock")
    if o.name == "pypath":
        return SITE
    vals = allowed_values(o)
    return vals[k % len(vals)]


RUNS = max(len(allowed_values(o)) for o in OPTIONS)


@pytest.mark.parametrize("k", range(RUNS))
def test_real_qemu_accepts_every_allowed_value(k, tmp_path):
    """Run k gives every option its k-th allowed value (cycling): over the runs every value
    of every option reaches both halves of the plugin in a real QEMU."""
    items = [f"{o.name}={_value_for_run(o, k, tmp_path)}" for o in OPTIONS]
    r = _start("qemu-system-x86_64", items)
    assert r.returncode == 0, f"{items}\n{r.stderr}"
    assert "p4pmu:" not in r.stderr, f"{items}\n{r.stderr}"
    parsed = options.parse(items)
    head = (tmp_path / f"pmu{k}.log").read_text().splitlines()[0]
    trace_head = json.loads((tmp_path / f"pmu{k}.trace").read_text().splitlines()[0])
    assert trace_head["k"] == "header" and trace_head["model"] == parsed["model"], trace_head
    model = parsed["model"]
    assert head.startswith(f"# p4pmu bridge: model {model} stepping {parsed['stepping']}, "
                           f"threads={parsed['threads']}, "
                           f"strict={options.canonical('strict', parsed['strict'])}"), head
