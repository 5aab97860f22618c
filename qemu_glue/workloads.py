"""The bundled workloads for perf in the Linux guest (`p4pmu demo`, tests/test_linux_perf.py).

Sources in ``qemu_glue/workloads/``; built with the machine's gcc (static, for amd64 and i386;
the 32-bit build needs gcc-multilib, which p4pmu.sh installs) into
``<checkout>/build/workloads/<arch>/`` (or ``~/.cache/p4pmu/workloads/<arch>/`` outside a
checkout).  A build is redone when a source, a flag or the gcc version changes (stamp).

=============  ==============================================================================
``count N``    freestanding loop: 4 instructions and 1 conditional branch per iteration
               (count.S: exact formula)
``branchy N``  freestanding loop with a second, patterned branch: exercises the predictor and
               the branch events (branchy.S)
``hotspots N`` freestanding: ``hot_a`` runs 3N iterations, ``hot_b`` N iterations of the
               same DIV loop, so hot_a takes 3/4 of their clocks (hotspots.S)
``stream N``   freestanding: N passes over an 8 MB buffer, one load per 64-byte line: every
               load misses L1 and L2, every page the DTLB (stream.S: the memory model's counts)
``wstream N``  the same with a store per line: every store misses L2 (a read for ownership)
               and, once L2 is full, replaces a modified sector (two lines written back)
``chase KB N``  freestanding: N iterations of 8 dependent loads over a ring of KB kilobytes
               with a 1 KB stride (4: L1, 128: L2, 16384: memory): the load-to-use latency
               (chase.S)
``memcomp N``   freestanding: ``mem_bound`` (8 dependent loads missing L2 per iteration) and
               ``compute_bound`` (8 dependent IMULs per iteration), N iterations each, the
               same instructions count: a cycles profile splits as their latencies
               (memcomp.S)
``strings N``   freestanding: N rounds of REP STOSB, MOVSB, LODSB, REPE CMPSB and REPNE
               SCASB over 16 KB buffers: time in string microcode (strings.S)
``tcsweep N``   freestanding: N passes through 9 blocks of code in one set of the trace
               cache, more than its ways: 9 trace-cache misses per pass (tcsweep.S)
``rt [-c CPU] CMD...``  run CMD under SCHED_FIFO 99 (busybox has no chrt), optionally pinned
``perf-setup`` the guest settings for perf on the emulated PMU (see the file)
``deterministic-all``, ``-int``, ``-fp``, ``-sse``  (amd64 only) the equivalent of Weaver's
               "deterministic" benchmark (ISPASS 2013), whose retired instructions and branches
               were measured on a Pentium D / Xeon: the same dynamic instruction mix (every
               instruction form as often), branches, system calls and first-touched pages, e.g.
               226,990,030 instructions and 9,240,001 branches for ``-all``; ``-int``: the
               integer sections, ``-fp``: x87 and MMX, ``-sse``: SSE, SSE2 and SSE3.  Generated
               at build time from the facts in deterministic_mix.py by deterministic_gen.py
               (the generated sources go to ``<build>/workloads/generated/``)
=============  ==============================================================================

In the guest the folder goes to ``GUEST_DIR`` (``p4pmu linux --add DIR:/opt/workloads``);
`guest_prelude()` is the shell line that puts it on PATH and runs perf-setup.

The freestanding programs are linked at their own addresses (`Workload.base`) so that no other
program in the guest has branches at the same linear addresses: the modelled branch predictor
is indexed by them (docs/guest-events.md I5).  Their loops are found through global symbols
(``count_loop`` .. ``count_loop_end``, ``branchy_loop`` .. ``branchy_loop_end``, the functions
``hot_a``/``hot_b`` with their sizes, ``det_<section>`` .. ``det_<section>_end`` in the
deterministic ones) that tests read with `symbols`.  The deterministic programs are linked
below 16 MiB (above busybox's 0x400000-0x5fffff), as the original was: the address of one data
cell reaches a single-precision conversion (SSE part, first iteration), exact only below 2^24.
"""
from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

SRC_DIR = Path(__file__).resolve().parent / "workloads"
ARCHES = ("amd64", "i386")
GUEST_DIR = "/opt/workloads"
M_FLAG = {"amd64": "-m64", "i386": "-m32"}


@dataclass(frozen=True)
class Workload:
    name: str
    source: str
    base: int | None  # link address of a freestanding program (None: a libc program / script)
    variant: str | None = None     # source is a generator: the variant it writes (a .S)
    arches: tuple[str, ...] = ARCHES   # the architectures it is built for
    defines: tuple[str, ...] = ()  # preprocessor symbols a .S is built with (a variant of it)


WORKLOADS = (
    Workload("count", "count.S", 0x20000000),
    Workload("branchy", "branchy.S", 0x21000000),
    Workload("hotspots", "hotspots.S", 0x22000000),
    Workload("stream", "stream.S", 0x23000000),
    Workload("chase", "chase.S", 0x24000000),
    Workload("memcomp", "memcomp.S", 0x25000000),
    Workload("strings", "strings.S", 0x26000000),
    Workload("tcsweep", "tcsweep.S", 0x27000000),
    Workload("wstream", "stream.S", 0x28000000, defines=("STREAM_STORES",)),
    Workload("denorm", "denorm.S", 0x29000000),
    Workload("rt", "rt.c", None),
    Workload("perf-setup", "perf-setup", None),
    Workload("deterministic-all", "deterministic_gen.py", 0x00A00000, "all", ("amd64",)),
    Workload("deterministic-int", "deterministic_gen.py", 0x00B00000, "int", ("amd64",)),
    Workload("deterministic-fp", "deterministic_gen.py", 0x00C00000, "fp", ("amd64",)),
    Workload("deterministic-sse", "deterministic_gen.py", 0x00D00000, "sse", ("amd64",)),
)
BY_NAME = {w.name: w for w in WORKLOADS}
EXTRA_SOURCES = ("sys.h", "ring.h", "deterministic_mix.py")

FREESTANDING_FLAGS = ("-static", "-nostdlib", "-no-pie", "-fno-pie", "-Wl,--build-id=none",
                      "-Wl,-z,noexecstack")
LIBC_FLAGS = ("-static", "-O2", "-Wall", "-Wextra", "-Werror")


class WorkloadBuildError(RuntimeError):
    """The workloads cannot be built; the message says what is missing."""


def _source_tree() -> Path | None:
    root = Path(__file__).resolve().parents[1]
    if (root / "pyproject.toml").is_file() and (root / "emulator").is_dir():
        return root
    return None


def build_dir(arch: str) -> Path:
    root = _source_tree()
    if root is not None:
        return root / "build" / "workloads" / arch
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "p4pmu" / "workloads" / arch


def _gcc_version() -> str:
    try:
        r = subprocess.run(["gcc", "--version"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError) as e:
        raise WorkloadBuildError(f"gcc is needed to build the workloads: {e}") from None
    return r.stdout.splitlines()[0] if r.stdout else "?"


def _stamp(arch: str) -> str:
    h = hashlib.sha256()
    for name in sorted({w.source for w in WORKLOADS} | set(EXTRA_SOURCES)):
        h.update(name.encode() + b"\0" + (SRC_DIR / name).read_bytes() + b"\0")
    h.update(repr((FREESTANDING_FLAGS, LIBC_FLAGS, M_FLAG[arch],
                   [(w.name, w.base, w.variant, w.defines) for w in WORKLOADS
                    if arch in w.arches])).encode())
    h.update(_gcc_version().encode())
    return h.hexdigest()[:20]


def generated_dir() -> Path:
    """Where the generated workload sources are written (next to the per-arch folders)."""
    return build_dir("amd64").parent / "generated"


def _generate(w: Workload) -> Path:
    """Run the workload's generator (a sibling module of the sources) into generated_dir()."""
    spec = importlib.util.spec_from_file_location(f"p4pmu_workloads_{w.source[:-3]}",
                                                  SRC_DIR / w.source)
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    out = generated_dir() / f"{w.name}.S"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(gen.generate(w.variant))
    return out


def _compile(w: Workload, arch: str, out: Path) -> None:
    src = _generate(w) if w.variant else SRC_DIR / w.source
    if src.suffix == ".S":
        cmd = ["gcc", M_FLAG[arch], *FREESTANDING_FLAGS, f"-Wl,-Ttext-segment={w.base:#x}",
               f"-I{SRC_DIR}", *(f"-D{d}" for d in w.defines), "-o", str(out), str(src)]
    elif w.source.endswith(".c"):
        cmd = ["gcc", M_FLAG[arch], *LIBC_FLAGS, "-o", str(out), str(src)]
    else:  # a script
        shutil.copyfile(src, out)
        os.chmod(out, 0o755)
        return
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        hint = ""
        if arch == "i386" and w.source.endswith(".c"):
            hint = " (the 32-bit static libc comes with gcc-multilib: apt-get install gcc-multilib)"
        raise WorkloadBuildError(f"building {w.name} for {arch} failed{hint}:\n"
                                 f"  {' '.join(cmd)}\n{r.stderr.strip()}")


def ensure_built(arch: str = "amd64", progress: bool = False) -> Path:
    """Build the workloads for `arch` if missing or stale; return their folder."""
    if arch not in ARCHES:
        raise ValueError(f"arch {arch!r}: expected one of {ARCHES}")
    out = build_dir(arch)
    out.parent.mkdir(parents=True, exist_ok=True)
    want = _stamp(arch)
    stamp = out.parent / f"{arch}.stamp"
    with open(out.parent / f".{arch}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if out.is_dir() and stamp.is_file() and stamp.read_text().strip() == want:
            out.chmod(0o755)  # --add copies the mode: every guest user may run them
            return out
        if progress:
            print(f"p4pmu: building the workloads for {arch} into {out}", file=sys.stderr,
                  flush=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{arch}-", dir=out.parent))
        tmp.chmod(0o755)  # mkdtemp's 0700 would reach the guest through --add
        try:
            for w in WORKLOADS:
                if arch in w.arches:
                    _compile(w, arch, tmp / w.name)
            if out.exists():
                shutil.rmtree(out)
            os.replace(tmp, out)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        stamp.write_text(want + "\n")
    return out


def symbols(path: Path) -> dict[str, tuple[int, int]]:
    """Global symbols of a built workload: name -> (address, size) (binutils' nm)."""
    r = subprocess.run(["nm", "-S", "--defined-only", str(path)], capture_output=True,
                       text=True, check=True)
    out = {}
    for ln in r.stdout.splitlines():
        parts = ln.split()
        if len(parts) == 4 and parts[2] in "TtDdBbRr":
            out[parts[3]] = (int(parts[0], 16), int(parts[1], 16))
        elif len(parts) == 3 and parts[1] in "TtDdBbRr":
            out[parts[2]] = (int(parts[0], 16), 0)
    return out


def code(path: Path, start: int, end: int) -> bytes:
    """The bytes of [start, end) of a freestanding workload's text (linked at Workload.base,
    text at file offset start - base: the ELF maps its first page at base)."""
    data = path.read_bytes()
    w = BY_NAME[path.name]
    assert w.base is not None
    return data[start - w.base:end - w.base]


def guest_prelude() -> str:
    """Shell commands for the guest: the workloads on PATH, perf-setup run."""
    return f"export PATH={GUEST_DIR}:$PATH; perf-setup"


def add_argument(arch: str) -> str:
    """The `p4pmu linux --add` value that brings the workloads into the guest."""
    return f"{ensure_built(arch)}:{GUEST_DIR}"


def main(argv: list[str] | None = None) -> int:
    """python -m p4pmu.qemu_glue.workloads [--arch A]: build and print the folder."""
    argv = sys.argv[1:] if argv is None else argv
    if argv and (len(argv) != 2 or argv[0] != "--arch" or argv[1] not in ARCHES):
        asked = argv in (["-h"], ["--help"])
        print(f"usage: python -m p4pmu.qemu_glue.workloads [--arch {'|'.join(ARCHES)}]\n"
              "build the bundled workloads (both architectures by default) and print their "
              "folder", file=sys.stdout if asked else sys.stderr)
        return 0 if asked else 2
    arches = ARCHES if not argv else [argv[1]]
    for a in arches:
        print(ensure_built(a, progress=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
