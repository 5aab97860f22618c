"""A read-only ELF reader: just enough to follow DT_NEEDED and read the dynamic symbols.

Formats from the System V ABI (gABI, "Object Files") and the Linux Standard Base's symbol
versioning (DT_VERNEED, DT_VERDEF, DT_VERSYM).
"""
from __future__ import annotations

import struct


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

    def section(self, name: str) -> bytes | None:
        """The contents of the section named `name` (None: no such section)."""
        if not self.sections or self.shstrndx >= len(self.sections):
            return None
        names = self.sections[self.shstrndx]
        for sec in self.sections:
            if self._str(names, sec["name"]) == name:
                return self.data[sec["offset"]:sec["offset"] + sec["size"]]
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

    def _verneed(self) -> list[tuple[int, str, str]]:
        """(version index, library file, version name) of each DT_VERNEED entry."""
        out: list[tuple[int, str, str]] = []
        vn = self._sec(0x6FFFFFFE)  # SHT_GNU_verneed
        if not vn:
            return out
        vs = self.sections[vn["link"]]
        off = vn["offset"]
        for _ in range(vn["info"]):
            _, cnt, file_, aux, nxt = struct.unpack_from("<HHIII", self.data, off)
            a = off + aux
            for _ in range(cnt):
                _, _, other, name, anext = struct.unpack_from("<IHHII", self.data, a)
                out.append((other, self._str(vs, file_), self._str(vs, name)))
                a += anext
            if not nxt:
                break
            off += nxt
        return out

    def version_needs(self) -> dict[str, set[str]]:
        """The symbol versions this object needs, per library file (DT_VERNEED: e.g.
        {"libc.so.6": {"GLIBC_2.2.5", "GLIBC_2.34"}})."""
        out: dict[str, set[str]] = {}
        for _, file_, name in self._verneed():
            out.setdefault(file_, set()).add(name)
        return out

    def version_defs(self) -> set[str]:
        """The symbol versions this library defines (DT_VERDEF), its own soname's entry
        included."""
        out: set[str] = set()
        vd = self._sec(0x6FFFFFFD)  # SHT_GNU_verdef
        if not vd:
            return out
        vs = self.sections[vd["link"]]
        off = vd["offset"]
        for _ in range(vd["info"]):
            _, _, _, _, _, aux, nxt = struct.unpack_from("<HHHHIII", self.data, off)
            out.add(self._str(vs, struct.unpack_from("<I", self.data, off + aux)[0]))
            if not nxt:
                break
            off += nxt
        return out

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
        vneed = {idx: (file_, name) for idx, file_, name in self._verneed()}
        vdef: dict[int, str] = {}
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

