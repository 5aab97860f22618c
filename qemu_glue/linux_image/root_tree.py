"""The initramfs of a Linux guest image: busybox, perf, the libraries perf needs, stubs, /init.

The libraries are found by walking DT_NEEDED from perf through the unpacked Debian tree (pure
Python, so the i386 image can be built on any x86-64 host), then checked with the image's own
loader run on the host like ``ldd -r`` (LD_TRACE_LOADED_OBJECTS, LD_BIND_NOW, LD_WARN: every
library and every symbol must resolve inside the image) when the host can run it.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from p4pmu.qemu_glue.linux_image.cpio import CpioWriter
from p4pmu.qemu_glue.linux_image.elf import Elf
from p4pmu.qemu_glue.linux_image.errors import ImageError
from p4pmu.qemu_glue.linux_image.guest_init import INIT_SCRIPT, guest_helpers
from p4pmu.qemu_glue.linux_image.kernel import modules_dep
from p4pmu.qemu_glue.linux_image.pins import BUSYBOX_PACKAGE, GUEST_TOOLS, KernelPin
from p4pmu.qemu_glue.linux_image.stub_library import StubSymbol, make_stub_library
from p4pmu.qemu_glue.provision import Progress

# perf's optional libraries (their packages are not downloaded): stub libraries in the image
STUB_SONAMES = re.compile(r"lib(python3\.\d+|perl|opencsd(_c_api)?|babeltrace(-ctf)?)"
                          r"\.so(\.[\w.]+)?")

_TRIPLETS = {"amd64": ("x86_64-linux-gnu", "/lib64/ld-linux-x86-64.so.2", 2, 62),
             "i386": ("i386-linux-gnu", "/lib/ld-linux.so.2", 1, 3)}


def arch_layout(arch: str) -> tuple[str, str, int, int]:
    """(multiarch triplet, loader path, ELF class, ELF machine) of a guest architecture."""
    return _TRIPLETS[arch]


class DebianTree:
    """An unpacked Debian tree: files found the way the guest's loader will find them."""

    def __init__(self, root: Path, arch: str):
        self.root = root
        triplet, self.loader, self.elf_class, self.machine = arch_layout(arch)
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


def _closure(tree: DebianTree, start: list[str]) -> _Closure:
    """Follow DT_NEEDED from the start objects; sonames matching STUB_SONAMES are stubbed."""
    objs, stub_order = _walk_needed(tree, start)
    files = {gp: tree.host(gp) for gp in objs}
    stubs = _stub_symbols(tree, objs, stub_order)
    return _Closure(files, {so: list(v.values()) for so, v in stubs.items()}, stub_order)


def _walk_needed(tree: DebianTree, start: list[str]) -> tuple[dict[str, Elf], list[str]]:
    """The objects reached from `start` through DT_NEEDED (guest path -> ELF, in the order
    found) and the stubbed sonames they need (in the order first needed)."""
    objs: dict[str, Elf] = {}
    stub_order: list[str] = []
    todo = list(start)
    found_by_soname: dict[str, str] = {}
    while todo:
        gp = todo.pop(0)
        if gp in objs:
            continue
        elf = Elf(tree.host(gp).read_bytes())
        if elf.cls != tree.elf_class or elf.machine != tree.machine:
            raise ImageError(f"{gp} in the unpacked packages is not a {tree.elf_class * 32}-bit "
                             f"x86 ELF file")
        objs[gp] = elf
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
                                 "library to STUB_SONAMES in linux_image/root_tree.py if perf "
                                 "can do without it)")
            found_by_soname[so] = where
            todo.append(where)
    return objs, stub_order


def _stub_symbols(tree: DebianTree, objs: dict[str, Elf],
                  stub_order: list[str]) -> dict[str, dict[str, StubSymbol]]:
    """What each stub must define: every versioned import naming it, and every unversioned
    import nothing else defines (those go to the first stub)."""
    exports = {gp: elf.exported() for gp, elf in objs.items()}
    loader_exports = Elf(tree.host(tree.loader).read_bytes()).exported()
    stubs: dict[str, dict[str, StubSymbol]] = {so: {} for so in stub_order}
    if not stub_order:
        return stubs
    for gp, elf in objs.items():
        # what the other objects define (a COPY relocation's own definition does not count)
        defined = set(loader_exports)
        for other, ex in exports.items():
            if other != gp:
                defined |= ex
        for (name, _v, size, _bind, typ, _sh, vfile, vname, _h) in elf.imports():
            if vfile and vfile in stubs:
                target, version = vfile, vname
            elif name in defined:
                continue
            else:
                target, version = stub_order[0], None
            prev = stubs[target].get(name)
            kind = {1: "object", 6: "tls"}.get(typ, "func")
            stubs[target][name] = StubSymbol(name, kind, max(size, prev.size if prev else 0),
                                             version)
    return stubs


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
                       pr: Progress) -> str:
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


class _Entry(NamedTuple):
    """One file of the initramfs: a host file, bytes, or a symlink (data = its target)."""
    path: str  # guest path
    kind: str  # "file", "bytes" or "symlink"
    data: object  # host Path, bytes, or the symlink's target
    mode: int


def write_initramfs(tree: DebianTree, out: Path, pin: KernelPin, pr: Progress,
                    modules: dict[str, Path]) -> dict:
    """Write the base initramfs (and manifest.txt next to it), check perf and the guest tools
    load in it; `modules`: path under /lib/modules/<release>/ -> file.  Returns facts for the
    stamp."""
    perf = _find_perf(tree, pin)
    busybox = tree.host("/bin/busybox")
    if not busybox.is_file():
        raise ImageError(f"{BUSYBOX_PACKAGE} has no /bin/busybox")
    tools = _tool_programs(tree)
    clo = _closure(tree, [perf, *tools])
    entries, stub_bytes = _library_entries(tree, clo, perf)
    entries += _tool_data_entries(tree)
    applets = _busybox_applets(busybox)
    entries += _busybox_entries(busybox, applets)
    entries += _init_and_etc_entries(pin)
    entries += _module_entries(pin, modules)
    total = _write_archive(out, entries, tree.libdirs[0].split("/")[-1])
    check = _check_staged(out.parent, entries, tree, pr, ["/usr/bin/perf", *tools])
    return {
        "perf": perf,
        "tools": tools,
        "modules": sorted(modules),
        "libraries": sorted(gp for gp in clo.files if gp != perf and gp not in tools),
        "stubs": {so: len(clo.stubs[so]) for so in clo.stub_order},
        "stub_bytes": stub_bytes,
        "busybox_applets": len(applets or []),
        "loader_check": check,
        "content_bytes": total,
    }


def _find_perf(tree: DebianTree, pin: KernelPin) -> str:
    """perf's guest path in the unpacked tree (Debian 11 names it perf_<version>)."""
    perf = "/usr/bin/perf"
    if not tree.host(perf).is_file():
        alt = sorted(tree.root.glob("usr/bin/perf_*"))
        if not alt:
            raise ImageError(f"{pin.perf_package} {pin.version} has no /usr/bin/perf")
        perf = "/" + str(alt[0].relative_to(tree.root))
    return perf


def _tool_programs(tree: DebianTree) -> list[str]:
    """The guest paths of GUEST_TOOLS' programs, each checked to be in its package."""
    for tool in GUEST_TOOLS:
        for gp in tool.programs:
            if not tree.host(gp).is_file():
                raise ImageError(f"{tool.package} has no {gp}: GUEST_TOOLS in "
                                 "linux_image/pins.py is out of date for this release")
    return [gp for tool in GUEST_TOOLS for gp in tool.programs]


def _tool_data_entries(tree: DebianTree) -> list[_Entry]:
    """The data folders of GUEST_TOOLS (files and symlinks, as the package has them)."""
    entries = []
    for tool in GUEST_TOOLS:
        for folder in tool.data:
            top = tree.host(folder)
            if not top.is_dir():
                raise ImageError(f"{tool.package} has no {folder}: GUEST_TOOLS in "
                                 "linux_image/pins.py is out of date for this release")
            for hp in sorted(top.rglob("*")):
                gp = f"{folder}/{hp.relative_to(top)}"
                if hp.is_symlink():
                    entries.append(_Entry(gp, "symlink", os.readlink(hp), 0o777))
                elif hp.is_file():
                    entries.append(_host_file(gp, hp))
    return entries


def _module_entries(pin: KernelPin, modules: dict[str, Path]) -> list[_Entry]:
    """The modules under /lib/modules/<release>/ and the modules.dep busybox's modprobe
    reads."""
    base = f"/lib/modules/{pin.release}"
    entries = [_host_file(f"{base}/{rel}", hp) for rel, hp in modules.items()]
    entries.append(_Entry(f"{base}/modules.dep", "bytes", modules_dep(modules).encode(), 0o644))
    return entries


def _host_file(gp: str, hp: Path) -> _Entry:
    return _Entry(gp, "file", hp, hp.stat().st_mode & 0o7777)


def _library_entries(tree: DebianTree, clo: _Closure, perf: str) -> tuple[list[_Entry], int]:
    """perf (as /usr/bin/perf), its libraries, the loader (in the multiarch folder, linked
    from its ABI path) and the stubs; and the stubs' size in bytes."""
    entries = [_host_file("/usr/bin/perf" if gp == perf else gp, hp)
               for gp, hp in clo.files.items()]
    triplet = tree.libdirs[0].split("/")[-1]
    loader_host = tree.host(tree.loader)
    triplet_loader = f"/lib/{triplet}/{os.path.basename(tree.loader)}"
    if tree.loader == triplet_loader:
        entries.append(_host_file(tree.loader, loader_host))
    else:
        entries.append(_host_file(triplet_loader, loader_host))
        entries.append(_Entry(tree.loader, "symlink", triplet_loader, 0o777))
    stub_bytes = 0
    for so in clo.stub_order:
        data = make_stub_library(so, tree.elf_class, tree.machine, clo.stubs[so])
        stub_bytes += len(data)
        entries.append(_Entry(f"/usr/lib/{triplet}/{so}", "bytes", data, 0o644))
    return entries, stub_bytes


def _busybox_entries(busybox: Path, applets: list[str] | None) -> list[_Entry]:
    """/bin/busybox and a symlink per applet (none for perf's own name)."""
    entries = [_host_file("/bin/busybox", busybox)]
    for a in applets or ():
        a = "/" + a.lstrip("/")
        if a != "/bin/busybox" and not a.startswith("/usr/bin/perf"):
            entries.append(_Entry(a, "symlink", "/bin/busybox", 0o777))
    return entries


def _init_and_etc_entries(pin: KernelPin) -> list[_Entry]:
    """/init, the helper scripts and the few /etc files busybox and perf read."""
    entries = [_Entry("/init", "bytes", INIT_SCRIPT.encode(), 0o755)]
    for gp, text in guest_helpers().items():
        entries.append(_Entry(gp, "bytes", text.encode(), 0o755))
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
    return entries + [_Entry(p, "bytes", text.encode(), 0o644) for p, text in etc.items()]


def _write_archive(out: Path, entries: list[_Entry], triplet: str) -> int:
    """The cpio archive (standard folders and device nodes first, then the entries sorted by
    path) and manifest.txt next to it; returns the bytes of file content."""
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
    return total


def _check_staged(work: Path, entries: list[_Entry], tree: DebianTree, pr: Progress,
                  programs: list[str]) -> str:
    """Check the result with the loader of the image, from a staged copy of the entries:
    every program in `programs` loads."""
    with tempfile.TemporaryDirectory(dir=work, prefix="stage.") as st:
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
        notes = {_check_with_loader(stage, tree.loader, tree.libdirs, exe, pr)
                 for exe in programs}
        return "; ".join(sorted(notes))
