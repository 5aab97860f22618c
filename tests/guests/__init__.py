"""Test-side helpers of the bare-metal guests (the guests themselves are p4pmu.qemu_glue.guests):
the bridge suite and its oracle, the events scripts, plans, loop traces and expectations."""
