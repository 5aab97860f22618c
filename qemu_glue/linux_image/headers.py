"""The guest kernel's headers, for building out-of-tree modules (`p4pmu module build`).

Debian's headers of a pinned kernel are three packages of the same version: the flavour's
``linux-headers-<abi>-<flavour>`` (its .config, Module.symvers, generated headers), the
``linux-headers-<abi>-common`` tree it includes, and ``linux-kbuild-<major>`` (Kbuild's
programs: modpost, fixdep, ...).  They are downloaded through a private apt configuration
(as the image's packages, checked against Debian's signed index; its own archive folder) and
unpacked into ``$XDG_CACHE_HOME/p4pmu/headers-<version>-<arch>/``; the flavour's Makefile,
which includes the common tree by its absolute /usr/src path, is pointed at the unpacked
copy.  The headers' own compiler dependency (``linux-compiler-gcc-10-x86`` for 5.10) is not
taken: modules build with the host's gcc (`module_build`), which Kbuild accepts; the
message says which compiler built the kernel.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

from p4pmu.qemu_glue.linux_image.errors import ImageError
from p4pmu.qemu_glue.linux_image.packages import (
    DebPackage,
    apt_error,
    download_packages,
    parse_records,
)
from p4pmu.qemu_glue.linux_image.pins import KernelPin, pin_for
from p4pmu.qemu_glue.provision import (
    AptEnv,
    Progress,
    cache_lock,
    cache_root,
    check_tools,
    safe_wipe,
)

_FORMAT = 1


def headers_dir(pin: KernelPin) -> Path:
    return cache_root() / f"headers-{pin.version.split(':', 1)[-1]}-{pin.arch}"


def kbuild_dir(pin: KernelPin) -> Path:
    """The folder `make -C` takes (the flavour's headers)."""
    return headers_dir(pin) / "usr" / "src" / f"linux-headers-{pin.release}"


def ensure_headers(arch: str, kernel: str, progress: bool = True) -> Path:
    """The guest kernel's headers (kbuild_dir), downloaded and unpacked on first use."""
    pin = pin_for(arch, kernel)
    pr = Progress(progress)
    vdir = headers_dir(pin)
    if _stamped(vdir, pin):
        return kbuild_dir(pin)
    check_tools()
    with cache_lock(cache_root() / ".headers.lock", pr):
        if not _stamped(vdir, pin):
            _build(pin, vdir, pr)
    return kbuild_dir(pin)


def _stamped(vdir: Path, pin: KernelPin) -> bool:
    try:
        st = json.loads((vdir / "stamp").read_text())
    except (OSError, ValueError):
        return False
    return st.get("format") == _FORMAT and st.get("release") == pin.release and \
        kbuild_dir(pin).is_dir()


def _build(pin: KernelPin, vdir: Path, pr: Progress) -> None:
    t0 = time.monotonic()
    if vdir.exists():
        safe_wipe(vdir, prefix="headers-", what="kernel headers", error=ImageError)
    pr.say(f"downloading the {pin.release} kernel's headers (Debian {pin.debian}) into {vdir}")
    apt = AptEnv(cache_root() / f"apt-{pin.codename}-{pin.arch}-headers", pin.arch, pin.suites)
    apt.prepare()
    rc, out = apt.run(["apt-get", "-q", "update"])
    if rc != 0 or re.search(r"^(E:|W: Failed to fetch|Err:)", out, flags=re.M):
        raise apt_error("apt-get update", rc, out, pin)
    pkgs = _resolve(apt, pin)
    download_packages(apt, pkgs, pin, pr)
    vdir.mkdir(parents=True)
    for p in pkgs:
        r = subprocess.run(["dpkg-deb", "-x", str(apt.archives / p.filename), str(vdir)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise ImageError(f"cannot unpack {p.filename}: {r.stderr.strip()}")
    _point_makefile_here(pin, vdir)
    (vdir / "stamp").write_text(json.dumps({
        "format": _FORMAT, "release": pin.release, "version": pin.version,
        "packages": [f"{p.name}={p.version}" for p in pkgs]}, indent=1) + "\n")
    pr.say(f"kernel headers for {pin.release} ready in {time.monotonic() - t0:.1f} s")


def _resolve(apt: AptEnv, pin: KernelPin) -> list[DebPackage]:
    """The flavour's headers package and the linux-* packages it depends on (no compiler)."""
    want = [f"linux-headers-{pin.release}"]
    recs: dict = {}
    while want:
        rc, out = apt.run(["apt-cache", "show", *(f"{n}={pin.version}" for n in want)])
        if rc != 0:
            raise apt_error("apt-cache show (the kernel headers)", rc, out, pin)
        found = parse_records(out)
        recs.update(found)
        deps = [alts[0].split()[0] for r in found.values()
                for alts in [d.strip().split("|") for d in r.get("Depends", "").split(",")]
                if alts[0].strip()]
        want = [d for d in deps if d.startswith("linux-") and not d.startswith("linux-compiler")
                and d not in recs]
    return [DebPackage(n, r["Version"], os.path.basename(r["Filename"]), int(r["Size"]),
                       r["SHA256"]) for n, r in recs.items()]


def _point_makefile_here(pin: KernelPin, vdir: Path) -> None:
    mk = kbuild_dir(pin) / "Makefile"
    text = mk.read_text()
    fixed = text.replace("include /usr/src/", f"include {vdir}/usr/src/")
    if fixed == text:
        raise ImageError(f"{mk}: no `include /usr/src/...` to point at the unpacked headers "
                         "(the headers package's layout changed?)")
    mk.write_text(fixed)


def kernel_compiler(pin: KernelPin) -> str:
    """The compiler that built the kernel (the headers' CONFIG_CC_VERSION_TEXT)."""
    cfg = kbuild_dir(pin) / ".config"
    m = re.search(r'^CONFIG_CC_VERSION_TEXT="([^"]*)"', cfg.read_text(), flags=re.M) \
        if cfg.is_file() else None
    return m.group(1) if m else "unknown"

