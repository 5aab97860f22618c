"""The p4pmu gdb extension: the emulated Pentium 4 PMU from inside gdb.

One job: give a gdb user the PMU of a QEMU started by `p4pmu qemu --gdb` or `p4pmu linux
--gdb`, through the plugin's control channel (JSON lines over a Unix socket, docs/gdb.md):
its counters, CCCRs and ESCRs decoded (`info p4pmu`), register writes (`p4pmu set`), PMU
breakpoints that stop the guest on an overflow, a PMI or a register access (`p4pmu break`),
the access trace switched on and off (`p4pmu trace`), and convenience functions for
expressions and breakpoint conditions ($p4pmu_counter, $p4pmu_reg, $p4pmu_ovf).

Loading: `p4pmu gdb` starts gdb with it loaded, connected and attached to the session's
gdbstub.  In a gdb of your own:

    (gdb) source /path/to/qemu_glue/gdb_extension.py     (`p4pmu info` prints the path)
    (gdb) p4pmu connect /path/to/control.sock            (or: set p4pmu socket PATH)
    (gdb) target remote :1234
    (gdb) help p4pmu

The socket's default is the environment variable P4PMU_CONTROL.  This file runs inside the
user's gdb (gdb 13's embedded Python 3.11 on Debian bookworm): it uses the standard library
and gdb's Python API only, never the rest of p4pmu.  gdb's `monitor` commands (QEMU's
monitor) are left alone.
"""
from __future__ import annotations

import json
import os
import socket
import time

import gdb

PROTOCOL_VERSION = 1  # the `hello` answer's `version` this extension speaks (docs/gdb.md)
CONNECT_TIMEOUT_S = 3.0
ANSWER_TIMEOUT_S = 5.0  # a `state` brings every vCPU's counting up to date first
COUNTER_BITS = 40  # SDM Vol. 3B 18.15.2: the NetBurst counters are 40 bits wide
WRMSR_MASK = (1 << 64) - 1  # EDX:EAX
NOT_CONNECTED = ("p4pmu: not connected to a control channel: `p4pmu connect [PATH]` or "
                 "`set p4pmu socket PATH` (the socket of `p4pmu qemu --gdb` or `p4pmu linux "
                 "--gdb`; `p4pmu gdb` starts gdb connected)")
LVT_DELIVERY_MODES = {0: "fixed", 2: "SMI", 4: "NMI", 5: "INIT", 7: "ExtINT"}  # SDM 10.5.1


# --------------------------------------------------------------------------------------------
# The control channel (docs/gdb.md, "The control channel")


class ControlChannel:
    """One connection to the plugin's control socket: a request line out, its answer line
    back.  Every failure is a gdb.GdbError that says what to do."""

    def __init__(self) -> None:
        self.sock: socket.socket | None = None
        self.path: str | None = None
        self.hello: dict | None = None
        self._received = b""
        self._next_id = 1

    @property
    def connected(self) -> bool:
        return self.sock is not None

    def connect(self, path: str) -> dict:
        """Connect to the socket at `path` and return its `hello` answer."""
        self.close()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(CONNECT_TIMEOUT_S)
        try:
            sock.connect(path)
        except OSError as e:
            sock.close()
            raise gdb.GdbError(_connect_failure(path, e)) from None
        self.sock, self.path, self._received = sock, path, b""
        try:
            self.hello = self.request("hello")
        except gdb.GdbError:
            self.close()
            raise
        return self.hello

    def close(self) -> None:
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
        self.sock, self.hello = None, None

    def request(self, op: str, **arguments) -> dict:
        """Send {"op": op, ...arguments} and return the answer; `ok: false` raises its
        `error`."""
        if self.sock is None:
            raise gdb.GdbError(NOT_CONNECTED)
        ident = self._next_id
        self._next_id += 1
        line = json.dumps({"id": ident, "op": op, **arguments}) + "\n"
        try:
            self.sock.sendall(line.encode())
            answer = self._answer_to(ident)
        except TimeoutError:
            raise gdb.GdbError(f"p4pmu: no answer to `{op}` from {self.path} within "
                               f"{ANSWER_TIMEOUT_S:g} s (is QEMU stuck?)") from None
        except ValueError as e:
            path = self.path
            self.close()
            raise gdb.GdbError(f"p4pmu: {path} answered `{op}` with something that is not "
                               f"a control-channel answer ({e}); disconnected") from None
        except OSError as e:
            path = self.path
            self.close()
            raise gdb.GdbError(f"p4pmu: the control channel {path} is gone ({_reason(e)}); "
                               "has QEMU exited? `p4pmu connect` once it runs "
                               "again") from None
        if not answer.get("ok"):
            raise gdb.GdbError(f"p4pmu: {answer.get('error') or f'`{op}` failed'}")
        return answer

    def _answer_to(self, ident: int) -> dict:
        """The next answer line carrying `ident` (or a null id: a request the server could
        not read); the late answers of requests that timed out are skipped."""
        deadline = time.monotonic() + ANSWER_TIMEOUT_S
        while True:
            line = self._read_line(deadline)
            answer = json.loads(line)
            if not isinstance(answer, dict):
                raise ValueError(f"not a JSON object: {line[:80]!r}")
            if answer.get("id") in (ident, None):
                return answer

    def _read_line(self, deadline: float) -> bytes:
        while b"\n" not in self._received:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            self.sock.settimeout(remaining)
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionResetError("QEMU closed the connection")
            self._received += chunk
        line, self._received = self._received.split(b"\n", 1)
        return line


def number(value) -> int:
    """An integer field of an answer: a JSON number, or a string such as "0x364"."""
    return value if isinstance(value, int) else int(str(value), 0)


def _reason(e: BaseException) -> str:
    return getattr(e, "strerror", None) or str(e) or type(e).__name__


def _connect_failure(path: str, e: OSError) -> str:
    if isinstance(e, FileNotFoundError):
        return (f"p4pmu: no control socket at {path}: is `p4pmu qemu --gdb` or `p4pmu linux "
                "--gdb` running? (`p4pmu gdb` finds the running session)")
    if isinstance(e, ConnectionRefusedError):
        return f"p4pmu: nothing serves {path} any more (its QEMU has exited)"
    if isinstance(e, PermissionError):
        return (f"p4pmu: {path}: permission denied (the channel serves only the user who "
                "started QEMU)")
    return f"p4pmu: cannot connect to {path}: {_reason(e)}"


# --------------------------------------------------------------------------------------------
# What the user reads: tables and lines from the channel's answers


def _table(headers: list[str], rows: list[list[str]], right: tuple[int, ...] = ()) -> str:
    """Columns padded to their widest cell (`right`: right-aligned); the last one unpadded."""
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]
    last = len(headers) - 1
    lines = []
    for row in [headers, *rows]:
        cells = [c.rjust(w) if i in right else c if i == last else c.ljust(w)
                 for i, (c, w) in enumerate(zip(row, widths))]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines) + "\n"


def _decoded(text: str | None) -> str:
    """The decoded part of a register's `text` ("NAME = 0x...: decoded", emulator/decode.py
    describe)."""
    if not text:
        return ""
    head, sep, rest = text.partition(": ")
    return rest if sep and " = " in head else text


def _register_text(register: dict) -> str:
    """A CCCR's or ESCR's value decoded; `-` for 0 (nothing programmed)."""
    return _decoded(register.get("text")) if number(register.get("value") or 0) else "-"


def _yes(flag) -> str:
    return "yes" if flag else "-"


def _vcpu_heading(vcpu: dict) -> str:
    return (f"vCPU {vcpu['vcpu']} (core {vcpu.get('core', '?')}, logical processor "
            f"{vcpu.get('lp', '?')})\n")


def describe_hello(hello: dict) -> str:
    """What a `hello` answer says: the CPU model, the vCPUs and QEMU's process id."""
    model = f"model {hello.get('model', '?')}"
    if hello.get("model_name"):
        model += f" ({hello['model_name']})"
    vcpus = hello.get("vcpus", "?")
    threads = ", 2 logical processors per core" if hello.get("threads") == 2 else ""
    return (f"{model}, {vcpus} vCPU{'' if vcpus == 1 else 's'}{threads}, "
            f"QEMU pid {hello.get('pid', '?')}")


def format_counters(vcpu: dict) -> str:
    """The 18 counters: value, OVF, counting, cascade, the ESCR's event and the CCCR."""
    rows = []
    for c in vcpu["counters"]:
        cccr, escr = c.get("cccr") or {}, c.get("escr") or {}
        value = number(c["value"])
        rows.append([str(c["n"]), c["name"], f"{value:#012x}", str(value), _yes(c.get("ovf")),
                     _yes(c.get("counting")), _yes(c.get("cascade")),
                     escr.get("event") or "-", _register_text(cccr)])
    return _table(["#", "counter", "value (hex)", "value (dec)", "OVF", "counting",
                   "cascade", "ESCR event", "CCCR"], rows, right=(0, 3))


def format_cccrs(vcpu: dict) -> str:
    rows = []
    for c in vcpu["counters"]:
        cccr = c.get("cccr") or {}
        rows.append([str(c["n"]), cccr.get("name", "?"), f"{number(cccr.get('msr', 0)):#x}",
                     f"{number(cccr.get('value', 0)):#010x}", _register_text(cccr)])
    return _table(["#", "CCCR", "MSR", "value", "decoded"], rows, right=(0,))


def format_escrs(vcpu: dict, every: bool) -> str:
    """The ESCRs (with `every` false: those with a non-zero value)."""
    escrs = [e for e in vcpu["escrs"] if every or number(e["value"])]
    if not escrs:
        return "All ESCRs are 0 (`info p4pmu escr all` lists them).\n" if not every else ""
    rows = [[e["name"], f"{number(e['msr']):#x}", f"{number(e['value']):#010x}",
             e.get("event") or "-", _register_text(e)] for e in escrs]
    return _table(["ESCR", "MSR", "value", "event", "decoded"], rows)


def format_lvt(vcpu: dict) -> str:
    """The local APIC's LVT performance-counter entry (APIC + 340h; SDM Vol. 3A 10.5.1)."""
    lvt = vcpu.get("lvt")
    pending = "PMI request: " + ("asserted (pending)" if vcpu.get("pmi_pending")
                                 else "not asserted")
    if lvt is None:
        return f"LVT performance-counter entry: unknown (no local APIC read)\n{pending}\n"
    lvt = number(lvt)
    mode = (lvt >> 8) & 7
    vector = f"{lvt & 0xff:#04x}" + (" (ignored: NMI)" if mode == 4 else "")
    return (f"LVT performance-counter entry (APIC + 340h) = {lvt:#x}: vector {vector}, "
            f"delivery mode {mode} ({LVT_DELIVERY_MODES.get(mode, 'reserved')}), "
            f"{'masked' if lvt >> 16 & 1 else 'not masked'}\n{pending}\n")


def format_findings(findings: list) -> str:
    if not findings:
        return "Checker: no findings.\n"
    return "Checker findings:\n" + "".join(f"  {f}\n" for f in findings)


def _breakpoint_target(b: dict) -> str:
    if b.get("kind") == "overflow":
        return "any counter" if b.get("counter") is None else f"counter {b['counter']}"
    if b.get("kind") == "access":
        reg = b.get("reg")
        return "any PMU register" if reg is None else (
            f"{reg:#x}" if isinstance(reg, int) else str(reg))
    return "any PMI" if b.get("kind") == "pmi" else "-"


def format_breakpoints(breaks: list) -> str:
    if not breaks:
        return "No P4PMU breakpoints.\n"
    rows = [[str(b["number"]), str(b.get("kind")), _breakpoint_target(b), str(b.get("hits", 0))]
            for b in breaks]
    return _table(["Num", "Kind", "What", "Hits"], rows, right=(3,))


def _stop_event(stop: dict) -> str:
    """A stop's event in words from its fields (when the server sent no `text`)."""
    where = f"on vCPU {stop.get('vcpu', '?')}"
    if stop.get("pc") is not None:
        where += f" (block at {number(stop['pc']):#x})"
    kind = stop.get("kind")
    if kind == "overflow":
        name = f" ({stop['counter_name']})" if stop.get("counter_name") else ""
        return f"counter {stop.get('counter', '?')}{name} overflowed {where}"
    if kind == "pmi":
        vector = f" (vector {number(stop['vector']):#x})" if stop.get("vector") is not None else ""
        return f"PMI delivered{vector} {where}"
    if kind == "access":
        reg = stop.get("reg") or (f"MSR {number(stop['msr']):#x}" if stop.get("msr") is not None
                                  else "a PMU register")
        value = f" = {number(stop['value']):#x}" if stop.get("value") is not None else ""
        return f"{str(stop.get('op', 'access')).upper()} of {reg}{value} {where}"
    return f"{kind or 'a stop'} {where}"


def stop_line(stop: dict) -> str:
    """`stopped by P4PMU breakpoint N: what happened` (the server's `text` when it has one)."""
    text = stop.get("text") or _stop_event(stop)
    if text.lower().startswith("stopped"):
        return text
    if text.lower().startswith("p4pmu breakpoint"):
        return f"stopped by {text}"
    who = f"P4PMU breakpoint {stop['number']}" if stop.get("number") is not None else "p4pmu"
    return f"stopped by {who}: {text}"


# --------------------------------------------------------------------------------------------
# Arguments


def _int_word(word: str) -> int | None:
    """`word` as an integer (0x364, 12), or None when it is a name."""
    try:
        return int(word, 0)
    except ValueError:
        return None


def _register_arg(word: str):
    """A register for the channel: an address as int, else the name as typed (docs/gdb.md:
    with or without MSR_)."""
    number = _int_word(word)
    return word if number is None else number


def _evaluate_int(expression: str) -> int:
    """A gdb expression's value as an integer (`-1000 & 0xffffffffff`, `$rax`)."""
    try:
        return int(gdb.parse_and_eval(expression))
    except gdb.error as e:
        raise gdb.GdbError(f"p4pmu: cannot evaluate {expression!r}: {e}") from None
    except (TypeError, ValueError, OverflowError):
        raise gdb.GdbError(f"p4pmu: {expression!r} is not an integer") from None


def _take_vcpu_option(words: list[str]) -> tuple[list[str], int | None]:
    """Remove `lp N` (or `vcpu N`) from `words`; the vCPU or None."""
    for i, w in enumerate(words):
        if w in ("lp", "vcpu"):
            if i + 1 >= len(words) or _int_word(words[i + 1]) is None:
                raise gdb.GdbError(f"p4pmu: `{w}` wants a vCPU number, e.g. `{w} 1`")
            return words[:i] + words[i + 2:], _int_word(words[i + 1])
    return words, None


# --------------------------------------------------------------------------------------------
# The extension's state


class P4pmuExtension:
    """What the extension knows: the channel, the socket setting, how many PMU breakpoints
    the server has and the last stop already reported."""

    def __init__(self, socket_default: str) -> None:
        self.channel = ControlChannel()
        self.socket_parameter = SocketParameter(self, socket_default)
        self.breakpoints = 0
        self.last_stop_seq = None
        self.auto_connect = True  # off after `p4pmu disconnect`, until a connect or a set
        self.commands: list = []  # the gdb.Command and gdb.Function objects (kept alive)

    def connect(self, path: str) -> None:
        """Connect to the socket at `path` and say what answers there."""
        path = os.path.abspath(os.path.expanduser(path))
        hello = self.channel.connect(path)
        status = self.channel.request("status")
        self.breakpoints = int(status.get("breaks", 0))
        stop = self.channel.request("why").get("stop")
        self.last_stop_seq = stop.get("seq") if stop else None  # report only later stops
        self.auto_connect = True
        if hello.get("version") != PROTOCOL_VERSION:
            gdb.write(f"p4pmu: warning: the server speaks protocol version "
                      f"{hello.get('version')}, this extension {PROTOCOL_VERSION}\n",
                      gdb.STDERR)
        gdb.write(f"p4pmu: connected to {path}: {describe_hello(hello)}\n")

    def ready_channel(self) -> ControlChannel:
        """The channel, connected: the first command after `set p4pmu socket PATH` (or
        with $P4PMU_CONTROL set) connects as `p4pmu connect` would."""
        if not self.channel.connected and self.auto_connect and self.socket_parameter.value:
            self.connect(self.socket_parameter.value)
        return self.channel

    def selected_vcpu(self) -> int:
        """The vCPU of gdb's selected thread: QEMU's gdbstub numbers its threads by CPU
        index + 1 (the thread id, the ptid's lwp), and gdb's thread N is vCPU N-1."""
        thread = gdb.selected_thread()
        if thread is None:
            return 0
        lwp = thread.ptid[1]
        count = (self.channel.hello or {}).get("vcpus")
        if 0 < lwp and (count is None or lwp <= count):
            return lwp - 1
        return thread.num - 1

    def check_vcpu(self, vcpu: int) -> int:
        """`vcpu` if the guest has it (the `hello` answer's `vcpus`)."""
        count = (self.channel.hello or {}).get("vcpus")
        if vcpu < 0 or (count is not None and vcpu >= count):
            has = f" (the guest's vCPUs: 0-{count - 1})" if count else ""
            raise gdb.GdbError(f"p4pmu: no vCPU {vcpu}{has}")
        return vcpu

    def vcpu_state(self, vcpu: int | None = None) -> dict:
        """The `state` of one vCPU (default: the selected thread's) and the findings."""
        channel = self.ready_channel()
        vcpu = self.check_vcpu(self.selected_vcpu() if vcpu is None else vcpu)
        answer = channel.request("state", vcpu=vcpu)
        states = answer.get("vcpus") or []
        state = next((s for s in states if s.get("vcpu") == vcpu), states[0] if states else None)
        if state is None:
            raise gdb.GdbError(f"p4pmu: the server sent no state for vCPU {vcpu}")
        state["findings"] = answer.get("findings") or []
        return state

    def on_stop(self, _event) -> None:
        """gdb.events.stop: say which P4PMU breakpoint stopped the guest (docs/gdb.md,
        "Stops").  Errors are printed, never raised into gdb's event loop."""
        if not self.channel.connected or self.breakpoints <= 0:
            return
        try:
            stop = self.channel.request("why").get("stop")
            if stop and stop.get("seq") != self.last_stop_seq:
                self.last_stop_seq = stop.get("seq")
                gdb.write(f"p4pmu: {stop_line(stop)}\n")
        except Exception as e:
            gdb.write(f"{e}\n" if str(e).startswith("p4pmu") else f"p4pmu: {e}\n", gdb.STDERR)

    def close(self) -> None:
        self.channel.close()


# --------------------------------------------------------------------------------------------
# Settings: set/show p4pmu socket


class SetPrefix(gdb.Command):
    """Set p4pmu options (the PMU extension's).

    set p4pmu socket PATH   the control socket `p4pmu connect` uses"""

    def __init__(self) -> None:
        super().__init__("set p4pmu", gdb.COMMAND_DATA, prefix=True)


class ShowPrefix(gdb.Command):
    """Show p4pmu options (the PMU extension's)."""

    def __init__(self) -> None:
        super().__init__("show p4pmu", gdb.COMMAND_DATA, prefix=True)

    def invoke(self, argument: str, from_tty: bool) -> None:
        if argument.strip():
            raise gdb.GdbError(f'Undefined show p4pmu command: "{argument.strip()}".  '
                               'Try "help show p4pmu".')
        gdb.execute("show p4pmu socket", from_tty)


class SocketParameter(gdb.Parameter):
    """The control socket of a p4pmu session (`p4pmu qemu --gdb`, `p4pmu linux --gdb`).

    `p4pmu connect` without an argument connects to it, and so does the first p4pmu
    command that needs the channel.  The default is the environment
    variable P4PMU_CONTROL; `p4pmu gdb` sets it to the running session's socket."""

    set_doc = "Set the p4pmu control socket."
    show_doc = "Show the p4pmu control socket."

    def __init__(self, extension: P4pmuExtension, default: str) -> None:
        super().__init__("p4pmu socket", gdb.COMMAND_DATA, gdb.PARAM_OPTIONAL_FILENAME)
        self.extension = extension
        self.value = default

    def get_set_string(self) -> str:
        self.extension.auto_connect = True
        channel = self.extension.channel
        if channel.connected and self.value and self.value != channel.path:
            return (f"Connected to {channel.path}: `p4pmu connect` connects to the new "
                    "socket.")
        return ""

    def get_show_string(self, svalue: str) -> str:
        if not svalue:
            return ("The p4pmu control socket is not set (P4PMU_CONTROL is unset; `set p4pmu "
                    "socket PATH` or `p4pmu connect PATH`).")
        channel = self.extension.channel
        state = "connected" if channel.connected and channel.path == svalue else \
            "not connected"
        return f'The p4pmu control socket is "{svalue}" ({state}).'


# --------------------------------------------------------------------------------------------
# Commands


class P4pmuCommand(gdb.Command):
    """A p4pmu command: a gdb.Command that knows the extension it belongs to."""

    def __init__(self, name: str, extension: P4pmuExtension, command_class: int,
                 prefix: bool = False) -> None:
        super().__init__(name, command_class, prefix=prefix)
        self.extension = extension

    @property
    def channel(self) -> ControlChannel:
        """The control channel, connected first when the socket is set."""
        return self.extension.ready_channel()


class P4pmuPrefix(P4pmuCommand):
    """The emulated Pentium 4 (NetBurst) PMU of a p4pmu QEMU.

    Connect with `p4pmu connect` (or start gdb with `p4pmu gdb`), stop the guest, then
    `info p4pmu` shows the counters of the selected thread's vCPU.  Convenience functions:
    $p4pmu_counter(N), $p4pmu_reg("NAME"), $p4pmu_ovf(N).  Settings: `set p4pmu socket`.
    The protocol and the stops: docs/gdb.md."""

    def __init__(self, extension: P4pmuExtension) -> None:
        super().__init__("p4pmu", extension, gdb.COMMAND_DATA, prefix=True)

    def invoke(self, argument: str, from_tty: bool) -> None:
        if argument.strip():
            raise gdb.GdbError(f'Undefined p4pmu command: "{argument.strip()}".  '
                               'Try "help p4pmu".')
        gdb.execute("help p4pmu", from_tty)


class ConnectCommand(P4pmuCommand):
    """Connect to a p4pmu control socket.

    Usage: p4pmu connect [PATH]
    Without PATH: the socket of `set p4pmu socket` (default: $P4PMU_CONTROL).  Says what
    it connected to: the CPU model, the vCPUs and QEMU's process id."""

    def __init__(self, extension: P4pmuExtension) -> None:
        super().__init__("p4pmu connect", extension, gdb.COMMAND_SUPPORT)

    def invoke(self, argument: str, from_tty: bool) -> None:
        words = gdb.string_to_argv(argument)
        if len(words) > 1:
            raise gdb.GdbError("p4pmu connect: one socket path at most")
        path = words[0] if words else self.extension.socket_parameter.value
        if not path:
            raise gdb.GdbError("p4pmu connect: which socket? `p4pmu connect PATH`, `set "
                               "p4pmu socket PATH`, or start gdb with `p4pmu gdb`")
        self.extension.connect(path)
        self.extension.socket_parameter.value = self.extension.channel.path


class DisconnectCommand(P4pmuCommand):
    """Close the connection to the p4pmu control socket.

    Usage: p4pmu disconnect
    The P4PMU breakpoints stay in the guest.  Commands no longer connect by themselves
    until `p4pmu connect` or `set p4pmu socket`."""

    def __init__(self, extension: P4pmuExtension) -> None:
        super().__init__("p4pmu disconnect", extension, gdb.COMMAND_SUPPORT)

    def invoke(self, argument: str, from_tty: bool) -> None:
        channel = self.extension.channel
        path = channel.path if channel.connected else None
        self.extension.close()
        self.extension.auto_connect = False
        gdb.write(f"p4pmu: disconnected from {path}\n" if path else "p4pmu: not connected\n")


class InfoCommand(P4pmuCommand):
    """Show the emulated PMU's registers, decoded.

    Usage: info p4pmu [counters|cccr|escr|all|breakpoints] [lp N]
      counters  (default) the 18 counters: value, OVF, counting, cascade, the event
                of the ESCR its CCCR selects, and the CCCR decoded
      cccr      every CCCR's value, decoded
      escr      the ESCRs with a non-zero value, their events, decoded (`escr all`: every
                ESCR of the model)
      all       counters, CCCRs, every ESCR, the LVT performance-counter entry, whether the
                PMI request is pending, and the programming checker's findings
      breakpoints  the P4PMU breakpoints (as `p4pmu breakpoints`)
    The vCPU is the one of gdb's selected thread (gdb thread N is vCPU N-1 under QEMU's
    gdbstub); `lp N` picks vCPU N.  The guest must be stopped."""

    VIEWS = ("counters", "cccr", "escr", "all", "breakpoints")

    def __init__(self, extension: P4pmuExtension) -> None:
        super().__init__("info p4pmu", extension, gdb.COMMAND_STATUS)

    def invoke(self, argument: str, from_tty: bool) -> None:
        words, vcpu = _take_vcpu_option(gdb.string_to_argv(argument))
        views = [self._view(w) for w in words]
        if "breakpoints" in views:
            breaks = self.channel.request("breaks")["breaks"]
            self.extension.breakpoints = len(breaks)
            gdb.write(format_breakpoints(breaks))
            return
        every = "all" in views  # with `escr`: every ESCR, not only the non-zero ones
        view = next((v for v in views if v != "all"), "all" if every else "counters")
        state = self.extension.vcpu_state(vcpu)
        gdb.write(_vcpu_heading(state))
        if view == "all":
            gdb.write(format_counters(state) + "\n" + format_cccrs(state) + "\n"
                      + format_escrs(state, every=True) + "\n" + format_lvt(state)
                      + format_findings(state["findings"]))
        else:
            show = {"counters": format_counters, "cccr": format_cccrs,
                    "escr": lambda s: format_escrs(s, every)}[view]
            gdb.write(show(state))

    def _view(self, word: str) -> str:
        matches = [v for v in self.VIEWS if v.startswith(word.lower())]
        if len(matches) != 1:
            raise gdb.GdbError(f"info p4pmu: {'ambiguous' if matches else 'unknown'} view "
                               f"{word!r} (one of: {', '.join(self.VIEWS)}; `lp N`)")
        return matches[0]

    def complete(self, text: str, word: str):
        return [v for v in (*self.VIEWS, "lp") if v.startswith(word or "")]


def _is_counter(register: str) -> bool:
    """A counter by name (IQ_COUNTER0, MSR_IQ_COUNTER0) or address (300h-311h, SDM Vol. 3B
    18.15.2)."""
    try:
        return 0x300 <= int(register, 0) <= 0x311
    except ValueError:
        return "_COUNTER" in register.upper()


class SetRegisterCommand(P4pmuCommand):
    """Write a PMU register as the guest's WRMSR would.

    Usage: p4pmu set [lp N] REGISTER VALUE
    REGISTER: a name with or without MSR_ (IQ_CCCR0, MSR_CRU_ESCR0) or an address (0x36c).
    VALUE: any gdb expression, e.g. `-1000` or `$rax`; a negative value is written as its
    two's complement in the register's width: 40 bits for a counter (so `-1000` presets it
    1000 events before overflow, as drivers write it), 64 bits (EDX:EAX) otherwise.  Writes on the
    selected thread's vCPU
    (`lp N`: vCPU N).  Prints the old and new value and the new one decoded; a value the
    hardware refuses (#GP) is not written and the reason is the error."""

    def __init__(self, extension: P4pmuExtension) -> None:
        super().__init__("p4pmu set", extension, gdb.COMMAND_DATA)

    def invoke(self, argument: str, from_tty: bool) -> None:
        vcpu = None
        words = argument.split(None, 2)
        if words and words[0] in ("lp", "vcpu"):
            _, vcpu = _take_vcpu_option(words[:2])
            argument = words[2] if len(words) > 2 else ""
        parts = argument.split(None, 1)
        if len(parts) != 2:
            raise gdb.GdbError("p4pmu set: usage: p4pmu set [lp N] REGISTER VALUE")
        value = _evaluate_int(parts[1])
        if value < 0:  # a counter's preset -N, as drivers write it: 40-bit two's complement
            value &= (1 << COUNTER_BITS) - 1 if _is_counter(parts[0]) else WRMSR_MASK
        if value > WRMSR_MASK:
            raise gdb.GdbError(f"p4pmu set: {value:#x} does not fit in 64 bits (EDX:EAX)")
        channel = self.channel  # (connected first: the vCPU check needs its `hello`)
        vcpu = self.extension.check_vcpu(self.extension.selected_vcpu() if vcpu is None
                                         else vcpu)
        answer = channel.request("write", reg=_register_arg(parts[0]), value=value, vcpu=vcpu)
        gdb.write(f"{answer.get('reg', parts[0])} (MSR {number(answer.get('msr', 0)):#x}) "
                  f"on vCPU {vcpu}: {number(answer.get('old', 0)):#x} -> "
                  f"{number(answer.get('value', value)):#x}\n")
        if answer.get("text"):
            gdb.write(f"  {_decoded(answer['text'])}\n")


class BreakPrefix(P4pmuCommand):
    """Stop the guest on a PMU event.

    Usage: p4pmu break overflow [COUNTER] | p4pmu break pmi | p4pmu break access [REGISTER]

    The guest stops before the next block it would run (gdb says `Program received signal
    SIGINT`) and the extension prints which P4PMU breakpoint stopped it; `continue` goes
    on with nothing lost.  List them with `info p4pmu breakpoints`, remove them with
    `p4pmu delete`."""

    def __init__(self, extension: P4pmuExtension) -> None:
        super().__init__("p4pmu break", extension, gdb.COMMAND_BREAKPOINTS, prefix=True)

    def invoke(self, argument: str, from_tty: bool) -> None:
        kind = f"unknown kind {argument.split()[0]!r}" if argument.strip() else "which kind?"
        raise gdb.GdbError(f"p4pmu break: {kind}: `p4pmu break overflow [COUNTER]`, `p4pmu "
                           "break pmi` or `p4pmu break access [REGISTER]`")


class BreakKindCommand(P4pmuCommand):
    """A `p4pmu break KIND` command: sends `break` with its kind and argument."""

    kind = ""
    argument_name = None  # the request's argument: "counter", "reg" or None

    def __init__(self, extension: P4pmuExtension) -> None:
        super().__init__(f"p4pmu break {self.kind}", extension, gdb.COMMAND_BREAKPOINTS)

    def invoke(self, argument: str, from_tty: bool) -> None:
        words = gdb.string_to_argv(argument)
        if len(words) > (1 if self.argument_name else 0):
            raise gdb.GdbError(f"p4pmu break {self.kind}: too many arguments")
        request = {"kind": self.kind}
        if words:
            request[self.argument_name] = _register_arg(words[0])
        number = self.channel.request("break", **request)["number"]
        self.extension.breakpoints += 1
        what = _breakpoint_target({"counter": None, "reg": None, **request})
        gdb.write(f"P4PMU breakpoint {number}: {self.describe(what)}\n")

    def describe(self, what: str) -> str:
        raise NotImplementedError


class BreakOverflowCommand(BreakKindCommand):
    """Stop when a counter overflows (its OVF flag goes from 0 to 1).

    Usage: p4pmu break overflow [COUNTER]
    COUNTER: an index 0-17 or a counter name (IQ_COUNTER0); none: any counter."""

    kind, argument_name = "overflow", "counter"

    def describe(self, what: str) -> str:
        return f"overflow of {what}"


class BreakPmiCommand(BreakKindCommand):
    """Stop when a PMI is delivered through the local APIC.

    Usage: p4pmu break pmi"""

    kind, argument_name = "pmi", None

    def describe(self, what: str) -> str:
        return "PMI delivered"


class BreakAccessCommand(BreakKindCommand):
    """Stop after the guest's RDMSR, WRMSR or RDPMC of a PMU register is served.

    Usage: p4pmu break access [REGISTER]
    REGISTER: a name with or without MSR_ (IQ_CCCR0) or an address (0x36c); none: any."""

    kind, argument_name = "access", "reg"

    def describe(self, what: str) -> str:
        return f"access to {what}"


class DeleteCommand(P4pmuCommand):
    """Delete P4PMU breakpoints.

    Usage: p4pmu delete [N...]
    Without N: every P4PMU breakpoint.  gdb's own breakpoints are not touched."""

    def __init__(self, extension: P4pmuExtension) -> None:
        super().__init__("p4pmu delete", extension, gdb.COMMAND_BREAKPOINTS)

    def invoke(self, argument: str, from_tty: bool) -> None:
        words = gdb.string_to_argv(argument)
        numbers = [_int_word(w) for w in words]
        if None in numbers:
            raise gdb.GdbError(f"p4pmu delete: not a breakpoint number: "
                               f"{words[numbers.index(None)]!r}")
        channel, deleted = self.channel, []
        try:
            for number in numbers or [None]:
                arguments = {} if number is None else {"number": number}
                deleted += channel.request("delete", **arguments).get("deleted", [])
        finally:  # (an unknown number ends the list: count what is left either way)
            self.extension.breakpoints = len(channel.request("breaks")["breaks"])
        if not deleted:
            gdb.write("No P4PMU breakpoints deleted.\n")
        else:
            gdb.write(f"Deleted P4PMU breakpoint{'s' if len(deleted) > 1 else ''} "
                      f"{', '.join(str(n) for n in deleted)}.\n")


class BreakpointsCommand(P4pmuCommand):
    """List the P4PMU breakpoints.

    Usage: p4pmu breakpoints
    Each one's number, kind, what it watches and how often it stopped the guest (the same
    table as `info p4pmu breakpoints`)."""

    def __init__(self, extension: P4pmuExtension) -> None:
        super().__init__("p4pmu breakpoints", extension, gdb.COMMAND_BREAKPOINTS)

    def invoke(self, argument: str, from_tty: bool) -> None:
        breaks = self.channel.request("breaks")["breaks"]
        self.extension.breakpoints = len(breaks)
        gdb.write(format_breakpoints(breaks))


class TraceCommand(P4pmuCommand):
    """Switch the PMU access trace on or off.

    The trace: docs/trace.md; read it with `p4pmu trace FILE` in a shell.
    Usage: p4pmu trace on [FILE]
           p4pmu trace off
    FILE: relative to gdb's working folder; default the plugin's `trace=` file, else
    p4pmu-trace.jsonl in QEMU's working folder."""

    def __init__(self, extension: P4pmuExtension) -> None:
        super().__init__("p4pmu trace", extension, gdb.COMMAND_SUPPORT)

    def invoke(self, argument: str, from_tty: bool) -> None:
        words = gdb.string_to_argv(argument)
        if not words or words[0] not in ("on", "off") or len(words) > 2 or \
                (words[0] == "off" and len(words) > 1):
            raise gdb.GdbError("p4pmu trace: usage: p4pmu trace on [FILE] | p4pmu trace off")
        arguments = {"on": words[0] == "on"}
        if len(words) == 2:
            arguments["file"] = os.path.abspath(os.path.expanduser(words[1]))
        answer = self.channel.request("trace", **arguments)
        state = "on" if answer.get("on") else "off"
        gdb.write(f"p4pmu: trace {state}" + (f" ({answer['file']})" if answer.get("file")
                                            else "") + "\n")

    def complete(self, text: str, word: str):
        if len(text.split()) <= 1 and not text.endswith(" "):
            return [w for w in ("on", "off") if w.startswith(word or "")]
        return gdb.COMPLETE_FILENAME


class WhyCommand(P4pmuCommand):
    """Say which P4PMU breakpoint last stopped the guest.

    Usage: p4pmu why
    The breakpoint's number, the event (an overflow, a PMI, a register access), the vCPU
    and the address of the block the guest stopped before."""

    def __init__(self, extension: P4pmuExtension) -> None:
        super().__init__("p4pmu why", extension, gdb.COMMAND_STATUS)

    def invoke(self, argument: str, from_tty: bool) -> None:
        stop = self.channel.request("why").get("stop")
        if not stop:
            gdb.write("p4pmu: no P4PMU breakpoint has stopped the guest yet.\n")
            return
        self.extension.last_stop_seq = stop.get("seq")
        gdb.write(f"p4pmu: {stop_line(stop)}\n")


# --------------------------------------------------------------------------------------------
# Convenience functions: $p4pmu_counter(N), $p4pmu_reg("NAME"), $p4pmu_ovf(N)


def _bare(name: str) -> str:
    name = name.strip().upper()
    return name[4:] if name.startswith("MSR_") else name


def _argument(value):
    """A function argument as an int, or as a string (a name)."""
    try:
        return int(value)
    except (gdb.error, TypeError, ValueError):
        try:
            return value.string()
        except gdb.error:
            raise gdb.GdbError(f"p4pmu: {value} is neither a number nor a string") from None


def _counter_entry(state: dict, which) -> dict:
    for c in state["counters"]:
        if c["n"] == which or (isinstance(which, str) and _bare(c["name"]) == _bare(which)):
            return c
    raise gdb.GdbError(f"p4pmu: no counter {which!r} (an index 0-17 or a name such as "
                       "IQ_COUNTER0)")


class P4pmuFunction(gdb.Function):
    """A p4pmu convenience function of one argument, answered from the vCPU's `state`."""

    def __init__(self, name: str, extension: P4pmuExtension) -> None:
        super().__init__(name)
        self.extension = extension

    def invoke(self, *args):
        if len(args) != 1:
            raise gdb.GdbError(f"${self.name}: one argument, got {len(args)}")
        return self.value(self.extension.vcpu_state(), _argument(args[0]))


class CounterFunction(P4pmuFunction):
    """$p4pmu_counter(N): counter N's value (N: 0-17 or a name) on the selected vCPU."""

    name = "p4pmu_counter"

    def __init__(self, extension: P4pmuExtension) -> None:
        super().__init__(self.name, extension)

    def value(self, state: dict, which) -> int:
        return number(_counter_entry(state, which)["value"])


class OvfFunction(P4pmuFunction):
    """$p4pmu_ovf(N): 1 if counter N's OVF flag (its CCCR's bit 31) is set, else 0."""

    name = "p4pmu_ovf"

    def __init__(self, extension: P4pmuExtension) -> None:
        super().__init__(self.name, extension)

    def value(self, state: dict, which) -> int:
        return 1 if _counter_entry(state, which).get("ovf") else 0


class RegFunction(P4pmuFunction):
    """$p4pmu_reg("NAME"): a counter's, CCCR's or ESCR's value on the selected vCPU (a name
    with or without MSR_, or an address)."""

    name = "p4pmu_reg"

    def __init__(self, extension: P4pmuExtension) -> None:
        super().__init__(self.name, extension)

    def value(self, state: dict, which) -> int:
        registers = [state["counters"], [c["cccr"] for c in state["counters"] if c.get("cccr")],
                     state["escrs"]]
        for reg in (r for group in registers for r in group):
            if number(reg.get("msr", -1)) == which or (isinstance(which, str) and
                                                       _bare(reg["name"]) == _bare(which)):
                return number(reg["value"])
        raise gdb.GdbError(f"p4pmu: no counter, CCCR or ESCR {which!r} on this model")


# --------------------------------------------------------------------------------------------
# Installation


COMMANDS = (P4pmuPrefix, ConnectCommand, DisconnectCommand, InfoCommand, SetRegisterCommand,
            BreakPrefix, BreakOverflowCommand, BreakPmiCommand, BreakAccessCommand,
            DeleteCommand, BreakpointsCommand, TraceCommand, WhyCommand,
            CounterFunction, OvfFunction, RegFunction)


def install(socket_default: str) -> P4pmuExtension:
    """Register the commands, the setting, the functions and the stop handler."""
    SetPrefix()
    ShowPrefix()
    extension = P4pmuExtension(socket_default)
    extension.commands = [make(extension) for make in COMMANDS]
    gdb.events.stop.connect(extension.on_stop)
    return extension


def uninstall(extension: P4pmuExtension) -> None:
    """Undo what `install` did that re-registering would not replace (a second `source`)."""
    gdb.events.stop.disconnect(extension.on_stop)
    extension.close()


def _reload() -> P4pmuExtension:
    """Install, replacing an extension loaded before by this file (keeps its socket)."""
    previous = globals().get("_p4pmu_loaded")
    socket_default = os.environ.get("P4PMU_CONTROL", "")
    if previous is not None:
        socket_default = previous.socket_parameter.value or socket_default
        uninstall(previous)
    return install(socket_default)


_p4pmu_loaded = _reload()
