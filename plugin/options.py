"""The plugin's options: one table, and everything about them derived from it.

The options are the ``name=value`` items after the plugin's path on QEMU's ``-plugin`` line
(``-plugin libp4pmu_plugin.so,model=0F_04,log=pmu.log``).  `OPTIONS` below is the only list
of them.  From it come:

* `parse` / `parse_one`: the Python side's parser (the bridge inside QEMU, ``p4pmu qemu
  --plugin-opt``), raising `OptionError` that names the option and the allowed values;
* `c_header`: ``p4_options_gen.h`` (written by plugin/build.py), the table for the C side's
  one generic parser (plugin/options.c), which fills ``struct p4_options`` with the same rules
  and the same messages;
* `help_text` (``p4pmu qemu --help``) and `markdown` (docs/options.md:
  ``python -m p4pmu.plugin.options --markdown > docs/options.md``).

Spelling rules (the same on both sides):

* booleans: exactly what QEMU's ``qemu_plugin_bool_parse`` accepts (QEMU's
  ``qapi_bool_parse``): ``on``, ``yes``, ``true``, ``y`` and ``off``, ``no``, ``false``,
  ``n``, lower case; anything else (``1``, ``0``, ``ON``) is refused;
* numbers: decimal digits, or ``0x`` and hexadecimal digits;
* a choice (``count``, ``model``): one of the listed values exactly;
* an option given twice: the last one counts (QEMU passes them in order).
"""
from __future__ import annotations

import argparse
import dataclasses
import re
import sys
import textwrap
from dataclasses import dataclass

from p4pmu.emulator.models import DEFAULT_MODEL, MODELS


class OptionError(ValueError):
    """A bad plugin option: the message names the option and what it accepts."""


BOOL = "bool"      # on/off (TRUE_WORDS / FALSE_WORDS)
CHOICE = "choice"  # one of `values`
INT = "int"        # a number lo..hi
TEXT = "text"      # a string (a file or folder name)

TRUE_WORDS = ("on", "yes", "true", "y")     # qapi_bool_parse (QEMU qapi/qapi-util.c)
FALSE_WORDS = ("off", "no", "false", "n")
_NUMBER = re.compile(r"[0-9]+|0[xX][0-9a-fA-F]+")


@dataclass(frozen=True)
class Option:
    name: str
    kind: str
    default: object          # None: unset (the meaning says what then applies)
    meaning: str             # one line
    values: tuple = ()       # CHOICE: the allowed values
    lo: int = 0              # INT: the range
    hi: int = 0
    nonempty: bool = False   # TEXT: an empty value is refused
    what: str = ""           # CHOICE: words before the list of values; TEXT: what it names
    reader: str = "Python"   # who acts on it: "Python" (plugin/bridge.py), "C", "both"
    creates: str = ""        # TEXT naming what the plugin creates: "file" or "socket" (its
                             # folder must exist, the name must not be a folder)

    @property
    def allowed(self) -> str:
        """What the option accepts, as error messages and the help say it."""
        if self.kind == BOOL:
            return (f"on or off (also {', '.join(TRUE_WORDS[1:])} / "
                    f"{', '.join(FALSE_WORDS[1:])})")
        if self.kind == CHOICE:
            return f"{self.what}{', '.join(self.values[:-1])} or {self.values[-1]}"
        if self.kind == INT:
            if self.hi - self.lo == 1:
                return f"{self.lo} or {self.hi}"
            return f"a number {self.lo}-{self.hi}"
        return self.what


OPTIONS: tuple[Option, ...] = (
    Option("model", CHOICE, None, f"CPU model key (default {DEFAULT_MODEL}; docs/emulator.md)",
           values=tuple(MODELS), what="one of the known models "),
    Option("stepping", INT, None, "CPUID stepping (default: the model's)", lo=0, hi=15),
    Option("strict", BOOL, False, "reserved-bit policy of the PMU model: on faults every "
           "undocumented bit (docs/bridge.md)"),
    Option("log", TEXT, None, "log every PMU access and every fault (with its reason) to "
           "this file", nonempty=True, what="a file name", creates="file"),
    Option("trace", TEXT, None, "write every PMU access and event to this file, one JSON "
           "object per line, decoded (docs/trace.md; read it with p4pmu trace)",
           nonempty=True, what="a file name", reader="both", creates="file"),
    Option("lint", BOOL, False, "report programming the hardware accepts silently but that "
           "is almost certainly a mistake, once per finding and register, on stderr "
           "(docs/checker.md)"),
    Option("control", TEXT, None, "serve the control channel on a Unix socket at this path "
           "(gdb and scripts read and write the PMU, set breakpoints on its events: "
           "docs/gdb.md; p4pmu qemu --gdb sets it)", nonempty=True, what="a socket path",
           reader="both", creates="socket"),
    Option("qmp", TEXT, None, "QEMU's QMP socket the control channel uses to stop the guest "
           "at a breakpoint (a -qmp unix: socket of this QEMU; p4pmu qemu --gdb sets it)",
           nonempty=True, what="a socket path"),
    Option("threads", INT, 1, "logical processors per core: with 2, vCPUs 2k and 2k+1 share "
           "one PMU as logical processors 0 and 1", lo=1, hi=2, reader="both"),
    Option("pypath", TEXT, None, "site directories to add to sys.path inside QEMU (default: "
           "the site-packages of the Python that built the plugin; set by p4pmu qemu)",
           what="folders separated by ':'"),
    Option("verbose", BOOL, False, "print each intercepted instruction at translation "
           "(QEMU -d plugin)", reader="C"),
    Option("count", CHOICE, "auto", "event counting from guest activity: auto starts at the "
           "first enabled counter (docs/guest-events.md)", values=("auto", "on", "off"),
           reader="both"),
    Option("pmi", BOOL, True, "deliver counter-overflow interrupts (docs/guest-events.md)",
           reader="C"),
    Option("bp_penalty", INT, None, "clocks lost per mispredicted branch (default: the CPU "
           "model's core, 20 Northwood or 31 Prescott: emulator/timing.py)", lo=0, hi=60,
           reader="C"),
    Option("timing", CHOICE, "core", "the clocks: core (pipeline, instruction latencies, L1 "
           "loads) or memory (also L2 and memory latencies and page walks, the memory model "
           "fed while any counter may count; docs/timing.md)", values=("core", "memory"),
           reader="both"),
    Option("errata", BOOL, True, "emulate the model's errata (the cascade PMI)"),
    Option("mirror", BOOL, True, "let the C-side register mirror serve accesses and deadlines "
           "of simple programmings (docs/bridge.md)"),
    Option("exact", BOOL, True, "exact deadlines: the counter that drives the deadline is "
           "watched in its own events (docs/guest-events.md)", reader="C"),
    Option("lite", BOOL, True, "the outcome-free level: blocks without outcome callbacks while "
           "no enabled counter depends on branch outcomes (docs/guest-events.md)", reader="C"),
    Option("directions", INT, 0, "every 2^N resolutions of a vCPU, give each conditional "
           "branch whose outcomes went mostly against its silent direction the other one (its "
           "blocks are translated again; one vCPU only; 20 is a good window); 0 (default): keep "
           "the static directions "
           "(docs/guest-events.md)", lo=0, hi=40, reader="C"),
    Option("dir_rewrite", BOOL, True, "with directions=: drop a changed branch's translated "
           "blocks by rewriting a byte of it with its own value; off (for tests): they run on "
           "until the flush their first execution asks for (docs/guest-events.md)",
           reader="C"),
    Option("tight", BOOL, True, "tight deadline bounds: an order-free change (a PMI arming, a "
           "FORCE_OVF overflow) is stepped once it may have happened, an EDGE counter with "
           "COMPLEMENT is bounded by its failing clocks (docs/guest-events.md)"),
)
BY_NAME = {o.name: o for o in OPTIONS}
NAMES = tuple(BY_NAME)

Options = dataclasses.make_dataclass(
    "Options", [(o.name, object, dataclasses.field(default=o.default)) for o in OPTIONS])
Options.__doc__ = "The parsed plugin options: one attribute per option (OPTIONS)."


# --------------------------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------------------------


def _bad(opt: Option, value: str) -> OptionError:
    if opt.kind == TEXT and opt.nonempty and not value:
        return OptionError(f"option {opt.name}='': needs {opt.allowed}")
    return OptionError(f"option {opt.name}='{value}': expected {opt.allowed}")


def _number(value: str) -> int | None:
    if not _NUMBER.fullmatch(value):
        return None
    return int(value, 16) if value[1:2] in ("x", "X") else int(value, 10)


def parse_one(name: str, value: str):
    """The value of option `name` given as `value` (bool, int, str), or OptionError."""
    opt = BY_NAME.get(name)
    if opt is None:
        raise OptionError(f"unknown plugin option '{name}'; known options: {', '.join(NAMES)}")
    if opt.kind == BOOL:
        if value in TRUE_WORDS or value in FALSE_WORDS:
            return value in TRUE_WORDS
    elif opt.kind == CHOICE:
        if value in opt.values:
            return value
    elif opt.kind == INT:
        n = _number(value)
        if n is not None and opt.lo <= n <= opt.hi:
            return n
    elif value or not opt.nonempty:
        return value
    raise _bad(opt, value)


def split_item(item: str) -> tuple[str, str]:
    """'name=value' -> (name, value), or OptionError."""
    if "=" not in item:
        raise OptionError(f"plugin option '{item}' is not key=value; known options: "
                          f"{', '.join(NAMES)}")
    name, value = item.split("=", 1)
    return name, value


def parse(items: list[str]) -> dict:
    """QEMU's plugin arguments ("name=value") -> {name: value} for every option (defaults
    filled in); the last of repeated options counts.  OptionError on the first bad item."""
    out = {o.name: o.default for o in OPTIONS}
    for item in items:
        name, value = split_item(item)
        out[name] = parse_one(name, value)
    return out


def parse_options(items: list[str]) -> Options:
    """Like `parse`, as an `Options` object (attributes)."""
    return Options(**parse(items))


def canonical(name: str, value) -> str:
    """A parsed value as text, its one spelling (booleans on/off; unset: empty)."""
    if value is None:
        return ""
    if BY_NAME[name].kind == BOOL:
        return "on" if value else "off"
    return str(value)


# --------------------------------------------------------------------------------------------
# Help, documentation and the C table
# --------------------------------------------------------------------------------------------


def _default_text(opt: Option) -> str:
    return "unset" if opt.default is None else canonical(opt.name, opt.default)


def help_text(width: int = 88) -> str:
    """The option list for --help: per option its values and default, then its meaning."""
    lines = []
    for o in OPTIONS:
        lines += textwrap.wrap(f"{o.name}: {o.allowed}; default {_default_text(o)}",
                               width, initial_indent="  ", subsequent_indent="      ")
        lines += textwrap.wrap(o.meaning, width, initial_indent="      ",
                               subsequent_indent="      ")
    return "\n".join(lines)


def markdown() -> str:
    """docs/options.md."""
    rows = "\n".join(f"| `{o.name}` | {o.allowed} | {_default_text(o)} | {o.reader} | "
                     f"{o.meaning} |" for o in OPTIONS)
    return f"""# Plugin options

<!-- Generated from p4pmu/plugin/options.py (the OPTIONS table): do not edit; regenerate with
     python -m p4pmu.plugin.options --markdown > docs/options.md -->

The options are the `name=value` items after the plugin's path on QEMU's `-plugin` line:

    qemu-system-x86_64 ... -plugin libp4pmu_plugin.so,model=0F_04,log=pmu.log

`p4pmu qemu --plugin-opt NAME=VALUE` (repeatable) puts them there and checks them first.
Both halves of the plugin parse them from one table (`p4pmu.plugin.options.OPTIONS`): the C
side (plugin/options.c, `struct p4_options`) and the Python side (plugin/bridge.py).  An
unknown option or a value outside what the table allows stops QEMU at start with a message
that names the option and the allowed values.

| option | values | default | read by | meaning |
|---|---|---|---|---|
{rows}

"unset": the meaning says what applies then.

## Spellings

* **Booleans** take exactly what QEMU's own plugins accept (`qemu_plugin_bool_parse`, i.e.
  QEMU's `qapi_bool_parse`): `on`, `yes`, `true`, `y` and `off`, `no`, `false`, `n`, in lower
  case.  `1`, `0` and upper-case spellings are refused everywhere (on a raw `-plugin` line and
  with `p4pmu qemu --plugin-opt`), with a message.  `p4pmu qemu` passes them on as `on`/`off`.
* **Numbers**: decimal digits, or `0x` followed by hexadecimal digits.
* **Choices** (`model`, `count`): one of the listed values exactly.  `p4pmu qemu
  --plugin-opt model=` and `--model` also take the short forms `0f_04`, `0F04` and `4`, and
  pass the key on.
* An option given twice: the last one counts.
"""


def _c_string(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _c_ident(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9]", "_", s).upper()


def _c_struct() -> list[str]:
    out = ["/* One field per option (plugin/options.py OPTIONS).  bool, choice (the index in",
           " * its values) and int options are ints, -1 when unset; text options point into",
           " * QEMU's argv, NULL when unset. */",
           "struct p4_options {"]
    for o in OPTIONS:
        ctype = "const char *" if o.kind == TEXT else "int "
        out.append(f"    {ctype}{o.name}; /* {o.kind} */")
    out += ["};", f"#define P4_OPTION_COUNT {len(OPTIONS)}",
            f"#define P4_OPTION_NAMES {_c_string(', '.join(NAMES))}"]
    for o in OPTIONS:
        for i, v in enumerate(o.values):
            out.append(f"#define P4_OPT_{_c_ident(o.name)}_{_c_ident(v)} {i}")
    return out


def _c_default(o: Option) -> str:
    """The spec's two default fields: `def_int, def_text`."""
    if o.kind == TEXT:
        return "0, " + ("NULL" if o.default is None else _c_string(o.default))
    if o.default is None:
        return "-1, NULL"
    if o.kind == CHOICE:
        return f"{o.values.index(o.default)}, NULL"
    return f"{int(o.default)}, NULL"


def _c_table() -> list[str]:
    out = ["#ifdef P4_OPTIONS_TABLE"]
    for o in OPTIONS:
        if o.kind == CHOICE:
            vals = ", ".join(_c_string(v) for v in o.values)
            out.append(f"static const char *const p4_opt_{o.name}_values[] = {{{vals}, NULL}};")
    for kind, words in (("true", TRUE_WORDS), ("false", FALSE_WORDS)):
        out.append(f"static const char *const p4_opt_{kind}_words[] = "
                   f"{{{', '.join(_c_string(w) for w in words)}, NULL}};")
    out.append("static const struct p4_option_spec p4_option_specs[] = {")
    for o in OPTIONS:
        vals = f"p4_opt_{o.name}_values" if o.kind == CHOICE else "NULL"
        out.append(f"    {{{_c_string(o.name)}, P4_OPT_{o.kind.upper()}, "
                   f"offsetof(struct p4_options, {o.name}), {vals}, {o.lo}, {o.hi}, "
                   f"{int(o.nonempty)}, {_c_default(o)}, {_c_string(o.allowed)}}},")
    out += ["};", "#endif"]
    return out


def c_header() -> str:
    """p4_options_gen.h: struct p4_options and the table plugin/options.c parses with."""
    lines = ["/* Generated from p4pmu/plugin/options.py (OPTIONS) by plugin/build.py: do not "
             "edit. */",
             "#ifndef P4_OPTIONS_GEN_H", "#define P4_OPTIONS_GEN_H", ""]
    lines += _c_struct() + [""] + _c_table() + ["", "#endif", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m p4pmu.plugin.options",
                                description="The plugin's options (one table).")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--markdown", action="store_true", help="print docs/options.md")
    g.add_argument("--c-header", action="store_true", help="print p4_options_gen.h")
    a = p.parse_args(argv)
    sys.stdout.write(markdown() if a.markdown else c_header() if a.c_header
                     else help_text() + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
