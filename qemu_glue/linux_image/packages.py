"""The Debian packages of a Linux guest image: resolve a pin to files, download and verify them.

apt runs under p4pmu's private configuration (`p4pmu.qemu_glue.provision.AptEnv`, the one
QEMU's provisioning uses, pointed at the pin's suites and the guest's architecture): apt checks
the archive signatures against the system's Debian keyring and every file against the signed
index; each file is checked once more against the index's SHA-256 here.  perf's optional
libraries (python, perl, opencsd, babeltrace) are not downloaded: the image carries
stub libraries in their place (`p4pmu.qemu_glue.linux_image.stub_library`).
"""
from __future__ import annotations

import os
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from p4pmu.qemu_glue.linux_image.errors import ImageError
from p4pmu.qemu_glue.linux_image.pins import BUSYBOX_PACKAGE, GUEST_TOOLS, KernelPin
from p4pmu.qemu_glue.provision import (
    APT_GET_LINE,
    AptEnv,
    Progress,
    apt_failure,
    cache_root,
    check_tools,
    deb_name_version,
    megabytes,
    sha256_file,
)

# perf's optional libraries: their packages are not downloaded, their sonames are stubbed.
STUB_PACKAGES = re.compile(r"(libpython3\.\d+|libperl5\.\d+|libopencsd\d*|"
                           r"libbabeltrace\d*|libbabeltrace-ctf\d*|perl|python3)(:any)?")


def apt_error(what: str, rc: int, out: str, pin: KernelPin) -> ImageError:
    """An apt failure in words: a vanished pin says which entry of PINS to move."""
    e = apt_failure(what, rc, out)
    msg = str(e)
    low = out.lower()
    if ("version '" in low and "was not found" in low) or "unable to locate package" in low \
            or "has no installation candidate" in low:
        msg = (f"{what} failed: a pinned package is no longer in Debian's {', '.join(pin.suites)} "
               f"indexes (Debian replaces kernels with every security update and point "
               f"release). Move the pin in p4pmu/qemu_glue/linux_image/pins.py (PINS, the "
               f"({pin.kernel!r}, {pin.arch!r}) entry) to what `python -m "
               f"p4pmu.qemu_glue.linux_image --policy --kernel {pin.kernel} --arch {pin.arch}` "
               f"shows.\n"
               + "\n".join(ln for ln in out.splitlines() if ln.startswith(("E:", "W:"))))
    else:
        msg = msg.replace("QEMU_DEB_VERSION in p4pmu/qemu_glue/provision.py",
                          "the pins in p4pmu/qemu_glue/linux_image/pins.py")
    return ImageError(msg)


def parse_records(out: str) -> dict[str, dict[str, str]]:
    """`apt-cache show` output -> {package: {field: value}} (the first record of each)."""
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
class DebPackage:
    """One resolved package: its index entry (file name, size, SHA-256) and whether the
    archive folder already has it."""
    name: str
    version: str
    filename: str
    size: int
    sha256: str
    hit: bool = False


def fetch_packages(pin: KernelPin, apt_base: Path,
                   pr: Progress) -> tuple[AptEnv, list[DebPackage]]:
    """apt-get update for the pin's suites, resolve its packages, download what is missing.
    Returns the apt environment (its archive folder holds the files) and the packages."""
    apt = AptEnv(apt_base, pin.arch, pin.suites)
    apt.prepare()
    pr.say(f"[1/6] apt-get update ({', '.join(pin.suites)}, {pin.arch})")
    rc, out = apt.run(["apt-get", "-q", "update"])
    if rc != 0 or re.search(r"^(E:|W: Failed to fetch|Err:)", out, flags=re.M):
        raise apt_error("apt-get update", rc, out, pin)
    pr.say(f"[2/6] resolving {pin.perf_package}'s libraries")
    pkgs = resolve_packages(apt, pin, pr)
    download_packages(apt, pkgs, pin, pr)
    return apt, pkgs


def resolve_packages(apt: AptEnv, pin: KernelPin, pr: Progress) -> list[DebPackage]:
    """The pinned packages and the guest tools' (GUEST_TOOLS) plus the closure of their
    dependencies, without perf's optional libraries (stubbed) and without anything the image
    does not need."""
    pinned = {pin.kernel_package: pin.version, pin.perf_package: pin.version,
              BUSYBOX_PACKAGE: pin.busybox_version}
    rc, out = apt.run(["apt-cache", "show", *(f"{n}={v}" for n, v in pinned.items())])
    if rc != 0:
        raise apt_error("apt-cache show (the pinned packages)", rc, out, pin)
    recs = parse_records(out)
    chosen: dict[str, dict[str, str]] = {}
    for n, v in pinned.items():
        r = recs.get(n)
        if not r or r.get("Version") != v:
            raise apt_error(f"looking up {n}={v}", 100,
                             f"E: Version '{v}' for '{n}' was not found", pin)
        chosen[n] = r
    tools = [t.package for t in GUEST_TOOLS]
    rc, out = apt.run(["apt-cache", "show", "--no-all-versions", *tools])
    recs = parse_records(out)
    for n in tools:
        if n not in recs:
            raise apt_error(f"looking up {n}", 100, f"E: Unable to locate package {n}", pin)
        chosen[n] = recs[n]
    queue = [pin.perf_package, *tools]
    seen = set(queue)
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
            found = parse_records(out)  # apt-cache exits non-zero for virtual names
        else:
            found = {}
        for alts in wanted:
            if any(STUB_PACKAGES.fullmatch(a) for a in alts):
                continue
            pick = next((a for a in alts if a in chosen or a in found), None)
            if pick is None:
                raise ImageError(f"cannot resolve the dependency {' | '.join(alts)} of the "
                                 f"image's packages ({pin.perf_package} {pin.version}, "
                                 f"{', '.join(tools)}) in {', '.join(pin.suites)}")
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
        pkgs.append(DebPackage(n, r["Version"], os.path.basename(r["Filename"]), int(r["Size"]),
                         r["SHA256"]))
    pkgs.sort(key=lambda p: (p.name != pin.kernel_package, p.name))
    return pkgs


def download_packages(apt: AptEnv, pkgs: list[DebPackage], pin: KernelPin,
                      pr: Progress) -> None:
    """Bring every package into the archive folder: the ones already there with the index's
    size and SHA-256 are kept, the others fetched with `apt-get download` and checked."""
    arch_dir = apt.archives
    arch_dir.mkdir(parents=True, exist_ok=True)
    for p in pkgs:
        f = arch_dir / p.filename
        p.hit = f.is_file() and f.stat().st_size == p.size and sha256_file(f) == p.sha256
    todo = [p for p in pkgs if not p.hit]
    total = sum(p.size for p in todo)
    pr.say(f"[3/6] {len(pkgs)} packages, {megabytes(sum(p.size for p in pkgs))}; to download: "
           f"{len(todo)}, {megabytes(total)}"
           + (f" ({len(pkgs) - len(todo)} already downloaded)" if len(todo) < len(pkgs) else ""))
    if not todo:
        return
    got = {"n": 0, "bytes": 0}
    sizes = {p.name: p.size for p in todo}

    def on_line(line: str) -> None:
        m = APT_GET_LINE.match(line)
        if m:
            got["n"] += 1
            got["bytes"] += sizes.get(m.group(2), 0)
            pr.step(f"[3/6] downloading {got['n']}/{len(todo)} {m.group(2)} {m.group(3)} "
                    f"({m.group(4)}); {megabytes(got['bytes'])} of {megabytes(total)}",
                    got["n"], len(todo))

    with tempfile.TemporaryDirectory(dir=apt.base, prefix="download.") as tmp:
        # `apt-get download` fetches exactly the named versions (no dependencies) and checks
        # each file against the signed index; it writes into the working folder.
        rc, out = apt.run(["apt-get", "-q", "download",
                          *(f"{p.name}={p.version}" for p in todo)], on_line, cwd=Path(tmp))
        if rc != 0:
            raise apt_error("apt-get download", rc, out, pin)
        # apt-get download names files name_version_arch.deb with the epoch's ':' as '%3a';
        # the pool (and this cache) names them without the epoch.
        got_files = {deb_name_version(f.name): f for f in Path(tmp).glob("*.deb")}
        for p in todo:
            src = got_files.get((p.name, p.version))
            if src is None:
                raise ImageError(f"apt-get download reported success but {p.name} {p.version} "
                                 "is missing")
            if sha256_file(src) != p.sha256:
                raise ImageError(f"{p.filename} does not match the SHA-256 of Debian's signed "
                                 "index; try again")
            os.replace(src, arch_dir / p.filename)



ALL_SUITES = {"bullseye": ("bullseye", "bullseye-updates", "bullseye-security"),
              "bookworm": ("bookworm", "bookworm-updates", "bookworm-security")}


def print_policy(pin: KernelPin) -> int:
    """What Debian offers for a pin (all of its release's suites, whatever the pin reads)."""
    arch = pin.arch
    check_tools()
    cache_root().mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache_root(), prefix=f".policy-{arch}.") as tmp:
        apt = AptEnv(Path(tmp), arch, ALL_SUITES[pin.codename])
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
