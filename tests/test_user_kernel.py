"""A user's own kernel with the image's userland: `p4pmu linux --kernel-image PATH`
(qemu_glue/linux_image/user_kernel.py; docs/linux-guest.md "Your own kernel").

The user kernels here are the project's own 6.1 kernel files (the amd64 vmlinux, booted
through PVH, and the i386 bzImage) under the default 5.10 image's userland; the refusals use
a copy of the 6.1 configuration with one needed option removed, and a kernel of the other
architecture.  All refusals come before boot.
"""
from __future__ import annotations

import os
import shlex
import subprocess
import sys

import pytest

from p4pmu.qemu_glue.linux_image import pins
from p4pmu.qemu_glue.linux_image.cache import ensure_image

P4PMU_LINUX = [sys.executable, "-m", "p4pmu.qemu_glue.cli", "linux",
               *shlex.split(os.environ.get("P4PMU_LINUX_TEST_ARGS", ""))]


def linux(*args: str, timeout: float = 1620) -> subprocess.CompletedProcess:
    return subprocess.run([*P4PMU_LINUX, "--timeout", "1500", *args], capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


@pytest.mark.guest
@pytest.mark.parametrize("arch", ("amd64", "i386"))
def test_the_projects_61_kernel_boots_as_a_user_kernel(arch):
    kernel = ensure_image(arch, progress=True, kernel="6.1").kernel  # vmlinux / bzImage
    r = linux("--arch", arch, "--clock", "host", "--kernel-image", str(kernel), "--",
              "uname -r; dmesg | grep 'Performance Events'; "
              "perf stat -x, -e instructions:u true 2>&1 | grep -c instructions")
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    lines = r.stdout.splitlines()
    assert lines[0] == pins.pin_for(arch, "6.1").release, r.stdout
    assert "Netburst P4/Xeon PMU driver" in lines[1], r.stdout
    assert lines[2] == "1", r.stdout


def test_a_kernel_without_a_needed_option_is_refused_naming_it(tmp_path):
    image = ensure_image("amd64", progress=True, kernel="6.1")
    cfg = tmp_path / "config"
    cfg.write_text("".join(ln for ln in (image.dir / "config").read_text().splitlines(True)
                           if not ln.startswith("CONFIG_PERF_EVENTS=")))
    r = linux("--kernel-image", str(image.kernel), "--kernel-config", str(cfg), "--", "true",
              timeout=300)
    assert r.returncode == 2, r.stderr
    assert "CONFIG_PERF_EVENTS: perf and the NMI watchdog" in r.stderr, r.stderr
    # stdin and --fetch need virtio built in: Debian builds it as modules
    r = linux("--kernel-image", str(image.kernel), "--fetch", "/etc/hosts", "--", "true",
              timeout=300)
    assert r.returncode == 2 and "CONFIG_VIRTIO_CONSOLE" in r.stderr, r.stderr


def test_a_kernel_of_the_other_architecture_is_refused(tmp_path):
    image = ensure_image("amd64", progress=True, kernel="6.1")
    r = linux("--arch", "i386", "--kernel-image", str(image.kernel), "--", "true", timeout=300)
    assert r.returncode == 2 and "a 64-bit kernel for --arch i386" in r.stderr, r.stderr
    junk = tmp_path / "junk"
    junk.write_bytes(b"\0" * 4096)
    r = linux("--kernel-image", str(junk), "--", "true", timeout=300)
    assert r.returncode == 2 and "neither a bzImage" in r.stderr, r.stderr
