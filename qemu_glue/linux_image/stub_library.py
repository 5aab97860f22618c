"""Stub shared libraries: an ELF library that defines given symbols and does nothing else.

The Linux guest image replaces perf's optional libraries (python, perl, slang, opencsd,
babeltrace) by such stubs, defining exactly the symbols and symbol versions perf imports from
them, so glibc's loader accepts perf; `perf stat`, `record`, `report --stdio` and `list` work.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

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
