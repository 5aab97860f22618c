"""QEMU provisioning (p4pmu.qemu_glue.provision) with the real QEMU and the real apt."""
from __future__ import annotations

import errno
import json
import os
import re
import shutil
import subprocess

import pytest

from p4pmu.qemu_glue import provision as pv

REAL_CACHE = pv.cache_root()  # before any test moves XDG_CACHE_HOME


@pytest.fixture(scope="module")
def qemu():
    return pv.ensure_qemu(progress=False)


def run(argv, **kw):
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, **kw)


def test_qemu_is_11_1_with_plugins(qemu):
    out = run(qemu.argv("--version"))
    assert out.returncode == 0, out.stderr
    m = re.search(r"QEMU emulator version (\d+\.\d+\.\d+)", out.stdout)
    assert m and m.group(1) == qemu.version
    assert qemu.version.startswith("11.1.")
    ph = run(qemu.argv("-plugin", "help"))
    assert ph.returncode == 0 and "Plugin options" in ph.stdout


def test_qemu_object_shape(qemu):
    assert qemu.argv_prefix[-1] == str(qemu.binary)
    assert qemu.binary.is_file()
    if qemu.source == "cache":
        root = qemu.root
        assert qemu.argv_prefix == [
            str(root / "usr/lib64/ld-linux-x86-64.so.2"), "--library-path",
            str(root / "usr/lib/x86_64-linux-gnu"), str(root / "usr/bin/qemu-system-x86_64")]
        assert qemu.data_dirs == [root / "usr/share/qemu", root / "usr/share/seabios"]
        assert all(d.is_dir() for d in qemu.data_dirs)
        assert qemu.package_version == pv.QEMU_DEB_VERSION
    else:
        assert qemu.argv_prefix == [str(qemu.binary)]
        assert qemu.data_dirs == []


def test_find_qemu_returns_what_ensure_made(qemu):
    assert pv.find_qemu() == qemu


def test_stamp_names_pin_and_checksums(qemu):
    if qemu.source != "cache":
        pytest.skip(f"using a {qemu.source} QEMU, no cache")
    stamp = json.loads((pv.qemu_cache_dir() / "stamp").read_text())
    assert stamp["version"] == pv.QEMU_DEB_VERSION
    names = {p["name"] for p in stamp["packages"]}
    assert {"qemu-system-x86", "qemu-system-data", "seabios", "libc6"} <= names
    assert all(re.fullmatch(r"[0-9a-f]{64}", p["sha256"]) for p in stamp["packages"])
    assert pv.cache_state() == "complete"


def test_version_helpers():
    assert pv.upstream_version("1:11.1.3+ds-1~bpo13+1") == "11.1.3"
    assert pv.upstream_version("11.1.0-2") == "11.1.0"
    assert pv._dir_version("1:11.1.3+ds-1~bpo13+1") == "11.1.3+ds-1~bpo13+1"
    assert ":" not in str(pv.qemu_cache_dir())
    assert pv.upstream_version().startswith("11.1.")


@pytest.fixture
def temp_cache(tmp_path, monkeypatch):
    """An empty cache in a temporary XDG_CACHE_HOME."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("P4PMU_QEMU", raising=False)
    yield tmp_path / "xdg" / "p4pmu"
    shutil.rmtree(tmp_path / "xdg", ignore_errors=True)  # up to ~250 MB: do not keep it


def test_cache_root_follows_xdg(temp_cache, monkeypatch):
    assert pv.cache_root() == temp_cache
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/path")  # ignored, per the XDG spec
    assert pv.cache_root() == pv.Path(os.path.expanduser("~/.cache/p4pmu"))


def _free_bytes(n: int):
    return lambda path: shutil._ntuple_diskusage(1 << 40, (1 << 40) - n, n)


def _disk_fills_up(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_full_disk_during_set_up_is_named(temp_cache, monkeypatch):
    """Too little space is said before anything is written; a disk that fills up while QEMU
    is unpacked (ENOSPC from the file system, simulated) is named as such, with what to
    do."""
    from p4pmu.qemu_glue.linux_image import cache as C
    from p4pmu.qemu_glue.linux_image.errors import ImageError
    monkeypatch.setattr(shutil, "disk_usage", _free_bytes(5 << 20))
    with pytest.raises(pv.ProvisionError, match="not enough free disk space for QEMU .* 5"):
        pv.provision()
    with pytest.raises(ImageError, match="not enough free disk space .* Linux guest image"):
        C.ensure_image("amd64", progress=False)
    monkeypatch.setattr(shutil, "disk_usage", _free_bytes(10 << 30))
    monkeypatch.setattr(pv, "_provision_locked", _disk_fills_up)
    with pytest.raises(pv.ProvisionError, match="the disk is full while provisioning QEMU"):
        pv.provision()
    monkeypatch.setattr(C, "_build_locked", _disk_fills_up)
    with pytest.raises(ImageError, match="the disk is full while building the Linux guest "
                                         "image"):
        C.ensure_image("amd64", progress=False)


def test_stamp_states(temp_cache):
    assert pv.cache_state() == "missing"
    vdir = pv.qemu_cache_dir()
    (vdir / "root").mkdir(parents=True)
    assert pv.cache_state() == "incomplete"
    (vdir / "stamp").write_text(json.dumps({"format": 1, "version": "1:0.0-other"}))
    assert pv.cache_state() == "incomplete"  # a stamp for another version does not count
    (vdir / "stamp").write_text("{not json")
    assert pv.cache_state() == "incomplete"


def test_wipe_refuses_foreign_folders(temp_cache, tmp_path):
    other = tmp_path / "precious"
    other.mkdir()
    with pytest.raises(pv.ProvisionError, match="refusing"):
        pv.safe_wipe(other)
    assert other.exists()


@pytest.mark.slow
def test_half_finished_cache_is_wiped_and_redone(temp_cache, capsys):
    # Reuse the user cache's packages (apt re-verifies them against the signed index), so
    # only the indexes are downloaded again.
    src = REAL_CACHE / "apt" / "archives"
    dst = temp_cache / "apt" / "archives"
    dst.mkdir(parents=True)
    for deb in src.glob("*.deb") if src.is_dir() else ():
        try:
            os.link(deb, dst / deb.name)
        except OSError:
            shutil.copy2(deb, dst / deb.name)

    vdir = pv.qemu_cache_dir()
    junk = vdir / "root" / "usr" / "bin" / "junk"
    junk.parent.mkdir(parents=True)
    junk.write_text("left over from an interrupted run")
    assert pv.cache_state() == "incomplete"

    q = pv.provision(pv.QEMU_DEB_VERSION, pv.Progress(True))

    err = capsys.readouterr().err
    assert "no completion stamp" in err and "wiping" in err
    assert re.search(r"unpacking \d+/\d+", err)
    assert not junk.exists()
    assert pv.cache_state() == "complete"
    stamp = json.loads((vdir / "stamp").read_text())
    assert stamp["version"] == pv.QEMU_DEB_VERSION
    out = run(q.argv("--version"))
    assert out.returncode == 0 and q.version in out.stdout
    # the second call reuses the cache without touching apt
    assert pv._cached_qemu() == q
    assert not (temp_cache / "apt" / "lists").exists()  # indexes dropped after success


def test_unreachable_archive_is_reported(temp_cache, monkeypatch):
    monkeypatch.setattr(pv, "DEBIAN_MIRROR", "http://127.0.0.1:9/debian")
    with pytest.raises(pv.ProvisionError) as e:
        pv.provision(pv.QEMU_DEB_VERSION, pv.Progress(False))
    assert "cannot be reached" in str(e.value)
    assert pv.cache_state() in ("missing", "incomplete")  # never "complete"


def test_signatures_are_checked(temp_cache, monkeypatch):
    """With a keyring that lacks the trixie keys apt refuses the archive: the private
    configuration really verifies signatures."""
    other = pv.Path("/usr/share/keyrings/debian-archive-bullseye-stable.gpg")
    if not other.is_file():
        pytest.skip(f"{other} not installed")
    monkeypatch.setattr(pv, "DEBIAN_KEYRING", other)
    with pytest.raises(pv.ProvisionError, match="signature could not be verified"):
        pv.provision(pv.QEMU_DEB_VERSION, pv.Progress(False))
    assert pv.cache_state() == "missing"


def test_missing_apt_is_reported(temp_cache, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    with pytest.raises(pv.ProvisionError, match="apt-get.*not found.*Debian or Ubuntu"):
        pv.provision(pv.QEMU_DEB_VERSION, pv.Progress(False))


@pytest.mark.slow
def test_vanished_pin_is_reported(temp_cache):
    with pytest.raises(pv.ProvisionError, match="no longer in trixie-backports"):
        pv.provision("1:0.0.1+ds-0~bpo13+0", pv.Progress(False))


def test_bad_env_qemu_is_reported(monkeypatch, tmp_path):
    monkeypatch.setenv("P4PMU_QEMU", str(tmp_path / "nope"))
    with pytest.raises(pv.ProvisionError, match="P4PMU_QEMU"):
        pv.find_qemu()


def test_version_gate():
    m = pv._VERSION_RE.search("QEMU emulator version 11.1.3 (Debian 1:11.1.3+ds-1~bpo13+1)")
    assert m.group(4) == "Debian 1:11.1.3+ds-1~bpo13+1"
    assert pv._qualifies((11, 1, 0)) and pv._qualifies((11, 1, 7))
    assert not pv._qualifies((10, 0, 2)) and not pv._qualifies((7, 2, 0))
    assert not pv._qualifies((11, 2, 0))


def test_system_qemu_on_path_is_judged(qemu, monkeypatch, tmp_path):
    """A qemu-system-x86_64 on PATH is used only when it is 11.1.x with plugins: put the
    provisioned one on PATH (through a wrapper that runs its loader) and look."""
    if qemu.source != "cache":
        pytest.skip("already a system QEMU")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    wrapper = bindir / "qemu-system-x86_64"
    import shlex
    wrapper.write_text("#!/bin/sh\nexec " + shlex.join(qemu.argv_prefix) + " "
                       + " ".join(f"-L {shlex.quote(str(d))}" for d in qemu.data_dirs)
                       + ' "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    q = pv.find_qemu()
    assert q.source == "system" and q.binary == wrapper and q.version == qemu.version
    assert q.package_version == pv.QEMU_DEB_VERSION
