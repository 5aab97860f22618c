"""`p4pmu module build DIR`: build an out-of-tree kernel module for the Linux guest's kernel.

One job: make sure the guest kernel's headers are there (linux_image/headers.py: Debian's
packages of the pinned kernel, downloaded once), then run Kbuild on DIR with the host's gcc:
``make -C <headers> M=DIR CC=gcc modules``.  The .ko files land in DIR, ready for
``p4pmu linux --module DIR/NAME.ko``, which checks their vermagic against the guest kernel
before boot.  Exit status: make's (0 built), 2 for a bad DIR, 125 when the headers could not
be had.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

from p4pmu.qemu_glue.linux_image import pins
from p4pmu.qemu_glue.linux_image.errors import ImageError
from p4pmu.qemu_glue.linux_image.headers import ensure_headers, kernel_compiler
from p4pmu.qemu_glue.provision import ProvisionError

PROG = "p4pmu module"
DESCRIPTION = ("Build an out-of-tree kernel module (a folder with a Kbuild file or a Kbuild "
               "Makefile, `obj-m := name.o`) against the Linux guest's kernel headers "
               "(Debian's packages of the pinned kernel, downloaded on first use), with the "
               "host's gcc.")
EPILOG = """examples:
  p4pmu module build ./mymod                     # for the default guest (5.10, amd64)
  p4pmu module build ./mymod --kernel 6.1 --arch i386
  p4pmu linux --module ./mymod/mymod.ko -- 'dmesg | tail'"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=("build", "clean"),
                   help="build: the .ko files into DIR; clean: Kbuild's clean of DIR")
    p.add_argument("dir", metavar="DIR", help="the module's folder")
    p.add_argument("--kernel", choices=pins.KERNELS, default=pins.DEFAULT_KERNEL,
                   help=f"the guest kernel to build for (default {pins.DEFAULT_KERNEL})")
    p.add_argument("--arch", choices=pins.ARCHES, default="amd64",
                   help="the guest architecture (default amd64)")
    p.add_argument("-j", "--jobs", type=int, default=2, help="make -j (default 2)")


def main(a: argparse.Namespace) -> int:
    src = Path(a.dir).expanduser().absolute()
    if not src.is_dir():
        return _fail(f"{a.dir}: not a folder", 2)
    if not ((src / "Kbuild").is_file() or (src / "Makefile").is_file()):
        return _fail(f"{a.dir}: no Kbuild or Makefile (a module folder has `obj-m := "
                     "name.o` in one of them)", 2)
    if shutil.which("make") is None or shutil.which("gcc") is None:
        return _fail("make and gcc are needed (./p4pmu.sh setup installs them)", 2)
    try:
        kdir = ensure_headers(a.arch, a.kernel, progress=True)
    except (ImageError, ProvisionError) as e:
        return _fail(str(e), 125)
    pin = pins.pin_for(a.arch, a.kernel)
    if a.action == "build":
        print(f"{PROG}: building {src} for {pin.release} (the kernel was built by "
              f"{kernel_compiler(pin)}; this uses the host's gcc)", file=sys.stderr, flush=True)
    target = "modules" if a.action == "build" else "clean"
    r = subprocess.run(["make", f"-j{max(1, a.jobs)}", "-C", str(kdir), f"M={src}", "CC=gcc",
                        target])
    if r.returncode == 0 and a.action == "build":
        kos = sorted(src.glob("*.ko"))
        print(f"{PROG}: built " + (", ".join(str(k) for k in kos) or "no .ko (is obj-m set?)"),
              file=sys.stderr)
    return r.returncode


def _fail(msg: str, status: int) -> int:
    print(f"{PROG}: error: {msg}", file=sys.stderr)
    return status
