"""Build the bare-metal guests with the system gcc (no cross toolchain).

    build_all(progress=True) -> dict[name, Path]   build every guest that is out of date
    guest_path(name) -> Path                        the bootable file (QEMU -kernel)

Outputs go to <checkout>/build/guests/ (gitignored), or ~/.cache/p4pmu/guests/ outside a
checkout.  A guest is rebuilt when the hash of its
sources, the generated files, the compiler flags or the compiler version changed.  Builds are
serialised with a file lock and outputs are replaced atomically, so parallel test sessions
sharing a work tree do not trip over each other.

Needs: gcc and binutils (objcopy).  The guests include no libc header and link no library
(not even libgcc), so Debian's gcc builds the 32-bit guest without gcc-multilib (checked with
strace: no file of a lib32/multilib package is opened); check_toolchain() still tries a
32-bit and a 64-bit link first and names gcc-multilib if the 32-bit one fails.

Command line: ``python -m p4pmu.qemu_glue.guests.build [--force]``.
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from p4pmu.qemu_glue.guests import layout

GUESTS_DIR = Path(__file__).resolve().parent  # the sources (package data)


def _build_dir() -> Path:
    """<checkout>/build/guests in a source checkout (an editable install), else the cache."""
    root = GUESTS_DIR.parents[1]
    if (root / "pyproject.toml").is_file() and (root / "emulator").is_dir():
        return root / "build" / "guests"
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "p4pmu" / "guests"


BUILD_DIR = _build_dir()

COMMON_CFLAGS = (
    "-ffreestanding", "-fno-pic", "-fno-pie", "-nostdlib", "-O2", "-std=gnu11",
    "-fno-stack-protector", "-fno-asynchronous-unwind-tables", "-fno-unwind-tables",
    "-mgeneral-regs-only", "-fno-strict-aliasing", "-Wall", "-Wextra", "-Werror",
    "-Wno-unused-parameter", "-g",
)
ARCH_CFLAGS = {
    32: ("-m32", "-march=i686"),
    64: ("-m64", "-mno-red-zone", "-mcmodel=small"),
}
LDFLAGS = ("-static", "-no-pie", "-Wl,--build-id=none", "-Wl,-z,noexecstack",
           "-Wl,--no-warn-rwx-segments")


class GuestBuildError(RuntimeError):
    """The guests cannot be built; the message says what to install or what failed."""


@dataclass(frozen=True)
class GuestSpec:
    name: str
    bits: int
    sources: tuple[str, ...]  # relative to GUESTS_DIR
    ldscript: str
    flat: bool  # objcopy -O binary (multiboot a.out kludge)

    @property
    def elf(self) -> Path:
        return BUILD_DIR / f"{self.name}.elf"

    @property
    def output(self) -> Path:
        return BUILD_DIR / f"{self.name}.bin" if self.flat else self.elf


_COMMON = ("common/rt.c", "common/probe.c")
# the events guests: script interpreter, APIC/PMI/AP runtime, asm loops
_EVENTS = ("common/rt.c", "common/evrt.c", "common/evasm.S", "common/loops.S",
           "common/events.c", "common/fuzz.c")
GUESTS: dict[str, GuestSpec] = {
    g.name: g for g in (
        GuestSpec("probe32", 32, ("arch32/boot.S",) + _COMMON, "arch32/link.ld", False),
        GuestSpec("probe64", 64, ("arch64/boot.S",) + _COMMON, "arch64/link.ld", True),
        GuestSpec("events32", 32, ("arch32/boot.S",) + _EVENTS, "arch32/link.ld", False),
        GuestSpec("events64", 64, ("arch64/boot.S",) + _EVENTS, "arch64/link.ld", True),
    )
}
HEADERS = ("common/rt.h", "common/regs.h", "common/evrt.h", "common/fuzz.h")


def guest_path(name: str) -> Path:
    """The file to pass to QEMU's -kernel for guest `name` ("probe32", "probe64",
    "events32", "events64")."""
    try:
        return GUESTS[name].output
    except KeyError:
        raise KeyError(f"unknown guest {name!r}; known: {', '.join(GUESTS)}") from None


def _generated(bits: int) -> dict[str, str]:
    return {"layout.h": layout.c_header(), f"stubs{bits}.S": layout.stubs_asm(bits)}


def _write_if_changed(path: Path, text: str) -> None:
    if path.exists() and path.read_text() == text:
        return
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def _run(cmd: list[str], what: str) -> str:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    except FileNotFoundError as e:
        raise GuestBuildError(f"{what}: {cmd[0]} not found ({e})") from None
    if p.returncode != 0:
        raise GuestBuildError(f"{what} failed (exit {p.returncode}):\n  {' '.join(cmd)}\n"
                              f"{p.stdout}{p.stderr}")
    return p.stdout


_toolchain_checked: str | None = None


def check_toolchain() -> str:
    """gcc and objcopy present, and gcc can make 32-bit and 64-bit freestanding code.
    Returns gcc's version (part of the build hash)."""
    global _toolchain_checked
    if _toolchain_checked:
        return _toolchain_checked
    gcc, objcopy = shutil.which("gcc"), shutil.which("objcopy")
    if not gcc:
        raise GuestBuildError("gcc not found: the bare-metal guests are built with the system gcc "
                              "(Debian: apt-get install -y gcc gcc-multilib)")
    if not objcopy:
        raise GuestBuildError("objcopy not found (Debian: apt-get install -y binutils)")
    version = _run([gcc, "-dumpfullversion"], "gcc -dumpfullversion").strip()
    with tempfile.TemporaryDirectory() as td:
        src = Path(td, "t.c")
        src.write_text("void _start(void) { for (;;) __asm__ volatile(\"hlt\"); }\n")
        for bits in (32, 64):
            cmd = [gcc, *ARCH_CFLAGS[bits], "-ffreestanding", "-nostdlib", "-static",
                   "-no-pie", "-fno-pic", "-o", str(Path(td, f"t{bits}")), str(src)]
            p = subprocess.run(cmd, capture_output=True, text=True)
            if p.returncode != 0:
                hint = (" (32-bit support missing: Debian: apt-get install -y gcc-multilib)"
                        if bits == 32 else "")
                raise GuestBuildError(f"gcc cannot build a freestanding {bits}-bit program"
                                      f"{hint}:\n  {' '.join(cmd)}\n{p.stderr}")
    _toolchain_checked = version
    return version


def _digest(spec: GuestSpec, gen: dict[str, str], gcc_version: str) -> str:
    h = hashlib.sha256()
    h.update(f"gcc {gcc_version}\n".encode())
    h.update(" ".join(COMMON_CFLAGS + ARCH_CFLAGS[spec.bits] + LDFLAGS).encode())
    for rel in spec.sources + HEADERS + (spec.ldscript,):
        h.update(rel.encode() + b"\0" + (GUESTS_DIR / rel).read_bytes())
    for name in sorted(gen):
        h.update(name.encode() + b"\0" + gen[name].encode())
    h.update(Path(__file__).read_bytes())
    return h.hexdigest()


def _build_one(spec: GuestSpec, gcc_version: str, force: bool, progress: bool) -> Path:
    gen_dir = BUILD_DIR / f"gen{spec.bits}"
    gen_dir.mkdir(parents=True, exist_ok=True)
    gen = _generated(spec.bits)
    digest = _digest(spec, gen, gcc_version)
    stamp = BUILD_DIR / f"{spec.name}.stamp"
    if (not force and spec.output.exists() and stamp.exists()
            and stamp.read_text().strip() == digest):
        if progress:
            print(f"guests: {spec.name} up to date", flush=True)
        return spec.output
    t0 = time.monotonic()
    if progress:
        print(f"guests: building {spec.name} ({spec.bits}-bit) ...", end="", flush=True)
    for name, text in gen.items():
        _write_if_changed(gen_dir / name, text)
    tmp_elf = spec.elf.with_name(spec.elf.name + f".tmp{os.getpid()}")
    srcs = [str(GUESTS_DIR / s) for s in spec.sources] + [str(gen_dir / f"stubs{spec.bits}.S")]
    cmd = ["gcc", *COMMON_CFLAGS, *ARCH_CFLAGS[spec.bits], f"-I{gen_dir}",
           f"-I{GUESTS_DIR / 'common'}", *LDFLAGS, "-T", str(GUESTS_DIR / spec.ldscript),
           "-o", str(tmp_elf), *srcs]
    try:
        _run(cmd, f"building guest {spec.name}")
        if spec.flat:
            tmp_bin = spec.output.with_name(spec.output.name + f".tmp{os.getpid()}")
            _run(["objcopy", "-O", "binary", str(tmp_elf), str(tmp_bin)],
                 f"objcopy of guest {spec.name}")
            os.replace(tmp_bin, spec.output)
        os.replace(tmp_elf, spec.elf)
    finally:
        for p in BUILD_DIR.glob(f"{spec.name}.*.tmp{os.getpid()}"):
            p.unlink(missing_ok=True)
    stamp.write_text(digest + "\n")
    if progress:
        print(f" ok ({time.monotonic() - t0:.1f} s)", flush=True)
    return spec.output


def build_all(progress: bool = True, force: bool = False) -> dict[str, Path]:
    """Build every guest that is out of date; returns {name: bootable file}.
    Raises GuestBuildError with an actionable message when the toolchain is missing."""
    gcc_version = check_toolchain()
    BUILD_DIR.mkdir(parents=True, exist_ok=True)
    with open(BUILD_DIR / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            return {name: _build_one(spec, gcc_version, force, progress)
                    for name, spec in GUESTS.items()}
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        out = build_all(progress=True, force="--force" in argv)
    except GuestBuildError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    for name, path in out.items():
        print(f"{name}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
