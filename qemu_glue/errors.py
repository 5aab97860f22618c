"""The error every `p4pmu` command raises for a bad command line found after parsing.

`p4pmu.qemu_glue.cli.main` prints it like argparse's own errors ("p4pmu CMD: error: ...")
and exits with status 2.  Failures of the run itself are `provision.ProvisionError` (exit 1,
or the command's own status, e.g. 125 for `p4pmu linux`).
"""
from __future__ import annotations


class UsageError(Exception):
    """A usage error found after parsing: printed like argparse's, exit status 2."""
