"""p4pmu.plugin"""

# The start of the line plugin/fold.c prints on stderr when a fold's bookkeeping was
# inconsistent (at the first such fold and, with the count, at exit).  The feeder repairs such
# a batch (totals kept; its adjacent clock pairs, which EDGE counting uses, are not) and the
# register mirror declines it.  It means a plugin bug: the tools pass it on to the user
# (demo, linux, bench) and the guest tests fail on it.
BOOKKEEPING_ERROR = "p4pmu: warning: counting bookkeeping error"

# Set by the host (qemu_glue/qemu_cmd.py) to learn that the plugin loaded: the entry points'
# `install` writes "loaded" into this file once the bridge exists.  QEMU's exit status alone
# cannot say it (a plugin that fails to load and a guest's isa-debug-exit both give 1).  Here,
# not in entry_points.py, so that the host side does not import the plugin's runtime.
LOADED_FILE_ENV = "P4PMU_LOADED_FILE"


def bookkeeping_errors(stderr: str) -> list[str]:
    """The plugin's bookkeeping-error lines in a QEMU run's standard error."""
    return [ln for ln in stderr.splitlines() if ln.startswith(BOOKKEEPING_ERROR)]
