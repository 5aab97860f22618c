"""The control channel inside QEMU (docs/gdb.md): a Unix socket, served on its own thread, through
which gdb (qemu_glue/gdb_extension.py) and scripts read and write the PMU state of every
logical processor, set breakpoints on PMU events and learn why the guest stopped.

The C half (plugin/control.c) checks the breakpoints on the vCPU threads, holds a vCPU at a
block entry until QEMU stops it, and tells which vCPUs are parked; this thread asks QEMU's
monitor to stop the guest (QMP "stop"), and reads or writes PMU state only between
`p4c_control_enter` and `p4c_control_leave`, while every vCPU is parked.

Robustness: a request line is at most MAX_REQUEST bytes (longer: one error answer, the rest of
the line is dropped); anything that is not a valid request gets an error answer; a client
that goes away is forgotten; only the owner's uid is served (SO_PEERCRED, besides the
private directory the socket is made in).  Nothing here ever blocks a vCPU thread.
"""
from __future__ import annotations

import contextlib
import json
import os
import selectors
import socket
import struct
import sys
import threading
import traceback

from p4pmu.plugin import control_state as cs
from p4pmu.plugin.control_state import RequestError

MAX_REQUEST = 65536
RUNNING = ("the guest is running: stop it first (Ctrl-C in gdb, or a p4pmu breakpoint)")
KINDS = {"overflow": 1, "pmi": 2, "access": 3}
KIND_NAMES = {v: k for k, v in KINDS.items()}
OPS = {1: "rdmsr", 2: "wrmsr", 3: "rdpmc"}


class Qmp:
    """QEMU's monitor (QMP) as this channel uses it: connect once (lazily: the socket exists
    only once QEMU set up its character devices), negotiate capabilities, send "stop" without
    waiting for its answer (a stop completes only once every vCPU left translated code),
    ask whether the VM runs, and hand the events it reads to `on_event`."""

    def __init__(self, path: str | None, on_event):
        self.path = path
        self.on_event = on_event
        self.sock: socket.socket | None = None
        self._buf = b""

    def _connect(self) -> None:
        if not self.path:
            raise RequestError("no QMP socket (plugin option qmp=): the guest cannot be "
                               "stopped or asked whether it runs")
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(5)
        s.connect(self.path)
        self.sock, self._buf = s, b""
        self._message()  # the greeting
        self._send({"execute": "qmp_capabilities"})
        self._until_return()

    def _send(self, msg: dict) -> None:
        self.sock.settimeout(5)
        self.sock.sendall(json.dumps(msg).encode() + b"\n")

    def _message(self) -> dict:
        while b"\n" not in self._buf:
            data = self.sock.recv(65536)
            if not data:
                self.close()
                raise OSError("QEMU closed its QMP socket")
            self._buf += data
        line, self._buf = self._buf.split(b"\n", 1)
        return json.loads(line)

    def _until_return(self, key: str | None = None) -> dict:
        """Messages up to the answer that has `key` (events go to on_event)."""
        while True:
            m = self._message()
            if "event" in m:
                self.on_event(m)
            elif "error" in m:
                raise RequestError(f"QMP: {m['error'].get('desc')}")
            elif "return" in m and (key is None or key in (m["return"] or {})):
                return m["return"]

    def stop(self) -> None:
        if self.sock is None:
            self._connect()
        self._send({"execute": "stop"})

    def vm_stopped(self) -> bool:
        if self.sock is None:
            self._connect()
        self._send({"execute": "query-status"})
        return not self._until_return("running")["running"]

    def readable(self) -> bool:
        """The selector saw data: the complete messages are read (events handled).  False:
        QEMU closed the socket (it is closed here too)."""
        self.sock.settimeout(0)
        try:
            data = self.sock.recv(65536)
            if not data:
                self.close()
                return False
            self._buf += data
        except BlockingIOError:
            pass
        while b"\n" in self._buf:
            line, self._buf = self._buf.split(b"\n", 1)
            m = json.loads(line)
            if "event" in m:
                self.on_event(m)
        return True

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None


class _Client:
    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.buf = b""
        self.out = b""
        self.discarding = False  # the rest of a too-large line is read and dropped


class ControlServer:
    """The channel: `start` at plugin initialisation, `close` at QEMU's exit."""

    def __init__(self, bridge, path: str, qmp_path: str | None, ffi, lib):
        self.bridge, self.path, self.ffi, self.lib = bridge, path, ffi, lib
        self.ctl = lib.p4c_control()
        self.qmp = Qmp(qmp_path, self._qmp_event)
        self.sel = selectors.DefaultSelector()
        self._numbers = 0
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._listen: socket.socket | None = None
        self._wake_r = self._wake_w = -1

    # -- life ------------------------------------------------------------------------------

    def start(self) -> None:
        if os.path.exists(self.path):
            os.unlink(self.path)  # a stale socket of an earlier run
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            s.bind(self.path)
        finally:
            os.umask(old)
        s.listen(8)
        s.setblocking(False)
        self._listen = s
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.sel.register(s, selectors.EVENT_READ, "listen")
        self.sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        self.ctl.wake_fd = self._wake_w
        self.ctl.on = 1
        self._thread = threading.Thread(target=self._loop, name="p4pmu-control", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stopping = True
        self.ctl.on = 0
        self.ctl.nbreaks = 0
        try:
            os.write(self._wake_w, b"q")
        except OSError:
            pass
        if self._thread is not None:
            self._thread.join(timeout=2)
        self.qmp.close()
        try:
            os.unlink(self.path)
        except OSError:
            pass

    # -- the loop ----------------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stopping:
            for key, events in self.sel.select(timeout=1.0):
                try:
                    self._event(key, events)
                except Exception:  # never let the thread die: report and go on
                    self.bridge.errors.record_text("control channel", "control channel",
                                                   traceback.format_exc(), "dropped")
        for key in list(self.sel.get_map().values()):
            if isinstance(key.data, _Client):
                key.data.sock.close()
        if self._listen is not None:
            self._listen.close()

    def _event(self, key, events) -> None:
        if key.data == "listen":
            self._accept()
        elif key.data == "wake":
            self._wake()
        elif key.data == "qmp":
            sock = self.qmp.sock
            if not self.qmp.readable():
                self.sel.unregister(sock)
        else:
            client = key.data
            if events & selectors.EVENT_READ:
                self._read(client)
            if events & selectors.EVENT_WRITE and client.sock.fileno() >= 0:
                self._flush(client)

    def _accept(self) -> None:
        try:
            conn, _ = self._listen.accept()
        except BlockingIOError:
            return
        conn.setblocking(False)
        client = _Client(conn)
        pid, uid, gid = struct.unpack("3i", conn.getsockopt(
            socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
        if uid != os.getuid():
            try:
                conn.send(self._answer(None, error=f"uid {uid} may not use this channel "
                                                   f"(it serves uid {os.getuid()} only)"))
            except OSError:
                pass
            conn.close()
            return
        self.sel.register(conn, selectors.EVENT_READ, client)

    def _drop(self, client: _Client) -> None:
        try:
            self.sel.unregister(client.sock)
        except (KeyError, ValueError):
            pass
        client.sock.close()

    def _read(self, client: _Client) -> None:
        try:
            data = client.sock.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._drop(client)
            return
        client.buf += data
        while True:
            if client.discarding:
                if b"\n" not in client.buf:
                    client.buf = b""
                    break
                client.buf = client.buf.split(b"\n", 1)[1]
                client.discarding = False
            if b"\n" not in client.buf:
                if len(client.buf) > MAX_REQUEST:
                    self._too_large(client)
                    continue
                break
            line, client.buf = client.buf.split(b"\n", 1)
            if len(line) > MAX_REQUEST:
                client.buf = line + b"\n" + client.buf
                self._too_large(client)
                continue
            client.out += self._serve_line(line)
        self._flush(client)

    def _too_large(self, client: _Client) -> None:
        """Answer at once; the rest of the line is read and dropped (the client may still be
        sending it), then the connection serves the next line."""
        client.out += self._answer(None, error=f"request too large (a request is one line of "
                                               f"at most {MAX_REQUEST} bytes)")
        client.discarding = True

    def _flush(self, client: _Client) -> None:
        try:
            while client.out:
                n = client.sock.send(client.out)
                client.out = client.out[n:]
        except BlockingIOError:
            self.sel.modify(client.sock, selectors.EVENT_READ | selectors.EVENT_WRITE, client)
            return
        except OSError:
            return self._drop(client)
        self.sel.modify(client.sock, selectors.EVENT_READ, client)

    def _wake(self) -> None:
        """A vCPU asked for a stop (or close() for the end)."""
        try:
            data = os.read(self._wake_r, 4096)
        except BlockingIOError:
            return
        if b"s" in data and not self._stopping:
            try:
                self.qmp.stop()
                self._watch_qmp()
            except (OSError, RequestError, ValueError) as e:
                print(f"p4pmu: control channel: cannot stop the guest through QMP "
                      f"({self.qmp.path}): {e}", file=sys.stderr, flush=True)

    def _watch_qmp(self) -> None:
        if self.qmp.sock is not None and self.qmp.sock not in \
                {k.fileobj for k in self.sel.get_map().values()}:
            self.sel.register(self.qmp.sock, selectors.EVENT_READ, "qmp")

    def _qmp_event(self, message: dict) -> None:
        if message.get("event") == "STOP":  # every vCPU is out of translated code
            self.lib.p4c_control_stopped()

    def _vm_stopped(self) -> bool:
        """QMP's word (with one TCG thread, vCPUs are never parked: plugin/control.c)."""
        try:
            stopped = self.qmp.vm_stopped()
        except (OSError, ValueError, RequestError):
            return False
        self._watch_qmp()
        return stopped

    # -- requests ------------------------------------------------------------------------------

    @staticmethod
    def _answer(rid, error: str | None = None, **fields) -> bytes:
        if error is not None:
            return json.dumps({"id": rid, "ok": False, "error": error}).encode() + b"\n"
        return json.dumps({"id": rid, "ok": True, **fields}).encode() + b"\n"

    def _serve_line(self, line: bytes) -> bytes:
        rid = None
        try:
            try:
                req = json.loads(line.decode("utf-8"))
            except (UnicodeDecodeError, ValueError) as e:
                raise RequestError(f"not a JSON object: {e}") from None
            if not isinstance(req, dict):
                raise RequestError("a request is a JSON object with an \"op\"")
            rid = req.get("id")
            op = req.get("op")
            handler = getattr(self, f"op_{op}", None) if isinstance(op, str) else None
            if handler is None:
                raise RequestError(f"unknown op {op!r} (known: {', '.join(self.op_names())})")
            return self._answer(rid, **handler(req))
        except RequestError as e:
            return self._answer(rid, error=str(e))
        except Exception as e:  # a bug here: reported (plugin/errors.py), and answered
            self.bridge.errors.record_text("control channel", "control channel",
                                           traceback.format_exc(), "an error answer")
            return self._answer(rid, error=f"internal error: {type(e).__name__}: {e}")

    @classmethod
    def op_names(cls) -> list[str]:
        return sorted(n[3:] for n in dir(cls) if n.startswith("op_"))

    @contextlib.contextmanager
    def _stopped(self):
        """While no vCPU runs guest code (plugin/control.c, "Parking"), each one's counting
        brought up to date; else RequestError(RUNNING)."""
        if not self.lib.p4c_control_enter(0) and \
                not (self._vm_stopped() and self.lib.p4c_control_enter(1)):
            raise RequestError(RUNNING)
        try:
            cs.sync(self.bridge, self.lib)
            yield
        finally:
            self.lib.p4c_control_leave()

    def op_hello(self, req) -> dict:
        b = self.bridge
        return {"version": 1, "model": b.model.key, "model_name": b.model.codename,
                "vcpus": b.control_vcpus(), "threads": b.threads,
                "pid": os.getpid()}

    def op_status(self, req) -> dict:
        stopped = bool(self.lib.p4c_control_enter(0)) or \
            (self._vm_stopped() and bool(self.lib.p4c_control_enter(1)))
        if stopped:
            self.lib.p4c_control_leave()
        return {"stopped": stopped, "breaks": int(self.ctl.nbreaks)}

    def op_state(self, req) -> dict:
        vcpu = _int_arg(req, "vcpu", None)
        with self._stopped():
            return cs.state(self.bridge, vcpu, self._lvt)

    def _lvt(self, vcpu: int):
        p = self.ffi.new("uint32_t *")
        return int(p[0]) if self.lib.p4c_control_lvt(vcpu, p) else None

    def op_write(self, req) -> dict:
        vcpu = _int_arg(req, "vcpu", 0)
        msr = cs.register(self.bridge, req.get("reg"))
        value = _int_arg(req, "value", None)
        if value is None:
            raise RequestError("write needs a \"value\"")
        with self._stopped():
            return cs.write(self.bridge, vcpu, msr, value)

    def op_break(self, req) -> dict:
        kind = req.get("kind")
        if kind not in KINDS:
            raise RequestError(f"break needs a \"kind\": one of {', '.join(KINDS)}")
        if self.bridge.feeder is None:
            raise RequestError("breakpoints need the counting (plugin option count=off)")
        counter, msr = -1, 0
        if kind == "overflow" and req.get("counter") is not None:
            counter = cs.counter(self.bridge, req["counter"])
        if kind == "access" and req.get("reg") is not None:
            msr = cs.register(self.bridge, req["reg"])
        slot = next((i for i in range(len(self.ctl.brk)) if not self.ctl.brk[i].kind), None)
        if slot is None:
            raise RequestError(f"too many breakpoints (at most {len(self.ctl.brk)})")
        self._numbers += 1
        b = self.ctl.brk[slot]
        b.counter, b.msr, b.number, b.hits = counter, msr, self._numbers, 0
        b.kind = KINDS[kind]  # (last: the vCPU threads check kind first)
        self.ctl.nbreaks += 1
        return {"number": self._numbers}

    def op_delete(self, req) -> dict:
        number = _int_arg(req, "number", None)
        deleted = []
        for b in self.ctl.brk:
            if b.kind and (number is None or b.number == number):
                b.kind = 0
                self.ctl.nbreaks -= 1
                deleted.append(int(b.number))
        if number is not None and not deleted:
            raise RequestError(f"no P4PMU breakpoint number {number}")
        return {"deleted": deleted}

    def op_breaks(self, req) -> dict:
        out = []
        for b in sorted((b for b in self.ctl.brk if b.kind), key=lambda b: b.number):
            d = {"number": int(b.number), "kind": KIND_NAMES[int(b.kind)], "hits": int(b.hits)}
            if b.kind == KINDS["overflow"]:
                d["counter"] = None if b.counter < 0 else cs.counter_name(int(b.counter))
            elif b.kind == KINDS["access"]:
                d["reg"] = None if not b.msr else cs.name(int(b.msr))
            out.append(d)
        return {"breaks": out}

    def op_why(self, req) -> dict:
        s = self.ctl.stop
        if not s.seq:
            return {"stop": None}
        return {"stop": cs.describe_stop(s, KIND_NAMES, OPS)}

    def op_trace(self, req) -> dict:
        on = req.get("on")
        if not isinstance(on, bool):
            raise RequestError("trace needs \"on\": true or false")
        file = req.get("file")
        if file is not None and (not isinstance(file, str) or not file):
            raise RequestError("\"file\" is a file name")
        with self._stopped():
            try:
                return {"on": on, "file": self.bridge.set_trace(file if on else None, on)}
            except (OSError, ValueError) as e:
                raise RequestError(str(e)) from None


def _int_arg(req: dict, name: str, default):
    """An integer argument: a JSON number or a string in C syntax (0x..)."""
    v = req.get(name, default)
    if v is None or isinstance(v, int) and not isinstance(v, bool):
        return v
    if isinstance(v, str):
        try:
            return int(v.strip(), 0)
        except ValueError:
            pass
    raise RequestError(f"\"{name}\" must be an integer (a number, or a string such as "
                       f"\"0x3ff\"), not {v!r}")
