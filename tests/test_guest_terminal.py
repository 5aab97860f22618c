"""An interactive shell in the Linux guest on a terminal (qemu_glue/linux_terminal.py;
docs/linux-guest.md "An interactive shell").

`p4pmu linux` with no COMMAND runs under a pseudo-terminal made here, as a user's terminal
would run it: the guest's shell prompts, perf top draws its own screen (libslang2 and the
terminal's description in the image) and quits on `q`, Ctrl-C interrupts the guest's
foreground program and not p4pmu, and leaving the shell ends the guest with its status.
The waits are hang detectors only.
"""
from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import shlex
import signal
import struct
import subprocess
import sys
import termios
import time

import pytest

P4PMU_LINUX = [sys.executable, "-m", "p4pmu.qemu_glue.cli", "linux",
               *shlex.split(os.environ.get("P4PMU_LINUX_TEST_ARGS", ""))]
WAIT = 600  # seconds: a hang detector (the guest boots in 10-40 s)
PROMPT = rb"p4pmu:[^\r\n#]*# "


class Session:
    """A process on the master side of a pseudo-terminal, with what it printed so far."""

    def __init__(self, argv: list[str], rows: int = 40, cols: int = 120):
        self.master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        env = {**os.environ, "TERM": "xterm"}
        self.proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env,
                                     start_new_session=True)
        os.close(slave)
        self.seen = b""

    def expect(self, pattern: bytes, after: int = 0) -> int:
        """Read until `pattern` (a regex) appears after offset `after`; its end offset."""
        deadline = time.monotonic() + WAIT
        while True:
            m = re.search(pattern, self.seen[after:])
            if m:
                return after + m.end()
            left = deadline - time.monotonic()
            if left <= 0 or self.proc.poll() is not None and not self._readable(0):
                pytest.fail(f"no {pattern!r} after {WAIT} s; the terminal showed:\n"
                            + self.seen[-3000:].decode(errors="replace"), pytrace=False)
            if self._readable(min(left, 1.0)):
                try:
                    self.seen += os.read(self.master, 65536)
                except OSError:  # the other side closed
                    pass

    def _readable(self, timeout: float) -> bool:
        return bool(select.select([self.master], [], [], timeout)[0])

    def send(self, data: bytes) -> None:
        os.write(self.master, data)

    def wait(self) -> int:
        return self.proc.wait(timeout=WAIT)


@pytest.fixture
def shell():
    # the virtual clock (the default with one vCPU): perf top's frequency mode then sizes its
    # period from the guest's own time, whatever the host's speed (on the host clock it could
    # keep the guest in back-to-back PMIs and never quit)
    s = Session([*P4PMU_LINUX, "--timeout", "1500"])
    yield s
    if s.proc.poll() is None:
        s.proc.send_signal(signal.SIGTERM)
        s.proc.wait(timeout=60)
    os.close(s.master)


@pytest.mark.guest
def test_an_interactive_shell_runs_perf_top_takes_ctrl_c_and_exits_with_its_status(shell):
    at = shell.expect(PROMPT)
    shell.send(b"stty size; echo $TERM\r")
    at = shell.expect(rb"40 120\r\nxterm\r\n", at)
    at = shell.expect(PROMPT, at)
    # perf top's own screen: its header line, drawn through libslang2, then `q` leaves it
    shell.send(b"perf top -e cycles -d 1\r")
    at = shell.expect(rb"Samples: +\d", at)
    shell.send(b"q")
    at = shell.expect(PROMPT, at)
    # Ctrl-C reaches the guest's foreground program, not p4pmu
    # a busy loop: on the virtual clock an idle guest's time is skipped, so `sleep` would end
    shell.send(b"while :; do :; done\r")
    at = shell.expect(rb"while :; do :; done\r\n", at)
    time.sleep(2)
    shell.send(b"\x03")
    at = shell.expect(PROMPT, at)
    shell.send(b"echo status=$?\r")
    at = shell.expect(rb"status=130\r\n", at)
    at = shell.expect(PROMPT, at)
    assert shell.proc.poll() is None
    shell.send(b"exit 4\r")
    assert shell.wait() == 4, shell.seen[-2000:].decode(errors="replace")


@pytest.mark.guest
def test_ctrl_close_bracket_stops_a_guest_that_does_not_answer(shell):
    at = shell.expect(PROMPT)
    shell.send(b"trap '' INT; while :; do :; done\r")
    time.sleep(2)
    shell.send(b"\x03\x1d")  # Ctrl-C is ignored by the loop; Ctrl-] stops the guest
    shell.expect(rb"Ctrl-\] typed: stopped the guest", at)
    assert shell.wait() == 130


def test_without_a_terminal_a_missing_command_is_a_usage_error():
    r = subprocess.run([*P4PMU_LINUX], stdin=subprocess.DEVNULL, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2
    assert "no COMMAND" in r.stderr and "interactive shell" in r.stderr
