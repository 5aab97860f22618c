"""Python errors during a run inside QEMU: never silent.

An exception raised by the Python half while it serves the C plugin (plugin/entry_points.py
calling plugin/bridge.py) is

* reported once per place -- the kind of call (RDMSR, WRMSR, ...), the exception's type and
  the line that raised it -- with its traceback, on stderr and in the ``log=`` file;
* counted, every time, per kind of call;
* summarised when QEMU exits (`RunErrors.summary`): ``p4pmu: 3 Python errors during the run
  (RDMSR: 2, WRMSR: 1); see pmu.log``.

How the access itself completes after an error is the bridge's decision (plugin/bridge.py).
A tool that filters QEMU's stderr must pass on the lines `is_error_line` accepts (the first
line of each report, and the summary).
"""
from __future__ import annotations

import re
import sys
import traceback
from collections.abc import Callable

REPORT_START = "p4pmu: Python error in "
_SUMMARY = re.compile(r"p4pmu: \d+ Python errors? during the run \(")


def is_error_line(line: str) -> bool:
    """The first line of an error's report, or the summary line."""
    return line.startswith(REPORT_START) or bool(_SUMMARY.match(line))


class RunErrors:
    """The Python errors of one run.  `write_log` writes one line to the log= file (it does
    nothing without one); `log_path` is that file's name, for the summary."""

    def __init__(self, write_log: Callable[[str], None], log_path: str | None = None):
        self._write_log = write_log
        self.log_path = log_path
        self.counts: dict[str, int] = {}  # kind of call -> errors
        self._reported: set[tuple] = set()

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @staticmethod
    def _place(kind: str, exc_info) -> tuple:
        frames = traceback.extract_tb(exc_info[2])
        last = frames[-1] if frames else None
        return (kind, exc_info[0].__name__ if exc_info[0] else "?",
                last.filename if last else "", last.lineno if last else 0)

    def record(self, kind: str, what: str, exc_info, outcome: str) -> None:
        """An exception (`exc_info`: sys.exc_info()) in a call of `kind` doing `what`; the
        access then completed as `outcome` says.  Never raises."""
        try:
            text = "".join(traceback.format_exception(*exc_info))
            self.record_text(kind, what, text, outcome, self._place(kind, exc_info))
        except BaseException:  # reporting must not turn into another error of the run
            pass

    def record_text(self, kind: str, what: str, text: str, outcome: str,
                    place: tuple | None = None) -> None:
        """Like `record` with the traceback as text; the place is then its last line."""
        try:
            self.counts[kind] = self.counts.get(kind, 0) + 1
            text = text.rstrip()
            place = place or (kind, text.splitlines()[-1] if text else "")
            if place in self._reported:
                return
            self._reported.add(place)
            head = (f"{what}: {outcome} (reported once for this place; the summary at "
                    f"QEMU's exit counts them all)")
            sys.stderr.write(f"{REPORT_START}{head}\n{text}\n")
            sys.stderr.flush()
            self._write_log(f"# Python error in {head}")
            for line in text.splitlines():
                self._write_log(f"#   {line}")
        except BaseException:
            pass

    def summary(self) -> str | None:
        """The line for QEMU's exit, or None without errors."""
        if not self.counts:
            return None
        n = self.total
        kinds = ", ".join(f"{k}: {c}" for k, c in self.counts.items())
        where = self.log_path or "the tracebacks above"
        return (f"p4pmu: {n} Python error{'s' if n != 1 else ''} during the run ({kinds}); "
                f"see {where}")
