"""`p4pmu events` and the guest's `p4event`: NetBurst events by name, for users.

One job: list the events of the event table (`p4pmu.emulator.events`) with their ESCRs, the
counters those drive, the CPU models that have them and which mask bits this emulator counts,
and turn `event:MASK:...:MODIFIER` into perf's raw event for Linux's P4 driver
(`perf_p4.raw_event`).  `guest_script()` generates `p4event`, a busybox/POSIX sh script that
does the same inside the Linux guest (no Python there), from the same tables.  docs/events.md
describes both; the exit statuses are: 0 done (warnings allowed), 1 no event matches the
PATTERN, 2 a bad option, event, mask bit or modifier.
"""
from __future__ import annotations

import argparse
import difflib
import fnmatch
import json
import sys
from dataclasses import dataclass, field

from p4pmu.emulator import bus_requests as BR
from p4pmu.emulator import clockmodel as CM
from p4pmu.emulator import events as EV
from p4pmu.emulator import tables as T
from p4pmu.emulator.models import MODELS
from p4pmu.qemu_glue import perf_p4 as P

PROG = "p4pmu events"
GUEST_PROG = "p4event"
PRIV_LETTERS = "ukh"  # perf's privilege modifiers (perf-list(1), "EVENT MODIFIERS")
KIND = {"NR": "non-retirement", "AR": "at-retirement"}  # SDM Tables 19-28 / 19-29, 19-30
THREAD = {"TS": "thread-specific", "TI": "thread-independent"}  # SDM Table 19-34
LEGEND = "*: not modelled by this emulator (counts 0)"
NAME_WIDTH = max(len(e.name) for e in EV.EVENTS) + 2


class SpecError(ValueError):
    """A bad event specification or pattern; the message is one line."""


# --------------------------------------------------------------------------------------------
# Facts about one event, all derived from the tables


def linux_index(ev: EV.Event) -> int | None:
    """Linux's index of the event (enum P4_EVENTS), None if its P4 driver lacks it."""
    try:
        return P.linux_index(ev.name)
    except KeyError:
        return None


def linux_accepts(ev: EV.Event, bit: int) -> bool:
    """Whether Linux's driver accepts mask bit `bit` of `ev` in a raw event."""
    return linux_index(ev) is not None and bool(P.linux_emask(ev.name) >> bit & 1)


def model_keys(ev: EV.Event) -> list[str]:
    """The CPU models (models.MODELS keys) that have the event."""
    return [k for k, m in MODELS.items() if m.model in ev.models]


def escr_counters(escr_name: str) -> list[tuple[int, str]]:
    """(index, name) of the counters whose CCCR can select this ESCR (SDM Table 18-63)."""
    return [(i, T.COUNTERS[i].counter_name) for i in T.ESCR_BY_NAME[escr_name].feeds()]


def perf_bits(ev: EV.Event) -> list[int]:
    """The mask bits usable with perf: those Linux's driver accepts, by bit number."""
    return [k for k in sorted(ev.mask) if linux_accepts(ev, k)]


def default_bits(ev: EV.Event) -> list[int]:
    """The mask bits of a spec that names none: the usable bits this emulator counts, or all
    usable bits if it counts none of them; for a bus-queue event, the mask of the requests it
    counts (bus_requests.default_mask)."""
    usable = perf_bits(ev)
    mask = _request_default(ev)
    if mask:
        return [k for k in usable if mask >> k & 1]
    return [k for k in usable if CM.is_modelled(ev.name, k)] or usable


# --------------------------------------------------------------------------------------------
# Listing


def match(pattern: str | None) -> list[EV.Event]:
    """The event named `pattern`, else the events whose name contains it, or matches it as a
    glob if it has * ? or [; case-insensitive, in table order."""
    if not pattern:
        return list(EV.EVENTS)
    p = pattern.lower()
    exact = [e for e in EV.EVENTS if e.name.lower() == p]
    if exact:
        return exact
    if any(c in p for c in "*?["):
        return [e for e in EV.EVENTS if fnmatch.fnmatchcase(e.name.lower(), p)]
    return [e for e in EV.EVENTS if p in e.name.lower()]


def event_info(ev: EV.Event) -> dict:
    """The JSON form of one event."""
    return {
        "name": ev.name, "kind": KIND[ev.kind], "thread": THREAD.get(ev.thread or "TS"),
        "event_select": ev.select, "counts": ev.counts, "models": model_keys(ev),
        "escrs": [{"name": n, "msr": T.ESCR_BY_NAME[n].msr,
                   "counters": [{"index": i, "name": c} for i, c in escr_counters(n)]}
                  for n in ev.escrs],
        "linux_index": linux_index(ev),
        "mask": [{"bit": k, "name": n, "escr_bit": T.ESCR_FIELD["EVENT_MASK"].lo + k,
                  "modelled": CM.is_modelled(ev.name, k), "linux": linux_accepts(ev, k)}
                 for k, n in sorted(ev.mask.items())],
        "note": ev.note,
    }


def _bit_remarks(ev: EV.Event, k: int) -> str:
    out = []
    if not ev.counts:
        out.append("tags uops, never counts")
    elif not CM.is_modelled(ev.name, k):
        out.append("not modelled: counts 0")
    if linux_index(ev) is not None and not linux_accepts(ev, k):
        out.append("Linux's driver rejects it")
    return "; ".join(out)


def format_event(ev: EV.Event) -> str:
    """The text form of one event (several lines)."""
    lines = [f"{ev.name}  ({KIND[ev.kind]}, {THREAD.get(ev.thread or 'TS')}, "
             f"event select {ev.select:02X}h)"]
    for n in ev.escrs:
        cs = ", ".join(f"{i} {c}" for i, c in escr_counters(n))
        lines.append(f"  {n} ({T.ESCR_BY_NAME[n].msr:X}h) -> counters {cs}")
    lines.append("  models: " + " ".join(model_keys(ev)))
    idx = linux_index(ev)
    lines.append(f"  perf: Linux event index {idx}" if idx is not None
                 else "  perf: none (not an event of Linux's P4 driver)")
    if ev.note:
        lines.append(f"  note: {ev.note}")
    lines.append("  mask bits:")
    w = max(len(n) for n in ev.mask.values())
    for k, n in sorted(ev.mask.items()):
        r = _bit_remarks(ev, k)
        lines.append(f"    {k:2d} {n:<{w}}  ({r})" if r else f"    {k:2d} {n}")
    return "\n".join(lines)


def brief_line(ev: EV.Event) -> str:
    """One line: the name and the mask bits perf can use, * marking those that count 0 here
    (the same as `p4event -l`)."""
    if linux_index(ev) is None:
        desc = "(no perf encoding: not an event of Linux's P4 driver)"
    elif not perf_bits(ev):
        desc = "(no perf encoding: Linux's P4 driver accepts none of its mask bits)"
    else:
        desc = " ".join(ev.mask[k] + ("" if CM.is_modelled(ev.name, k) else "*")
                        for k in perf_bits(ev))
    return f"{ev.name:<{NAME_WIDTH}}{desc}"


def brief_listing(events: list[EV.Event]) -> str:
    lines = [brief_line(e) for e in events]
    if any("*" in ln for ln in lines):
        lines.append(LEGEND)
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------
# Encoding: event[:MASK...][:MODIFIER] -> perf's raw event


@dataclass
class Encoding:
    spec: str
    event: EV.Event
    bits: list[int]  # mask bit numbers, sorted, unique
    modifier: str
    warnings: list[str] = field(default_factory=list)

    @property
    def names(self) -> list[str]:
        return [self.event.mask[k] for k in self.bits]

    @property
    def config(self) -> int:
        return P.raw_config(self.event.name, *self.names)

    @property
    def perf(self) -> str:
        return P.raw_event(self.event.name, *self.names, modifier=self.modifier)


def split_spec(spec: str) -> tuple[str, list[str], str]:
    """`event[:MASK...][:MODIFIER]` -> (event, masks, modifier).  The last component is the
    modifier when there are two or more and it is made only of perf's privilege letters."""
    parts = spec.split(":")
    if not all(parts):
        raise SpecError(f"empty component in '{spec}'")
    mod = ""
    if len(parts) > 1 and all(c in PRIV_LETTERS for c in parts[-1]):
        mod = parts.pop()
        if len(set(mod)) != len(mod):
            raise SpecError(f"modifier '{mod}' repeats a letter")
    return parts[0], parts[1:], mod


def find_event(name: str) -> EV.Event:
    """The event named `name` (case-insensitive); SpecError with suggestions otherwise."""
    by_lower = {e.name.lower(): e for e in EV.EVENTS}
    ev = by_lower.get(name.lower())
    if ev is None:
        close = difflib.get_close_matches(name.lower(), list(by_lower), n=3)
        hint = f"; did you mean {', '.join(by_lower[c].name for c in close)}?" if close else ""
        raise SpecError(f"unknown event '{name}'{hint} ('p4pmu events' lists them)")
    if linux_index(ev) is None:
        raise SpecError(f"{ev.name} is not an event of Linux's P4 driver: perf cannot count it")
    return ev


def find_bit(ev: EV.Event, name: str) -> int:
    """Mask bit `name` (case-insensitive) of `ev`, checked against Linux's driver."""
    for k, n in sorted(ev.mask.items()):
        if n.lower() == name.lower():
            if not linux_accepts(ev, k):
                raise SpecError(f"{ev.name}:{n} is rejected by Linux's P4 driver (not in its "
                                f"event mask for {ev.name})")
            return k
    raise SpecError(f"unknown mask bit '{name}' of {ev.name}; its bits: "
                    + " ".join(n for _, n in sorted(ev.mask.items())))


def _request_default(ev: EV.Event) -> int:
    """A bus-queue event's default mask (0: not one, or it counts no request here)."""
    if not ev.selects_requests:
        return 0
    return BR.default_mask(ev.name, CM.modelled_requests(ev.name))


def _request_checks(ev: EV.Event) -> str:
    """The table column of a bus-queue event for the guest's p4event: its default mask, then
    care:mask per request it counts (bus_requests.care_mask), in hex; - for other events."""
    reqs = CM.modelled_requests(ev.name) if ev.selects_requests else ()
    if not reqs:
        return "-"
    return f"{_request_default(ev):x}/" + ",".join(
        f"{BR.care_mask(ev.name, r):x}:{BR.canonical_mask(ev.name, r):x}" for r in reqs)


def request_warning(ev: EV.Event, mask: int) -> str | None:
    """The warning for a bus-queue event's mask that selects none of the requests this
    emulator models on models 2 and later (the guest's p4event tests the same with
    bus_requests.care_mask)."""
    reqs = CM.modelled_requests(ev.name)
    if any(BR.selects(ev.name, mask, r, 2) for r in reqs):
        return None
    return (f"{ev.name}: mask {mask:04X}h selects none of the bus requests this emulator "
            "models (on models 0F_02 and later; docs/events.md, Bus requests): counts 0")


# what an occupancy event (clockmodel.ACTIVE_EVENTS) needs: its requests are active for the
# clocks loads wait for memory, which only timing=memory charges.  `p4pmu linux` puts
# MEMORY_TIMING_ARG on the guest kernel's command line when it runs so (the kernel ignores an
# unknown parameter with a dot), and the guest's p4event does not warn then.
TIMING_NOTE = ("counts only with timing=memory (p4pmu linux --timing memory): with timing=core "
               "it reads 0")
MEMORY_TIMING_ARG = "p4pmu.timing=memory"


def spec_warnings(ev: EV.Event, bits: list[int]) -> list[str]:
    """What the user should know about a valid encoding (printed on stderr)."""
    out = []
    if set(MODELS) - set(model_keys(ev)):
        out.append(f"{ev.name} exists only on models {' '.join(model_keys(ev))} (Linux's "
                   f"driver rejects it on others)")
    if not ev.counts:
        out.append(f"{ev.name} never counts by itself (it only tags uops for other events)")
        return out
    if ev.name in CM.ACTIVE_EVENTS:
        out.append(f"{ev.name} {TIMING_NOTE}")
    if ev.selects_requests and CM.modelled_requests(ev.name):
        w = request_warning(ev, sum(1 << k for k in bits))
        if w:
            out.append(w)
    else:
        dead = [ev.mask[k] for k in bits if not CM.is_modelled(ev.name, k)]
        if dead:
            out.append(f"{ev.name}: not modelled by this emulator, counts 0: {' '.join(dead)}")
    return out


def encode(spec: str) -> Encoding:
    """Parse and check one spec; SpecError (one line) if it is bad."""
    name, masks, mod = split_spec(spec)
    ev = find_event(name)
    bits = sorted({find_bit(ev, m) for m in masks}) if masks else default_bits(ev)
    if not bits:
        raise SpecError(f"Linux's P4 driver accepts no mask bit of {ev.name}: perf cannot "
                        "count it")
    return Encoding(spec, ev, bits, mod, spec_warnings(ev, bits))


# --------------------------------------------------------------------------------------------
# The guest's p4event: the same listing and encoding in POSIX sh (busybox ash, dash)

_SCRIPT = r"""#!/bin/sh
# p4event: NetBurst (Pentium 4) events by name -> perf raw events, in the p4pmu Linux guest.
#
# Generated by p4pmu from its event table (p4pmu.qemu_glue.events_cmd.guest_script; print it
# again with `p4pmu events --guest-script`): do not edit.  docs/events.md describes it.
# Encoding: perf's config = ESCR image << 32 | CCCR image; the ESCR's event-select field
# (bits 30:25) holds Linux's event index, its event-mask field (bits 24:9) the mask bits
# (SDM Vol. 3B 18.15, Figure 18-43).  The ESCR half stays below 2^31, so 32-bit shell
# arithmetic builds it; the CCCR half is printed after it as 8 hex digits.
# Exit status: 0 done, 1 no event matches PATTERN, 2 bad input.

PROG=@PROG@
WIDTH=@WIDTH@
CCCR=0
LEGEND='@LEGEND@'
# One event a line: name in lower case, name, Linux event index (- if none), counts (1/0),
# the models it is limited to (- for all), for a bus-queue event its default mask and the
# care:mask pairs of the requests it counts (DEFAULT/C:M,C:M in hex; - for others), then its
# mask bits as bit:lower:NAME:M:L (M 1 = modelled by this emulator, L 1 = accepted by
# Linux's P4 driver).
TABLE='@TABLE@'
OUT=
LF='
'
set -f

usage() {
    cat <<EOF
usage: $PROG EVENT[:MASK...][:MODIFIER]...   perf's raw event for each, one a line
       $PROG -l [PATTERN]                    list events and the mask bits perf accepts
       $PROG -h                              this help

EVENT and MASK names are case-insensitive; MODIFIER is perf's u, k, uk (also h).  Without
MASK bits: the bits this emulator counts.  PATTERN: a name, else a substring or a
glob (* ? [).
Example: perf stat -e "\$($PROG branch_retired:MMTP:MMTM:u)" ./prog
$LEGEND
EOF
}

die() { printf '%s: error: %s\n' "$PROG" "$1" >&2; exit 2; }
warn() { printf '%s: warning: %s\n' "$PROG" "$1" >&2; }
lower() { printf '%s' "$1" | tr 'ABCDEFGHIJKLMNOPQRSTUVWXYZ' 'abcdefghijklmnopqrstuvwxyz'; }

# split_bit BIT: sets K, BL (lower-case name), BN (name), BM (modelled), BX (Linux accepts)
split_bit() {
    K=${1%%:*}; r=${1#*:}; BL=${r%%:*}; r=${r#*:}; BN=${r%%:*}; r=${r#*:}
    BM=${r%%:*}; BX=${r#*:}
}

# find_event LOWER-NAME: sets E_NAME E_IDX E_COUNTS E_MODELS E_REQS E_BITS; status 1 if
# unknown
find_event() {
    while read -r l n i c m q b; do
        if [ "$l" = "$1" ]; then
            E_NAME=$n; E_IDX=$i; E_COUNTS=$c; E_MODELS=$m; E_REQS=$q; E_BITS=$b
            return 0
        fi
    done <<EOF
$TABLE
EOF
    return 1
}

# suggest LOWER-NAME: up to three event names containing it, else sharing its first 4 letters
suggest() {
    tail=${1#????}; pre=${1%"$tail"}; a=; ka=0; b=; kb=0
    while read -r l n rest; do
        case $l in *"$1"*) [ $ka -ge 3 ] || a="$a${a:+, }$n"; ka=$((ka + 1));; esac
        case $pre in ?*) case $l in "$pre"*) [ $kb -ge 3 ] || b="$b${b:+, }$n"
                                              kb=$((kb + 1));; esac;; esac
    done <<EOF
$TABLE
EOF
    printf '%s' "${a:-$b}"
}

# add_bit NAME: ORs mask bit NAME of the current event into MASK
add_bit() {
    lm=$(lower "$1"); all=
    for b in $E_BITS; do
        split_bit "$b"
        all="$all${all:+ }$BN"
        if [ "$BL" = "$lm" ]; then
            [ "$BX" = 1 ] || die "$E_NAME:$BN is rejected by Linux's P4 driver (not in its \
event mask for $E_NAME)"
            MASK=$((MASK | (1 << K)))
            return
        fi
    done
    die "unknown mask bit '$1' of $E_NAME; its bits: $all"
}

# default_mask: the Linux-accepted bits this emulator counts, else all Linux-accepted bits;
# a bus-queue event's default mask
default_mask() {
    if [ "$E_REQS" != - ]; then
        MASK=$((0x${E_REQS%%/*}))
        return
    fi
    for b in $E_BITS; do
        split_bit "$b"
        [ "$BX" = 1 ] && [ "$BM" = 1 ] && MASK=$((MASK | (1 << K)))
    done
    [ "$MASK" != 0 ] && return
    for b in $E_BITS; do
        split_bit "$b"
        [ "$BX" = 1 ] && MASK=$((MASK | (1 << K)))
    done
}

warnings() {
    if [ "$E_MODELS" != - ]; then
        models=$(printf '%s' "$E_MODELS" | tr ',' ' ')
        warn "$E_NAME exists only on models $models (Linux's driver rejects it on others)"
    fi
    if [ "$E_COUNTS" = 0 ]; then
        warn "$E_NAME never counts by itself (it only tags uops for other events)"
        return
    fi
    if [ "$E_COUNTS" = 2 ]; then
        case " $(cat /proc/cmdline 2>/dev/null) " in
            *" @TIMING_ARG@ "*) ;;
            *) warn "$E_NAME @TIMING@";;
        esac
    fi
    if [ "$E_REQS" != - ]; then
        for q in $(printf '%s' "${E_REQS#*/}" | tr ',' ' '); do
            [ $((MASK & 0x${q%%:*})) = $((0x${q#*:})) ] && return
        done
        warn "$E_NAME: mask $(printf '%04X' "$MASK")h selects none of the bus requests this \
emulator models (on models 0F_02 and later; docs/events.md, Bus requests): counts 0"
        return
    fi
    dead=
    for b in $E_BITS; do
        split_bit "$b"
        [ $((MASK >> K & 1)) = 1 ] && [ "$BM" = 0 ] && dead="$dead${dead:+ }$BN"
    done
    [ -z "$dead" ] || warn "$E_NAME: not modelled by this emulator, counts 0: $dead"
}

# encode SPEC: appends perf's raw event for SPEC (event[:MASK...][:MODIFIER]) to OUT
encode() {
    spec=$1
    case $spec in ''|:*|*:|*::*) die "empty component in '$spec'";; esac
    ev=${spec%%:*}; rest=; mod=
    case $spec in *:*) rest=${spec#*:};; esac
    last=${rest##*:}
    case $last in
        ''|*[!ukh]*) ;;
        *) mod=$last
           case $rest in *:*) rest=${rest%:*};; *) rest=;; esac
           case $mod in *u*u*|*k*k*|*h*h*) die "modifier '$mod' repeats a letter";; esac;;
    esac
    lev=$(lower "$ev")
    if ! find_event "$lev"; then
        s=$(suggest "$lev")
        die "unknown event '$ev'${s:+; did you mean $s?} ($PROG -l lists them)"
    fi
    [ "$E_IDX" = - ] && die "$E_NAME is not an event of Linux's P4 driver: perf cannot count it"
    MASK=0
    if [ -n "$rest" ]; then
        while [ -n "$rest" ]; do
            m=${rest%%:*}
            case $rest in *:*) rest=${rest#*:};; *) rest=;; esac
            add_bit "$m"
        done
    else
        default_mask
    fi
    [ "$MASK" != 0 ] || die "Linux's P4 driver accepts no mask bit of $E_NAME: perf cannot count it"
    warnings
    OUT="$OUT$(printf 'r%x%08x' $(( (E_IDX << 25) | (MASK << 9) )) "$CCCR")${mod:+:$mod}$LF"
}

# brief NAME IDX BITS: the -l line of one event
brief() {
    if [ "$2" = - ]; then
        d="(no perf encoding: not an event of Linux's P4 driver)"
    else
        d=
        for b in $3; do
            split_bit "$b"
            [ "$BX" = 1 ] || continue
            [ "$BM" = 1 ] || { BN="$BN*"; STAR=1; }
            d="$d${d:+ }$BN"
        done
        [ -n "$d" ] || d="(no perf encoding: Linux's P4 driver accepts none of its mask bits)"
    fi
    printf "%-${WIDTH}s%s\n" "$1" "$d"
}

# list [PATTERN]: -l
list() {
    lp=$(lower "$1"); found=; STAR=; exact=
    find_event "$lp" && exact=1
    while read -r l n i c m q b; do
        if [ -n "$exact" ]; then
            [ "$l" = "$lp" ] || continue
        else
            case $lp in
                '') ;;
                *[*?[]*) case $l in $lp) ;; *) continue;; esac;;
                *) case $l in *"$lp"*) ;; *) continue;; esac;;
            esac
        fi
        found=1
        brief "$n" "$i" "$b"
    done <<EOF
$TABLE
EOF
    if [ -z "$found" ]; then
        printf "%s: error: no event matches '%s'\n" "$PROG" "$1" >&2
        exit 1
    fi
    [ -z "$STAR" ] || printf '%s\n' "$LEGEND"
}

case ${1-} in
    -h|--help) usage; exit 0;;
    -l|--list) [ $# -le 2 ] || die "$1 takes at most one PATTERN"; list "${2-}"; exit 0;;
    -*) die "unknown option '$1' ($PROG -h for help)";;
esac
if [ $# -eq 0 ]; then
    usage >&2
    exit 2
fi
for spec in "$@"; do
    encode "$spec"
done
printf '%s' "$OUT"
"""


def _table_line(ev: EV.Event) -> str:
    idx = linux_index(ev)
    models = "-" if not set(MODELS) - set(model_keys(ev)) else ",".join(model_keys(ev))
    bits = " ".join(f"{k}:{n.lower()}:{n}:{int(CM.is_modelled(ev.name, k))}:"
                    f"{int(linux_accepts(ev, k))}" for k, n in sorted(ev.mask.items()))
    counts = 2 if ev.name in CM.ACTIVE_EVENTS else int(ev.counts)  # 2: with timing=memory
    return f"{ev.name.lower()} {ev.name} {'-' if idx is None else idx} {counts} " \
           f"{models} {_request_checks(ev)} {bits}"


def guest_script() -> str:
    """The text of `p4event`, the guest's sh script (busybox ash, dash), generated from the
    event table: same listing (`-l` = `p4pmu events --brief`) and encoding as here."""
    table = "\n".join(_table_line(e) for e in EV.EVENTS)
    for s in (table, LEGEND):
        assert "'" not in s, "the script quotes these in '...'"
    return (_SCRIPT.replace("@PROG@", GUEST_PROG).replace("@WIDTH@", str(NAME_WIDTH))
            .replace("@LEGEND@", LEGEND).replace("@TIMING@", TIMING_NOTE)
            .replace("@TIMING_ARG@", MEMORY_TIMING_ARG).replace("@TABLE@", table))


# --------------------------------------------------------------------------------------------
# The command

DESCRIPTION = (
    "List the NetBurst (Pentium 4) performance-monitoring events: kind, ESCRs and the counters "
    "they drive (SDM Table 18-63), CPU models, and every mask bit with whether this emulator "
    "counts it and whether Linux's P4 driver accepts it. With --perf, print perf's raw event "
    "for each SPEC, one a line. docs/events.md has the details.")
EPILOG = f"""\
SPEC is EVENT[:MASK[:MASK...]][:MODIFIER]; EVENT and MASK names are case-insensitive;
MODIFIER is perf's privilege suffix made of the letters {', '.join(PRIV_LETTERS)} (u user, k kernel,
h hypervisor), copied to the output. Without MASK bits: the bits Linux accepts that this
emulator counts (all bits Linux accepts if it counts none). A mask bit that counts 0 here is
still encoded, with a warning on stderr.

exit status: 0 done (warnings allowed), 1 no event matches PATTERN, 2 bad option, event,
mask bit or modifier (one line on stderr, nothing on stdout).

examples:
  p4pmu events                         every event, in detail
  p4pmu events branch                  events whose name contains "branch"
  p4pmu events '*_uop' --brief         one line per event, as the guest's `p4event -l`
  p4pmu events --json > events.json
  p4pmu events --perf branch_retired:MMTP:MMTM:u instr_retired:k
  perf stat -e "$(p4pmu events --perf branch_retired:MMTM:u)" ./prog
  p4pmu events --guest-script > p4event   the same, as a sh script for the Linux guest"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("pattern", nargs="?", metavar="PATTERN",
                   help="only the event named PATTERN, else those whose name contains it, or "
                        "matches it as a glob if it has * ? or [ (case-insensitive)")
    p.add_argument("--perf", nargs="+", metavar="SPEC",
                   help="print perf's raw event (rHEX[:MODIFIER]) for each SPEC, one a line")
    p.add_argument("--brief", action="store_true",
                   help="one line per event: the mask bits perf accepts, * marking those "
                        "that count 0 here (the guest's `p4event -l`)")
    p.add_argument("--json", action="store_true",
                   help="machine-readable output (of the listing, or of --perf)")
    p.add_argument("--guest-script", action="store_true",
                   help="print the guest's p4event sh script and exit")


def _fail(msg: str, status: int = 2) -> int:
    print(f"{PROG}: error: {msg}", file=sys.stderr)
    return status


def _conflict(a: argparse.Namespace) -> str | None:
    modes = [n for n, on in (("PATTERN", a.pattern is not None), ("--perf", bool(a.perf)),
                             ("--guest-script", a.guest_script)) if on]
    if len(modes) > 1:
        return f"{' and '.join(modes)} cannot be combined"
    if a.brief and a.json:
        return "--brief and --json cannot be combined"
    if a.brief and (a.perf or a.guest_script):
        return "--brief only applies to the listing"
    if a.json and a.guest_script:
        return "--json does not apply to --guest-script"
    return None


def cmd_perf(specs: list[str], as_json: bool) -> int:
    encs = []
    for s in specs:  # warnings as each spec is read, as p4event does
        try:
            encs.append(encode(s))
        except SpecError as e:
            return _fail(str(e))
        for w in encs[-1].warnings:
            print(f"{PROG}: warning: {w}", file=sys.stderr)
    if as_json:
        print(json.dumps([{"spec": e.spec, "event": e.event.name, "mask": e.names,
                           "modifier": e.modifier, "config": f"{e.config:#x}",
                           "perf": e.perf} for e in encs], indent=2))
    else:
        sys.stdout.write("".join(e.perf + "\n" for e in encs))
    return 0


def cmd_list(pattern: str | None, brief: bool, as_json: bool) -> int:
    events = match(pattern)
    if not events:
        return _fail(f"no event matches '{pattern}'", 1)
    if as_json:
        print(json.dumps([event_info(e) for e in events], indent=2))
    elif brief:
        sys.stdout.write(brief_listing(events))
    else:
        print("\n\n".join(format_event(e) for e in events))
    return 0


def main(a: argparse.Namespace) -> int:
    clash = _conflict(a)
    if clash:
        return _fail(clash)
    if a.guest_script:
        sys.stdout.write(guest_script())
        return 0
    if a.perf:
        return cmd_perf(a.perf, a.json)
    return cmd_list(a.pattern, a.brief, a.json)
