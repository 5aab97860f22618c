"""p4pmu.plugin"""

# The start of the line plugin/fold.c prints on stderr when a fold's bookkeeping was
# inconsistent (at the first such fold and, with the count, at exit).  The feeder repairs such
# a batch (totals kept; its adjacent clock pairs, which EDGE counting uses, are not) and the
# register mirror declines it.  It means a plugin bug: the tools pass it on to the user
# (demo, linux, bench) and the guest tests fail on it.
BOOKKEEPING_ERROR = "p4pmu: warning: counting bookkeeping error"


def bookkeeping_errors(stderr: str) -> list[str]:
    """The plugin's bookkeeping-error lines in a QEMU run's standard error."""
    return [ln for ln in stderr.splitlines() if ln.startswith(BOOKKEEPING_ERROR)]
