"""The bare-metal x86 guests p4pmu boots itself: their C and assembly sources (package data)
and the Python side that must agree with them.

- `build`: builds the guests with the system gcc (`build_all`, `guest_path`); `p4pmu setup`
  runs it;
- `layout`: what the probe guests and the host agree on (op codes, modes, prefixes, flag
  setups, the script format); generates the guests' `layout.h` and instruction stubs;
- `script`: the probe guests' command scripts (`Script`) and answers (`parse_serial`).

`probe32`/`probe64` run a binary command script (`p4pmu demo --replay` uses `probe32`);
`events32`/`events64` run a text script that programs the PMU and runs measured loops
(`p4pmu bench` uses `events32`).  The tests (tests/test_bridge_*.py, tests/test_events_*.py)
run the same guests; see README.md in this folder.
"""
