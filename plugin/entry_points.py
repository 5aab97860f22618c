"""The Python functions the C plugin calls inside QEMU (p4pmu_plugin.h, EMBEDDING API).

cffi's embedding init code (plugin/build.py, BOOTSTRAP) defines only ``p4pmu_py_init``: it
puts the site directories of the ``pypath=`` option on sys.path, imports this module and
calls `install`, which makes the one `bridge.Bridge` and registers every other entry point
with ``ffi.def_extern``.  Each entry point delegates to the bridge.  An exception of an access
is never silent: the bridge's ``*_failed`` method reports it (once per place, with its
traceback, on stderr and in the log), counts it for the summary at QEMU's exit, and
completes the access (plugin/bridge.py's docstring says how).  cffi's onerror handler
(`EntryPoints.onerror`) is the last resort, for an error outside those (the fallbacks
themselves, exit).

``out`` arguments are ``uint64_t *`` from C; anything indexable works (the tests pass lists).
"""
from __future__ import annotations

import os
import sys
import traceback

from p4pmu.plugin import LOADED_FILE_ENV
from p4pmu.plugin import bridge as bridge_mod


class EntryPoints:
    """The entry points of one plugin instance, around its bridge."""

    def __init__(self, bridge, ffi=None):
        self.bridge = bridge
        self.ffi = ffi

    # -- the accesses: (status, value) through out[0] --------------------------------------

    @staticmethod
    def _read(out, serve, failed):
        """A read access: `serve()`, or `failed(exc_info)` when it raised; the value to
        out[0], the status returned."""
        try:
            status, value = serve()
        except Exception:
            status, value = failed(sys.exc_info())
        out[0] = value
        return status

    def rdmsr(self, vcpu, msr, out):
        b = self.bridge
        return self._read(out, lambda: b.rdmsr(vcpu, msr),
                          lambda exc: b.rdmsr_failed(vcpu, msr, exc))

    def wrmsr(self, vcpu, msr, value):
        try:
            return self.bridge.wrmsr(vcpu, msr, value)
        except Exception:
            return self.bridge.wrmsr_failed(vcpu, msr, value, sys.exc_info())

    def rdpmc(self, vcpu, ecx, out):
        b = self.bridge
        return self._read(out, lambda: b.rdpmc(vcpu, ecx),
                          lambda exc: b.rdpmc_failed(vcpu, ecx, exc))

    def misc_enable(self, vcpu, qemu_value, out):
        b = self.bridge
        return self._read(out, lambda: b.misc_enable(vcpu, qemu_value),
                          lambda exc: b.misc_enable_failed(vcpu, qemu_value, exc))

    # -- what the C side tells the model ----------------------------------------------------

    def note(self, vcpu, message):
        try:
            self.bridge.note(vcpu, self._text(message))
        except Exception:
            return self.bridge.call_failed("note", vcpu, sys.exc_info())
        return 1

    def counter_rewritten(self, vcpu, msr, first, second):
        try:
            self.bridge.counter_rewritten(vcpu, msr, first, second)
        except Exception:
            return self.bridge.call_failed("counter rewritten", vcpu, sys.exc_info())
        return 1

    def deadline(self, vcpu):
        try:
            return self.bridge.deadline(vcpu)
        except Exception:
            return self.bridge.deadline_failed(vcpu, sys.exc_info())

    def exit(self):
        self.bridge.close()

    # -- plumbing -----------------------------------------------------------------------------

    def _text(self, message) -> str:
        """A C string (char *) or, from tests, a Python str or bytes."""
        if isinstance(message, str):
            return message
        raw = message if isinstance(message, bytes) else self.ffi.string(message)
        return raw.decode("utf-8", "replace")

    def onerror(self, where: str):
        """cffi's last-resort handler for `where`: recorded by the bridge, and the call returns
        0 ("not handled": what QEMU does by itself)."""
        def handler(exc, value, tb):
            try:
                self.bridge.errors.record(where, where, (exc, value, tb), "left to QEMU")
            except BaseException:
                report_error(where, exc, value, tb)
            return None
        return handler


# (C name, what an error message calls it, EntryPoints method): every entry point but
# p4pmu_py_init, which the bootstrap defines
ENTRY_POINTS = (
    ("p4pmu_py_rdmsr", "RDMSR", "rdmsr"),
    ("p4pmu_py_wrmsr", "WRMSR", "wrmsr"),
    ("p4pmu_py_rdpmc", "RDPMC", "rdpmc"),
    ("p4pmu_py_misc_enable", "RDMSR IA32_MISC_ENABLE", "misc_enable"),
    ("p4pmu_py_note", "note", "note"),
    ("p4pmu_py_counter_rewritten", "counter rewritten", "counter_rewritten"),
    ("p4pmu_py_deadline", "deadline", "deadline"),
    ("p4pmu_py_exit", "exit", "exit"),
)


def report_error(where: str, exc, value, tb) -> None:
    """An error with no bridge to record it: on stderr."""
    try:
        text = "".join(traceback.format_exception(exc, value, tb))
        sys.stderr.write(f"p4pmu: Python error in {where} (left to QEMU):\n{text}")
        sys.stderr.flush()
    except BaseException:
        pass


def install(ffi, lib, args: list[str], smp_vcpus: int, max_vcpus: int) -> int:
    """Make the bridge from the plugin's options and register the entry points; 1 on
    success, 0 (the reason on stderr) when the plugin must not load."""
    try:
        b = bridge_mod.Bridge.from_args(args, smp_vcpus, max_vcpus, native=(ffi, lib))
    except bridge_mod.OptionError as e:
        sys.stderr.write(f"p4pmu: {e}\n")
        return 0
    points = EntryPoints(b, ffi)
    for c_name, where, method in ENTRY_POINTS:
        ffi.def_extern(name=c_name, onerror=points.onerror(where))(getattr(points, method))
    _say_loaded()
    return 1


def _say_loaded() -> None:
    path = os.environ.get(LOADED_FILE_ENV)
    if path:
        try:
            with open(path, "w") as f:
                f.write("loaded\n")
        except OSError as e:
            sys.stderr.write(f"p4pmu: warning: cannot write {LOADED_FILE_ENV}={path}: {e}\n")
