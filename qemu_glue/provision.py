"""Get a plugin-capable QEMU 11.1.x for the host.

Order of preference (`find_qemu` / `ensure_qemu`):

1. ``$P4PMU_QEMU``: an explicit qemu-system-x86_64 binary; it must be 11.1.x with plugins.
2. ``qemu-system-x86_64`` on ``PATH`` if it is 11.1.x and accepts ``-plugin``.
3. A per-user cache, ``$XDG_CACHE_HOME/p4pmu/qemu-<version>/`` (``~/.cache`` by default),
   filled from Debian's trixie-backports by ``ensure_qemu``:

   - a private apt configuration under ``<cache>/p4pmu/apt/`` (its own sources list naming
     trixie and trixie-backports, its own lists, an empty dpkg status, its own archive
     directory, no recommends, none of the system's apt.conf.d hooks), so nothing is
     installed or changed system-wide;
   - ``apt-get update`` and ``apt-get install --download-only -t trixie-backports
     qemu-system-x86=<QEMU_DEB_VERSION>``: apt checks the archive's signatures against the
     system's Debian archive keyring (bookworm's ``debian-archive-keyring`` carries the trixie
     keys) and every package against the signed index; the files are checked once more
     against the SHA-256 that apt announced before they are unpacked;
   - ``dpkg-deb -x`` of every package into ``qemu-<version>/root``;
   - a check that the unpacked QEMU runs, is the pinned version and accepts ``-plugin``;
   - ``qemu-<version>/stamp`` written last (JSON: pinned version, package list with
     SHA-256). A folder without a stamp is a half-finished provisioning: it is wiped and
     redone. Downloaded packages stay in ``<cache>/p4pmu/apt/archives`` so a redo needs no
     second download (apt re-verifies them against the signed index).

That QEMU needs glibc 2.41 (newer than bookworm's), so it runs through the tree's own loader:
``ROOT/usr/lib64/ld-linux-x86-64.so.2 --library-path ROOT/usr/lib/x86_64-linux-gnu
ROOT/usr/bin/qemu-system-x86_64 -L ROOT/usr/share/qemu -L ROOT/usr/share/seabios``
(`Qemu.argv_prefix` and `Qemu.data_dirs`).

Works as root and as an ordinary user (apt-get ``--download-only`` with private directories
needs no privileges).  Every failure raises `ProvisionError` with what went wrong and what to
do about it.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

# The one pin.  trixie-backports keeps only its newest build: when Debian replaces this one,
# `apt-get install` reports "Version ... was not found" and this constant must be moved on
# (`apt-cache policy qemu-system-x86` with the private configuration shows what is there:
# `python -m p4pmu.qemu_glue.provision --policy`).
QEMU_DEB_VERSION = "1:11.1.3+ds-1~bpo13+1"
QEMU_DEB_PACKAGE = "qemu-system-x86"
QEMU_SERIES = (11, 1)  # any 11.1.x qualifies for a system QEMU

DEBIAN_MIRROR = "http://deb.debian.org/debian"
DEBIAN_SECURITY_MIRROR = "http://deb.debian.org/debian-security"  # the *-security suites
DEBIAN_SUITES = ("trixie", "trixie-backports")
DEBIAN_TARGET_RELEASE = "trixie-backports"
DEBIAN_KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")

# amd64 only: the loader and library folder of the unpacked tree.
_HOST_ARCHES = {"x86_64": ("amd64", "x86_64-linux-gnu", "ld-linux-x86-64.so.2")}

_MIN_FREE_BYTES = 400 * 1024 * 1024  # ~40 MB of packages + ~175 MB tree + indexes, with room
_STAMP_FORMAT = 1
_VERSION_RE = re.compile(r"QEMU emulator version (\d+)\.(\d+)\.(\d+)\S*(?:\s+\(([^)]*)\))?")


class ProvisionError(RuntimeError):
    """Getting QEMU failed; the message says what went wrong and what to do."""


@dataclass
class Qemu:
    """A runnable qemu-system-x86_64.

    ``argv_prefix`` starts a command line (the loader, ``--library-path`` and the binary for a
    provisioned QEMU; just the binary for a system QEMU); ``data_dirs`` are the ``-L``
    folders (empty for a system QEMU, which knows its own); ``root`` is the unpacked tree
    (None for a system QEMU); ``version`` is the upstream version ("11.1.3");
    ``package_version`` the Debian one when known; ``source`` says where it came from
    ("env", "system" or "cache").
    """

    binary: Path
    argv_prefix: list[str]
    data_dirs: list[Path]
    version: str
    root: Path | None = None
    package_version: str | None = None
    source: str = "system"

    def data_dir_args(self) -> list[str]:
        out: list[str] = []
        for d in self.data_dirs:
            out += ["-L", str(d)]
        return out

    def argv(self, *args: str) -> list[str]:
        """A full command line: the prefix, the -L folders, then ``args``."""
        return [*self.argv_prefix, *self.data_dir_args(), *args]


# --------------------------------------------------------------------------------------------
# Paths and progress


def cache_root() -> Path:
    """``$XDG_CACHE_HOME/p4pmu`` (``~/.cache/p4pmu`` when unset)."""
    base = os.environ.get("XDG_CACHE_HOME") or ""
    if not base or not os.path.isabs(base):  # the XDG spec says: ignore relative paths
        base = os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "p4pmu"


def _dir_version(deb_version: str) -> str:
    """The folder-name form of a Debian version: no epoch (':' would break --library-path)."""
    return deb_version.split(":", 1)[-1]


def qemu_cache_dir(deb_version: str = QEMU_DEB_VERSION) -> Path:
    return cache_root() / f"qemu-{_dir_version(deb_version)}"


def upstream_version(deb_version: str = QEMU_DEB_VERSION) -> str:
    """'1:11.1.3+ds-1~bpo13+1' -> '11.1.3'."""
    v = deb_version.split(":", 1)[-1]
    return re.split(r"[+~-]", v, maxsplit=1)[0]


class Progress:
    """Progress lines on stderr; one rewritten line on a terminal."""

    def __init__(self, enabled: bool, stream=None):
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.tty = enabled and hasattr(self.stream, "isatty") and self.stream.isatty()
        self._open = False

    def say(self, msg: str) -> None:
        if not self.enabled:
            return
        self._end()
        print(f"p4pmu: {msg}", file=self.stream, flush=True)

    def step(self, msg: str, i: int, n: int) -> None:
        """Item i of n: rewritten in place on a terminal, every ~10% otherwise."""
        if not self.enabled:
            return
        if self.tty:
            line = f"p4pmu: {msg}"
            cols = shutil.get_terminal_size((100, 20)).columns
            self.stream.write("\r\033[K" + line[: cols - 1])
            self.stream.flush()
            self._open = True
            if i >= n:
                self._end()
        elif i == 1 or i >= n or i % max(1, n // 10) == 0:
            print(f"p4pmu: {msg}", file=self.stream, flush=True)

    def _end(self) -> None:
        if self._open:
            self.stream.write("\n")
            self.stream.flush()
            self._open = False


def megabytes(n: int) -> str:
    """A byte count for messages: "12.3 MB"."""
    return f"{n / 1e6:.1f} MB"


# --------------------------------------------------------------------------------------------
# Probing a QEMU binary


def _probe(argv_prefix: list[str], data_dirs: Iterable[Path] = ()
           ) -> tuple[tuple[int, int, int], str | None, bool]:
    """Run ``--version`` and ``-plugin help``: ((major, minor, micro), debian_version, plugins)."""
    try:
        out = subprocess.run([*argv_prefix, "--version"], capture_output=True, text=True,
                             timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ProvisionError(f"cannot run {' '.join(argv_prefix)} --version: {e}") from e
    m = _VERSION_RE.search(out.stdout)
    if out.returncode != 0 or not m:
        detail = (out.stderr or out.stdout).strip().splitlines()
        raise ProvisionError(
            f"{' '.join(argv_prefix)} --version failed (exit {out.returncode}): "
            f"{detail[-1] if detail else 'no output'}")
    ver = (int(m.group(1)), int(m.group(2)), int(m.group(3)))
    deb = None
    if m.group(4) and m.group(4).startswith("Debian "):
        deb = m.group(4)[len("Debian "):].strip()
    # `-plugin help` lists the plugin options and exits 0 on a QEMU built with plugins; a QEMU
    # built without them (--disable-plugins) rejects -plugin as an invalid option.
    dargs: list[str] = []
    for d in data_dirs:
        dargs += ["-L", str(d)]
    try:
        ph = subprocess.run([*argv_prefix, *dargs, "-plugin", "help"], capture_output=True,
                            text=True, timeout=30)
        plugins = ph.returncode == 0 and "Plugin options" in ph.stdout
    except (OSError, subprocess.TimeoutExpired):
        plugins = False
    return ver, deb, plugins


def _qualifies(ver: tuple[int, int, int]) -> bool:
    return ver[:2] == QEMU_SERIES


def _external_qemu(binary: str, source: str) -> Qemu:
    ver, deb, plugins = _probe([binary])
    vs = ".".join(map(str, ver))
    if not _qualifies(ver):
        raise ProvisionError(
            f"{binary} is QEMU {vs}; p4pmu needs {QEMU_SERIES[0]}.{QEMU_SERIES[1]}.x "
            "(plugin API v7 with register writes)")
    if not plugins:
        raise ProvisionError(
            f"{binary} (QEMU {vs}) was built without TCG plugin support (-plugin is not "
            "accepted); use a build configured with --enable-plugins")
    return Qemu(binary=Path(binary), argv_prefix=[binary], data_dirs=[], version=vs,
                root=None, package_version=deb, source=source)


def _env_qemu() -> Qemu | None:
    path = os.environ.get("P4PMU_QEMU")
    if not path:
        return None
    resolved = shutil.which(path) if os.sep not in path else path
    if not resolved or not os.access(resolved, os.X_OK):
        raise ProvisionError(f"P4PMU_QEMU={path} is not an executable file; unset it to let "
                             "p4pmu find or provision QEMU")
    try:
        return _external_qemu(os.path.abspath(resolved), "env")
    except ProvisionError as e:
        raise ProvisionError(f"P4PMU_QEMU: {e}; unset P4PMU_QEMU to let p4pmu provision "
                             "QEMU itself") from None


def _system_qemu() -> tuple[Qemu | None, str | None]:
    """The PATH QEMU if it qualifies, else (None, why not)."""
    path = shutil.which("qemu-system-x86_64")
    if not path:
        return None, None
    try:
        return _external_qemu(path, "system"), None
    except ProvisionError as e:
        return None, str(e)


# --------------------------------------------------------------------------------------------
# The cached tree


def _host_arch() -> tuple[str, str, str]:
    mach = platform.machine()
    if mach not in _HOST_ARCHES:
        raise ProvisionError(
            f"unsupported host architecture {mach!r}: p4pmu provisions QEMU only from Debian's "
            "amd64 packages. Install QEMU 11.1.x built with --enable-plugins and put "
            "qemu-system-x86_64 on PATH (or set P4PMU_QEMU to it)")
    return _HOST_ARCHES[mach]


def _tree_qemu(root: Path, deb_version: str) -> Qemu:
    _, triplet, loader = _host_arch()
    binary = root / "usr/bin/qemu-system-x86_64"
    prefix = [str(root / "usr/lib64" / loader), "--library-path", str(root / "usr/lib" / triplet),
              str(binary)]
    return Qemu(binary=binary, argv_prefix=prefix,
                data_dirs=[root / "usr/share/qemu", root / "usr/share/seabios"],
                version=upstream_version(deb_version), root=root,
                package_version=deb_version, source="cache")


def _read_stamp(vdir: Path) -> dict | None:
    try:
        data = json.loads((vdir / "stamp").read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _cached_qemu(deb_version: str = QEMU_DEB_VERSION) -> Qemu | None:
    """The cached tree if its stamp is complete and names the pinned version."""
    vdir = qemu_cache_dir(deb_version)
    st = _read_stamp(vdir)
    if not st or st.get("version") != deb_version or st.get("format") != _STAMP_FORMAT:
        return None
    q = _tree_qemu(vdir / "root", deb_version)
    if not (q.binary.is_file() and Path(q.argv_prefix[0]).exists()):
        return None
    return q


def cache_state(deb_version: str = QEMU_DEB_VERSION) -> str:
    """'complete', 'missing' or 'incomplete' (a folder without a valid stamp)."""
    vdir = qemu_cache_dir(deb_version)
    if not vdir.exists():
        return "missing"
    return "complete" if _cached_qemu(deb_version) else "incomplete"


def find_qemu() -> Qemu | None:
    """A usable QEMU without downloading anything: $P4PMU_QEMU, a qualifying system QEMU, or
    a complete cache; None otherwise.  Raises ProvisionError only for a bad $P4PMU_QEMU."""
    q = _env_qemu()
    if q:
        return q
    q, _ = _system_qemu()
    if q:
        return q
    with contextlib.suppress(ProvisionError):  # unsupported arch: nothing cached either
        return _cached_qemu()
    return None



def finish_cache(vdir: Path, stamp: dict, apt, debs) -> None:
    """Write `vdir/stamp` last and atomically (a cache folder without it is redone), keep only
    these packages in the apt archive and drop the apt indexes (refreshed by every build)."""
    tmp = vdir / "stamp.tmp"
    tmp.write_text(json.dumps(stamp, indent=1) + "\n")
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, vdir / "stamp")
    keep = {d.filename for d in debs}
    for f in apt.archives.glob("*.deb"):  # older pins' packages
        if f.name not in keep:
            f.unlink(missing_ok=True)
    for sub in ("lists", "cache"):
        shutil.rmtree(apt.base / sub, ignore_errors=True)

def ensure_qemu(progress: bool = True) -> Qemu:
    """`find_qemu`, or provision the pinned Debian QEMU into the cache (see the module doc)."""
    q = _env_qemu()
    if q:
        return q
    q, why_not = _system_qemu()
    if q:
        return q
    with contextlib.suppress(ProvisionError):
        q = _cached_qemu()
        if q:
            return q
    pr = Progress(progress)
    if why_not:
        pr.say(f"not using the system QEMU: {why_not}")
    return provision(QEMU_DEB_VERSION, pr)


# --------------------------------------------------------------------------------------------
# Provisioning


@dataclass
class _Deb:
    uri: str
    filename: str
    size: int
    sha256: str
    name: str = ""
    version: str = ""
    hit: bool = False  # already in the archive folder with the right checksum


@dataclass
class AptEnv:
    """apt-get and apt-cache under a private configuration rooted in `base`: its own sources
    (`suites` of Debian's archive, signed-by the system's Debian keyring), lists, empty dpkg
    status and archive folder; none of the system's apt configuration but its proxy settings.
    QEMU's provisioning and the Linux guest images (p4pmu.qemu_glue.linux_image.packages)
    both fetch through it."""
    base: Path  # <cache>/p4pmu/apt
    arch: str  # Debian architecture of the packages
    suites: tuple[str, ...] = DEBIAN_SUITES
    conf: Path = field(init=False)

    def __post_init__(self):
        self.conf = self.base / "apt.conf"

    @property
    def archives(self) -> Path:
        return self.base / "archives"

    def prepare(self) -> None:
        b = self.base
        for d in ("etc/apt.conf.d", "etc/preferences.d", "etc/trusted.gpg.d",
                  "etc/sources.list.d", "etc/auth.conf.d", "lists/partial",
                  "archives/partial", "cache", "log"):
            (b / d).mkdir(parents=True, exist_ok=True)
        (b / "status").write_text("")  # an empty dpkg database: apt resolves everything
        (b / "etc/sources.list").write_text("".join(
            f"deb [signed-by={DEBIAN_KEYRING}] {_mirror(s)} {s} main\n" for s in self.suites))

        def q(p) -> str:
            return '"' + str(p).replace('"', '') + '"'

        lines = [
            "// p4pmu's private apt configuration (written by p4pmu.qemu_glue.provision).",
            "// None of the system's apt configuration is read (no hooks, no sources); only",
            "// its proxy settings are copied here.",
            f"Dir::Etc::main {q('/dev/null')};",
            f"Dir::Etc::parts {q(b / 'etc/apt.conf.d')};",
            f"Dir::Etc::sourcelist {q(b / 'etc/sources.list')};",
            f"Dir::Etc::sourceparts {q(b / 'etc/sources.list.d')};",
            f"Dir::Etc::preferences {q('/dev/null')};",
            f"Dir::Etc::preferencesparts {q(b / 'etc/preferences.d')};",
            f"Dir::Etc::trusted {q('/dev/null')};",
            f"Dir::Etc::trustedparts {q(b / 'etc/trusted.gpg.d')};",
            f"Dir::Etc::netrc {q('/dev/null')};",
            f"Dir::Etc::netrcparts {q(b / 'etc/auth.conf.d')};",
            f"Dir::State {q(b)};",
            f"Dir::State::Lists {q(b / 'lists')};",
            f"Dir::State::status {q(b / 'status')};",
            f"Dir::State::extended_states {q(b / 'extended_states')};",
            f"Dir::Cache {q(b / 'cache')};",
            f"Dir::Cache::archives {q(b / 'archives')};",
            f"Dir::Log {q(b / 'log')};",
            f"APT::Architecture {q(self.arch)};",
            f"APT::Architectures {{ {q(self.arch)}; }};",
            'APT::Install-Recommends "false";',
            'APT::Install-Suggests "false";',
            'APT::Get::AllowUnauthenticated "false";',
            'Acquire::AllowInsecureRepositories "false";',
            'Acquire::AllowDowngradeToInsecureRepositories "false";',
            'Acquire::Languages "none";',
            'Acquire::GzipIndexes "true";',
            'Acquire::Retries "2";',
            'Acquire::http::Timeout "30";',
            'Acquire::https::Timeout "30";',
            'Binary::apt-get::Acquire::AllowInsecureRepositories "false";',
        ]
        if os.geteuid() == 0:
            # The cache usually lives in root's 0700 home, where apt's download sandbox user
            # (_apt) cannot write; downloading as root avoids apt's warning about it.  The
            # signature and checksum checks are the same.
            lines.append('APT::Sandbox::User "root";')
        lines += _system_proxy_settings()
        self.conf.write_text("\n".join(lines) + "\n")
        os.chmod(self.conf, 0o600)  # may carry a proxy URL

    def unpack(self, debs: Iterable, dest: Path, pr: Progress, label: str,
               error: type[Exception] = ProvisionError) -> None:
        """``dpkg-deb -x`` of each package (``.name``, ``.filename`` in the archive folder)
        into `dest`; a full disk stays an OSError (ENOSPC), other failures raise `error`."""
        debs = list(debs)
        for i, d in enumerate(debs, 1):
            pr.step(f"{label} unpacking {i}/{len(debs)} {d.name}", i, len(debs))
            p = subprocess.run(["dpkg-deb", "-x", str(self.archives / d.filename), str(dest)],
                               capture_output=True, text=True)
            if p.returncode != 0:
                err = p.stderr.strip()
                if "No space left" in err:
                    raise OSError(errno.ENOSPC, err)
                raise error(f"dpkg-deb -x {d.filename} failed: {err}")

    def run(self, args: list[str], line_cb: Callable[[str], None] | None = None,
            timeout: float = 900, cwd: Path | None = None) -> tuple[int, str]:
        """Run apt-get/apt-cache with the private configuration; (exit status, all output).
        `cwd` (default `base`) is where `apt-get download` writes."""
        env = dict(os.environ)
        env.update(APT_CONFIG=str(self.conf), LC_ALL="C", LANG="C", LANGUAGE="C",
                   DEBIAN_FRONTEND="noninteractive")
        try:
            p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, text=True, env=env, bufsize=1,
                                 cwd=str(cwd or self.base))
        except OSError as e:
            raise ProvisionError(f"cannot run {args[0]}: {e}") from e
        out: list[str] = []
        deadline = time.monotonic() + timeout
        assert p.stdout is not None
        for line in p.stdout:
            out.append(line)
            if line_cb:
                line_cb(line.rstrip("\n"))
            if time.monotonic() > deadline:
                p.kill()
                break
        rc = p.wait()
        return rc, "".join(out)


def _mirror(suite: str) -> str:
    """The archive that serves a suite: the -security suites live on their own mirror."""
    return DEBIAN_SECURITY_MIRROR if suite.endswith("-security") else DEBIAN_MIRROR


def _system_proxy_settings() -> list[str]:
    """Carry the system's apt proxy settings (only those) into the private configuration;
    http_proxy and friends in the environment reach apt anyway."""
    try:
        out = subprocess.run(["apt-config", "dump"], capture_output=True, text=True,
                             timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    keep = []
    for line in out.splitlines():
        key = line.split(" ", 1)[0]
        if re.fullmatch(r"Acquire::(https?|ftp)::Proxy(::[^ ]+)?|"
                        r"Acquire::(https?)::Proxy-Auto-Detect",
                        key, flags=re.I):
            keep.append(line if line.endswith(";") else line + ";")
    return keep


def check_tools() -> None:
    """apt-get, apt-config and dpkg-deb are there; else a ProvisionError naming them."""
    missing = [t for t in ("apt-get", "apt-config", "dpkg-deb") if not shutil.which(t)]
    if missing:
        raise ProvisionError(
            f"cannot provision QEMU: {', '.join(missing)} not found. Provisioning downloads "
            "Debian's QEMU packages with apt and needs a Debian or Ubuntu host. Elsewhere, "
            "install QEMU 11.1.x built with --enable-plugins and put qemu-system-x86_64 on PATH "
            "(or set P4PMU_QEMU to it)")
    if not DEBIAN_KEYRING.is_file():
        raise ProvisionError(
            f"cannot provision QEMU: the Debian archive keyring {DEBIAN_KEYRING} is missing, so "
            "the downloads could not be verified. Install the debian-archive-keyring package "
            "(Debian: it is always there; Ubuntu: `apt install debian-archive-keyring`), or "
            "install QEMU 11.1.x with plugins yourself and set P4PMU_QEMU")


def _check_space(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(path).free
    if free < _MIN_FREE_BYTES:
        raise ProvisionError(
            f"not enough free disk space for QEMU in {path}: {megabytes(free)} free, about "
            f"{megabytes(_MIN_FREE_BYTES)} needed. Free some space, or point XDG_CACHE_HOME to a "
            "file system with room")


def apt_failure(what: str, rc: int, output: str) -> ProvisionError:
    """A failed apt command in words: its error lines and what to do about them."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    errs = [ln for ln in lines if ln.startswith(("E:", "W:", "Err:"))] or lines[-5:]
    text = "\n".join(errs)
    low = output.lower()
    if "no space left on device" in low:
        hint = (f"the disk is full: free some space (about {megabytes(_MIN_FREE_BYTES)} is needed) "
                "or point XDG_CACHE_HOME elsewhere")
    elif re.search(r"temporary failure resolving|could not resolve|failed to connect|"
                   r"connection (?:timed out|refused)|unable to connect|network is unreachable|"
                   r"no route to host|could not connect", low):
        hint = (f"the Debian archive ({DEBIAN_MIRROR}) cannot be reached: check the network "
                "connection, or set http_proxy / Acquire::http::Proxy")
    elif re.search(r"no_pubkey|not signed|signature|is not valid yet|expired", low):
        hint = (f"the archive signature could not be verified against {DEBIAN_KEYRING}: "
                "update the debian-archive-keyring package (it must carry the Debian 13 "
                "'trixie' keys) and check the system clock")
    elif "version '" in low and "was not found" in low or "has no installation candidate" in low:
        hint = (f"{QEMU_DEB_PACKAGE}={QEMU_DEB_VERSION} is no longer in "
                f"{DEBIAN_TARGET_RELEASE} (backports keep only the newest build): move "
                "QEMU_DEB_VERSION in p4pmu/qemu_glue/provision.py to the version that "
                "`python -m p4pmu.qemu_glue.provision --policy` shows")
    elif "permission denied" in low or "could not open lock file" in low:
        hint = f"the cache folder {cache_root()} is not writable by this user"
    else:
        hint = "see apt's messages above"
    status = f" (exit {rc})" if rc else ""
    return ProvisionError(f"{what} failed{status}: {hint}\n{text}")


_URI_RE = re.compile(r"^'([^']+)'\s+(\S+)\s+(\d+)(?:\s+(\S+))?\s*$")
APT_GET_LINE = re.compile(r"^Get:(\d+)\s+\S+\s+\S+\s+(?:\S+\s+)?(\S+)\s+\S+\s+(\S+)\s+\[([^\]]+)\]")


def deb_name_version(filename: str) -> tuple[str, str]:
    """(package, version) of a .deb file name (name_version_arch.deb, epoch as %3a)."""
    base = filename[:-4] if filename.endswith(".deb") else filename
    parts = base.split("_")
    if len(parts) >= 3:
        from urllib.parse import unquote
        return parts[0], unquote(parts[1])
    return base, ""


def sha256_file(path: Path) -> str:
    """The SHA-256 of a file, hex."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def safe_wipe(vdir: Path, prefix: str = "qemu-", what: str = "QEMU cache",
               error: type[Exception] = ProvisionError) -> None:
    """Remove a half-finished cache folder: only folders named `prefix`* directly under the
    cache root (QEMU trees, Linux images), so a bad path can never delete anything else."""
    root = cache_root().resolve()
    target = vdir.resolve()
    if target.parent != root or not target.name.startswith(prefix):
        raise error(f"refusing to remove {target}: not a p4pmu {what} folder")

    def onerror(func, p, exc):  # make read-only folders writable, then retry
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(p), 0o755)
            os.chmod(p, 0o755)
            func(p)

    if sys.version_info >= (3, 12):
        shutil.rmtree(target, onexc=onerror)
    else:
        shutil.rmtree(target, onerror=onerror)
    if target.exists():
        raise error(f"cannot remove the half-finished {what} {target}: remove it by hand and "
                    "try again")


@contextlib.contextmanager
def cache_lock(path: Path, pr: Progress):
    """Hold an exclusive file lock on `path` (one process fills a cache folder at a time)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pr.say(f"waiting for another p4pmu process to finish provisioning ({path})")
            fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def provision(deb_version: str = QEMU_DEB_VERSION, pr: Progress | None = None) -> Qemu:
    """Download and unpack Debian's qemu-system-x86 into the cache (see the module doc)."""
    pr = pr or Progress(True)
    arch, _, _ = _host_arch()
    check_tools()
    root = cache_root()
    vdir = qemu_cache_dir(deb_version)
    if ":" in str(vdir) or "," in str(vdir):
        raise ProvisionError(
            f"the cache path {vdir} contains ':' or ',', which QEMU's loader and option syntax "
            "cannot take; set XDG_CACHE_HOME to a path without them")
    try:
        _check_space(root)
        with cache_lock(root / ".provision.lock", pr):
            q = _cached_qemu(deb_version)  # another process may have finished meanwhile
            if q:
                return q
            return _provision_locked(deb_version, arch, root, vdir, pr)
    except OSError as e:
        if e.errno == errno.ENOSPC:
            raise ProvisionError(
                f"the disk is full while provisioning QEMU into {vdir}: free about "
                f"{megabytes(_MIN_FREE_BYTES)} (or set XDG_CACHE_HOME elsewhere) and run "
                "`p4pmu setup` again; the half-finished folder is redone then") from e
        if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise ProvisionError(
                f"cannot write the QEMU cache {root}: {e}. Make it writable or set "
                "XDG_CACHE_HOME to a writable folder") from e
        raise


def _provision_locked(deb_version: str, arch: str, root: Path, vdir: Path,
                      pr: Progress) -> Qemu:
    """Provision QEMU `deb_version` into `vdir` (under the cache lock) and stamp it."""
    t0 = time.monotonic()
    if vdir.exists():
        pr.say(f"{vdir} has no completion stamp (an interrupted provisioning): wiping it")
        safe_wipe(vdir)
    pr.say(f"provisioning QEMU {QEMU_DEB_PACKAGE}={deb_version} from Debian "
           f"{DEBIAN_TARGET_RELEASE} into {vdir}")
    apt = AptEnv(root / "apt", arch)
    apt.prepare()
    pr.say(f"[1/4] apt-get update ({', '.join(DEBIAN_SUITES)} from {DEBIAN_MIRROR})")
    rc, out = apt.run(["apt-get", "-q", "update"])
    if rc != 0 or re.search(r"^(E:|W: Failed to fetch|Err:)", out, flags=re.M):
        raise apt_failure("apt-get update", rc, out)
    spec = f"{QEMU_DEB_PACKAGE}={deb_version}"
    install = ["apt-get", "-q", "-y", "install", "--download-only", "-t",
               DEBIAN_TARGET_RELEASE, spec]
    debs = _list_downloads(apt, install, spec)
    _download(apt, install, spec, debs, pr)
    tree = vdir / "root"
    tree.mkdir(parents=True)
    apt.unpack(debs, tree, pr, "[3/4]")
    q, vs = _check_tree(tree, deb_version, pr)
    # the stamp, last; then drop what a next run re-creates anyway
    size = sum(f.stat().st_size for f in tree.rglob("*") if f.is_file() and not f.is_symlink())
    stamp = {
        "format": _STAMP_FORMAT,
        "package": QEMU_DEB_PACKAGE,
        "version": deb_version,
        "upstream_version": vs,
        "suites": list(DEBIAN_SUITES),
        "mirror": DEBIAN_MIRROR,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "tree_bytes": size,
        "packages": [{"file": d.filename, "name": d.name, "version": d.version,
                      "size": d.size, "sha256": d.sha256} for d in debs],
    }
    finish_cache(vdir, stamp, apt, debs)
    pr.say(f"QEMU {vs} ready in {time.monotonic() - t0:.1f} s ({len(debs)} packages, "
           f"{megabytes(size)} unpacked) at {tree}")
    return q


def _list_downloads(apt: AptEnv, install: list[str], spec: str) -> list[_Deb]:
    """What `install` downloads: --print-uris against an empty archive folder lists every
    package; --print-uris names only an MD5 sum, so each SHA-256 (and size) comes from the
    signed package index."""
    with tempfile.TemporaryDirectory(dir=apt.base) as empty:
        (Path(empty) / "partial").mkdir()
        rc, out = apt.run([*install[:1], "-o", f"Dir::Cache::archives={empty}",
                           *install[1:], "--print-uris"])
    if rc != 0:
        raise apt_failure(f"apt-get install --print-uris {spec}", rc, out)
    debs: list[_Deb] = []
    for line in out.splitlines():
        m = _URI_RE.match(line)
        if m:
            d = _Deb(m.group(1), m.group(2), int(m.group(3)), "")
            d.name, d.version = deb_name_version(d.filename)
            debs.append(d)
    if not debs:
        raise ProvisionError(f"apt listed nothing to download for {spec}:\n{out[-2000:]}")
    rc, out = apt.run(["apt-cache", "show", "--no-all-versions",
                       *(f"{d.name}={d.version}" for d in debs)])
    if rc != 0:
        raise apt_failure("apt-cache show", rc, out)
    index: dict[tuple[str, str], dict[str, str]] = {}
    for record in out.split("\n\n"):
        fields = dict(ln.split(": ", 1) for ln in record.splitlines()
                      if ": " in ln and not ln.startswith(" "))
        if "Package" in fields and "Version" in fields:
            index[(fields["Package"], fields["Version"])] = fields
    for d in debs:
        rec = index.get((d.name, d.version))
        if not rec or not re.fullmatch(r"[0-9a-f]{64}", rec.get("SHA256", "")):
            raise ProvisionError(f"no SHA-256 for {d.name} {d.version} in Debian's package "
                                 "index: cannot verify it")
        if int(rec.get("Size", -1)) != d.size:
            raise ProvisionError(f"{d.name} {d.version}: apt's size {d.size} differs from the "
                                 f"index's {rec.get('Size')}")
        d.sha256 = rec["SHA256"]
    if not any(d.name == QEMU_DEB_PACKAGE for d in debs):
        raise ProvisionError(f"apt's download list for {spec} does not contain "
                             f"{QEMU_DEB_PACKAGE} itself:\n{out[-2000:]}")
    return debs


def _download(apt: AptEnv, install: list[str], spec: str, debs: list[_Deb],
              pr: Progress) -> None:
    """Download what the archive folder lacks (apt verifies each file against the signed
    index), then check every file against the index's SHA-256 once more."""
    for d in debs:
        f = apt.archives / d.filename
        d.hit = f.is_file() and f.stat().st_size == d.size and sha256_file(f) == d.sha256
    todo = [d for d in debs if not d.hit]
    total = sum(d.size for d in todo)
    pr.say(f"[2/4] {len(debs)} packages, {megabytes(sum(d.size for d in debs))}; to download: "
           f"{len(todo)} packages, {megabytes(total)}"
           + (f" ({len(debs) - len(todo)} already downloaded)" if len(todo) < len(debs) else ""))
    got = {"n": 0, "bytes": 0}
    sizes = {d.filename.split("_", 1)[0]: d.size for d in todo}

    def on_line(line: str) -> None:
        m = APT_GET_LINE.match(line)
        if m:
            got["n"] += 1
            pkg = m.group(2)
            got["bytes"] += sizes.get(pkg, 0)
            pr.step(f"[2/4] downloading {got['n']}/{len(todo)} {pkg} {m.group(3)} ({m.group(4)}); "
                    f"{megabytes(got['bytes'])} of {megabytes(total)}", got["n"], len(todo))

    if todo:
        rc, out = apt.run(install, on_line)
        if rc != 0:
            raise apt_failure(f"apt-get install --download-only {spec}", rc, out)
    for d in debs:  # belt and braces: the files are what the signed index announced
        f = apt.archives / d.filename
        if not f.is_file():
            raise ProvisionError(f"apt reported success but {f} is missing")
        if not d.hit and sha256_file(f) != d.sha256:
            raise ProvisionError(f"{f} does not match the SHA-256 of Debian's signed index; "
                                 "remove it and run `p4pmu setup` again")


def _check_tree(tree: Path, deb_version: str, pr: Progress) -> tuple[Qemu, str]:
    """The unpacked QEMU runs, is the pinned version and accepts -plugin; (it, its version)."""
    q = _tree_qemu(tree, deb_version)
    pr.say("[4/4] checking the unpacked QEMU")
    for p in (Path(q.argv_prefix[0]), q.binary):
        if not p.exists():
            raise ProvisionError(f"the unpacked tree lacks {p}; Debian's packaging changed? "
                                 "Check QEMU_DEB_VERSION in p4pmu/qemu_glue/provision.py")
    ver, deb, plugins = _probe(list(q.argv_prefix), q.data_dirs)
    vs = ".".join(map(str, ver))
    if vs != q.version or (deb and deb != deb_version):
        raise ProvisionError(f"the unpacked QEMU reports {vs} ({deb}), expected {q.version} "
                             f"({deb_version})")
    if not plugins:
        raise ProvisionError(f"the unpacked QEMU {vs} does not accept -plugin (built without "
                             "TCG plugins?): p4pmu cannot use it")
    return q, vs


def _policy() -> int:
    """Show what trixie-backports offers (to move the pin)."""
    arch, _, _ = _host_arch()
    check_tools()
    apt = AptEnv(cache_root() / "apt", arch)
    apt.prepare()
    rc, out = apt.run(["apt-get", "-q", "update"])
    if rc != 0:
        raise apt_failure("apt-get update", rc, out)
    rc, out = apt.run(["apt-cache", "policy", QEMU_DEB_PACKAGE])
    print(out, end="")
    print(f"pinned: {QEMU_DEB_VERSION}")
    return rc


def _main(argv: list[str] | None = None) -> int:
    import argparse
    ap = argparse.ArgumentParser(prog="python -m p4pmu.qemu_glue.provision",
                                 description="Find or provision QEMU 11.1 for p4pmu.")
    ap.add_argument("--policy", action="store_true",
                    help="show the qemu-system-x86 versions Debian offers and the pin")
    ap.add_argument("--find", action="store_true", help="only look, never download")
    a = ap.parse_args(argv)
    try:
        if a.policy:
            return _policy()
        q = find_qemu() if a.find else ensure_qemu()
    except ProvisionError as e:
        print(f"p4pmu: error: {e}", file=sys.stderr)
        return 1
    if q is None:
        print("no usable QEMU (run `p4pmu setup`)", file=sys.stderr)
        return 1
    print(" ".join(q.argv_prefix))
    print(" ".join(str(d) for d in q.data_dirs))
    return 0


if __name__ == "__main__":
    sys.exit(_main())
