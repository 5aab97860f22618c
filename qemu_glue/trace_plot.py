"""`p4pmu trace FILE --plot OUT.png|OUT.svg`: the access trace as a timeline picture.

One panel per logical processor (vCPU), against its instructions (`insns`) or clocks
(`clk`, `--x clocks`); one lane per register the trace touches (counters, CCCRs, ESCRs,
others), ordered by MSR number; markers for what happened on it: writes (|), reads (.),
RDPMC (o), faults (x, the access that took the #GP), overflows (red triangle, on the
counter's lane), cascade starts (diamond) and the programming checker's findings (star, on
the register it names); an interrupt is a dashed line across its panel.  A record without a
time of its own (a fault QEMU raised before the plugin saw it has its last fold's clock; a
finding made at the end of the run has no vCPU) is drawn at the last time known for that
panel.  Drawn with matplotlib, an optional extra (``pip install 'p4pmu[plot]'``; `./p4pmu.sh
setup` installs it), without a display (the Agg backend).  `plot` returns how many markers of
each kind it drew, counted from the figure's own artists (the tests compare them with the
trace).
"""
from __future__ import annotations

import collections
import functools
from pathlib import Path

from p4pmu.emulator import decode as D
from p4pmu.emulator import tables as T
from p4pmu.emulator.models import CpuModel

# kind -> (marker, colour, size, label); "fault" is an access with a `fault` key
STYLE = {
    "wrmsr": ("|", "tab:blue", 80, "WRMSR"),
    "rdmsr": (".", "tab:gray", 30, "RDMSR"),
    "rdpmc": ("o", "tab:green", 18, "RDPMC"),
    "fault": ("x", "black", 60, "#GP"),
    "overflow": ("^", "tab:red", 50, "overflow (OVF 0 -> 1)"),
    "cascade": ("D", "tab:purple", 36, "cascade start"),
    "finding": ("*", "tab:orange", 110, "checker finding"),
}
PMI_STYLE = {"color": "tab:red", "linestyle": "--", "linewidth": 0.8, "alpha": 0.6}
FORMATS = (".png", ".svg")
X_KEYS = {"insns": ("insns", "instructions"), "clocks": ("clk", "clocks")}


class PlotError(ValueError):
    """What cannot be plotted (no matplotlib, an unknown format); one line."""


def kind_of(rec: dict) -> str | None:
    """The marker kind of a record (None: not drawn as a marker: pmi, header, note, end)."""
    k = rec["k"]
    if k in ("rdmsr", "wrmsr", "rdpmc"):
        return "fault" if "fault" in rec else k
    return k if k in STYLE else None


@functools.lru_cache(maxsize=8)
def _msr_by_name(model: CpuModel) -> dict[str, int]:
    """Register name (with and without MSR_) -> MSR, over the PMU's address range."""
    out = {}
    for msr in range(T.PMU_RANGE[0], T.PMU_RANGE[1] + 1):
        name = D.register_name(msr, model)
        if name:
            out[name] = out[name.removeprefix("MSR_")] = msr
    return out


def lane_of(rec: dict, model: CpuModel) -> str:
    """The lane (register) a marker goes on."""
    k = rec["k"]
    if k in ("overflow", "cascade"):
        return rec.get("reg") or f"counter {rec.get('counter')}"
    if k == "finding":
        return rec.get("register") or "(findings)"
    if rec.get("reg"):
        return rec["reg"]
    msr = rec.get("msr")
    if msr is None:
        return f"RDPMC ecx={rec.get('ecx')}" if k == "rdpmc" else "(no register)"
    msr = int(msr, 16) if isinstance(msr, str) else msr
    return D.register_name(msr, model) or f"MSR {msr:#x}"


def _lane_key(name: str, msrs: dict[str, int]) -> tuple:
    return (msrs.get(name, 0xFFFFFFFF), name)


def plot(records: list[dict], model: CpuModel, out: Path, x: str = "insns",
         title: str = "") -> collections.Counter:
    """Draw `records` (a trace's, in file order) into `out`; markers drawn per kind (and
    "pmi": the interrupt lines)."""
    if out.suffix.lower() not in FORMATS:
        raise PlotError(f"--plot {out}: the picture's name must end in .png or .svg")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise PlotError("--plot needs matplotlib: pip install 'p4pmu[plot]' (./p4pmu.sh setup "
                        "installs it)") from None
    key, label = X_KEYS[x]
    panels, pmis, msrs = _gather(records, model, key)
    vcpus = sorted(panels) or [0]
    lanes = {v: sorted({ln for _, ln, _ in panels.get(v, [])}, key=lambda n: _lane_key(n, msrs))
             for v in vcpus}
    heights = [max(2, len(lanes[v])) * 0.32 + 0.9 for v in vcpus]
    fig, axes = plt.subplots(len(vcpus), 1, figsize=(13, sum(heights) + 0.6), squeeze=False,
                             gridspec_kw={"height_ratios": heights})
    for ax, v in zip(axes[:, 0], vcpus):
        _draw_panel(ax, v, panels.get(v, []), lanes[v], pmis.get(v, []))
    axes[-1, 0].set_xlabel(f"{label} of the logical processor")
    handles = [plt.Line2D([], [], marker=m, color=c, linestyle="", label=lab)
               for m, c, _, lab in STYLE.values()]
    handles.append(plt.Line2D([], [], label="interrupt (PMI)", **PMI_STYLE))
    top = 1 - 0.55 / (sum(heights) + 0.6)
    fig.legend(handles=handles, loc="upper center", ncol=len(handles), fontsize=8,
               frameon=False, bbox_to_anchor=(0.5, top + 0.25 / (sum(heights) + 0.6)))
    fig.text(0.01, 0.995, title, fontsize=8, va="top")
    fig.tight_layout(rect=(0, 0, 1, top))
    drawn = _count_drawn(fig)
    fig.savefig(out)
    plt.close(fig)
    return drawn


def _gather(records: list[dict], model: CpuModel, key: str):
    """Per vCPU: (x, lane, kind) markers and the interrupts' x; lane name -> MSR."""
    panels: dict[int, list] = collections.defaultdict(list)
    pmis: dict[int, list] = collections.defaultdict(list)
    last_x: dict[int, float] = collections.defaultdict(float)
    msrs: dict[str, int] = {}
    for rec in records:
        kind = kind_of(rec)
        if kind is None and rec["k"] != "pmi":
            continue
        v = rec.get("vcpu")
        if v is None:  # a finding at the end of the run
            v = max(last_x, default=0)
        t = rec.get(key)
        xv = float(t) if isinstance(t, (int, float)) else last_x[v]
        last_x[v] = max(last_x[v], xv)
        if rec["k"] == "pmi":
            pmis[v].append(xv)
            continue
        lane = lane_of(rec, model)
        if lane not in msrs:
            msrs[lane] = _msr_by_name(model).get(lane, 0xFFFFFFFF)
        panels[v].append((xv, lane, kind))
    return panels, pmis, msrs


def _draw_panel(ax, vcpu: int, marks: list, lanes: list[str], pmis: list[float]) -> None:
    ypos = {name: i for i, name in enumerate(lanes)}
    by_kind: dict[str, tuple[list, list]] = collections.defaultdict(lambda: ([], []))
    for xv, lane, kind in marks:
        xs, ys = by_kind[kind]
        xs.append(xv)
        ys.append(ypos[lane])
    for kind, (xs, ys) in by_kind.items():
        m, c, size, lab = STYLE[kind]
        ax.scatter(xs, ys, marker=m, c=c, s=size, label=kind, linewidths=1.2, zorder=3)
    for xv in pmis:
        ax.axvline(xv, label="pmi", **PMI_STYLE)
    ax.set_yticks(range(len(lanes)), lanes, fontsize=7)
    ax.set_ylim(max(len(lanes), 1) - 0.3, -0.7)  # the lowest MSR at the top
    ax.set_ylabel(f"vCPU {vcpu}", fontsize=9)
    ax.grid(axis="x", alpha=0.3)
    ax.ticklabel_format(axis="x", style="plain", useOffset=False)


def _count_drawn(fig) -> collections.Counter:
    """Markers per kind, from the figure's artists (scatter collections' offsets, the
    interrupt lines)."""
    n: collections.Counter = collections.Counter()
    for ax in fig.axes:
        for coll in ax.collections:
            if coll.get_label() in STYLE:
                n[coll.get_label()] += len(coll.get_offsets())
        n["pmi"] += sum(1 for ln in ax.lines if ln.get_label() == "pmi")
    return n
