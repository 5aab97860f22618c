"""Build the p4pmu QEMU plugin: one shared library made with cffi's embedding mode.

    from p4pmu.plugin.build import plugin_path, ensure_built
    path = ensure_built()          # builds if missing or stale, returns the .so
    qemu ... -plugin {path},model=0F_04,log=/tmp/pmu.log

Where the library goes (`plugin_path()`):

* running from a source tree (this file sits next to ``../pyproject.toml`` and
  ``../emulator/``, as with ``pip install -e .``): ``<repo>/build/plugin/libp4pmu_plugin.so``;
* installed as a normal package: a per-user cache,
  ``$XDG_CACHE_HOME/p4pmu/plugin/<python-tag>-<interpreter hash>/libp4pmu_plugin.so``
  (``~/.cache`` when XDG_CACHE_HOME is unset), because site-packages may not be writable.

`ensure_built()` rebuilds when any plugin source, the Python interpreter (path, version,
libpython) or cffi changed; a stamp file next to the library records what it was built from.

The library links against the shared libpython of the interpreter that builds it and keeps
a RUNPATH to that libpython's directory (QEMU starts the plugin through its own loader, which
ignores LD_LIBRARY_PATH).  The Python side that runs inside QEMU is BOOTSTRAP below (cffi's
embedding init code: finds the package) and `p4pmu.plugin.entry_points` (every other function
the C side calls), around `p4pmu.plugin.bridge`.
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import sys
import sysconfig
import tempfile
from pathlib import Path

PLUGIN_DIR = Path(__file__).resolve().parent
LIB_NAME = "libp4pmu_plugin.so"
MODULE_NAME = "_p4pmu_bridge"
# Every C file of the plugin (one list: what is compiled and what the build stamp covers).
# Each .c is its own translation unit; docs/plugin.md says what each one does.
C_SOURCES = (
    # headers
    "messages.h", "state.h", "qemu_plugin_api.h", "p4pmu_plugin.h", "p4c_api.h", "bridge_types.h",
    "counting_types.h", "registers.h", "python_calls.h", "intercept.h", "install.h", "mirror.h",
    "programs.h", "access_times.h", "pmi.h", "trace.h", "control.h",
    "counting.h", "kinds.h", "batch.h", "classify.h", "predictor.h", "blocks.h", "resolve.h",
    "cuts.h", "fold.h", "deadline.h", "siblings.h", "translate.h", "flush.h", "options.h",
    "memmodel.h", "memory.h", "directions.h", "fp_assist.h",
    # units
    "messages.c", "state.c", "install.c", "registers.c", "python_calls.c", "intercept.c",
    "mirror.c", "programs.c", "access_times.c", "pmi.c", "trace.c", "control.c",
    "counting.c", "kinds.c", "batch.c", "classify.c", "predictor.c", "blocks.c", "resolve.c",
    "cuts.c", "fold.c", "deadline.c", "siblings.c", "translate.c", "flush.c", "options.c",
    "memmodel.c", "memory.c", "directions.c", "fp_assist.c",
)
C_UNITS = tuple(name for name in C_SOURCES if name.endswith(".c"))
GENERATED_HEADER = "p4_tables.h"
OPTIONS_HEADER = "p4_options_gen.h"  # plugin/options.py's table for plugin/options.c
# The header whose marked block declares, once for C and for cffi's cdef, the structs and
# functions Python reaches (p4c_out, p4c_mirror, P4_NCOUNTERS ...).
PYTHON_API_HEADER = "p4c_api.h"
# Compiler warnings: all of -Wall -Wextra; -Wno-unused-parameter because the file cffi
# generates (compiled with the same flags) has unused parameters (our units have none).
WARNINGS = ["-Wall", "-Wextra", "-Wno-unused-parameter"]
STAMP_SUFFIX = ".stamp"


class BuildError(RuntimeError):
    """The plugin cannot be built here; the message says what to install or change."""


# --------------------------------------------------------------------------------------------
# Where
# --------------------------------------------------------------------------------------------


def _source_tree() -> Path | None:
    root = PLUGIN_DIR.parent
    if (root / "pyproject.toml").is_file() and (root / "emulator").is_dir():
        return root
    return None


def _interpreter_tag() -> str:
    exe = os.path.realpath(sys.executable)
    h = hashlib.sha256(f"{exe}|{sys.prefix}|{sys.version}".encode()).hexdigest()[:10]
    return f"py{sys.version_info[0]}{sys.version_info[1]}-{h}"


def plugin_path() -> Path:
    """Path of the plugin library (it may not be built yet: see `ensure_built`)."""
    root = _source_tree()
    if root is not None:
        return root / "build" / "plugin" / LIB_NAME
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "p4pmu" / "plugin" / _interpreter_tag() / LIB_NAME


# --------------------------------------------------------------------------------------------
# What Python we embed
# --------------------------------------------------------------------------------------------


def _debian_dev_package() -> str:
    v = f"{sys.version_info[0]}.{sys.version_info[1]}"
    return f"libpython{v}-dev (or python3-dev)"


def python_build_info() -> dict:
    """The libpython and headers of the running interpreter, or BuildError saying why not."""
    cv = sysconfig.get_config_var
    if not cv("Py_ENABLE_SHARED"):
        raise BuildError(
            f"{sys.executable} is not a shared-libpython build (Py_ENABLE_SHARED=0): the "
            "plugin embeds Python inside QEMU and needs libpython as a shared library. Use a "
            "Python configured with --enable-shared (Debian's /usr/bin/python3 with "
            f"{_debian_dev_package()} installed, or pyenv with "
            "PYTHON_CONFIGURE_OPTS=--enable-shared).")
    libdir = cv("LIBDIR") or ""
    candidates = [cv("INSTSONAME"), cv("LDLIBRARY")]
    multiarch = cv("MULTIARCH")
    dirs = [libdir] + ([os.path.join(libdir, multiarch)] if multiarch else [])
    libpython = None
    for d in dirs:
        for name in candidates:
            if name and os.path.isfile(os.path.join(d, name)):
                libpython = os.path.realpath(os.path.join(d, name))
                break
        if libpython:
            break
    if not libpython:
        raise BuildError(
            f"cannot find the shared libpython of {sys.executable} (looked for "
            f"{', '.join(c for c in candidates if c)} in {', '.join(dirs)}); on Debian "
            f"install {_debian_dev_package()}.")
    include = sysconfig.get_paths()["include"]
    if not os.path.isfile(os.path.join(include, "Python.h")):
        raise BuildError(
            f"Python headers missing ({include}/Python.h): on Debian install "
            f"{_debian_dev_package()}.")
    link_name = f"python{sys.version_info[0]}.{sys.version_info[1]}{sys.abiflags}"
    link_ok = any(os.path.exists(os.path.join(d, f"lib{link_name}.so")) for d in dirs)
    if not link_ok:
        raise BuildError(
            f"lib{link_name}.so (the link-time name of libpython) is missing in "
            f"{', '.join(dirs)}: on Debian install {_debian_dev_package()}.")
    return {"libpython": libpython, "libdir": os.path.dirname(libpython),
            "include": include, "purelib": sysconfig.get_paths()["purelib"]}


# --------------------------------------------------------------------------------------------
# The Python half that cffi runs inside QEMU
# --------------------------------------------------------------------------------------------

BOOTSTRAP = r'''
# cffi's embedding init code: it runs once, before the first call from C.  It defines the one
# entry point whose arguments say where p4pmu is (pypath=), then hands over to the real module,
# p4pmu.plugin.entry_points, which registers the others.
import os
import sys

# numpy's BLAS must not start its own threads inside QEMU: they spin (busy-wait) on the
# host's cores and the PMU model only does small matrix products
for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

from _p4pmu_bridge import ffi, lib

DEFAULT_PYPATH = @DEFAULT_PYPATH@   # site-packages of the interpreter that built the plugin


def _init_failed(exc, value, tb):
    import traceback
    text = "".join(traceback.format_exception(exc, value, tb))
    sys.stderr.write("p4pmu: Python error in plugin initialisation:\n%s" % text)
    return None


@ffi.def_extern(onerror=_init_failed)
def p4pmu_py_init(argc, argv, smp_vcpus, max_vcpus):
    args = [ffi.string(argv[i]).decode("utf-8", "replace") for i in range(argc)]
    given = [a.split("=", 1)[1] for a in args if a.startswith("pypath=")]
    paths = [p for p in (given[-1] if given else DEFAULT_PYPATH).split(os.pathsep) if p]
    import site
    for p in paths:
        site.addsitedir(p)
    try:
        from p4pmu.plugin import entry_points
    except ImportError as e:
        sys.stderr.write(
            "p4pmu: cannot import the p4pmu package inside QEMU (%s).\n"
            "p4pmu: site directories tried: %s\n"
            "p4pmu: pass pypath=DIR (the site-packages where p4pmu and numpy are installed)\n"
            % (e, ", ".join(paths) or "none"))
        return 0
    return entry_points.install(ffi, lib, args, smp_vcpus, max_vcpus)
'''


def _embedding_api() -> str:
    text = (PLUGIN_DIR / "p4pmu_plugin.h").read_text()
    m = re.search(r"/\* BEGIN EMBEDDING API \*/(.*?)/\* END EMBEDDING API \*/", text, re.S)
    if not m:
        raise BuildError("p4pmu_plugin.h lacks the EMBEDDING API block")
    return m.group(1)


def _python_api() -> str:
    """What cffi's cdef reads: the counter count and the block of p4c_api.h (the C units
    include the same header, and the count from the generated p4_tables.h)."""
    text = (PLUGIN_DIR / PYTHON_API_HEADER).read_text()
    m = re.search(r"/\* BEGIN PYTHON API \*/(.*?)/\* END PYTHON API \*/", text, re.S)
    if not m:
        raise BuildError(f"{PYTHON_API_HEADER} lacks the PYTHON API block")
    return _counter_count_define() + m.group(1)


def _counter_count_define() -> str:
    """The counter and ESCR counts, one truth: p4pmu.emulator.tables (NUM_COUNTERS, ESCRS:
    a model has at most that many ESCRs)."""
    from p4pmu.emulator import tables
    return (f"#define P4_NCOUNTERS {tables.NUM_COUNTERS}\n"
            f"#define P4_NESCRS {len(tables.ESCRS)}\n")


def _init_code(info: dict) -> str:
    return BOOTSTRAP.replace("@DEFAULT_PYPATH@", repr(info["purelib"]))


def capstone_info() -> dict:
    """Headers and library of the Capstone 5 wheel (pip package `capstone`, 5.0.x)."""
    try:
        import capstone
    except ImportError:
        raise BuildError("the Python package capstone (5.0.x) is missing: pip install "
                         "'capstone>=5.0,<6' (it ships libcapstone and its headers)") from None
    root = Path(capstone.__file__).resolve().parent
    inc, lib = root / "include", root / "lib"
    if not (inc / "capstone" / "capstone.h").is_file() or not (lib / "libcapstone.so").is_file():
        raise BuildError(f"the capstone package at {root} has no include/capstone/capstone.h "
                         "or lib/libcapstone.so (a wheel of capstone 5.0.x is needed)")
    major = int(capstone.__version__.split(".")[0])
    if major != 5:
        raise BuildError(f"capstone {capstone.__version__} found, the plugin needs 5.0.x "
                         "(QEMU 11.1 loads libcapstone.so.5)")
    return {"include": str(inc), "lib": str(lib), "version": capstone.__version__}


def generated_header() -> str:
    """p4_tables.h: the instruction table and the clock-model parameters (one truth:
    p4pmu.emulator.insn_classes / clockmodel)."""
    sys.path_importer_cache.clear()
    from p4pmu.emulator import fp_assist, insn_classes
    text = insn_classes.c_header() + "\n" + fp_assist.c_table()
    return text + ("\n/* the counter and ESCR counts (p4pmu.emulator.tables) */\n"
                   "#ifndef P4_NCOUNTERS\n" + _counter_count_define() + "#endif\n") + \
        _memory_geometry_table()


def _memory_geometry_table() -> str:
    """The memory model's geometry per CPU model (p4pmu.emulator.models MemoryGeometry), in
    the order of the model option's values (struct mm_params fields), and each model's core
    (the uop counts classification uses)."""
    from p4pmu.emulator.insn_classes import CORES
    from p4pmu.emulator.models import DEFAULT_MODEL, MODELS
    rows = ",\n".join(f"    {m.memory.c_row()} /* {k} */" for k, m in MODELS.items())
    cores = ", ".join(str(CORES.index(m.core)) for m in MODELS.values())
    return ("\n/* memory geometry per CPU model, in the model option's order (struct mm_params) "
            "*/\n#ifndef P4_MM_GEOMETRY\n#define P4_MM_GEOMETRY\n"
            f"#define P4_MM_DEFAULT_MODEL {list(MODELS).index(DEFAULT_MODEL)}\n"
            f"static const unsigned p4_mm_geometry[{len(MODELS)}][9] = {{\n{rows}\n}};\n"
            "/* the core of each CPU model (CpuModel.core: insn_classes.CORES index) */\n"
            f"static const unsigned char p4_model_core[{len(MODELS)}] = {{{cores}}};\n"
            "#endif\n")


def options_header() -> str:
    """p4_options_gen.h: the option table (one truth: p4pmu.plugin.options)."""
    sys.path_importer_cache.clear()
    from p4pmu.plugin import options
    return options.c_header()


def _stamp(info: dict) -> str:
    import cffi
    h = hashlib.sha256()
    for name in C_SOURCES:
        h.update(name.encode())
        h.update((PLUGIN_DIR / name).read_bytes())
    h.update(generated_header().encode())
    h.update(options_header().encode())
    h.update(capstone_info()["version"].encode())
    h.update(_init_code(info).encode())
    for part in (os.path.realpath(sys.executable), sys.prefix, sys.version, info["libpython"],
                 cffi.__version__):
        h.update(part.encode())
    return h.hexdigest()


# --------------------------------------------------------------------------------------------
# Build
# --------------------------------------------------------------------------------------------


def fingerprint(path: Path) -> str:
    """A file's size and a hash of its first and last MB: a truncated or overwritten file
    no longer matches the stamp that recorded it (the plugin, the Linux images: built
    again)."""
    h = hashlib.sha256()
    size = path.stat().st_size
    with open(path, "rb") as f:
        h.update(f.read(1 << 20))
        if size > 1 << 20:
            f.seek(max(1 << 20, size - (1 << 20)))
            h.update(f.read())
    return f"{size}:{h.hexdigest()}"


def _inputs_digest(info: dict) -> str:
    """A digest of every file the stamp is derived from, and more: the C sources, every
    module of p4pmu.emulator and p4pmu.plugin (the generated headers come from some of them;
    this file holds the bootstrap), the interpreter, and where cffi, capstone and numpy are
    installed.  Equal digests mean an equal stamp; computing it costs milliseconds, where the
    stamp's generated headers cost about 0.3 s (numpy and the instruction tables) at every
    `p4pmu qemu`.  A digest that differs only sends the check to the stamp itself."""
    from importlib.util import find_spec
    h = hashlib.sha256()
    files = [PLUGIN_DIR / name for name in C_SOURCES]
    files += sorted(PLUGIN_DIR.glob("*.py"))
    files += sorted((PLUGIN_DIR.parent / "emulator").rglob("*.py"))
    for f in files:
        h.update(str(f).encode())
        h.update(f.read_bytes())
    for pkg in ("cffi", "capstone", "numpy"):
        spec = find_spec(pkg)
        origin = Path(spec.origin) if spec and spec.origin else None
        st = origin.stat() if origin and origin.is_file() else None
        h.update(f"{pkg}:{origin}:{st.st_size if st else 0}:{st.st_mtime_ns if st else 0}"
                 .encode())
    for part in (os.path.realpath(sys.executable), sys.prefix, sys.version, info["libpython"]):
        h.update(part.encode())
    return h.hexdigest()


def _stamp_lines(path: Path, stamp: Path) -> list[str]:
    """The stamp file's lines (the stamp, the plugin's fingerprint, the inputs' digest), or
    [] when the plugin or the stamp is missing or the plugin is not the file it recorded."""
    if not path.is_file() or not stamp.is_file():
        return []
    lines = stamp.read_text().split()
    return lines if len(lines) == 3 and lines[1] == fingerprint(path) else []


def _up_to_date(path: Path, stamp: Path, info: dict) -> bool:
    """The plugin at `path` was built from these sources and is intact: by the inputs'
    digest when it is unchanged, else by the stamp (then the new digest is recorded)."""
    lines = _stamp_lines(path, stamp)
    if not lines:
        return False
    digest = _inputs_digest(info)
    if lines[2] == digest:
        return True
    if lines[0] != _stamp(info):
        return False
    stamp.write_text(f"{lines[0]}\n{lines[1]}\n{digest}\n")
    return True


def is_stale(path: Path | None = None) -> bool:
    path = Path(path) if path else plugin_path()
    stamp = path.with_name(path.name + STAMP_SUFFIX)
    return not _up_to_date(path, stamp, python_build_info())


def write_generated_headers(gen: Path) -> None:
    """p4_tables.h and p4_options_gen.h into the folder `gen` (made if missing)."""
    gen.mkdir(exist_ok=True)
    (gen / GENERATED_HEADER).write_text(generated_header())
    (gen / OPTIONS_HEADER).write_text(options_header())


def unit_compile_options(info: dict, gen: Path) -> dict:
    """How each C unit is compiled: include_dirs, define_macros, extra_compile_args (the
    generated headers in `gen`: write_generated_headers)."""
    return {
        "include_dirs": [str(PLUGIN_DIR), str(gen), capstone_info()["include"]],
        "define_macros": [("P4PMU_LIBPYTHON", '"%s"' % info["libpython"])],
        "extra_compile_args": ["-O2", "-flto=auto", "-fvisibility=hidden"] + WARNINGS,
    }


def _compile(info: dict, workdir: Path, progress: bool, outdir: Path) -> Path:
    import cffi
    cs = capstone_info()
    gen = workdir / "gen"
    write_generated_headers(gen)
    ffi = cffi.FFI()
    ffi.embedding_api(_embedding_api())
    ffi.cdef(_python_api())
    # libcapstone.so.5: QEMU 11.1 has normally loaded its own already (same major version,
    # the plugin then shares it); for a QEMU without Capstone the RUNPATH finds the wheel's
    # copy through a libcapstone.so.5 link next to the plugin.
    ffi.set_source(
        MODULE_NAME,
        f'#include "{PYTHON_API_HEADER}"\n',
        sources=[str(PLUGIN_DIR / name) for name in C_UNITS],
        **unit_compile_options(info, gen),
        # -flto at both steps: the hot callbacks inline helpers of other units, as in one unit
        extra_link_args=["-O2", "-flto=auto", f"-Wl,-rpath,{info['libdir']}",
                         f"-Wl,-rpath,{outdir}", "-Wl,--enable-new-dtags", f"-L{cs['lib']}",
                         "-lcapstone", "-ldl", "-lpthread"],
    )
    ffi.embedding_init_code(_init_code(info))
    out = ffi.compile(tmpdir=str(workdir), target=LIB_NAME[:-3] + ".*", verbose=progress)
    return Path(out)


def ensure_built(progress: bool = True) -> Path:
    """Build the plugin if it is missing or stale; return its path.

    Raises BuildError with an actionable message when this Python cannot be embedded
    (not a shared-libpython build, headers or the libpython link name missing)."""
    info = python_build_info()
    path = plugin_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    stamp_path = path.with_name(path.name + STAMP_SUFFIX)
    with open(path.with_name(path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _up_to_date(path, stamp_path, info):
            return path
        want = _stamp(info)
        if progress:
            print(f"p4pmu: building the QEMU plugin {path} (Python {sys.version.split()[0]}, "
                  f"{info['libpython']})", file=sys.stderr)
        with tempfile.TemporaryDirectory(prefix="p4pmu-plugin-") as tmp:
            try:
                built = _compile(info, Path(tmp), progress, path.parent)
            except Exception as e:  # distutils/setuptools CompileError, LinkError, ...
                raise BuildError(f"building the plugin failed: {e}") from e
            partial = path.with_name(path.name + ".new")
            shutil.copyfile(built, partial)
            os.chmod(partial, 0o755)
            os.replace(partial, path)
            link = path.parent / "libcapstone.so.5"
            target = Path(capstone_info()["lib"]) / "libcapstone.so"
            if link.is_symlink() or link.exists():
                link.unlink()
            link.symlink_to(target)
        stamp_path.write_text(f"{want}\n{fingerprint(path)}\n{_inputs_digest(info)}\n")
    return path


def main(argv: list[str] | None = None) -> int:
    """python -m p4pmu.plugin.build [--force] [--quiet]: build and print the path."""
    argv = sys.argv[1:] if argv is None else argv
    if "--force" in argv:
        p = plugin_path()
        for f in (p, p.with_name(p.name + STAMP_SUFFIX)):
            if f.exists():
                f.unlink()
    try:
        print(ensure_built(progress="--quiet" not in argv))
    except BuildError as e:
        print(f"p4pmu: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
