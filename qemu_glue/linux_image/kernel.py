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
from p4pmu.qemu_glue.linux_image.pins import KernelPin
from p4pmu.qemu_glue.provision import Progress

def extract_boot_files(deb: Path, release: str, dest: Path) -> dict[str, Path]:
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


def install_kernel(deb: Path, pin: KernelPin, work: Path, vdir: Path, pr: Progress) -> Path:
    """The kernel of `pin` from its package into the image folder: ``vmlinux`` (PVH boot,
    checked for the PVH note) or ``bzImage``, and its ``config``.  Returns the kernel file."""
    pr.say(f"[5/6] kernel {pin.release}: extracting /boot from {pin.kernel_package}")
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
