"""The interactive terminal of a `p4pmu linux` run (no COMMAND on a terminal, or -t).

The guest's ttyS1 (COM2) becomes the session's terminal: QEMU reads and writes one end of a
socket pair (``-chardev socket,fd=N``) and the host relays the other end to its own terminal,
which it puts in raw mode for the run, so every key reaches the guest: the guest's tty line
discipline echoes, edits lines and turns Ctrl-C into SIGINT for the foreground program, as a
terminal does.  /init (linux_image/guest_init.py) sets ttyS1's size and TERM from the host's
(``/p4pmu/tty``: ``ROWS COLS TERM``) and runs COMMAND (or a shell) on it as the controlling
terminal of a new session, with stdout and stderr on it too; ttyS2 stays unused.

Ctrl-] (the telnet escape) typed on the host stops the guest: the way out of a guest that
no longer answers.  A later change of the host's window size is not passed on.
"""
from __future__ import annotations

import os
import socket
import sys
import termios
import threading
import tty

ESCAPE = b"\x1d"  # Ctrl-]


def wanted(command_words: list[str], force: bool) -> bool:
    """A terminal session: -t, or no COMMAND, with stdin and stdout both terminals."""
    return (force or not command_words) and os.isatty(0) and os.isatty(1)


class Terminal:
    """The host end of the guest's terminal: its QEMU backend, the relay threads, the host
    terminal's mode saved and restored."""

    def __init__(self):
        self._host, self._qemu = socket.socketpair()
        self._saved: list | None = None
        self.escaped = threading.Event()
        self._threads: list[threading.Thread] = []

    def run_file(self) -> bytes:
        """/p4pmu/tty: the host terminal's size and TERM."""
        size = os.get_terminal_size(1)
        term = os.environ.get("TERM") or "vt100"
        if not term.replace("-", "").replace("+", "").replace(".", "").isalnum():
            term = "vt100"
        return f"{size.lines} {size.columns} {term}\n".encode()

    def backend(self, machine) -> str:
        """The chardev backend of ttyS1 (the descriptor goes to `machine`)."""
        fd = os.dup(self._qemu.fileno())
        self._qemu.close()
        return f"socket,fd={machine.pass_fd(fd).rsplit('/', 1)[1]}"

    def start(self, write) -> None:
        """After QEMU started: the host terminal in raw mode, keys in, output to `write`."""
        if os.isatty(0):
            self._saved = termios.tcgetattr(0)
            tty.setraw(0, termios.TCSANOW)
        for target, args in ((self._keys_in, ()), (self._screen_out, (write,))):
            t = threading.Thread(target=target, args=args, daemon=True)
            t.start()
            self._threads.append(t)

    def close_unstarted(self) -> None:
        self._host.close()

    def join(self) -> None:
        """After QEMU is gone: the output drained, the host terminal back as it was."""
        if self._threads:
            self._threads[-1].join(timeout=10)  # _screen_out: ends at QEMU's end of the socket
        self.restore()
        self._host.close()

    def restore(self) -> None:
        if self._saved is not None:
            termios.tcsetattr(0, termios.TCSADRAIN, self._saved)
            self._saved = None

    def _keys_in(self) -> None:
        try:
            while chunk := os.read(0, 4096):
                if ESCAPE in chunk:
                    self._host.sendall(chunk.split(ESCAPE, 1)[0])
                    self.escaped.set()
                    return
                self._host.sendall(chunk)
        except OSError:
            pass  # the guest is gone

    def _screen_out(self, write) -> None:
        try:
            while chunk := self._host.recv(1 << 16):
                write(chunk)
        except OSError:
            pass


def note_escape() -> None:
    print("\r\np4pmu linux: Ctrl-] typed: stopped the guest", file=sys.stderr, flush=True)
