"""The QEMU ``-cpu`` option for a Pentium 4 model of `p4pmu.emulator.models`.

Starts from ``qemu64`` (a family-15 base with the P6/SSE2 feature set) and makes it a
GenuineIntel family 0Fh part with the model's DisplayModel, stepping and brand string:

- ``-hypervisor,-svm``: qemu64 advertises both; a Pentium 4 has neither.
- ``level=<cpuid_level>`` (3 or 5): no leaf 0Ah, so no architectural performance monitoring
  and Linux picks its NetBurst PMU driver.
- no long mode (``-lm,-nx,-syscall,-lahf-lm``, and ``-cx16``, a 64-bit-only instruction) for the
  32-bit models; no SSE3 (``-pni``) for Willamette and Northwood.
- ``xlevel``: 80000004h (brand string only) for the pre-Prescott models, 80000008h (address
  sizes) for the others; it also drops qemu64's AMD SVM leaf 8000000Ah.

Property names were checked with ``qemu-system-x86_64 -device qemu64-x86_64-cpu,help`` on
QEMU 11.1.3.
"""
from __future__ import annotations

from p4pmu.emulator.models import CpuModel, get_model

BASE_CPU = "qemu64"
_LONG_MODE_FLAGS = ("lm", "nx", "syscall", "lahf-lm", "cx16")


def qemu_escape(value: str) -> str:
    """Escape a value for QEMU's comma-separated option syntax (``,`` -> ``,,``)."""
    return value.replace(",", ",,")


def cpu_properties(model: CpuModel) -> list[tuple[str, str | None]]:
    """The ordered (name, value) pairs after the base CPU name; value None means a ``-flag``
    (feature removed).  Values are not escaped."""
    props: list[tuple[str, str | None]] = [
        ("vendor", "GenuineIntel"),
        ("family", "15"),
        ("model", str(model.model)),
        ("stepping", str(model.stepping)),
        ("model-id", model.brand),
        ("level", str(model.cpuid_level)),
        ("xlevel", hex(0x80000008 if (model.long_mode or model.sse3) else 0x80000004)),
    ]
    removed = ["hypervisor", "svm"]
    if not model.long_mode:
        removed += _LONG_MODE_FLAGS
    if not model.sse3:
        removed.append("pni")
    props += [(f, None) for f in removed]
    return props


def cpu_option(model: CpuModel | str, stepping: int | None = None) -> str:
    """The value of QEMU's ``-cpu`` for a model (a CpuModel or a key like "0F_04")."""
    if isinstance(model, str):
        model = get_model(model, stepping)
    elif stepping is not None:
        model = model.with_stepping(stepping)
    if model.cpuid_level > 5:
        # leaf 0Ah would advertise architectural performance monitoring
        raise ValueError(f"{model.key}: cpuid_level {model.cpuid_level} > 5 would expose "
                         "CPUID leaf 0Ah (architectural perfmon), which a Pentium 4 lacks")
    parts = [BASE_CPU]
    for name, value in cpu_properties(model):
        parts.append(f"-{name}" if value is None else f"{name}={qemu_escape(value)}")
    return ",".join(parts)


def cpu_args(model: CpuModel | str, stepping: int | None = None) -> list[str]:
    return ["-cpu", cpu_option(model, stepping)]
