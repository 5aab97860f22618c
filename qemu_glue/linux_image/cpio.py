"""cpio in the kernel's initramfs format ("newc", no checksums): a writer and a reader."""
from __future__ import annotations

import stat
from collections.abc import Iterator
from typing import BinaryIO, NamedTuple


class CpioMember(NamedTuple):
    name: str  # without a leading "/"
    mode: int
    data: bytes  # a file's contents, a symlink's target


def read_members(data: bytes) -> Iterator[CpioMember]:
    """The members of a newc archive (as CpioWriter writes them), up to its trailer."""
    pos = 0
    while pos + 110 <= len(data):
        hdr = data[pos:pos + 110]
        if hdr[:6] not in (b"070701", b"070702"):
            raise ValueError(f"not a newc cpio archive (at byte {pos})")
        field = [int(hdr[6 + 8 * i:14 + 8 * i], 16) for i in range(13)]
        mode, size, namesize = field[1], field[6], field[11]
        name = data[pos + 110:pos + 110 + namesize - 1].decode("utf-8", "replace")
        pos = (pos + 110 + namesize + 3) & ~3
        body = data[pos:pos + size]
        pos = (pos + size + 3) & ~3
        if name == "TRAILER!!!":
            return
        yield CpioMember(name, mode, body)

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
