"""The shared libraries a host-built program needs in the Linux guest (`p4pmu linux --add`).

The guest image carries the libraries its perf needs, from the Debian release of its kernel
(5.10: Debian 11's glibc 2.31).  A program built on the host is linked against the host's
libraries, usually newer ones: run as is, it fails in the guest with "version `GLIBC_2.34'
not found".  So before boot, every dynamically linked ELF file among the --add files is
resolved the way the host's loader resolves it (``ld.so --list``: the user's
LD_LIBRARY_PATH, the loader cache, RUNPATH), and each library it reaches is taken

- from the image, when the image has it and it defines every symbol version that the
  program and its other libraries need from it (System V ABI symbol versioning);
- from the host otherwise, at the image's path for that soname (replacing the image's copy)
  or in /usr/lib/<multiarch triplet>/.

glibc's libraries and its loader must come from one build (they share private interfaces),
so when one of them has to come from the host, all of them do: the guest then runs the
host's glibc, perf included (glibc keeps old programs working: perf needs nothing newer
than its own release's).  A program the guest cannot run -- another architecture, another
loader, a library that neither side has -- is refused before boot with what to do.
Statically linked programs need nothing and are left alone.
"""
from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from p4pmu.qemu_glue.errors import UsageError
from p4pmu.qemu_glue.linux_image.cpio import read_members
from p4pmu.qemu_glue.linux_image.elf import Elf
from p4pmu.qemu_glue.linux_image.root_tree import arch_layout

# glibc's libraries (one build: loader and libraries use each other's GLIBC_PRIVATE symbols)
GLIBC_SONAMES = frozenset((
    "libc.so.6", "libm.so.6", "libmvec.so.1", "libpthread.so.0", "libdl.so.2", "librt.so.1",
    "libresolv.so.2", "libutil.so.1", "libanl.so.1", "libBrokenLocale.so.1", "libnsl.so.1",
    "libnss_files.so.2", "libnss_dns.so.2", "libnss_compat.so.2", "libnss_hesiod.so.2",
    "libthread_db.so.1", "libc_malloc_debug.so.0", "libcidn.so.1",
    "ld-linux-x86-64.so.2", "ld-linux.so.2"))
_ELF_MACHINES = {3: "32-bit x86 (i386)", 62: "64-bit x86 (x86-64)"}
_ET_EXEC, _ET_DYN = 2, 3


@dataclass
class LibraryPlan:
    """What goes into the guest besides the --add files: guest path -> host file."""
    files: dict[str, Path] = field(default_factory=dict)
    links: dict[str, str] = field(default_factory=dict)  # guest path -> symlink target
    host_glibc: bool = False  # the host's glibc replaces the image's
    notes: list[str] = field(default_factory=list)

    def total_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.files.values())


@dataclass(frozen=True)
class _ImageLib:
    guest_path: str  # the real file's guest path ("/lib/x86_64-linux-gnu/libc.so.6")
    versions: frozenset[str]


@lru_cache(maxsize=4)
def image_libraries(initrd: Path) -> dict[str, _ImageLib]:
    """soname -> the image's library (shared objects in the image's initramfs)."""
    out: dict[str, _ImageLib] = {}
    for m in read_members(initrd.read_bytes()):
        if (m.mode & 0o170000) != 0o100000 or not m.data.startswith(b"\x7fELF"):
            continue
        try:
            elf = Elf(m.data)
        except (ValueError, IndexError):
            continue
        so = elf.soname()
        if so and so not in out:
            out[so] = _ImageLib("/" + m.name, frozenset(elf.version_defs()))
    return out


def _added_elves(adds) -> list[tuple[Path, str]]:
    """(host file, guest path) of every ELF file among the --add files."""
    out = []
    for spec in adds:
        if spec.host.is_dir():
            base = spec.host.resolve()
            for d, dirs, files in os.walk(base):
                dirs.sort()
                for name in sorted(files):
                    hp = Path(d) / name
                    if hp.is_symlink() or not hp.is_file():
                        continue
                    gp = os.path.normpath(os.path.join(spec.guest, os.path.relpath(hp, base)))
                    out.append((hp, gp))
        else:
            out.append((spec.host, spec.guest))
    elves = []
    for hp, gp in out:
        try:
            with open(hp, "rb") as f:
                if f.read(4) != b"\x7fELF":
                    continue
        except OSError as e:
            raise UsageError(f"--add: cannot read {hp}: {e.strerror}") from None
        elves.append((hp, gp))
    return elves


def _host_resolution(loader: str, obj: Path) -> dict[str, str | None]:
    """soname -> host path (None: not found) of every library the host's loader loads for
    `obj` (``ld.so --list``, what ldd runs; the program's own code does not run)."""
    try:
        p = subprocess.run([loader, "--list", str(obj.absolute())], capture_output=True, text=True,
                           timeout=60, env={**os.environ, "LC_ALL": "C"})
    except OSError as e:
        raise UsageError(f"--add {obj}: the host cannot run its loader {loader} to find the "
                         f"libraries it needs ({e.strerror}); link it with -static") from None
    except subprocess.TimeoutExpired:
        raise UsageError(f"--add {obj}: {loader} --list did not finish") from None
    out: dict[str, str | None] = {}
    for ln in p.stdout.splitlines():
        if "=>" not in ln:
            continue
        name, rest = (s.strip() for s in ln.split("=>", 1))
        out[name] = None if rest.startswith("not found") else rest.split(" (", 1)[0].strip()
    if p.returncode != 0 and not out:
        raise UsageError(f"--add {obj}: {loader} --list failed: "
                         f"{(p.stderr or p.stdout).strip()[-300:]}")
    return out


def _check_runnable(elf: Elf, hp: Path, arch: str, machine: int, loader: str) -> bool:
    """Whether `elf` is dynamically linked; UsageError when the guest cannot run it."""
    if elf.machine not in _ELF_MACHINES:
        raise UsageError(f"--add {hp}: an ELF file for another processor (e_machine "
                         f"{elf.machine}): the guest is {arch}")
    dynamic = bool(elf.interp() or elf.needed())
    if elf.machine != machine:
        what = _ELF_MACHINES[elf.machine]
        if not dynamic and arch == "amd64":
            return False  # a static 32-bit program runs on the 64-bit kernel
        other = "i386" if elf.machine == 3 else "amd64"
        raise UsageError(f"--add {hp}: a {what} {'program' if dynamic else 'file'}, which the "
                         f"{arch} guest cannot run{' with its libraries' if dynamic else ''}: "
                         f"use --arch {other}" + (" or link it with -static" if dynamic else ""))
    interp = elf.interp()
    if interp and os.path.basename(interp) != os.path.basename(loader):
        raise UsageError(f"--add {hp}: its loader is {interp}; the guest's is {loader} (a "
                         "program for another C library?): link it with -static")
    return dynamic


def plan_libraries(adds, initrd: Path, arch: str) -> LibraryPlan:
    """The libraries the --add files need from the host (see the module doc)."""
    triplet, loader, _cls, machine = arch_layout(arch)
    plan = LibraryPlan()
    dynamic = []
    for hp, _gp in _added_elves(adds):
        try:
            elf = Elf(hp.read_bytes())
        except (ValueError, IndexError, OSError):
            continue
        if elf.type in (_ET_EXEC, _ET_DYN) and _check_runnable(elf, hp, arch, machine, loader):
            dynamic.append((hp, elf))
    if not dynamic:
        return plan
    added_hosts = {hp.resolve() for hp, _ in _added_elves(adds)}
    found: dict[str, Path] = {}  # soname -> host file, outside the --add files
    needs: dict[str, set[str]] = {}  # soname -> versions needed from it
    objects = [elf for _, elf in dynamic]
    for hp, elf in dynamic:
        host_loader = elf.interp() or loader
        for so, where in _host_resolution(host_loader, hp).items():
            if where is None:
                raise UsageError(f"--add {hp}: it needs {so}, which the host's loader does not "
                                 "find either: add the library with --add (or set "
                                 "LD_LIBRARY_PATH as you would to run it on the host)")
            path = Path(where).resolve()
            if path in added_hosts or so in found:
                continue
            found[so] = path
            objects.append(Elf(path.read_bytes()))
    for elf in objects:
        for so, vers in elf.version_needs().items():
            needs.setdefault(so, set()).update(vers)
    image = image_libraries(initrd)
    from_host = {so for so in found
                 if so not in image or not needs.get(so, set()) <= image[so].versions}
    libdir = f"/usr/lib/{triplet}"
    if from_host & GLIBC_SONAMES:
        plan.host_glibc = True
        libdir = _take_host_glibc(plan, found, image, loader, triplet)
    for so in sorted(from_host - GLIBC_SONAMES):
        gp = image[so].guest_path if so in image else f"{libdir}/{so}"
        plan.files[gp] = found[so]
        missing = sorted(needs.get(so, set()) - (image[so].versions if so in image else set()))
        plan.notes.append(f"{so} from the host ({found[so]})" +
                          (f": the guest's lacks {', '.join(missing)}" if so in image else ""))
    return plan


def _take_host_glibc(plan: LibraryPlan, found: dict[str, Path], image: dict[str, _ImageLib],
                     loader: str, triplet: str) -> str:
    """Every glibc library of the image, and its loader, replaced by the host's; returns the
    guest folder for the other host libraries.  A host loader whose own search path is not
    the image's (Debian's 32-bit multilib glibc searches /lib32 and /usr/lib32, the image
    /lib/i386-linux-gnu) gets its glibc in its own folder and a link there to every other
    library of the image."""
    libc = found.get("libc.so.6")
    if libc is None:
        raise UsageError("--add: a glibc library must come from the host, but the host's "
                         "libc.so.6 was not found among the program's libraries")
    host_dir = libc.parent
    ld_name = os.path.basename(loader)
    for so in sorted(GLIBC_SONAMES & set(image)):
        host = found.get(so) or host_dir / so
        if so == ld_name:
            host = found.get(so) or _host_loader(loader, host_dir)
        if not host.exists():
            raise UsageError(f"--add: the host's glibc replaces the guest's, but the host has no "
                             f"{so} beside {libc} (the guest's perf needs it)")
        plan.files[image[so].guest_path] = host.resolve()
    # the loader at the path programs name (PT_INTERP), whatever the image's layout
    plan.files[loader] = _host_loader(loader, host_dir)
    plan.files.setdefault(f"/lib/{triplet}/{ld_name}", plan.files[loader])
    plan.notes.append(f"glibc from the host ({libc}): the guest's is older than the program "
                      "needs; perf runs with it too")
    own = str(host_dir)
    if own in (f"/lib/{triplet}", f"/usr/lib/{triplet}", "/lib", "/usr/lib"):
        return f"/usr/lib/{triplet}"
    for so, lib in sorted(image.items()):
        if so in GLIBC_SONAMES:
            host = found.get(so) or host_dir / so
            if host.exists():
                plan.files[f"{own}/{so}"] = host.resolve()
        else:
            plan.links[f"{own}/{so}"] = lib.guest_path
    return own


def _host_loader(loader: str, host_dir: Path) -> Path:
    for cand in (host_dir / os.path.basename(loader), Path(loader)):
        if cand.exists():
            return cand.resolve()
    raise UsageError(f"--add: the host has no loader {loader} beside {host_dir}")
