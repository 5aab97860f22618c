"""Linux guest images for `p4pmu linux`, built from Debian's archive by package name.

An image is one pinned kernel (`PINS`: Debian 11's 5.10, the default, or Debian 12's 6.1; amd64
or 686) plus a base initramfs, cached per user under
``$XDG_CACHE_HOME/p4pmu/linux-<debian version>-<arch>/`` (``~/.cache`` by default):

- ``vmlinux`` (amd64: the uncompressed ELF cut out of the bzImage with Python's `lzma`, which
  QEMU boots through PVH and so skips the decompressor) or ``bzImage`` (i386);
- ``initrd.cpio``: an uncompressed cpio (newc) archive with busybox-static, ``perf`` from
  the perf package of the same source version as the kernel, the shared libraries perf needs,
  stub libraries in place of perf's optional scripting and UI libraries, ``/init`` and the
  helper scripts (`guest_helpers`: ``p4event``);
- ``config`` of the kernel, ``manifest.txt`` (the image's files);
- ``stamp`` written last (JSON: the recipe hash, the pinned and resolved packages with their
  SHA-256).  A folder without a valid stamp is a half-finished build and is redone; a stamp
  with another recipe hash (other pins, another /init, another builder format) is rebuilt.

Nothing is installed system-wide.  The packages are downloaded with apt under a private
configuration (`p4pmu.qemu_glue.provision._AptEnv`, the one QEMU's provisioning uses, pointed
at the pin's suites and the target architecture): apt checks the archive signatures against
the system's Debian keyring and every file against the signed index, and the files are checked
once more against the index's SHA-256.  They stay in ``<cache>/p4pmu/apt-<codename>-<arch>/
archives`` so a rebuild needs no second download.  ``dpkg-deb`` unpacks them into a scratch
folder; only the files the image needs are copied into the archive.

The libraries are found by walking DT_NEEDED from perf through the unpacked tree (pure Python,
so the i386 image can be built on any x86-64 host), then checked with the image's own loader
run on the host like ``ldd -r`` (LD_TRACE_LOADED_OBJECTS, LD_BIND_NOW, LD_WARN: every library
and every symbol must resolve inside the image) when the host can run it.  perf's optional
libraries (python, perl, slang, opencsd, babeltrace) are replaced by stub ELF libraries
written here that define exactly the symbols (and symbol versions) perf imports from them:
`perf stat`, `record`, `report --stdio`, `list` work; `perf script` with a Python or Perl
script and the TUI do not.

Guest protocol (shared with `p4pmu.qemu_glue.linux`): the per-run files are in ``/p4pmu``
(``cmd``: the shell command; ``nonce``), the command's stdout goes to ttyS1, its stderr to
ttyS2, and /init prints ``P4PMU-EXIT <nonce> <status>`` on ttyS0 (the console) after both
streams are drained, then powers off.
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import lzma
import os
import re
import shutil
import stat
import struct
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Iterable

from p4pmu.qemu_glue.provision import (DEBIAN_KEYRING, DEBIAN_MIRROR, ProvisionError, _AptEnv,
                                       _GET_RE, _Progress, _apt_failure, _check_tools,
                                       _deb_name_version, _lock, _mb, _safe_wipe, _sha256,
                                       cache_root, finish_cache)

# --------------------------------------------------------------------------------------------
# The pins: the one place that names the guest kernels (`p4pmu linux --kernel`).
#
# 5.10 (the default) is Debian 11 "bullseye"'s LTS kernel from its final point release (11.11,
# a suite that no longer changes).  Its P4 driver writes the counter's *current* period twice
# (erratum N15, inside x86_perf_event_set_period), so perf counts right from the first command.
# 6.1 is Debian 12 "bookworm"'s.  Its p4_pmu_set_period writes the *previous* period as the
# second write: the counts of a counter's first use, of a task switched out and back in and of
# multiplexed events are nonsense, on a real Pentium 4 as here (docs/linux-guest.md, "Linux
# 6.1's p4_pmu_set_period quirk").  amd64 6.1 is bookworm-security's current kernel; i386 6.1
# is the 12.x point release's: bookworm-security's i386 index could not be fetched from the
# mirror this was built against ("File has unexpected size", persistently).  To move a pin:
# `python -m p4pmu.qemu_glue.linux_image --policy --kernel K --arch A` shows what the archive
# offers.

DEBIAN_SECURITY_MIRROR = "http://deb.debian.org/debian-security"


@dataclass(frozen=True)
class KernelPin:
    kernel: str  # the --kernel choice: "5.10" or "6.1"
    arch: str  # Debian architecture of the guest: amd64 or i386
    flavour: str  # amd64 or 686
    abi: str  # "6.1.0-56": part of the package name and of `uname -r`
    version: str  # Debian version of linux-image-<abi>-<flavour> and of the perf package
    perf_package: str  # linux-perf-5.10 (bullseye), linux-perf (bookworm): same source
    busybox_version: str  # busybox-static of the same Debian release
    debian: str  # "11 bullseye", "12 bookworm": for messages and /etc/os-release
    suites: tuple[str, ...]  # apt suites to read (the -security ones live on their own mirror)
    boot: str  # "pvh": the uncompressed vmlinux through PVH; "bzimage": the bzImage as is
    set_period_quirk: bool  # the driver's second counter write installs the previous period

    @property
    def kernel_package(self) -> str:
        return f"linux-image-{self.abi}-{self.flavour}"

    @property
    def release(self) -> str:
        """`uname -r` in the guest."""
        return f"{self.abi}-{self.flavour}"

    @property
    def codename(self) -> str:
        return self.debian.split()[-1]


_BULLSEYE = ("bullseye",)
_BOOKWORM = ("bookworm", "bookworm-updates")
_BB_BULLSEYE = "1:1.30.1-6+b3"
_BB_BOOKWORM = "1:1.35.0-4+deb12u1+b1"
PINS: dict[tuple[str, str], KernelPin] = {(p.kernel, p.arch): p for p in (
    KernelPin("5.10", "amd64", "amd64", "5.10.0-32", "5.10.223-1", "linux-perf-5.10",
              _BB_BULLSEYE, "11 bullseye", _BULLSEYE, "pvh", False),
    KernelPin("5.10", "i386", "686", "5.10.0-32", "5.10.223-1", "linux-perf-5.10",
              _BB_BULLSEYE, "11 bullseye", _BULLSEYE, "bzimage", False),
    KernelPin("6.1", "amd64", "amd64", "6.1.0-56", "6.1.192-2", "linux-perf",
              _BB_BOOKWORM, "12 bookworm", _BOOKWORM + ("bookworm-security",), "pvh", True),
    KernelPin("6.1", "i386", "686", "6.1.0-50", "6.1.176-1", "linux-perf",
              _BB_BOOKWORM, "12 bookworm", _BOOKWORM, "bzimage", True),
)}
KERNELS = tuple(dict.fromkeys(k for k, _ in PINS))  # ("5.10", "6.1")
ARCHES = tuple(dict.fromkeys(a for _, a in PINS))  # ("amd64", "i386")
DEFAULT_KERNEL = "5.10"
BUSYBOX_PACKAGE = "busybox-static"

# perf's optional libraries: their packages are not downloaded, their sonames are stubbed.
STUB_PACKAGES = re.compile(r"(libpython3\.\d+|libperl5\.\d+|libslang2|libopencsd\d*|"
                           r"libbabeltrace\d*|libbabeltrace-ctf\d*|perl|python3)(:any)?")
STUB_SONAMES = re.compile(r"lib(python3\.\d+|perl|slang|opencsd(_c_api)?|babeltrace(-ctf)?)"
                          r"\.so(\.[\w.]+)?")

# Bump when the builder produces a different image from the same packages.
IMAGE_FORMAT = 1
_STAMP_FORMAT = 1
_MIN_FREE_BYTES = 300 * 1024 * 1024  # ~80 MB of packages, ~250 MB unpacked while building

# The per-run protocol between the host (linux.py) and /init.
GUEST_RUN_DIR = "/p4pmu"
GUEST_WORKDIR = "/root"
EXIT_MARKER = "P4PMU-EXIT"

_TRIPLETS = {"amd64": ("x86_64-linux-gnu", "/lib64/ld-linux-x86-64.so.2", 2, 62),
             "i386": ("i386-linux-gnu", "/lib/ld-linux.so.2", 1, 3)}


def _arch_layout(arch: str) -> tuple[str, str, int, int]:
    """(multiarch triplet, loader path, ELF class, ELF machine) of a guest architecture."""
    return _TRIPLETS[arch]


INIT_SCRIPT = r"""#!/bin/busybox sh
# /init of p4pmu's Linux guest (p4pmu.qemu_glue.linux_image).  Runs /p4pmu/cmd with
# /bin/sh -c in /root: its stdout goes to ttyS1, its stderr to ttyS2 (both raw), and once both
# are drained "P4PMU-EXIT <nonce> <status>" goes to the console (ttyS0); then power off.
[ -e /bin/sh ] || /bin/busybox --install -s
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root TERM=dumb PAGER=cat PERF_PAGER=cat LANG=C.UTF-8 TMPDIR=/tmp
say() { echo "p4pmu-init: $*" > /dev/console; }
mount -t proc -o nosuid,nodev,noexec proc /proc
mount -t sysfs -o nosuid,nodev,noexec sysfs /sys
mount -t devtmpfs -o nosuid devtmpfs /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts -o nosuid,noexec devpts /dev/pts
mount -t tmpfs -o nosuid,nodev tmpfs /dev/shm
ln -sf /proc/self/fd /dev/fd
ln -sf /proc/self/fd/0 /dev/stdin
ln -sf /proc/self/fd/1 /dev/stdout
ln -sf /proc/self/fd/2 /dev/stderr
mount -t debugfs -o nosuid,nodev,noexec debugfs /sys/kernel/debug 2>/dev/null
mount -t tracefs -o nosuid,nodev,noexec tracefs /sys/kernel/tracing 2>/dev/null
chmod 1777 /tmp
hostname p4pmu
ip link set lo up 2>/dev/null
run=/p4pmu
if [ ! -f $run/cmd ]; then
    say "no $run/cmd in the initramfs: nothing to run"
    poweroff -f
fi
nonce=$(cat $run/nonce 2>/dev/null)
stty -F /dev/ttyS1 raw -echo || say "stty ttyS1 failed"
stty -F /dev/ttyS2 raw -echo || say "stty ttyS2 failed"
mkfifo $run/.out $run/.err
cat $run/.out > /dev/ttyS1 &
opid=$!
cat $run/.err > /dev/ttyS2 &
epid=$!
cd /root
/bin/sh -c "$(cat $run/cmd)" < /dev/null > $run/.out 2> $run/.err
status=$?
wait $opid
wait $epid
echo 1 > /proc/sys/kernel/printk
printf '\n%s %s %d\n' P4PMU-EXIT "$nonce" "$status" > /dev/ttyS0
poweroff -f
"""


def guest_helpers() -> dict[str, str]:
    """Scripts the image carries besides busybox and perf: guest path -> text.  `p4event`
    prints perf's raw encoding of a NetBurst event by name (docs/events.md)."""
    from p4pmu.qemu_glue.events_cmd import guest_script
    return {"/usr/local/bin/p4event": guest_script()}


class ImageError(ProvisionError):
    """Building or finding a Linux guest image failed; the message says what to do."""


# --------------------------------------------------------------------------------------------
# Paths, state


def pin_for(arch: str, kernel: str = DEFAULT_KERNEL) -> KernelPin:
    """The pin of a guest; ImageError for an unknown architecture or kernel."""
    if arch not in ARCHES:
        raise ImageError(f"unknown guest architecture {arch!r} (known: {', '.join(ARCHES)})")
    try:
        return PINS[(kernel, arch)]
    except KeyError:
        raise ImageError(f"unknown guest kernel {kernel!r} (known: {', '.join(KERNELS)})") \
            from None


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


def _image_from_stamp(pin: KernelPin, vdir: Path, st: dict) -> LinuxImage | None:
    kernel = vdir / ("vmlinux" if pin.boot == "pvh" else "bzImage")
    initrd = vdir / "initrd.cpio"
    if not (kernel.is_file() and initrd.is_file()):
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
    """'complete', 'missing', 'incomplete' (no valid stamp) or 'stale' (another recipe)."""
    vdir = image_dir(arch, kernel)
    if not vdir.exists():
        return "missing"
    if find_image(arch, kernel):
        return "complete"
    st = _read_stamp(vdir)
    return "stale" if st and st.get("format") == _STAMP_FORMAT else "incomplete"


def ensure_image(arch: str = "amd64", progress: bool = True, stream=None,
                 kernel: str = DEFAULT_KERNEL) -> LinuxImage:
    """The cached image, built first when missing, half-finished or stale."""
    pin = pin_for(arch, kernel)
    img = find_image(arch, kernel)
    if img:
        return img
    pr = _Progress(progress, stream)
    _check_tools()
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
                             f"image: {_mb(free)} free, about {_mb(_MIN_FREE_BYTES)} needed. "
                             "Free some space or point XDG_CACHE_HOME elsewhere")
        with _lock(root / f".linux-{arch}.lock", pr):
            img = find_image(arch, kernel)  # another process may have built it meanwhile
            if img:
                return img
            return _build_locked(pin, root, vdir, pr)
    except OSError as e:
        if e.errno == errno.ENOSPC:
            raise ImageError(f"the disk is full while building the Linux guest image in {vdir}: "
                             f"free about {_mb(_MIN_FREE_BYTES)} (or set XDG_CACHE_HOME "
                             "elsewhere) and try again; the half-finished folder is redone") \
                from e
        if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise ImageError(f"cannot write the cache {root}: {e}. Make it writable or set "
                             "XDG_CACHE_HOME to a writable folder") from e
        raise


# --------------------------------------------------------------------------------------------
# apt


class _DebianApt(_AptEnv):
    """provision's private apt configuration, reading one Debian release's suites for one
    architecture."""

    def __init__(self, base: Path, arch: str, suites: Iterable[str]):
        super().__init__(base, arch)
        self.suites = tuple(suites)

    def prepare(self) -> None:
        super().prepare()
        lines = []
        for s in self.suites:
            mirror = DEBIAN_SECURITY_MIRROR if s.endswith("-security") else DEBIAN_MIRROR
            lines.append(f"deb [signed-by={DEBIAN_KEYRING}] {mirror} {s} main\n")
        (self.base / "etc/sources.list").write_text("".join(lines))

    def run_in(self, cwd: Path, args: list[str], line_cb=None) -> tuple[int, str]:
        """`run` with another working folder (`apt-get download` writes there)."""
        old = self.base
        try:
            # _AptEnv.run starts the process in self.base; the configuration file path is
            # absolute, so borrowing the attribute for the call is enough.
            object.__setattr__(self, "base", cwd)
            return super().run(args, line_cb)
        finally:
            object.__setattr__(self, "base", old)


def _apt_error(what: str, rc: int, out: str, pin: KernelPin) -> ImageError:
    e = _apt_failure(what, rc, out)
    msg = str(e)
    low = out.lower()
    if ("version '" in low and "was not found" in low) or "unable to locate package" in low \
            or "has no installation candidate" in low:
        msg = (f"{what} failed: a pinned package is no longer in Debian's {', '.join(pin.suites)} "
               f"indexes (Debian replaces kernels with every security update and point "
               f"release). Move the pin in p4pmu/qemu_glue/linux_image.py (PINS, the "
               f"({pin.kernel!r}, {pin.arch!r}) entry) to what `python -m "
               f"p4pmu.qemu_glue.linux_image --policy --kernel {pin.kernel} --arch {pin.arch}` "
               f"shows.\n"
               + "\n".join(ln for ln in out.splitlines() if ln.startswith(("E:", "W:"))))
    else:
        msg = msg.replace("QEMU_DEB_VERSION in p4pmu/qemu_glue/provision.py",
                          "the pins in p4pmu/qemu_glue/linux_image.py")
    return ImageError(msg)


def _parse_records(out: str) -> dict[str, dict[str, str]]:
    recs: dict[str, dict[str, str]] = {}
    for record in out.split("\n\n"):
        fields: dict[str, str] = {}
        key = None
        for ln in record.splitlines():
            if ln.startswith((" ", "\t")) and key:
                fields[key] += "\n" + ln
            elif ": " in ln:
                key, v = ln.split(": ", 1)
                fields[key] = v
        if "Package" in fields:
            recs.setdefault(fields["Package"], fields)
    return recs


def _dep_names(field_value: str) -> list[list[str]]:
    """'a (>= 1), b | c:any' -> [['a'], ['b', 'c']] (names only)."""
    out = []
    for clause in field_value.split(","):
        alts = []
        for alt in clause.split("|"):
            name = alt.strip().split(" ", 1)[0].split("(", 1)[0].strip()
            name = name.split(":", 1)[0]
            if name:
                alts.append(name)
        if alts:
            out.append(alts)
    return out


@dataclass
class _Pkg:
    name: str
    version: str
    filename: str
    size: int
    sha256: str
    hit: bool = False


def _resolve(apt: _DebianApt, pin: KernelPin, pr: _Progress) -> list[_Pkg]:
    """The pinned packages plus the closure of linux-perf's dependencies, without perf's
    optional libraries (stubbed) and without anything the image does not need."""
    pinned = {pin.kernel_package: pin.version, pin.perf_package: pin.version,
              BUSYBOX_PACKAGE: pin.busybox_version}
    rc, out = apt.run(["apt-cache", "show", *(f"{n}={v}" for n, v in pinned.items())])
    if rc != 0:
        raise _apt_error("apt-cache show (the pinned packages)", rc, out, pin)
    recs = _parse_records(out)
    chosen: dict[str, dict[str, str]] = {}
    for n, v in pinned.items():
        r = recs.get(n)
        if not r or r.get("Version") != v:
            raise _apt_error(f"looking up {n}={v}", 100,
                             f"E: Version '{v}' for '{n}' was not found", pin)
        chosen[n] = r
    queue = [pin.perf_package]
    seen = {pin.perf_package}
    while queue:
        batch, queue = queue, []
        wanted: list[list[str]] = []
        for n in batch:
            r = chosen[n]
            for fld in ("Pre-Depends", "Depends"):
                wanted += _dep_names(r.get(fld, ""))
        names = sorted({a for alts in wanted for a in alts if not STUB_PACKAGES.fullmatch(a)})
        names = [a for a in names if a not in chosen]
        if names:
            rc, out = apt.run(["apt-cache", "show", "--no-all-versions", *names])
            found = _parse_records(out)  # apt-cache exits non-zero for virtual names
        else:
            found = {}
        for alts in wanted:
            if any(STUB_PACKAGES.fullmatch(a) for a in alts):
                continue
            pick = next((a for a in alts if a in chosen or a in found), None)
            if pick is None:
                raise ImageError(f"cannot resolve the dependency {' | '.join(alts)} of "
                                 f"{pin.perf_package} {pin.version} in {', '.join(pin.suites)}")
            if pick not in chosen:
                chosen[pick] = found[pick]
            if pick not in seen:
                seen.add(pick)
                queue.append(pick)
    pkgs = []
    for n, r in chosen.items():
        if not re.fullmatch(r"[0-9a-f]{64}", r.get("SHA256", "")):
            raise ImageError(f"no SHA-256 for {n} {r.get('Version')} in Debian's package index: "
                             "cannot verify it")
        pkgs.append(_Pkg(n, r["Version"], os.path.basename(r["Filename"]), int(r["Size"]),
                         r["SHA256"]))
    pkgs.sort(key=lambda p: (p.name != pin.kernel_package, p.name))
    return pkgs


def _download(apt: _DebianApt, pkgs: list[_Pkg], pin: KernelPin, pr: _Progress) -> None:
    arch_dir = apt.archives
    arch_dir.mkdir(parents=True, exist_ok=True)
    for p in pkgs:
        f = arch_dir / p.filename
        p.hit = f.is_file() and f.stat().st_size == p.size and _sha256(f) == p.sha256
    todo = [p for p in pkgs if not p.hit]
    total = sum(p.size for p in todo)
    pr.say(f"[3/6] {len(pkgs)} packages, {_mb(sum(p.size for p in pkgs))}; to download: "
           f"{len(todo)}, {_mb(total)}"
           + (f" ({len(pkgs) - len(todo)} already downloaded)" if len(todo) < len(pkgs) else ""))
    if not todo:
        return
    got = {"n": 0, "bytes": 0}
    sizes = {p.name: p.size for p in todo}

    def on_line(line: str) -> None:
        m = _GET_RE.match(line)
        if m:
            got["n"] += 1
            got["bytes"] += sizes.get(m.group(2), 0)
            pr.step(f"[3/6] downloading {got['n']}/{len(todo)} {m.group(2)} {m.group(3)} "
                    f"({m.group(4)}); {_mb(got['bytes'])} of {_mb(total)}", got["n"], len(todo))

    with tempfile.TemporaryDirectory(dir=apt.base, prefix="download.") as tmp:
        # `apt-get download` fetches exactly the named versions (no dependencies) and checks
        # each file against the signed index; it writes into the working folder.
        rc, out = apt.run_in(Path(tmp), ["apt-get", "-q", "download",
                                         *(f"{p.name}={p.version}" for p in todo)], on_line)
        if rc != 0:
            raise _apt_error("apt-get download", rc, out, pin)
        # apt-get download names files name_version_arch.deb with the epoch's ':' as '%3a';
        # the pool (and this cache) names them without the epoch.
        got_files = {_deb_name_version(f.name): f for f in Path(tmp).glob("*.deb")}
        for p in todo:
            src = got_files.get((p.name, p.version))
            if src is None:
                raise ImageError(f"apt-get download reported success but {p.name} {p.version} "
                                 "is missing")
            if _sha256(src) != p.sha256:
                raise ImageError(f"{p.filename} does not match the SHA-256 of Debian's signed "
                                 "index; try again")
            os.replace(src, arch_dir / p.filename)


# --------------------------------------------------------------------------------------------
# Kernel


def _extract_boot_files(deb: Path, release: str, dest: Path) -> dict[str, Path]:
    """vmlinuz and config of ``release`` from the kernel package, reading its data
    archive as a stream and stopping once /boot is done (the modules are not unpacked)."""
    want = {f"./boot/vmlinuz-{release}": "vmlinuz", f"./boot/config-{release}": "config"}
    got: dict[str, Path] = {}
    p = subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(deb)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    assert p.stdout is not None
    try:
        with tarfile.open(fileobj=p.stdout, mode="r|") as tf:
            for m in tf:
                name = m.name if m.name.startswith("./") else "./" + m.name
                if name in want and m.isfile():
                    src = tf.extractfile(m)
                    assert src is not None
                    out = dest / want[name]
                    with open(out, "wb") as f:
                        shutil.copyfileobj(src, f)
                    got[want[name]] = out
                if len(got) == len(want) or (got and not name.startswith("./boot")):
                    break
    except tarfile.TarError as e:
        raise ImageError(f"cannot read {deb.name}: {e}") from e
    finally:
        p.stdout.close()
        with contextlib.suppress(OSError):
            p.kill()
        p.wait()
    if "vmlinuz" not in got:
        raise ImageError(f"{deb.name} has no /boot/vmlinuz-{release}: is the pin right?")
    return got


XZ_MAGIC = b"\xfd7zXZ\x00"


def extract_vmlinux(bzimage: bytes) -> bytes:
    """The uncompressed ELF kernel inside an XZ-compressed bzImage."""
    pos = bzimage.find(XZ_MAGIC)
    while pos >= 0:
        d = lzma.LZMADecompressor(format=lzma.FORMAT_XZ)
        try:
            out = d.decompress(bzimage[pos:])
        except lzma.LZMAError:
            out = b""
        if out[:4] == b"\x7fELF" and d.eof:
            return out
        pos = bzimage.find(XZ_MAGIC, pos + 1)
    raise ImageError("no XZ-compressed ELF kernel found in the bzImage (Debian's kernels are "
                     "XZ-compressed; another compression would need another extractor)")


def has_pvh_note(vmlinux: bytes) -> bool:
    """True if the ELF carries XEN_ELFNOTE_PHYS32_ENTRY (18), which QEMU's PVH boot needs."""
    try:
        elf = Elf(vmlinux)
    except ValueError:
        return False
    for ptype, off, filesz in elf.segments():
        if ptype != 4:  # PT_NOTE
            continue
        p, end = off, off + filesz
        while p + 12 <= end:
            namesz, descsz, ntype = struct.unpack_from("<III", vmlinux, p)
            name = vmlinux[p + 12:p + 12 + namesz].rstrip(b"\0")
            if name == b"Xen" and ntype == 18:
                return True
            p += 12 + ((namesz + 3) & ~3) + ((descsz + 3) & ~3)
    return False


# --------------------------------------------------------------------------------------------
# ELF: just enough to follow DT_NEEDED, read the dynamic symbols, and write stub libraries


class Elf:
    """A read-only view of an ELF file's dynamic linking information."""

    def __init__(self, data: bytes):
        if data[:4] != b"\x7fELF" or data[5] != 1:
            raise ValueError("not a little-endian ELF file")
        self.data = data
        self.cls = data[4]
        if self.cls == 2:
            (self.type, self.machine, _, _, self.phoff, self.shoff, _, _, self.phentsize,
             self.phnum, self.shentsize, self.shnum, self.shstrndx) = struct.unpack_from(
                "<HHIQQQIHHHHHH", data, 16)
        elif self.cls == 1:
            (self.type, self.machine, _, _, self.phoff, self.shoff, _, _, self.phentsize,
             self.phnum, self.shentsize, self.shnum, self.shstrndx) = struct.unpack_from(
                "<HHIIIIIHHHHHH", data, 16)
        else:
            raise ValueError("bad ELF class")
        self.sections = [self._shdr(i) for i in range(self.shnum)] if self.shoff else []
        self._dynsym: list[tuple] | None = None

    def _shdr(self, i: int) -> dict:
        off = self.shoff + i * self.shentsize
        if self.cls == 2:
            v = struct.unpack_from("<IIQQQQIIQQ", self.data, off)
        else:
            v = struct.unpack_from("<IIIIIIIIII", self.data, off)
        keys = ("name", "type", "flags", "addr", "offset", "size", "link", "info", "align",
                "entsize")
        return dict(zip(keys, v))

    def segments(self) -> list[tuple[int, int, int]]:
        """(p_type, p_offset, p_filesz) of each program header."""
        out = []
        for i in range(self.phnum):
            off = self.phoff + i * self.phentsize
            if self.cls == 2:
                t, _, o, _, _, fs, _, _ = struct.unpack_from("<IIQQQQQQ", self.data, off)
            else:
                t, o, _, _, fs, _, _, _ = struct.unpack_from("<IIIIIIII", self.data, off)
            out.append((t, o, fs))
        return out

    def interp(self) -> str | None:
        for t, o, fs in self.segments():
            if t == 3:
                return self.data[o:o + fs].rstrip(b"\0").decode()
        return None

    def _sec(self, sh_type: int) -> dict | None:
        return next((s for s in self.sections if s["type"] == sh_type), None)

    def _str(self, sec: dict, off: int) -> str:
        base = sec["offset"] + off
        end = self.data.index(b"\0", base)
        return self.data[base:end].decode("utf-8", "replace")

    def dynamic(self) -> list[tuple[int, int]]:
        sec = self._sec(6)  # SHT_DYNAMIC
        if not sec:
            return []
        fmt, size = ("<qQ", 16) if self.cls == 2 else ("<iI", 8)
        out = []
        for off in range(sec["offset"], sec["offset"] + sec["size"], size):
            tag, val = struct.unpack_from(fmt, self.data, off)
            if tag == 0:
                break
            out.append((tag, val))
        return out

    def _dynstr(self) -> dict | None:
        dsec = self._sec(6)
        return self.sections[dsec["link"]] if dsec else None

    def needed(self) -> list[str]:
        strtab = self._dynstr()
        return [self._str(strtab, v) for t, v in self.dynamic() if t == 1] if strtab else []

    def soname(self) -> str | None:
        strtab = self._dynstr()
        for t, v in self.dynamic():
            if t == 14 and strtab:
                return self._str(strtab, v)
        return None

    def dynsym(self) -> list[tuple]:
        """(name, value, size, bind, type, shndx, version_file, version_name, hidden) for each
        dynamic symbol; version_file is set for references (verneed), None for definitions."""
        if self._dynsym is not None:
            return self._dynsym
        sec = self._sec(11)  # SHT_DYNSYM
        out: list[tuple] = []
        if not sec:
            self._dynsym = out
            return out
        strtab = self.sections[sec["link"]]
        versym_sec = self._sec(0x6FFFFFFF)
        vneed: dict[int, tuple[str, str]] = {}
        vdef: dict[int, str] = {}
        vn = self._sec(0x6FFFFFFE)  # SHT_GNU_verneed
        if vn:
            vs = self.sections[vn["link"]]
            off = vn["offset"]
            for _ in range(vn["info"]):
                _, cnt, file_, aux, nxt = struct.unpack_from("<HHIII", self.data, off)
                a = off + aux
                for _ in range(cnt):
                    _, _, other, name, anext = struct.unpack_from("<IHHII", self.data, a)
                    vneed[other] = (self._str(vs, file_), self._str(vs, name))
                    a += anext
                if not nxt:
                    break
                off += nxt
        vd = self._sec(0x6FFFFFFD)  # SHT_GNU_verdef
        if vd:
            vs = self.sections[vd["link"]]
            off = vd["offset"]
            for _ in range(vd["info"]):
                _, flags, ndx, cnt, _, aux, nxt = struct.unpack_from("<HHHHIII", self.data, off)
                name_off, _ = struct.unpack_from("<II", self.data, off + aux)
                vdef[ndx] = self._str(vs, name_off)
                if not nxt:
                    break
                off += nxt
        entsize = 24 if self.cls == 2 else 16
        n = sec["size"] // entsize
        for i in range(n):
            off = sec["offset"] + i * entsize
            if self.cls == 2:
                name, info, other, shndx, value, size = struct.unpack_from("<IBBHQQ", self.data,
                                                                           off)
            else:
                name, value, size, info, other, shndx = struct.unpack_from("<IIIBBH", self.data,
                                                                           off)
            ver = struct.unpack_from("<H", self.data, versym_sec["offset"] + 2 * i)[0] \
                if versym_sec else 1
            idx = ver & 0x7FFF
            vfile = vname = None
            if idx >= 2:
                if idx in vneed:
                    vfile, vname = vneed[idx]
                elif idx in vdef:
                    vname = vdef[idx]
            out.append((self._str(strtab, name), value, size, info >> 4, info & 0xF, shndx,
                        vfile, vname, bool(ver & 0x8000)))
        self._dynsym = out
        return out

    def exported(self) -> set[str]:
        return {s[0] for s in self.dynsym()
                if s[0] and s[5] != 0 and s[3] in (1, 2) and s[4] not in (3, 4) and not s[8]}

    def imports(self) -> list[tuple]:
        """Symbols this object needs from others: non-weak undefined symbols, plus symbols
        copied into it by COPY relocations (an executable's data imports)."""
        syms = self.dynsym()
        out = [s for s in syms[1:] if s[0] and s[5] == 0 and s[3] != 2]
        copy_type = 5  # R_X86_64_COPY and R_386_COPY
        for sec in self.sections:
            if sec["type"] not in (4, 9) or sec["link"] == 0:
                continue
            if self.sections[sec["link"]]["type"] != 11:
                continue
            ent = sec["entsize"] or ((24 if sec["type"] == 4 else 16) if self.cls == 2
                                     else (12 if sec["type"] == 4 else 8))
            for off in range(sec["offset"], sec["offset"] + sec["size"], ent):
                if self.cls == 2:
                    info = struct.unpack_from("<Q", self.data, off + 8)[0]
                    rtype, rsym = info & 0xFFFFFFFF, info >> 32
                else:
                    info = struct.unpack_from("<I", self.data, off + 4)[0]
                    rtype, rsym = info & 0xFF, info >> 8
                if rtype == copy_type and rsym < len(syms):
                    out.append(syms[rsym])
        return out


def _elf_hash(name: bytes) -> int:
    h = 0
    for c in name:
        h = ((h << 4) + c) & 0xFFFFFFFF
        g = h & 0xF0000000
        if g:
            h ^= g >> 24
        h &= ~g & 0xFFFFFFFF
    return h


@dataclass
class StubSymbol:
    name: str
    kind: str  # "func", "object" or "tls"
    size: int
    version: str | None = None  # a version defined by the stub; None: the base (unversioned)


def make_stub_library(soname: str, elf_class: int, machine: int,
                      symbols: list[StubSymbol]) -> bytes:
    """A shared library named ``soname`` that defines ``symbols``: functions return 0, objects
    and thread-local variables are zero-filled (bss, tbss).  It has no dependencies and no
    relocations; DT_HASH, DT_VERSYM and DT_VERDEF (when a symbol carries a version) make
    glibc's loader accept it."""
    is64 = elf_class == 2
    page = 0x1000
    versions = sorted({s.version for s in symbols if s.version})
    ver_index = {v: i + 2 for i, v in enumerate(versions)}
    syms = sorted({s.name: s for s in symbols}.values(), key=lambda s: s.name)

    dynstr = bytearray(b"\0")
    str_off: dict[str, int] = {}

    def add_str(s: str) -> int:
        if s not in str_off:
            str_off[s] = len(dynstr)
            dynstr.extend(s.encode() + b"\0")
        return str_off[s]

    add_str(soname)
    for s in syms:
        add_str(s.name)
    for v in versions:
        add_str(v)

    ehdr_size = 64 if is64 else 52
    phent = 56 if is64 else 32
    shent = 64 if is64 else 40
    syment = 24 if is64 else 16
    dynent = 16 if is64 else 8
    has_tls = any(s.kind == "tls" for s in symbols)
    nphdr = 5 if has_tls else 4
    nsym = len(syms) + 1

    def align(x: int, a: int) -> int:
        return (x + a - 1) & ~(a - 1)

    # text segment: headers, .hash, .dynsym, .dynstr, .gnu.version, .gnu.version_d, .text
    off = ehdr_size + nphdr * phent
    hash_off = align(off, 8)
    nbucket = max(1, nsym // 2 + 1)
    hash_size = 4 * (2 + nbucket + nsym)
    dynsym_off = align(hash_off + hash_size, 8)
    dynstr_off = dynsym_off + nsym * syment
    versym_off = align(dynstr_off + len(dynstr), 2)
    versym_size = 2 * nsym if versions else 0
    verdef_off = align(versym_off + versym_size, 4)
    verdef_size = 28 * (1 + len(versions)) if versions else 0
    text_off = align(verdef_off + verdef_size, 16)
    code = b"\x31\xc0\xc3"  # xor eax, eax; ret (both modes)
    text_end = text_off + len(code)
    # data segment, on its own page: .dynamic, then .bss for the objects
    dyn_off = align(text_end, page)
    dyn_tags = [(14, str_off[soname]), (4, hash_off), (5, dynstr_off), (6, dynsym_off),
                (10, len(dynstr)), (11, syment)]
    if versions:
        dyn_tags += [(0x6FFFFFF0, versym_off), (0x6FFFFFFC, verdef_off),
                     (0x6FFFFFFD, 1 + len(versions))]
    dyn_tags.append((0, 0))
    dyn_size = dynent * len(dyn_tags)
    bss_off = align(dyn_off + dyn_size, 32)
    obj_addr: dict[str, int] = {}
    cur = bss_off
    for s in syms:
        if s.kind == "object":
            obj_addr[s.name] = cur
            cur = align(cur + max(s.size, 16), 32)
    bss_end = cur
    tls_off: dict[str, int] = {}
    tcur = 0
    for s in syms:
        if s.kind == "tls":
            tls_off[s.name] = tcur
            tcur = align(tcur + max(s.size, 16), 32)
    tls_size = tcur
    file_end = dyn_off + dyn_size
    shstr = b"\0.hash\0.dynsym\0.dynstr\0.gnu.version\0.gnu.version_d\0.text\0.dynamic\0" \
            b".bss\0.tbss\0.shstrtab\0"
    shstr_off = file_end
    shoff = align(shstr_off + len(shstr), 8)
    names = {n: shstr.index(b"\0" + n.encode() + b"\0") + 1 for n in
             (".hash", ".dynsym", ".dynstr", ".gnu.version", ".gnu.version_d", ".text",
              ".dynamic", ".bss", ".tbss", ".shstrtab")}
    # section indices (the loader never looks at them; readelf and the symbols' st_shndx do)
    sec_list = [".hash", ".dynsym", ".dynstr"] + ([".gnu.version", ".gnu.version_d"]
                                                  if versions else []) + \
               [".text", ".dynamic", ".bss"] + ([".tbss"] if has_tls else []) + [".shstrtab"]
    sidx = {n: i + 1 for i, n in enumerate(sec_list)}

    buf = bytearray(shoff + shent * (1 + len(sec_list)))
    # ELF header
    ident = b"\x7fELF" + bytes([elf_class, 1, 1, 0]) + b"\0" * 8
    if is64:
        struct.pack_into("<16sHHIQQQIHHHHHH", buf, 0, ident, 3, machine, 1, 0, ehdr_size,
                         shoff, 0, ehdr_size, phent, nphdr, shent, 1 + len(sec_list),
                         sidx[".shstrtab"])
    else:
        struct.pack_into("<16sHHIIIIIHHHHHH", buf, 0, ident, 3, machine, 1, 0, ehdr_size,
                         shoff, 0, ehdr_size, phent, nphdr, shent, 1 + len(sec_list),
                         sidx[".shstrtab"])

    def phdr(i, ptype, flags, offset, vaddr, filesz, memsz, palign):
        o = ehdr_size + i * phent
        if is64:
            struct.pack_into("<IIQQQQQQ", buf, o, ptype, flags, offset, vaddr, vaddr, filesz,
                             memsz, palign)
        else:
            struct.pack_into("<IIIIIIII", buf, o, ptype, offset, vaddr, vaddr, filesz, memsz,
                             flags, palign)

    phdr(0, 1, 5, 0, 0, text_end, text_end, page)  # PT_LOAD R+X
    phdr(1, 1, 6, dyn_off, dyn_off, dyn_size, bss_end - dyn_off, page)  # PT_LOAD RW
    phdr(2, 2, 6, dyn_off, dyn_off, dyn_size, dyn_size, dynent)  # PT_DYNAMIC
    phdr(3, 0x6474E551, 6, 0, 0, 0, 0, 16)  # PT_GNU_STACK, not executable
    if has_tls:  # PT_TLS: an all-zero block (tbss); the initialisation image is empty
        phdr(4, 7, 4, bss_off, bss_off, 0, tls_size, 32)

    # .dynsym
    chains = [0] * nsym
    buckets = [0] * nbucket
    for i, s in enumerate(syms, 1):
        # st_size: the importer's size (a COPY relocation copies that much; a larger size
        # makes the loader warn), storage: at least 16 bytes
        if s.kind == "object":
            value, size, typ, shndx = obj_addr[s.name], s.size or 16, 1, sidx[".bss"]
        elif s.kind == "tls":
            value, size, typ, shndx = tls_off[s.name], s.size or 16, 6, sidx[".tbss"]
        else:
            value, size, typ, shndx = text_off, len(code), 2, sidx[".text"]
        info = (1 << 4) | typ  # STB_GLOBAL
        o = dynsym_off + i * syment
        if is64:
            struct.pack_into("<IBBHQQ", buf, o, str_off[s.name], info, 0, shndx, value, size)
        else:
            struct.pack_into("<IIIBBH", buf, o, str_off[s.name], value, size, info, 0, shndx)
        b = _elf_hash(s.name.encode()) % nbucket
        chains[i] = buckets[b]
        buckets[b] = i
    struct.pack_into(f"<II{nbucket}I{nsym}I", buf, hash_off, nbucket, nsym, *buckets, *chains)
    buf[dynstr_off:dynstr_off + len(dynstr)] = dynstr
    if versions:
        for i, s in enumerate(syms, 1):
            struct.pack_into("<H", buf, versym_off + 2 * i, ver_index[s.version] if s.version
                             else 1)
        entries = [(1, 1, soname)] + [(0, ver_index[v], v) for v in versions]
        for k, (flags, ndx, name) in enumerate(entries):
            o = verdef_off + 28 * k
            nxt = 28 if k + 1 < len(entries) else 0
            struct.pack_into("<HHHHIII", buf, o, 1, flags, ndx, 1, _elf_hash(name.encode()), 20,
                             nxt)
            struct.pack_into("<II", buf, o + 20, str_off[name], 0)
    buf[text_off:text_end] = code
    fmt = "<qQ" if is64 else "<iI"
    for k, (tag, val) in enumerate(dyn_tags):
        struct.pack_into(fmt, buf, dyn_off + k * dynent, tag, val)
    buf[shstr_off:shstr_off + len(shstr)] = shstr

    def shdr(i, name, stype, flags, addr, offset, size, link, info, salign, entsize):
        o = shoff + i * shent
        if is64:
            struct.pack_into("<IIQQQQIIQQ", buf, o, names[name], stype, flags, addr, offset,
                             size, link, info, salign, entsize)
        else:
            struct.pack_into("<IIIIIIIIII", buf, o, names[name], stype, flags, addr, offset,
                             size, link, info, salign, entsize)

    A, W, X = 2, 1, 4  # SHF_ALLOC, SHF_WRITE, SHF_EXECINSTR
    ds = sidx[".dynstr"]
    shdr(sidx[".hash"], ".hash", 5, A, hash_off, hash_off, hash_size, sidx[".dynsym"], 0, 8, 4)
    shdr(sidx[".dynsym"], ".dynsym", 11, A, dynsym_off, dynsym_off, nsym * syment, ds, 1, 8,
         syment)
    shdr(ds, ".dynstr", 3, A, dynstr_off, dynstr_off, len(dynstr), 0, 0, 1, 0)
    if versions:
        shdr(sidx[".gnu.version"], ".gnu.version", 0x6FFFFFFF, A, versym_off, versym_off,
             versym_size, sidx[".dynsym"], 0, 2, 2)
        shdr(sidx[".gnu.version_d"], ".gnu.version_d", 0x6FFFFFFD, A, verdef_off, verdef_off,
             verdef_size, ds, 1 + len(versions), 4, 0)
    shdr(sidx[".text"], ".text", 1, A | X, text_off, text_off, len(code), 0, 0, 16, 0)
    shdr(sidx[".dynamic"], ".dynamic", 6, A | W, dyn_off, dyn_off, dyn_size, ds, 0, 8, dynent)
    shdr(sidx[".bss"], ".bss", 8, A | W, bss_off, bss_off, bss_end - bss_off, 0, 0, 32, 0)
    if has_tls:
        shdr(sidx[".tbss"], ".tbss", 8, A | W | 0x400, bss_off, bss_off, tls_size, 0, 0, 32, 0)
    shdr(sidx[".shstrtab"], ".shstrtab", 3, 0, 0, shstr_off, len(shstr), 0, 0, 1, 0)
    return bytes(buf)


# --------------------------------------------------------------------------------------------
# cpio (newc)


class CpioWriter:
    """Writes a cpio archive in the kernel's initramfs format ("newc", no checksums)."""

    def __init__(self, f: BinaryIO, mtime: int = 0):
        self.f = f
        self.ino = 1000
        self.mtime = mtime
        self.pos = 0
        self.dirs: set[str] = set()

    def _write(self, b: bytes) -> None:
        self.f.write(b)
        self.pos += len(b)

    def _pad(self) -> None:
        if self.pos % 4:
            self._write(b"\0" * (4 - self.pos % 4))

    def _entry(self, name: str, mode: int, data: bytes = b"", rdev: tuple[int, int] = (0, 0),
               mtime: int | None = None) -> None:
        name = name.lstrip("/") or "."
        nb = name.encode() + b"\0"
        self.ino += 1
        hdr = "070701" + "".join(f"{v:08X}" for v in (
            self.ino, mode, 0, 0, 2 if stat.S_ISDIR(mode) else 1,
            self.mtime if mtime is None else max(0, int(mtime)) & 0xFFFFFFFF, len(data), 0, 0,
            rdev[0], rdev[1], len(nb), 0))
        self._write(hdr.encode() + nb)
        self._pad()
        if data:
            self._write(data)
            self._pad()

    def parents(self, path: str) -> None:
        parts = path.strip("/").split("/")[:-1]
        for i in range(1, len(parts) + 1):
            self.dir("/".join(parts[:i]))

    def dir(self, path: str, mode: int = 0o755) -> None:
        p = path.strip("/")
        if p in self.dirs:
            return
        self.parents(p)
        self.dirs.add(p)
        self._entry(p, stat.S_IFDIR | mode)

    def file(self, path: str, data: bytes, mode: int = 0o644, mtime: int | None = None) -> None:
        self.parents(path)
        self._entry(path, stat.S_IFREG | (mode & 0o7777), data, mtime=mtime)

    def symlink(self, path: str, target: str) -> None:
        self.parents(path)
        self._entry(path, stat.S_IFLNK | 0o777, target.encode())

    def chardev(self, path: str, major: int, minor: int, mode: int = 0o600) -> None:
        self.parents(path)
        self._entry(path, stat.S_IFCHR | mode, rdev=(major, minor))

    def finish(self) -> None:
        self._entry("TRAILER!!!", 0)
        if self.pos % 512:
            self._write(b"\0" * (512 - self.pos % 512))


# --------------------------------------------------------------------------------------------
# The root file system


class _Tree:
    """An unpacked Debian tree: files found the way the guest's loader will find them."""

    def __init__(self, root: Path, arch: str):
        self.root = root
        triplet, self.loader, self.elf_class, self.machine = _arch_layout(arch)
        self.libdirs = [f"/lib/{triplet}", f"/usr/lib/{triplet}", "/lib", "/usr/lib"]

    def host(self, guest_path: str) -> Path:
        """Resolve a guest path inside the tree, following symlinks within the tree."""
        parts = [p for p in guest_path.split("/") if p]
        cur: list[str] = []
        for _ in range(64):
            if not parts:
                break
            part = parts.pop(0)
            if part == "..":
                cur = cur[:-1]
                continue
            if part == ".":
                continue
            hp = self.root.joinpath(*cur, part)
            if hp.is_symlink():
                target = os.readlink(hp)
                parts = [p for p in target.split("/") if p] + parts
                if target.startswith("/"):
                    cur = []
                continue
            cur.append(part)
        return self.root.joinpath(*cur)

    def find_lib(self, soname: str) -> str | None:
        for d in self.libdirs:
            hp = self.host(f"{d}/{soname}")
            if hp.is_file():
                return f"{d}/{soname}"
        return None


@dataclass
class _Closure:
    files: dict[str, Path]  # guest path -> host file (real objects)
    stubs: dict[str, list[StubSymbol]]  # stubbed soname -> symbols
    stub_order: list[str]


def _closure(tree: _Tree, start: list[str]) -> _Closure:
    """Follow DT_NEEDED from the start objects; sonames matching STUB_SONAMES are stubbed."""
    files: dict[str, Path] = {}
    objs: dict[str, Elf] = {}
    stub_order: list[str] = []
    todo = list(start)
    found_by_soname: dict[str, str] = {}
    while todo:
        gp = todo.pop(0)
        if gp in objs:
            continue
        hp = tree.host(gp)
        elf = Elf(hp.read_bytes())
        if elf.cls != tree.elf_class or elf.machine != tree.machine:
            raise ImageError(f"{gp} in the unpacked packages is not a {tree.elf_class * 32}-bit "
                             f"x86 ELF file")
        objs[gp] = elf
        files[gp] = hp
        for so in elf.needed():
            if STUB_SONAMES.fullmatch(so):
                if so not in stub_order:
                    stub_order.append(so)
                continue
            if so in found_by_soname or so == os.path.basename(tree.loader):
                continue
            where = tree.find_lib(so)
            if where is None:
                raise ImageError(f"{so}, needed by {gp}, is in none of the downloaded packages: "
                                 "the dependencies of perf's package changed? (or add the "
                                 "library to STUB_SONAMES in linux_image.py if perf can do "
                                 "without it)")
            found_by_soname[so] = where
            todo.append(where)
    exports = {gp: elf.exported() for gp, elf in objs.items()}
    loader_exports = Elf(tree.host(tree.loader).read_bytes()).exported()
    stubs: dict[str, dict[str, StubSymbol]] = {so: {} for so in stub_order}
    if stub_order:
        for gp, elf in objs.items():
            # what the other objects define (a COPY relocation's own definition does not count)
            defined = set(loader_exports)
            for other, ex in exports.items():
                if other != gp:
                    defined |= ex
            for (name, _v, size, bind, typ, _sh, vfile, vname, _h) in elf.imports():
                if vfile and vfile in stubs:
                    target, version = vfile, vname
                elif name in defined:
                    continue
                else:
                    target, version = stub_order[0], None
                prev = stubs[target].get(name)
                kind = {1: "object", 6: "tls"}.get(typ, "func")
                sym = StubSymbol(name, kind, max(size, prev.size if prev else 0), version)
                stubs[target][name] = sym
    return _Closure(files, {so: list(v.values()) for so, v in stubs.items()}, stub_order)


def _busybox_applets(busybox: Path) -> list[str] | None:
    """`busybox --list-full` run on the host (None when the host cannot run it)."""
    try:
        p = subprocess.run([str(busybox), "--list-full"], capture_output=True, text=True,
                           timeout=30, env={"PATH": "/usr/bin:/bin"})
    except (OSError, subprocess.TimeoutExpired):
        return None
    if p.returncode != 0:
        return None
    apps = [ln.strip() for ln in p.stdout.splitlines() if ln.strip()]
    return apps or None


def _check_with_loader(stage: Path, loader: str, libdirs: list[str], exe: str,
                       pr: _Progress) -> str:
    """Run the image's loader on the host over the staged tree: every library and every
    symbol must resolve inside the stage.  Returns a note for the stamp."""
    ld = (stage / loader.lstrip("/")).resolve()  # the stage's symlinks point into the stage
    if not ld.is_file():
        raise ImageError(f"the image has no loader {loader}")
    lp = ":".join(str(stage / d.lstrip("/")) for d in libdirs)
    # What `ldd -r` does: list the objects and process every relocation (LD_BIND_NOW), with
    # a message for each symbol that does not resolve (LD_WARN).  `--list` alone would skip
    # the relocations.
    env = {"LD_TRACE_LOADED_OBJECTS": "1", "LD_BIND_NOW": "1", "LD_WARN": "1",
           "LD_LIBRARY_PATH": lp, "PATH": "/usr/bin:/bin", "LC_ALL": "C"}
    try:
        p = subprocess.run([str(ld), "--inhibit-cache", str(stage / exe.lstrip("/"))],
                           capture_output=True, text=True, timeout=60, env=env)
    except OSError as e:
        pr.say(f"      (not checked with the guest's loader: the host cannot run it: {e})")
        return f"not checked: {e}"
    except subprocess.TimeoutExpired:
        return "not checked: timeout"
    text = p.stdout + p.stderr
    problems = []
    for ln in text.splitlines():
        s = ln.strip()
        if not s:
            continue
        if "=>" in s:
            name, rest = s.split("=>", 1)
            path = rest.strip().split(" (", 1)[0]
            if "not found" in rest or not path.startswith(str(stage)):
                problems.append(s)
        elif re.search(r"undefined symbol|different size|error|version|not found", s, re.I):
            problems.append(s)
    if p.returncode != 0 or problems:
        raise ImageError(f"the guest's loader cannot load {exe} in the image (exit "
                         f"{p.returncode}):\n" + "\n".join(problems or text.splitlines()[-10:]))
    return "ok"


def _build_root(tree: _Tree, out: Path, pin: KernelPin, pr: _Progress) -> dict:
    """Write the base initramfs; returns facts for the stamp."""
    perf = "/usr/bin/perf"
    if not tree.host(perf).is_file():
        alt = sorted(tree.root.glob("usr/bin/perf_*"))
        if not alt:
            raise ImageError(f"{pin.perf_package} {pin.version} has no /usr/bin/perf")
        perf = "/" + str(alt[0].relative_to(tree.root))
    busybox = tree.host("/bin/busybox")
    if not busybox.is_file():
        raise ImageError(f"{BUSYBOX_PACKAGE} has no /bin/busybox")
    clo = _closure(tree, [perf])
    triplet = tree.libdirs[0].split("/")[-1]
    stub_dir = f"/usr/lib/{triplet}"
    entries: list[tuple[str, str, object, int]] = []  # (path, kind, data, mode)

    def add_file(gp: str, hp: Path) -> None:
        entries.append((gp, "file", hp, hp.stat().st_mode & 0o7777))

    for gp, hp in clo.files.items():
        if gp == perf:
            add_file("/usr/bin/perf", hp)
        else:
            add_file(gp, hp)
    loader_host = tree.host(tree.loader)
    triplet_loader = f"/lib/{triplet}/{os.path.basename(tree.loader)}"
    if tree.loader == triplet_loader:
        add_file(tree.loader, loader_host)
    else:
        add_file(triplet_loader, loader_host)
        entries.append((tree.loader, "symlink", triplet_loader, 0o777))
    stub_bytes = 0
    for so in clo.stub_order:
        data = make_stub_library(so, tree.elf_class, tree.machine, clo.stubs[so])
        stub_bytes += len(data)
        entries.append((f"{stub_dir}/{so}", "bytes", data, 0o644))
    add_file("/bin/busybox", busybox)
    applets = _busybox_applets(busybox)
    if applets:
        for a in applets:
            a = "/" + a.lstrip("/")
            if a != "/bin/busybox" and not a.startswith("/usr/bin/perf"):
                entries.append((a, "symlink", "/bin/busybox", 0o777))
    entries.append(("/init", "bytes", INIT_SCRIPT.encode(), 0o755))
    for gp, text in guest_helpers().items():
        entries.append((gp, "bytes", text.encode(), 0o755))
    etc = {
        "/etc/passwd": "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent"
                       ":/bin/false\n",
        "/etc/group": "root:x:0:\nnogroup:x:65534:\n",
        "/etc/hostname": "p4pmu\n",
        "/etc/hosts": "127.0.0.1\tlocalhost p4pmu\n",
        "/etc/nsswitch.conf": "passwd: files\ngroup: files\nhosts: files\n",
        "/etc/os-release": f'PRETTY_NAME="p4pmu guest (Debian {pin.debian} kernel {pin.release}, '
                           f'{pin.perf_package} {pin.version})"\nID=p4pmu\n',
    }
    for p, text in etc.items():
        entries.append((p, "bytes", text.encode(), 0o644))

    manifest = []
    total = 0
    with open(out, "wb") as f:
        w = CpioWriter(f)
        for d in ("bin", "sbin", "usr/bin", "usr/sbin", "usr/local/bin", f"lib/{triplet}",
                  f"usr/lib/{triplet}", "etc", "proc", "sys", "dev", "run", "var/tmp", "mnt"):
            w.dir(d)
        w.dir("root", 0o700)
        w.dir("tmp", 0o1777)
        w.chardev("dev/console", 5, 1)
        w.chardev("dev/null", 1, 3, 0o666)
        for gp, kind, data, mode in sorted(entries, key=lambda e: e[0]):
            if kind == "symlink":
                w.symlink(gp, str(data))
                manifest.append(f"{gp} -> {data}")
                continue
            blob = Path(data).read_bytes() if kind == "file" else data  # type: ignore[arg-type]
            w.file(gp, blob, mode)
            total += len(blob)
            manifest.append(f"{gp} {len(blob)} {oct(mode)}")
        w.finish()
    (out.parent / "manifest.txt").write_text("\n".join(manifest) + "\n")

    # Check the result with the loader of the image, from a staged copy.
    with tempfile.TemporaryDirectory(dir=out.parent, prefix="stage.") as st:
        stage = Path(st)
        for gp, kind, data, mode in entries:
            dst = stage / gp.lstrip("/")
            dst.parent.mkdir(parents=True, exist_ok=True)
            if kind == "symlink":
                os.symlink(stage / str(data).lstrip("/"), dst)
            elif kind == "file":
                shutil.copyfile(data, dst)  # type: ignore[arg-type]
                os.chmod(dst, mode)
            else:
                dst.write_bytes(data)  # type: ignore[arg-type]
                os.chmod(dst, mode)
        check = _check_with_loader(stage, tree.loader, tree.libdirs, "/usr/bin/perf", pr)
    return {
        "perf": perf,
        "libraries": sorted(gp for gp in clo.files if gp != perf),
        "stubs": {so: len(clo.stubs[so]) for so in clo.stub_order},
        "stub_bytes": stub_bytes,
        "busybox_applets": len(applets or []),
        "loader_check": check,
        "content_bytes": total,
    }


# --------------------------------------------------------------------------------------------
# The build


def _build_locked(pin: KernelPin, root: Path, vdir: Path, pr: _Progress) -> LinuxImage:
    arch = pin.arch
    t0 = time.monotonic()
    if vdir.exists():
        st = _read_stamp(vdir)
        why = ("it was built from another recipe" if st else
               "it has no completion stamp (an interrupted build)")
        pr.say(f"{vdir}: {why}: rebuilding")
        _safe_wipe(vdir, prefix="linux-", what="Linux image", error=ImageError)
    pr.say(f"building the {arch} Linux {pin.kernel} guest image (Debian {pin.debian}: "
           f"{pin.kernel_package} and {pin.perf_package} {pin.version}, {BUSYBOX_PACKAGE}) "
           f"into {vdir}")
    apt = _DebianApt(root / f"apt-{pin.codename}-{arch}", arch, pin.suites)
    apt.prepare()

    pr.say(f"[1/6] apt-get update ({', '.join(pin.suites)}, {arch})")
    rc, out = apt.run(["apt-get", "-q", "update"])
    if rc != 0 or re.search(r"^(E:|W: Failed to fetch|Err:)", out, flags=re.M):
        raise _apt_error("apt-get update", rc, out, pin)

    pr.say(f"[2/6] resolving {pin.perf_package}'s libraries")
    pkgs = _resolve(apt, pin, pr)
    _download(apt, pkgs, pin, pr)

    vdir.mkdir(parents=True)
    work = vdir / "build"
    unpack = work / "root"
    unpack.mkdir(parents=True)
    others = [p for p in pkgs if p.name != pin.kernel_package]
    for i, p in enumerate(others, 1):
        pr.step(f"[4/6] unpacking {i}/{len(others)} {p.name}", i, len(others))
        r = subprocess.run(["dpkg-deb", "-x", str(apt.archives / p.filename), str(unpack)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            err = r.stderr.strip()
            if "No space left" in err:
                raise OSError(errno.ENOSPC, err)
            raise ImageError(f"dpkg-deb -x {p.filename} failed: {err}")

    pr.say(f"[5/6] kernel {pin.release}: extracting /boot from {pin.kernel_package}")
    kdeb = apt.archives / next(p.filename for p in pkgs if p.name == pin.kernel_package)
    boot = _extract_boot_files(kdeb, pin.release, work)
    if "config" in boot:  # (Debian's System.map is a placeholder: the symbols are in -dbg)
        os.replace(boot["config"], vdir / "config")
    if pin.boot == "pvh":
        vmlinux = extract_vmlinux(boot["vmlinuz"].read_bytes())
        if not has_pvh_note(vmlinux):
            raise ImageError(f"the vmlinux of {pin.kernel_package} has no PVH entry note "
                             "(XEN_ELFNOTE_PHYS32_ENTRY): QEMU cannot boot it directly; set "
                             f"boot='bzimage' in PINS[({pin.kernel!r}, {arch!r})]")
        (vdir / "vmlinux").write_bytes(vmlinux)
        kernel_file = vdir / "vmlinux"
    else:
        os.replace(boot["vmlinuz"], vdir / "bzImage")
        kernel_file = vdir / "bzImage"

    pr.say("[6/6] initramfs: busybox, perf, its libraries, stubs for "
           "python/perl/slang/opencsd/babeltrace")
    tree = _Tree(unpack, arch)
    facts = _build_root(tree, vdir / "initrd.cpio", pin, pr)
    shutil.rmtree(work, ignore_errors=True)

    stamp = {
        "format": _STAMP_FORMAT,
        "recipe": recipe_hash(arch, pin.kernel),
        "recipe_inputs": recipe(arch, pin.kernel),
        "arch": arch,
        "linux": pin.kernel,
        "kernel_package": pin.kernel_package,
        "version": pin.version,
        "release": pin.release,
        "boot": pin.boot,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "kernel_bytes": kernel_file.stat().st_size,
        "initrd_bytes": (vdir / "initrd.cpio").stat().st_size,
        "image": facts,
        "packages": [{"file": p.filename, "name": p.name, "version": p.version,
                      "size": p.size, "sha256": p.sha256} for p in pkgs],
    }
    finish_cache(vdir, stamp, apt, pkgs)
    pr.say(f"{arch} Linux guest image ready in {time.monotonic() - t0:.1f} s: kernel "
           f"{_mb(stamp['kernel_bytes'])}, initramfs {_mb(stamp['initrd_bytes'])} "
           f"({len(facts['libraries'])} libraries, {len(facts['stubs'])} stubs) at {vdir}")
    img = find_image(arch, pin.kernel)
    assert img is not None
    return img


# --------------------------------------------------------------------------------------------
# Command line: python -m p4pmu.qemu_glue.linux_image [--policy] [--arch A] [--build]


ALL_SUITES = {"bullseye": ("bullseye", "bullseye-updates", "bullseye-security"),
              "bookworm": ("bookworm", "bookworm-updates", "bookworm-security")}


def _policy(pin: KernelPin) -> int:
    """What Debian offers for a pin (all of its release's suites, whatever the pin reads)."""
    arch = pin.arch
    _check_tools()
    cache_root().mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache_root(), prefix=f".policy-{arch}.") as tmp:
        apt = _DebianApt(Path(tmp), arch, ALL_SUITES[pin.codename])
        apt.prepare()
        rc, out = apt.run(["apt-get", "-q", "update"])
        for ln in out.splitlines():
            if ln.startswith(("E:", "W:", "Err:")):
                print(f"apt: {ln}", file=sys.stderr)
        meta = f"linux-image-{pin.flavour}"
        rc, out = apt.run(["apt-cache", "policy", meta, pin.perf_package, BUSYBOX_PACKAGE])
        print(out, end="")
        _, out2 = apt.run(["apt-cache", "show", meta])
        for m in re.finditer(r"^Version: (\S+)\n(?:.*\n)*?Depends: (linux-image-\S+)", out2,
                             flags=re.M):
            print(f"{meta} {m.group(1)} depends on {m.group(2)}")
    print(f"pinned ({', '.join(pin.suites)}): {pin.kernel_package}={pin.version}, "
          f"{pin.perf_package}={pin.version}, {BUSYBOX_PACKAGE}={pin.busybox_version}")
    return rc


def _main(argv: list[str] | None = None) -> int:
    import argparse
    ap = argparse.ArgumentParser(prog="python -m p4pmu.qemu_glue.linux_image",
                                 description="Build or inspect p4pmu's Linux guest images.")
    ap.add_argument("--arch", choices=ARCHES, default="amd64")
    ap.add_argument("--kernel", choices=KERNELS, default=DEFAULT_KERNEL)
    ap.add_argument("--policy", action="store_true",
                    help="show the kernel, perf and busybox versions Debian offers, and the pins")
    ap.add_argument("--state", action="store_true", help="only show the cache state")
    a = ap.parse_args(argv)
    try:
        if a.policy:
            return _policy(pin_for(a.arch, a.kernel))
        if a.state:
            print(f"{image_dir(a.arch, a.kernel)}: {image_state(a.arch, a.kernel)}")
            return 0
        img = ensure_image(a.arch, kernel=a.kernel)
    except ProvisionError as e:
        print(f"p4pmu: error: {e}", file=sys.stderr)
        return 1
    print(img.kernel)
    print(img.initrd)
    return 0


if __name__ == "__main__":
    sys.exit(_main())
