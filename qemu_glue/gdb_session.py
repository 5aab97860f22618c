"""Scripted GDB sessions on the emulated PMU (docs/gdb.md, "Scripted sessions"): one object
owns a guest started with `p4pmu qemu --gdb` or `p4pmu linux --gdb`, the gdb attached to it
through pygdbmi (GDB/MI), and the PMU control channel.

    from p4pmu.qemu_glue.gdb_session import GdbSession

    with GdbSession.bare_metal("guest.elf", qemu_args=["-initrd", "script.bin"]) as s:
        s.pmu_break("overflow", counter="IQ_COUNTER0")
        stop = s.cont(timeout=30)          # Stop(reason="signal-received", p4pmu={...})
        print(stop.p4pmu["text"], s.pmu_counter(12))
        s.pmu_write("IQ_CCCR0", 0)
        s.pmu_delete()
        s.cont()                           # until the guest ends: Stop(reason="exited")

Every wait has a timeout (GdbTimeout, the guest then interrupted so the session stays
usable); gdb's and the channel's errors are GdbError with their words.  Leaving the `with`
block -- also by an exception, as in a failing test -- ends gdb, QEMU and p4pmu and leaves no
process, socket or directory behind.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from p4pmu.qemu_glue import gdb_cmd, sessions
from p4pmu.qemu_glue.gdb_launch import free_port


class GdbError(RuntimeError):
    """gdb, the control channel or the guest's start refused or failed: the message says why."""


class GdbTimeout(GdbError):
    """A wait ran out of time (the guest was interrupted: the session is still usable)."""


@dataclass
class Stop:
    """Why and where the guest stopped (GDB/MI's *stopped record)."""
    reason: str                  # "signal-received", "breakpoint-hit", "end-stepping-range",
    #                              "exited", "exited-normally", ...
    pc: int | None = None
    signal: str | None = None    # "SIGINT" for a stop asked by the PMU channel or interrupt
    exit_code: int | None = None
    p4pmu: dict | None = None    # the control channel's `why` when a P4PMU breakpoint stopped it
    console: list[str] = field(default_factory=list)  # gdb's console output meanwhile

    @property
    def exited(self) -> bool:
        return self.reason.startswith("exited")


class ControlClient:
    """The PMU control channel (JSON lines over a Unix socket: docs/gdb.md)."""

    def __init__(self, path: str, timeout: float = 10.0):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        try:
            self.sock.connect(path)
        except OSError as e:
            self.sock.close()
            raise GdbError(f"cannot connect to the PMU control channel {path}: "
                           f"{e.strerror}") from None
        self._file = self.sock.makefile("rb")

    def request(self, op: str, **args) -> dict:
        line = json.dumps({"op": op, **args}).encode() + b"\n"
        try:
            self.sock.sendall(line)
            answer = self._file.readline()
        except OSError as e:
            raise GdbError(f"PMU control channel: {e}") from None
        if not answer:
            raise GdbError("PMU control channel closed (QEMU ended?)")
        reply = json.loads(answer)
        if not reply.get("ok"):
            raise GdbError(f"p4pmu {op}: {reply.get('error')}")
        return reply

    def close(self) -> None:
        self._file.close()
        self.sock.close()


class GdbSession:
    """A guest under gdb with the PMU channel; see the module doc.  Prefer the constructors
    `bare_metal` and `linux`; ``p4pmu_args`` is a `p4pmu` command line with ``--gdb=PORT``
    where PORT is `{port}`."""

    def __init__(self, p4pmu_args: list[str], *, elf: str | None = None,
                 start_timeout: float = 120.0, gdb: str = "gdb"):
        self.port = free_port()
        self.args = [a.replace("{port}", str(self.port)) for a in p4pmu_args]
        self.elf = elf
        self.start_timeout = start_timeout
        self.gdb_binary = gdb
        self.proc: subprocess.Popen | None = None
        self.gdb = None
        self.control: ControlClient | None = None
        self.session: dict | None = None
        self._seen_stop = 0
        self._log = tempfile.TemporaryFile()  # p4pmu's and QEMU's output, for error messages

    @classmethod
    def bare_metal(cls, kernel: str, *, qemu_args: list[str] = (), model: str = "0F_04",
                   plugin_opts: list[str] = (), **kw) -> GdbSession:
        """A bare-metal guest (-kernel ELF, multiboot) on `p4pmu qemu --gdb`."""
        opts = [x for o in plugin_opts for x in ("--plugin-opt", o)]
        args = ["qemu", "--gdb={port}", "--model", model, *opts, "--",
                "-machine", "pc", "-m", "64", "-nodefaults", "-display", "none",
                "-no-reboot", "-device", "isa-debug-exit,iobase=0xf4,iosize=0x04",
                "-kernel", str(kernel), *qemu_args]
        return cls(args, elf=str(kernel), **kw)

    @classmethod
    def linux(cls, command: str, *, linux_args: list[str] = (), **kw) -> GdbSession:
        """`p4pmu linux --gdb -- COMMAND` (the guest's command output goes to the log)."""
        return cls(["linux", "--gdb={port}", *linux_args, "--", command], **kw)

    # -- life --------------------------------------------------------------------------------

    def __enter__(self) -> GdbSession:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> None:
        """Start the guest (stopped), attach gdb with the extension, connect the channel."""
        from pygdbmi.gdbcontroller import GdbController
        cmd = [sys.executable, "-c", "import sys; from p4pmu.qemu_glue.cli import main; "
               "sys.exit(main())", *self.args]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self._log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        self.session = self._wait_for_session()
        self.control = ControlClient(self.session["control"])
        self.gdb = GdbController(command=[self.gdb_binary, "--nx", "-q", "--interpreter=mi3"])
        self._mi("-gdb-set mi-async on")  # commands (an interrupt) while the guest runs
        self.console(f"source {gdb_cmd.extension_path()}")
        self.console(f"set p4pmu socket {self.session['control']}")
        # qemu-system-x86_64's gdbstub sends 64-bit registers, also for a 32-bit guest ELF
        self.console("set architecture i386:x86-64")
        if self.elf:
            self.console(f"file {self.elf}")
        self._mi(f"-target-select remote localhost:{self.port}", timeout=20)

    def _wait_for_session(self) -> dict:
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            for s in sessions.live_sessions():
                if s.get("p4pmu_pid") == self.proc.pid and os.path.exists(s["control"]):
                    return s
            if self.proc.poll() is not None:
                raise GdbError(f"p4pmu ended (status {self.proc.returncode}) before the guest "
                               f"was ready for gdb:\n{self.output()}")
            time.sleep(0.1)
        raise GdbTimeout(f"the guest was not ready for gdb within {self.start_timeout:g} s:\n"
                         f"{self.output()}")

    def output(self) -> str:
        """What p4pmu and QEMU printed so far."""
        self._log.seek(0)
        return self._log.read().decode("utf-8", "replace")

    def close(self) -> None:
        """End gdb, then QEMU and p4pmu (SIGTERM, then SIGKILL); idempotent."""
        if self.control is not None:
            self.control.close()
            self.control = None
        if self.gdb is not None:
            try:
                self.gdb.exit()
            except Exception:
                pass
            self.gdb = None
        p = self.proc
        if p is not None and p.poll() is None:
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.killpg(p.pid, sig)
                    p.wait(timeout=10)
                    break
                except ProcessLookupError:
                    break
                except subprocess.TimeoutExpired:
                    continue
        if p is not None and self.session is not None:
            # p4pmu removes its session when it ends; a SIGKILLed one cannot
            sessions.live_sessions()

    # -- gdb ---------------------------------------------------------------------------------

    def _mi(self, command: str, timeout: float = 10.0) -> list[dict]:
        """A GDB/MI command; its records up to its result (error: GdbError)."""
        if self.gdb is None:
            raise GdbError("the session is closed")
        records = self.gdb.write(command, timeout_sec=timeout, raise_error_on_timeout=False)
        deadline = time.monotonic() + timeout
        while not any(r["type"] == "result" for r in records):
            if time.monotonic() > deadline:
                raise GdbTimeout(f"gdb did not answer {command!r} within {timeout:g} s")
            records += self.gdb.get_gdb_response(timeout_sec=0.2, raise_error_on_timeout=False)
        result = next(r for r in records if r["type"] == "result")
        if result["message"] == "error":
            raise GdbError(f"gdb: {command}: {result['payload'].get('msg')}")
        self._pending = [r for r in records if r["type"] == "notify" and
                         r["message"] == "stopped"]
        return records

    def console(self, command: str, timeout: float = 10.0) -> str:
        """A gdb CLI command (also the extension's `info p4pmu`, `p4pmu ...`); its output."""
        quoted = command.replace("\\", "\\\\").replace('"', '\\"')
        records = self._mi(f'-interpreter-exec console "{quoted}"', timeout)
        return "".join(r["payload"] for r in records  # ("target": monitor's answers)
                       if r["type"] in ("console", "output", "target") and
                       isinstance(r["payload"], str))

    def _wait_stop(self, timeout: float, what: str) -> Stop:
        deadline = time.monotonic() + timeout
        records: list[dict] = list(getattr(self, "_pending", []))
        self._pending = []
        while True:
            stopped = next((r for r in records if r["type"] == "notify" and
                            r["message"] == "stopped"), None)
            if stopped is not None:
                return self._stop_of(stopped["payload"] or {}, records)
            if time.monotonic() > deadline:
                self.interrupt()
                raise GdbTimeout(f"{what}: the guest did not stop within {timeout:g} s "
                                 f"(interrupted it)")
            records += self.gdb.get_gdb_response(timeout_sec=0.2, raise_error_on_timeout=False)

    def _stop_of(self, payload: dict, records: list[dict]) -> Stop:
        frame = payload.get("frame") or {}
        addr = frame.get("addr")
        exit_code = payload.get("exit-code")
        stop = Stop(reason=payload.get("reason", "unknown"),
                    pc=int(addr, 16) if addr else None, signal=payload.get("signal-name"),
                    exit_code=int(exit_code, 8) if exit_code else None,
                    console=[r["payload"] for r in records if r["type"] == "console"])
        if not stop.exited and self.control is not None:
            why = self.control.request("why")["stop"]
            if why and why["seq"] > self._seen_stop:
                self._seen_stop = why["seq"]
                stop.p4pmu = why
        return stop

    def cont(self, timeout: float = 60.0) -> Stop:
        """Continue until the next stop (a breakpoint, a P4PMU breakpoint, the end)."""
        self._mi("-exec-continue")
        return self._wait_stop(timeout, "continue")

    def stepi(self, timeout: float = 10.0) -> Stop:
        self._mi("-exec-step-instruction")
        return self._wait_stop(timeout, "stepi")

    def interrupt(self) -> bool:
        """Stop a running guest (as Ctrl-C); whether gdb reported the stop (within 5 s)."""
        records = self.gdb.write("-exec-interrupt", timeout_sec=2,
                                 raise_error_on_timeout=False)
        deadline = time.monotonic() + 5
        # (the stop often comes with the command's own answer)
        while not any(r["type"] == "notify" and r["message"] == "stopped" for r in records):
            if time.monotonic() > deadline:
                return False
            records = self.gdb.get_gdb_response(timeout_sec=0.2, raise_error_on_timeout=False)
        return True

    def break_at(self, location: str) -> int:
        """A gdb breakpoint (a symbol of the ELF, or *ADDRESS); its number."""
        records = self._mi(f"-break-insert {location}")
        result = next(r for r in records if r["type"] == "result")
        return int(result["payload"]["bkpt"]["number"])

    def register(self, name: str) -> int:
        """A guest register of the selected vCPU ($rip, $rax, $eflags...)."""
        records = self._mi(f"-data-evaluate-expression ${name.lstrip('$')}")
        value = next(r for r in records if r["type"] == "result")["payload"]["value"]
        return int(value.split()[0], 0)

    # -- the PMU (the control channel) ---------------------------------------------------------

    def _ctl(self, op: str, **args) -> dict:
        if self.control is None:
            raise GdbError("the session is closed")
        return self.control.request(op, **args)

    def pmu_state(self, vcpu: int = 0) -> dict:
        """The PMU state of a vCPU (docs/gdb.md, `state`)."""
        return self._ctl("state", vcpu=vcpu)["vcpus"][0]

    def pmu_counter(self, counter: int, vcpu: int = 0) -> int:
        return self.pmu_state(vcpu)["counters"][counter]["value"]

    def pmu_read(self, reg: str, vcpu: int = 0) -> int:
        """Any PMU register by name (counters, CCCRs, ESCRs)."""
        state = self.pmu_state(vcpu)
        want = reg.upper().removeprefix("MSR_")
        for c in state["counters"]:
            if c["name"] == want:
                return c["value"]
            if c["cccr"]["name"] == want:
                return c["cccr"]["value"]
        for e in state["escrs"]:
            if e["name"] == want:
                return e["value"]
        raise GdbError(f"no PMU register {reg!r} in the state")

    def pmu_write(self, reg: str | int, value: int, vcpu: int = 0) -> dict:
        """Write a PMU register as the guest's WRMSR would (a refused write: GdbError with
        the model's reason)."""
        return self._ctl("write", reg=reg, value=value, vcpu=vcpu)

    def pmu_break(self, kind: str, counter=None, reg=None) -> int:
        """A P4PMU breakpoint: kind "overflow" (counter), "pmi" or "access" (reg)."""
        args = {"counter": counter} if counter is not None else {}
        if reg is not None:
            args["reg"] = reg
        return self._ctl("break", kind=kind, **args)["number"]

    def pmu_delete(self, number: int | None = None) -> list[int]:
        return self._ctl("delete", **({} if number is None else {"number": number}))["deleted"]

    def wait_for(self, kind: str, counter=None, reg=None, timeout: float = 60.0) -> Stop:
        """Continue until the next PMU event of `kind` (a temporary P4PMU breakpoint)."""
        number = self.pmu_break(kind, counter=counter, reg=reg)
        try:
            stop = self.cont(timeout)
        finally:
            if self.control is not None:
                self.pmu_delete(number)
        if stop.p4pmu is None:
            raise GdbError(f"the guest stopped for another reason ({stop.reason}) before the "
                           f"next {kind}")
        return stop


def default_guest(name: str = "events32") -> Path:
    """A bare-metal guest p4pmu builds (p4pmu setup), for examples and tests."""
    from p4pmu.qemu_glue.guests import build
    return build.guest_path(name)
