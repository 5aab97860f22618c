"""The Linux guest image cache: find an image, or build it from its pin and stamp it.

An image lives in ``$XDG_CACHE_HOME/p4pmu/linux-<debian version>-<arch>/`` (``~/.cache`` by
default): ``vmlinux`` (PVH) or ``bzImage``, ``initrd.cpio``, the kernel's ``config``,
``manifest.txt`` and ``stamp`` written last (JSON: the recipe hash, the pinned and resolved
packages with their SHA-256).  A folder without a valid stamp is a half-finished build and is
redone; a stamp with another recipe hash (other pins, another /init, another builder format)
is rebuilt.
"""
from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from p4pmu.plugin.build import fingerprint
from p4pmu.qemu_glue.linux_image.errors import ImageError
from p4pmu.qemu_glue.linux_image.guest_init import INIT_SCRIPT, guest_helpers
from p4pmu.qemu_glue.linux_image.kernel import install_kernel
from p4pmu.qemu_glue.linux_image.packages import STUB_PACKAGES, DebPackage, fetch_packages
from p4pmu.qemu_glue.linux_image.pins import (
    BUSYBOX_PACKAGE,
    DEFAULT_KERNEL,
    GUEST_MODULES,
    GUEST_TOOLS,
    KernelPin,
    pin_for,
)
from p4pmu.qemu_glue.linux_image.root_tree import STUB_SONAMES, DebianTree, write_initramfs
from p4pmu.qemu_glue.provision import (
    Progress,
    cache_lock,
    cache_root,
    check_tools,
    finish_cache,
    megabytes,
    safe_wipe,
)

# Bump when the builder produces a different image from the same packages.
IMAGE_FORMAT = 2
_STAMP_FORMAT = 1
_MIN_FREE_BYTES = 300 * 1024 * 1024  # ~80 MB of packages, ~250 MB unpacked while building


def image_dir(arch: str, kernel: str = DEFAULT_KERNEL) -> Path:
    pin = pin_for(arch, kernel)
    return cache_root() / f"linux-{pin.version.split(':', 1)[-1]}-{arch}"


def recipe(arch: str, kernel: str = DEFAULT_KERNEL) -> dict:
    """Everything the image is built from, except the resolved library versions."""
    pin = pin_for(arch, kernel)
    return {
        "format": IMAGE_FORMAT,
        "arch": arch,
        "kernel": f"{pin.kernel_package}={pin.version}",
        "perf": f"{pin.perf_package}={pin.version}",
        "busybox": f"{BUSYBOX_PACKAGE}={pin.busybox_version}",
        "suites": list(pin.suites),
        "boot": pin.boot,
        "stub_packages": STUB_PACKAGES.pattern,
        "tools": [[t.package, *t.programs, *t.data] for t in GUEST_TOOLS],
        "modules": list(GUEST_MODULES),
        "stub_sonames": STUB_SONAMES.pattern,
        "init": hashlib.sha256(INIT_SCRIPT.encode()).hexdigest(),
        "helpers": hashlib.sha256(json.dumps(guest_helpers(), sort_keys=True).encode())
        .hexdigest(),
    }


def recipe_hash(arch: str, kernel: str = DEFAULT_KERNEL) -> str:
    return hashlib.sha256(json.dumps(recipe(arch, kernel), sort_keys=True).encode()) \
        .hexdigest()[:20]


@dataclass
class LinuxImage:
    arch: str
    dir: Path
    kernel: Path  # vmlinux (PVH) or bzImage
    initrd: Path  # the base initramfs (uncompressed newc cpio)
    boot: str  # "pvh" or "bzimage"
    version: str  # Debian version of the kernel and perf
    release: str  # uname -r
    pin: KernelPin | None = None
    stamp: dict = field(default_factory=dict)


def _read_stamp(vdir: Path) -> dict | None:
    try:
        data = json.loads((vdir / "stamp").read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _intact(path: Path, size, fp) -> bool:
    """`path` has the size its stamp recorded and, for stamps that record one, the same
    fingerprint (size and the hash of its first and last MB: a truncated or overwritten
    image is built again)."""
    if not path.is_file() or path.stat().st_size != size:
        return False
    return fp is None or fingerprint(path) == fp


def _image_from_stamp(pin: KernelPin, vdir: Path, st: dict) -> LinuxImage | None:
    kernel = vdir / ("vmlinux" if pin.boot == "pvh" else "bzImage")
    initrd = vdir / "initrd.cpio"
    if not (_intact(kernel, st.get("kernel_bytes"), st.get("kernel_fingerprint")) and
            _intact(initrd, st.get("initrd_bytes"), st.get("initrd_fingerprint"))):
        return None
    return LinuxImage(pin.arch, vdir, kernel, initrd, pin.boot, pin.version, pin.release, pin,
                      st)


def find_image(arch: str, kernel: str = DEFAULT_KERNEL) -> LinuxImage | None:
    """The cached image if it is complete and built from the current recipe, else None."""
    vdir = image_dir(arch, kernel)
    st = _read_stamp(vdir)
    if (not st or st.get("format") != _STAMP_FORMAT
            or st.get("recipe") != recipe_hash(arch, kernel)):
        return None
    return _image_from_stamp(pin_for(arch, kernel), vdir, st)


def image_state(arch: str, kernel: str = DEFAULT_KERNEL) -> str:
    """'complete', 'missing', 'incomplete' (no valid stamp, or a file that does not match
    it) or 'stale' (another recipe)."""
    vdir = image_dir(arch, kernel)
    if not vdir.exists():
        return "missing"
    if find_image(arch, kernel):
        return "complete"
    st = _read_stamp(vdir)
    if not st or st.get("format") != _STAMP_FORMAT:
        return "incomplete"
    return "stale" if st.get("recipe") != recipe_hash(arch, kernel) else "incomplete"


def ensure_image(arch: str = "amd64", progress: bool = True, stream=None,
                 kernel: str = DEFAULT_KERNEL) -> LinuxImage:
    """The cached image, built first when missing, half-finished or stale."""
    pin = pin_for(arch, kernel)
    img = find_image(arch, kernel)
    if img:
        return img
    pr = Progress(progress, stream)
    check_tools()
    root = cache_root()
    vdir = image_dir(arch, kernel)
    if ":" in str(vdir) or "," in str(vdir):
        raise ImageError(f"the cache path {vdir} contains ':' or ',', which QEMU's option "
                         "syntax cannot take; set XDG_CACHE_HOME to a path without them")
    try:
        root.mkdir(parents=True, exist_ok=True)
        free = shutil.disk_usage(root).free
        if free < _MIN_FREE_BYTES:
            raise ImageError(f"not enough free disk space in {root} to build the Linux guest "
                             f"image: {megabytes(free)} free, about "
                             f"{megabytes(_MIN_FREE_BYTES)} needed. Free some space or point "
                             "XDG_CACHE_HOME elsewhere")
        with cache_lock(root / f".linux-{arch}.lock", pr):
            img = find_image(arch, kernel)  # another process may have built it meanwhile
            if img:
                return img
            return _build_locked(pin, root, vdir, pr)
    except OSError as e:
        if e.errno == errno.ENOSPC:
            raise ImageError(f"the disk is full while building the Linux guest image in {vdir}: "
                             f"free about {megabytes(_MIN_FREE_BYTES)} (or set XDG_CACHE_HOME "
                             "elsewhere) and try again; the half-finished folder is redone") \
                from e
        if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise ImageError(f"cannot write the cache {root}: {e}. Make it writable or set "
                             "XDG_CACHE_HOME to a writable folder") from e
        raise


def _build_locked(pin: KernelPin, root: Path, vdir: Path, pr: Progress) -> LinuxImage:
    """Build the image of `pin` into `vdir` (under the cache lock) and stamp it."""
    t0 = time.monotonic()
    if vdir.exists():
        st = _read_stamp(vdir)
        why = ("it was built from another recipe" if st else
               "it has no completion stamp (an interrupted build)")
        pr.say(f"{vdir}: {why}: rebuilding")
        safe_wipe(vdir, prefix="linux-", what="Linux image", error=ImageError)
    pr.say(f"building the {pin.arch} Linux {pin.kernel} guest image (Debian {pin.debian}: "
           f"{pin.kernel_package} and {pin.perf_package} {pin.version}, {BUSYBOX_PACKAGE}) "
           f"into {vdir}")
    apt, pkgs = fetch_packages(pin, root / f"apt-{pin.codename}-{pin.arch}", pr)
    vdir.mkdir(parents=True)
    work = vdir / "build"
    unpack = work / "root"
    unpack.mkdir(parents=True)
    apt.unpack([p for p in pkgs if p.name != pin.kernel_package], unpack, pr, "[4/6]",
               ImageError)
    kdeb = apt.archives / next(p.filename for p in pkgs if p.name == pin.kernel_package)
    kernel_file, modules = install_kernel(kdeb, pin, work, vdir, pr)
    pr.say("[6/6] initramfs: busybox, perf, "
           f"{', '.join(os.path.basename(p) for t in GUEST_TOOLS for p in t.programs)}, their "
           "libraries, stubs for python/perl/opencsd/babeltrace, the modules")
    facts = write_initramfs(DebianTree(unpack, pin.arch), vdir / "initrd.cpio", pin, pr,
                            modules)
    shutil.rmtree(work, ignore_errors=True)
    stamp = _stamp(pin, vdir, kernel_file, facts, pkgs)
    finish_cache(vdir, stamp, apt, pkgs)
    pr.say(f"{pin.arch} Linux guest image ready in {time.monotonic() - t0:.1f} s: kernel "
           f"{megabytes(stamp['kernel_bytes'])}, initramfs {megabytes(stamp['initrd_bytes'])} "
           f"({len(facts['libraries'])} libraries, {len(facts['stubs'])} stubs) at {vdir}")
    img = find_image(pin.arch, pin.kernel)
    assert img is not None
    return img


def _stamp(pin: KernelPin, vdir: Path, kernel_file: Path, facts: dict,
           pkgs: list[DebPackage]) -> dict:
    """The stamp of a finished image: its recipe, what it was built from, what it holds."""
    return {
        "format": _STAMP_FORMAT,
        "recipe": recipe_hash(pin.arch, pin.kernel),
        "recipe_inputs": recipe(pin.arch, pin.kernel),
        "arch": pin.arch,
        "linux": pin.kernel,
        "kernel_package": pin.kernel_package,
        "version": pin.version,
        "release": pin.release,
        "boot": pin.boot,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "kernel_bytes": kernel_file.stat().st_size,
        "initrd_bytes": (vdir / "initrd.cpio").stat().st_size,
        "kernel_fingerprint": fingerprint(kernel_file),
        "initrd_fingerprint": fingerprint(vdir / "initrd.cpio"),
        "image": facts,
        "packages": [{"file": p.filename, "name": p.name, "version": p.version,
                      "size": p.size, "sha256": p.sha256} for p in pkgs],
    }
