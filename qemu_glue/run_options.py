"""The run options every command shares: --plugin-opt, --model/--stepping and --timing.

One check and one message for each, whichever command (`p4pmu qemu`, `linux`, `demo`,
`bench`, ...) takes it: plugin options against the plugin's option table
(p4pmu.plugin.options, docs/options.md), a model against emulator/models.py.  Every check
here needs nothing downloaded or built, so a command makes them before it provisions QEMU.
Errors are UsageError (errors.py): the command line asks for something that cannot run.
"""
from __future__ import annotations

from pathlib import Path

from p4pmu.emulator.models import CpuModel, get_model
from p4pmu.plugin import options
from p4pmu.qemu_glue.errors import UsageError

PLUGIN_OPTS = options.NAMES  # the plugin's option names, in the order of its table
TIMINGS = ("core", "memory")
TIMING_HELP = ("the clocks: core (default: pipeline, instruction latencies, every load an L1 "
               "hit) or memory (also L2 and memory latencies and page walks from the memory "
               "model, fed while any counter counts: slower); docs/timing.md. The same as "
               "--plugin-opt timing=")


def plugin_options_help() -> str:
    """The option list of the plugin, as `--help` texts show it."""
    return options.help_text()


# --------------------------------------------------------------------------------------------
# --plugin-opt

def _created_path(item: str, opt: options.Option, value: str) -> str:
    """The absolute path of a file or socket the plugin will create (its folder must exist)."""
    p = Path(value).expanduser().absolute()
    if not p.parent.is_dir():
        raise UsageError(f"--plugin-opt {item}: folder {p.parent} does not exist")
    if p.is_dir():
        raise UsageError(f"--plugin-opt {item}: is a folder, expected {opt.what}")
    return str(p)


def _folders(item: str, value: str) -> str:
    dirs = []
    for d in value.split(":"):
        p = Path(d).expanduser().absolute()
        if not d or not p.is_dir():
            raise UsageError(f"--plugin-opt {item}: {p} is not a folder")
        dirs.append(str(p))
    return ":".join(dirs)


def _one_plugin_opt(item: str) -> tuple[str, str]:
    """(name, value in its one spelling) of one K=V item."""
    if "=" not in item:
        raise UsageError(f"--plugin-opt {item!r}: expected KEY=VALUE "
                         f"(keys: {', '.join(PLUGIN_OPTS)})")
    k, v = item.split("=", 1)
    k = k.strip()
    if k not in PLUGIN_OPTS:
        raise UsageError(f"--plugin-opt {item!r}: unknown key {k!r} "
                         f"(known: {', '.join(PLUGIN_OPTS)})")
    if k == "model":  # the short forms of --model (0f_04, 0F04, 4) too
        try:
            v = get_model(v).key
        except KeyError as e:
            raise UsageError(f"--plugin-opt model={v}: {e.args[0]}") from None
    try:
        v = options.canonical(k, options.parse_one(k, v))
    except options.OptionError as e:
        raise UsageError(f"--plugin-opt {item}: {e}") from None
    opt = options.BY_NAME[k]
    if opt.creates:
        v = _created_path(item, opt, v)
    elif k == "pypath":
        v = _folders(item, v)
    return k, v


def parse_plugin_opts(items: list[str]) -> dict[str, str]:
    """Check --plugin-opt K=V items against the plugin's option table (p4pmu.plugin.options,
    docs/options.md); returns each value in its one spelling (booleans on/off, model keys,
    absolute paths).  A file or socket the plugin creates must be in an existing folder.
    Raises UsageError."""
    opts: dict[str, str] = {}
    for item in items:
        k, v = _one_plugin_opt(item)
        if k in opts and opts[k] != v:
            raise UsageError(f"--plugin-opt {k} given twice ({opts[k]!r} and {v!r})")
        opts[k] = v
    return opts


# --------------------------------------------------------------------------------------------
# --model, --stepping

def _stepping(v: str | int, what: str) -> int:
    try:
        n = int(str(v), 10) if str(v).strip().isdigit() else int(str(v), 0)
    except ValueError:
        raise UsageError(f"{what}: not a number") from None
    if not 0 <= n <= 15:
        raise UsageError(f"{what}: stepping must be 0-15")
    return n


def model_from_arg(key: str | None, option: str = "--model") -> CpuModel:
    """The CpuModel of a --model value (None: the default); the one UsageError every command
    gives for an unknown model."""
    try:
        return get_model(key)
    except KeyError as e:
        raise UsageError(f"{option}: {e.args[0]}") from None


def resolve_model(model_arg: str | None, stepping_arg: str | int | None,
                  popts: dict[str, str]) -> CpuModel:
    """The CpuModel from --model/--stepping and the model=/stepping= plugin options."""
    m = model_from_arg(model_arg)
    if "model" in popts:
        if model_arg is not None and m.key != popts["model"]:
            raise UsageError(f"--model {model_arg} and --plugin-opt model={popts['model']} "
                             "disagree")
        m = model_from_arg(popts["model"])
    st = None
    if stepping_arg is not None:
        st = _stepping(stepping_arg, f"--stepping {stepping_arg}")
    if "stepping" in popts:
        if st is not None and st != int(popts["stepping"]):
            raise UsageError(f"--stepping {st} and --plugin-opt stepping={popts['stepping']} "
                             "disagree")
        st = int(popts["stepping"])
    return m.with_stepping(st) if st is not None else m


# --------------------------------------------------------------------------------------------
# --timing

def add_timing_argument(p) -> None:
    """--timing core|memory (commands that run the plugin)."""
    p.add_argument("--timing", choices=TIMINGS, default=None, help=TIMING_HELP)


def apply_timing(timing: str | None, popts: dict[str, str]) -> str:
    """Put --timing into the plugin options (a UsageError if --plugin-opt timing= says
    otherwise); returns the timing in effect."""
    if timing is not None:
        if popts.get("timing", timing) != timing:
            raise UsageError(f"--timing {timing} and --plugin-opt timing={popts['timing']} "
                             "disagree")
        popts["timing"] = timing
    return popts.get("timing", "core")
