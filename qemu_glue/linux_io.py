"""The output side of `p4pmu linux`: the guest's three UART pipes to the host.

- `HostOutput`: where the command's stdout and stderr and p4pmu's own lines go (the
  terminal by default, or a caller's functions, e.g. the demo's); it notices a reader that
  went away (`p4pmu linux ... | head`) and then stops the run as a shell pipeline stops its
  writer.
- `LineSink`: passes a stream on in whole lines (the command's stdout and stderr must not
  interleave mid-line on one terminal).
- `Console`: the console UART (ttyS0) to the kernel log, with the last lines kept for a
  failure report.
- `relay`: copies one pipe to its sink until EOF; `read_qemu_stderr` keeps QEMU's stderr.

Which UART carries what: docs/linux-guest.md and the doc of qemu_glue/linux.py.
"""
from __future__ import annotations

import collections
import os
import select
import sys
import threading
import time
from dataclasses import dataclass, field

from p4pmu.plugin.errors import is_error_line

WARNING_PREFIX = b"p4pmu: warning:"  # the plugin's warnings (emulator/notices.py)
FINDING_PREFIX = b"p4pmu: finding:"  # the programming checker's (lint=on: docs/checker.md)


class HostOutput:
    """Writes the run's bytes to the host's stdout and stderr, one chunk at a time (stdout
    and stderr often share a terminal).  When a reader has gone, its stream is pointed at
    /dev/null (so that Python's exit does not complain) and, for stdout, `stdout_closed` is
    set: the run stops.  ``stdout``/``stderr``: functions taking bytes, instead of the
    process's own streams."""

    def __init__(self, stdout=None, stderr=None):
        self._custom = {"stdout": stdout, "stderr": stderr}
        self._broken: set[str] = set()
        self._lock = threading.Lock()
        self.stdout_closed = threading.Event()

    def stdout(self, chunk: bytes) -> None:
        self._write("stdout", chunk)

    def stderr(self, chunk: bytes) -> None:
        self._write("stderr", chunk)

    def _write(self, name: str, chunk: bytes) -> None:
        if name in self._broken:
            return
        custom = self._custom[name]
        if custom is not None:
            try:
                with self._lock:
                    custom(chunk)
            except BrokenPipeError:  # the caller's own output went away
                self._broken.add(name)
                if name == "stdout":
                    self.stdout_closed.set()
            return
        stream = getattr(sys, name)
        try:
            with self._lock:
                buf = getattr(stream, "buffer", None)
                if buf is not None:
                    buf.write(chunk)
                    buf.flush()
                else:
                    stream.write(chunk.decode("utf-8", "replace"))
                    stream.flush()
        except (BrokenPipeError, ValueError, OSError):
            self._reader_gone(name, stream)

    def _reader_gone(self, name: str, stream) -> None:
        self._broken.add(name)
        try:
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, stream.fileno())
            os.close(null)
        except (OSError, ValueError, AttributeError):
            pass
        if name == "stdout":
            self.stdout_closed.set()


class LineSink:
    """Passes a stream on in whole lines: the command's stdout and stderr arrive through two
    UARTs a byte at a time, and on one terminal their bytes would interleave mid-line.  A
    partial line (a prompt, a progress bar, binary data) goes out once nothing more came for
    `PARTIAL_AFTER` seconds, once it reaches `MAX_PARTIAL` bytes, and at the end."""

    PARTIAL_AFTER = 0.1
    MAX_PARTIAL = 1 << 16

    def __init__(self, write):
        self.write = write
        self.partial = b""

    def feed(self, chunk: bytes) -> None:
        data = self.partial + chunk
        cut = data.rfind(b"\n") + 1
        if len(data) - cut >= self.MAX_PARTIAL:
            cut = len(data)
        if cut:
            self.write(data[:cut])
        self.partial = data[cut:]

    def flush(self) -> None:
        if self.partial:
            self.write(self.partial)
            self.partial = b""


@dataclass
class Console:
    """Copies the console pipe to the log (and, with ``echo``, to the host's stderr) and
    keeps the last lines."""

    log: object  # binary file
    echo: bool
    output: HostOutput
    tail: collections.deque = field(default_factory=lambda: collections.deque(maxlen=400))
    partial: bytes = b""

    def feed(self, chunk: bytes) -> None:
        self.log.write(chunk)  # type: ignore[attr-defined]
        self.log.flush()  # type: ignore[attr-defined]
        if self.echo:
            self.output.stderr(chunk)
        data = self.partial + chunk
        lines = data.split(b"\n")
        self.partial = lines.pop()
        if len(self.partial) > 65536:
            lines.append(self.partial)
            self.partial = b""
        for ln in lines:
            self.tail.append(ln.rstrip(b"\r").decode("utf-8", "replace"))

    def lines(self) -> list[str]:
        out = list(self.tail)
        if self.partial:
            out.append(self.partial.rstrip(b"\r").decode("utf-8", "replace"))
        return out


def relay(rfd: int, sink) -> None:
    """Copy a pipe to ``sink`` (a callable, or a LineSink) until EOF.  A UART delivers one
    byte per write(), so after a short read the copy waits a moment and lets bytes collect in
    the pipe (64 KiB, far more than a UART's 0.5 MB/s fills in the pause): fewer wake-ups,
    less CPU taken from QEMU."""
    feed = sink.feed if isinstance(sink, LineSink) else sink
    try:
        while True:
            if isinstance(sink, LineSink) and sink.partial:
                ready, _, _ = select.select([rfd], [], [], LineSink.PARTIAL_AFTER)
                if not ready:
                    sink.flush()
                    continue
            try:
                chunk = os.read(rfd, 1 << 16)
            except InterruptedError:
                continue
            if not chunk:
                break
            feed(chunk)
            if len(chunk) < 4096:
                time.sleep(0.01)
    finally:
        if isinstance(sink, LineSink):
            sink.flush()
        os.close(rfd)


def read_qemu_stderr(stream, keep: bytearray, output: HostOutput) -> None:
    """Keep QEMU's stderr for the kernel log and the failure report; pass the plugin's
    warnings and its Python-error reports (plugin/errors.py: the first line of each, and the
    summary at exit) on to the host's stderr as they come."""
    for line in iter(stream.readline, b""):
        keep.extend(line)
        if line.startswith((WARNING_PREFIX, FINDING_PREFIX)) or \
                is_error_line(line.decode("utf-8", "replace")):
            output.stderr(line)
