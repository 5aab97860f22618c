"""The kernel of a Linux guest image: /boot out of the Debian package, vmlinux out of the bzImage.

amd64 images boot the uncompressed ELF through QEMU's PVH entry (which skips the
decompressor); that needs the ELF note XEN_ELFNOTE_PHYS32_ENTRY, checked here.
"""
from __future__ import annotations

import contextlib
import lzma
import os
import shutil
import struct
import subprocess
import tarfile
from pathlib import Path

from p4pmu.qemu_glue.linux_image.elf import Elf
from p4pmu.qemu_glue.linux_image.errors import ImageError
from p4pmu.qemu_glue.linux_image.pins import GUEST_MODULES, KernelPin
from p4pmu.qemu_glue.provision import Progress


@contextlib.contextmanager
def _package_files(deb: Path):
    """The files of a package's data archive, as a stream: (name with "./", the member, the
    tarfile to extract it from).  The caller may stop early."""
    p = subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(deb)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    assert p.stdout is not None
    try:
        with tarfile.open(fileobj=p.stdout, mode="r|") as tf:
            yield ((m.name if m.name.startswith("./") else "./" + m.name, m, tf) for m in tf)
    except tarfile.TarError as e:
        raise ImageError(f"cannot read {deb.name}: {e}") from e
    finally:
        p.stdout.close()
        with contextlib.suppress(OSError):
            p.kill()
        p.wait()


def _copy_member(tf: tarfile.TarFile, m: tarfile.TarInfo, out: Path) -> None:
    src = tf.extractfile(m)
    assert src is not None
    with open(out, "wb") as f:
        shutil.copyfileobj(src, f)


def extract_boot_files(deb: Path, release: str, dest: Path) -> dict[str, Path]:
    """vmlinuz and config of ``release`` from the kernel package, reading its data
    archive as a stream and stopping once /boot is done."""
    want = {f"./boot/vmlinuz-{release}": "vmlinuz", f"./boot/config-{release}": "config"}
    got: dict[str, Path] = {}
    with _package_files(deb) as files:
        for name, m, tf in files:
            if name in want and m.isfile():
                _copy_member(tf, m, dest / want[name])
                got[want[name]] = dest / want[name]
            if len(got) == len(want) or (got and not name.startswith("./boot")):
                break
    if "vmlinuz" not in got:
        raise ImageError(f"{deb.name} has no /boot/vmlinuz-{release}: is the pin right?")
    return got


def extract_modules(deb: Path, release: str, dest: Path,
                    names: tuple[str, ...]) -> dict[str, Path]:
    """Every module of ``release`` in the kernel package whose name is in `names` or that one
    of those needs (its .modinfo ``depends=``, followed until nothing is missing): path under
    /lib/modules/<release>/ ("kernel/arch/x86/kernel/msr.ko") -> the extracted file."""
    prefix = f"./lib/modules/{release}/"
    want = set(names)
    got: dict[str, Path] = {}
    while True:
        found = _extract_named(deb, prefix, want, dest, got)
        got.update(found)
        have = {_module_name(p) for p in got}
        need = {d for p in got.values() for d in module_depends(p.read_bytes())} - have
        if want - have:
            raise ImageError(f"{deb.name} has no module {', '.join(sorted(want - have))} for "
                             f"{release}: GUEST_MODULES in linux_image/pins.py names a module "
                             "this kernel does not build as one")
        if not need:
            return got
        want |= need


def _module_name(rel: str) -> str:
    return os.path.basename(rel).split(".ko", 1)[0].replace("-", "_")


def _extract_named(deb: Path, prefix: str, want: set[str], dest: Path,
                   got: dict[str, Path]) -> dict[str, Path]:
    """One pass over the package's data: the .ko files named in `want` not in `got` yet."""
    found: dict[str, Path] = {}
    with _package_files(deb) as files:
        for name, m, tf in files:
            if not (name.startswith(prefix) and name.endswith(".ko") and m.isfile()):
                continue
            rel = name[len(prefix):]
            if rel in got or _module_name(rel) not in want:
                continue
            out = dest / "modules" / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            _copy_member(tf, m, out)
            found[rel] = out
    return found


def module_depends(ko: bytes) -> list[str]:
    """The modules a .ko needs first (its .modinfo ``depends=`` entry)."""
    info = Elf(ko).section(".modinfo") or b""
    for entry in info.split(b"\0"):
        if entry.startswith(b"depends="):
            return [d.replace("-", "_") for d in entry[8:].decode().split(",") if d]
    return []


def modules_dep(modules: dict[str, Path]) -> str:
    """modules.dep in depmod's format (``kernel/a.ko: kernel/b.ko kernel/c.ko``, each
    module's dependencies in load order, last first) for modprobe."""
    by_name = {_module_name(rel): rel for rel in modules}
    deps = {rel: module_depends(p.read_bytes()) for rel, p in modules.items()}

    def order(rel: str, seen: list[str]) -> None:
        for d in deps[rel]:
            drel = by_name[d]
            if drel not in seen:
                order(drel, seen)
                seen.append(drel)

    lines = []
    for rel in sorted(modules):
        chain: list[str] = []
        order(rel, chain)
        lines.append(f"{rel}: {' '.join(reversed(chain))}".rstrip())
    return "\n".join(lines) + "\n"


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


def install_kernel(deb: Path, pin: KernelPin, work: Path, vdir: Path,
                   pr: Progress) -> tuple[Path, dict[str, Path]]:
    """The kernel of `pin` from its package into the image folder: ``vmlinux`` (PVH boot,
    checked for the PVH note) or ``bzImage``, and its ``config``.  Returns the kernel file
    and the modules the image carries (GUEST_MODULES, extracted into `work`)."""
    pr.say(f"[5/6] kernel {pin.release}: extracting /boot and the modules "
           f"{', '.join(GUEST_MODULES)} (with what they need) from {pin.kernel_package}")
    modules = extract_modules(deb, pin.release, work, GUEST_MODULES)
    return _install_boot(deb, pin, work, vdir), modules


def _install_boot(deb: Path, pin: KernelPin, work: Path, vdir: Path) -> Path:
    boot = extract_boot_files(deb, pin.release, work)
    if "config" in boot:  # (Debian's System.map is a placeholder: the symbols are in -dbg)
        os.replace(boot["config"], vdir / "config")
    if pin.boot != "pvh":
        os.replace(boot["vmlinuz"], vdir / "bzImage")
        return vdir / "bzImage"
    vmlinux = extract_vmlinux(boot["vmlinuz"].read_bytes())
    if not has_pvh_note(vmlinux):
        raise ImageError(f"the vmlinux of {pin.kernel_package} has no PVH entry note "
                         "(XEN_ELFNOTE_PHYS32_ENTRY): QEMU cannot boot it directly; set "
                         f"boot='bzimage' in PINS[({pin.kernel!r}, {pin.arch!r})]")
    (vdir / "vmlinux").write_bytes(vmlinux)
    return vdir / "vmlinux"
