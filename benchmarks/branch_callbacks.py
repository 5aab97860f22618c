"""How many conditional-branch callbacks each silent-direction rule would cost, from a branch
trace (`P4PMU_BRANCH_TRACE=PATH`, docs/guest-events.md: one line per outcome the plugin
resolved or replayed: kind, address, target, next, actual, taken, predicted, block, count).

A conditional branch whose group is saturated in its silent direction runs without a
callback; every outcome in the other direction is a callback (docs/guest-events.md, "Silent
branch outcomes").  Per branch site this prints what that costs under

* static:     the silent direction is backward-taken / forward-not-taken (the plugin's rule);
* majority:   the site's own majority direction over the run (the best one fixed direction
              per site can do);
* mispredict: a callback only at a misprediction (a bound no fixed direction reaches).

    P4PMU_BRANCH_TRACE=/tmp/t.txt p4pmu linux -- 'gzip -9 -c FILE >/dev/null'
    .venv/bin/python benchmarks/branch_callbacks.py /tmp/t.txt
"""
from __future__ import annotations

import argparse
import collections
import sys

COND = 1  # clockmodel.BR_NAMES.index("cond")


def site_totals(lines) -> dict[int, list[int]]:
    """address -> [not taken, taken, mispredicted, backward] over the trace's conditional
    outcomes."""
    sites: dict[int, list[int]] = collections.defaultdict(lambda: [0, 0, 0, 0])
    for ln in lines:
        f = ln.split()
        if len(f) != 9 or int(f[0]) != COND:
            continue
        addr, target, n = int(f[1], 16), int(f[2], 16), int(f[8])
        taken, pred = f[5] == "1", f[6] == "1"
        s = sites[addr]
        s[1 if taken else 0] += n
        if not pred:
            s[2] += n
        s[3] = int(target < addr)
    return sites


def costs(sites: dict[int, list[int]]) -> dict[str, int]:
    static = sum(s[0] if s[3] else s[1] for s in sites.values())
    majority = sum(min(s[0], s[1]) for s in sites.values())
    return {"outcomes": sum(s[0] + s[1] for s in sites.values()), "static": static,
            "majority": majority, "mispredict": sum(s[2] for s in sites.values()),
            "sites": len(sites),
            "sites where majority differs": sum(1 for s in sites.values()
                                                if (s[1] > s[0]) != bool(s[3]))}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("trace")
    a = p.parse_args(argv)
    with open(a.trace) as f:
        c = costs(site_totals(f))
    n = c["outcomes"] or 1
    for k, v in c.items():
        extra = f"  ({100 * v / n:.2f} % of conditional outcomes)" if k in (
            "static", "majority", "mispredict") else ""
        print(f"{k:>30}: {v:,}{extra}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
