"""Stub shared libraries: an ELF library that defines given symbols and does nothing else.

The Linux guest image replaces perf's optional libraries (python, perl, opencsd,
babeltrace) by such stubs, defining exactly the symbols and symbol versions perf imports from
them, so glibc's loader accepts perf; `perf stat`, `record`, `report --stdio` and `list` work.

Formats: System V ABI (gABI), "Object Files" (ELF header, program and section headers, the
symbol table, the SysV hash table, the dynamic section); symbol versioning (DT_VERSYM,
DT_VERDEF) as in the Linux Standard Base Core specification, "Symbol Versioning".
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

PAGE = 0x1000
CODE = b"\x31\xc0\xc3"  # xor eax, eax; ret (both modes): every stub function returns 0
SHSTRTAB = (b"\0.hash\0.dynsym\0.dynstr\0.gnu.version\0.gnu.version_d\0.text\0.dynamic\0"
            b".bss\0.tbss\0.shstrtab\0")
SHF_ALLOC, SHF_WRITE, SHF_EXECINSTR, SHF_TLS = 2, 1, 4, 0x400
DT_VERSYM, DT_VERDEF, DT_VERDEFNUM = 0x6FFFFFF0, 0x6FFFFFFC, 0x6FFFFFFD
VERDEF_SIZE = 28  # one Elf_Verdef (20 bytes) with its one Elf_Verdaux (8 bytes)


def _elf_hash(name: bytes) -> int:
    h = 0
    for c in name:
        h = ((h << 4) + c) & 0xFFFFFFFF
        g = h & 0xF0000000
        if g:
            h ^= g >> 24
        h &= ~g & 0xFFFFFFFF
    return h


def _align(x: int, a: int) -> int:
    return (x + a - 1) & ~(a - 1)


@dataclass
class StubSymbol:
    name: str
    kind: str  # "func", "object" or "tls"
    size: int
    version: str | None = None  # a version defined by the stub; None: the base (unversioned)


@dataclass(frozen=True)
class _Sizes:
    """Header and entry sizes of an ELF class."""
    ehdr: int
    phent: int
    shent: int
    syment: int
    dynent: int

    @staticmethod
    def of(is64: bool) -> _Sizes:
        return _Sizes(64, 56, 64, 24, 16) if is64 else _Sizes(52, 32, 40, 16, 8)


class _Layout:
    """Where everything goes in the stub (file offset = virtual address: it loads at 0).

    Text segment: headers, .hash, .dynsym, .dynstr, .gnu.version, .gnu.version_d, .text.  Data
    segment, on its own page: .dynamic, then .bss for the objects; .tbss for the thread-local
    variables.  Then .shstrtab and the section headers (not loaded)."""

    def __init__(self, soname: str, is64: bool, syms: list[StubSymbol], versions: list[str],
                 has_tls: bool):
        self.soname, self.is64 = soname, is64
        self.syms = syms  # sorted by name, one per name
        self.versions = versions
        self.sz = _Sizes.of(is64)
        self.ver_index = {v: i + 2 for i, v in enumerate(versions)}
        self.has_tls = has_tls
        self.nphdr = 5 if has_tls else 4
        self.nsym = len(syms) + 1
        self._strings()
        self._text_segment()
        self._data_segment()
        self._sections()

    def _strings(self) -> None:
        self.dynstr, self.str_off = bytearray(b"\0"), {}
        for s in [self.soname] + [s.name for s in self.syms] + self.versions:
            if s not in self.str_off:
                self.str_off[s] = len(self.dynstr)
                self.dynstr.extend(s.encode() + b"\0")

    def _text_segment(self) -> None:
        self.hash_off = _align(self.sz.ehdr + self.nphdr * self.sz.phent, 8)
        self.nbucket = max(1, self.nsym // 2 + 1)
        self.hash_size = 4 * (2 + self.nbucket + self.nsym)
        self.dynsym_off = _align(self.hash_off + self.hash_size, 8)
        self.dynstr_off = self.dynsym_off + self.nsym * self.sz.syment
        self.versym_off = _align(self.dynstr_off + len(self.dynstr), 2)
        self.versym_size = 2 * self.nsym if self.versions else 0
        self.verdef_off = _align(self.versym_off + self.versym_size, 4)
        self.verdef_size = VERDEF_SIZE * (1 + len(self.versions)) if self.versions else 0
        self.text_off = _align(self.verdef_off + self.verdef_size, 16)
        self.text_end = self.text_off + len(CODE)

    def _data_segment(self) -> None:
        self.dyn_off = _align(self.text_end, PAGE)
        self.dyn_tags = [(14, self.str_off[self.soname]), (4, self.hash_off),
                         (5, self.dynstr_off), (6, self.dynsym_off), (10, len(self.dynstr)),
                         (11, self.sz.syment)]  # SONAME, HASH, STRTAB, SYMTAB, STRSZ, SYMENT
        if self.versions:
            self.dyn_tags += [(DT_VERSYM, self.versym_off), (DT_VERDEF, self.verdef_off),
                              (DT_VERDEFNUM, 1 + len(self.versions))]
        self.dyn_tags.append((0, 0))
        self.dyn_size = self.sz.dynent * len(self.dyn_tags)
        self.bss_off = _align(self.dyn_off + self.dyn_size, 32)
        self.obj_addr, self.bss_end = self._place("object", self.bss_off)
        self.tls_off, self.tls_size = self._place("tls", 0)

    def _place(self, kind: str, start: int) -> tuple[dict[str, int], int]:
        """Addresses of the symbols of `kind` from `start` (at least 16 bytes, 32-aligned)."""
        where, cur = {}, start
        for s in self.syms:
            if s.kind == kind:
                where[s.name] = cur
                cur = _align(cur + max(s.size, 16), 32)
        return where, cur

    def _sections(self) -> None:
        self.shstr_off = self.dyn_off + self.dyn_size  # the end of the loaded part
        self.shoff = _align(self.shstr_off + len(SHSTRTAB), 8)
        # section indices (the loader never looks at them; readelf and the symbols' st_shndx do)
        names = ([".hash", ".dynsym", ".dynstr"]
                 + ([".gnu.version", ".gnu.version_d"] if self.versions else [])
                 + [".text", ".dynamic", ".bss"] + ([".tbss"] if self.has_tls else [])
                 + [".shstrtab"])
        self.sidx = {n: i + 1 for i, n in enumerate(names)}
        self.nsections = 1 + len(names)

    @property
    def file_size(self) -> int:
        return self.shoff + self.sz.shent * self.nsections


def make_stub_library(soname: str, elf_class: int, machine: int,
                      symbols: list[StubSymbol]) -> bytes:
    """A shared library named ``soname`` that defines ``symbols``: functions return 0, objects
    and thread-local variables are zero-filled (bss, tbss).  It has no dependencies and no
    relocations; DT_HASH, DT_VERSYM and DT_VERDEF (when a symbol carries a version) make
    glibc's loader accept it."""
    lay = _Layout(soname, elf_class == 2,
                  sorted({s.name: s for s in symbols}.values(), key=lambda s: s.name),
                  sorted({s.version for s in symbols if s.version}),
                  any(s.kind == "tls" for s in symbols))
    buf = bytearray(lay.file_size)
    _write_elf_header(buf, lay, elf_class, machine)
    _write_program_headers(buf, lay)
    _write_symbols_and_hash(buf, lay)
    buf[lay.dynstr_off:lay.dynstr_off + len(lay.dynstr)] = lay.dynstr
    if lay.versions:
        _write_versions(buf, lay)
    buf[lay.text_off:lay.text_end] = CODE
    fmt = "<qQ" if lay.is64 else "<iI"
    for k, (tag, val) in enumerate(lay.dyn_tags):
        struct.pack_into(fmt, buf, lay.dyn_off + k * lay.sz.dynent, tag, val)
    buf[lay.shstr_off:lay.shstr_off + len(SHSTRTAB)] = SHSTRTAB
    _write_section_headers(buf, lay)
    return bytes(buf)


def _write_elf_header(buf: bytearray, lay: _Layout, elf_class: int, machine: int) -> None:
    ident = b"\x7fELF" + bytes([elf_class, 1, 1, 0]) + b"\0" * 8
    fmt = "<16sHHIQQQIHHHHHH" if lay.is64 else "<16sHHIIIIIHHHHHH"
    struct.pack_into(fmt, buf, 0, ident, 3, machine, 1, 0, lay.sz.ehdr, lay.shoff, 0,
                     lay.sz.ehdr, lay.sz.phent, lay.nphdr, lay.sz.shent, lay.nsections,
                     lay.sidx[".shstrtab"])  # ET_DYN, EV_CURRENT, no entry point


def _write_program_headers(buf: bytearray, lay: _Layout) -> None:
    def phdr(i, ptype, flags, offset, vaddr, filesz, memsz, palign):
        o = lay.sz.ehdr + i * lay.sz.phent
        if lay.is64:
            struct.pack_into("<IIQQQQQQ", buf, o, ptype, flags, offset, vaddr, vaddr, filesz,
                             memsz, palign)
        else:
            struct.pack_into("<IIIIIIII", buf, o, ptype, offset, vaddr, vaddr, filesz, memsz,
                             flags, palign)

    dyn_off, dyn_size = lay.dyn_off, lay.dyn_size
    phdr(0, 1, 5, 0, 0, lay.text_end, lay.text_end, PAGE)  # PT_LOAD R+X
    phdr(1, 1, 6, dyn_off, dyn_off, dyn_size, lay.bss_end - dyn_off, PAGE)  # PT_LOAD RW
    phdr(2, 2, 6, dyn_off, dyn_off, dyn_size, dyn_size, lay.sz.dynent)  # PT_DYNAMIC
    phdr(3, 0x6474E551, 6, 0, 0, 0, 0, 16)  # PT_GNU_STACK, not executable
    if lay.has_tls:  # PT_TLS: an all-zero block (tbss); the initialisation image is empty
        phdr(4, 7, 4, lay.bss_off, lay.bss_off, 0, lay.tls_size, 32)


def _write_symbols_and_hash(buf: bytearray, lay: _Layout) -> None:
    """.dynsym (index 0 stays the null symbol) and the SysV hash table over it."""
    chains = [0] * lay.nsym
    buckets = [0] * lay.nbucket
    for i, s in enumerate(lay.syms, 1):
        # st_size: the importer's size (a COPY relocation copies that much; a larger size
        # makes the loader warn), storage: at least 16 bytes
        if s.kind == "object":
            value, size, typ, shndx = lay.obj_addr[s.name], s.size or 16, 1, lay.sidx[".bss"]
        elif s.kind == "tls":
            value, size, typ, shndx = lay.tls_off[s.name], s.size or 16, 6, lay.sidx[".tbss"]
        else:
            value, size, typ, shndx = lay.text_off, len(CODE), 2, lay.sidx[".text"]
        info = (1 << 4) | typ  # STB_GLOBAL
        o = lay.dynsym_off + i * lay.sz.syment
        name = lay.str_off[s.name]
        if lay.is64:
            struct.pack_into("<IBBHQQ", buf, o, name, info, 0, shndx, value, size)
        else:
            struct.pack_into("<IIIBBH", buf, o, name, value, size, info, 0, shndx)
        b = _elf_hash(s.name.encode()) % lay.nbucket
        chains[i] = buckets[b]
        buckets[b] = i
    struct.pack_into(f"<II{lay.nbucket}I{lay.nsym}I", buf, lay.hash_off, lay.nbucket, lay.nsym,
                     *buckets, *chains)


def _write_versions(buf: bytearray, lay: _Layout) -> None:
    """.gnu.version (each symbol's version index; 1 = the base) and .gnu.version_d (the base
    definition named after the soname, then one per version)."""
    for i, s in enumerate(lay.syms, 1):
        struct.pack_into("<H", buf, lay.versym_off + 2 * i,
                         lay.ver_index[s.version] if s.version else 1)
    entries = [(1, 1, lay.soname)] + [(0, lay.ver_index[v], v) for v in lay.versions]
    for k, (flags, ndx, name) in enumerate(entries):  # flags 1: VER_FLG_BASE
        o = lay.verdef_off + VERDEF_SIZE * k
        nxt = VERDEF_SIZE if k + 1 < len(entries) else 0
        struct.pack_into("<HHHHIII", buf, o, 1, flags, ndx, 1, _elf_hash(name.encode()), 20,
                         nxt)
        struct.pack_into("<II", buf, o + 20, lay.str_off[name], 0)


def _write_section_headers(buf: bytearray, lay: _Layout) -> None:
    def shdr(name, stype, flags, addr, offset, size, link, info, salign, entsize):
        o = lay.shoff + lay.sidx[name] * lay.sz.shent
        sh_name = SHSTRTAB.index(b"\0" + name.encode() + b"\0") + 1
        fmt = "<IIQQQQIIQQ" if lay.is64 else "<IIIIIIIIII"
        struct.pack_into(fmt, buf, o, sh_name, stype, flags, addr, offset, size, link, info,
                         salign, entsize)

    A, W, X = SHF_ALLOC, SHF_WRITE, SHF_EXECINSTR
    ds, sym = lay.sidx[".dynstr"], lay.sidx[".dynsym"]
    shdr(".hash", 5, A, lay.hash_off, lay.hash_off, lay.hash_size, sym, 0, 8, 4)
    shdr(".dynsym", 11, A, lay.dynsym_off, lay.dynsym_off, lay.nsym * lay.sz.syment, ds, 1, 8,
         lay.sz.syment)
    shdr(".dynstr", 3, A, lay.dynstr_off, lay.dynstr_off, len(lay.dynstr), 0, 0, 1, 0)
    if lay.versions:
        shdr(".gnu.version", 0x6FFFFFFF, A, lay.versym_off, lay.versym_off, lay.versym_size,
             sym, 0, 2, 2)
        shdr(".gnu.version_d", 0x6FFFFFFD, A, lay.verdef_off, lay.verdef_off, lay.verdef_size,
             ds, 1 + len(lay.versions), 4, 0)
    shdr(".text", 1, A | X, lay.text_off, lay.text_off, len(CODE), 0, 0, 16, 0)
    shdr(".dynamic", 6, A | W, lay.dyn_off, lay.dyn_off, lay.dyn_size, ds, 0, 8,
         lay.sz.dynent)
    shdr(".bss", 8, A | W, lay.bss_off, lay.bss_off, lay.bss_end - lay.bss_off, 0, 0, 32, 0)
    if lay.has_tls:
        shdr(".tbss", 8, A | W | SHF_TLS, lay.bss_off, lay.bss_off, lay.tls_size, 0, 0, 32, 0)
    shdr(".shstrtab", 3, 0, 0, lay.shstr_off, len(SHSTRTAB), 0, 0, 1, 0)
