"""Command line of the Linux guest images: build one, show its cache state, or show what Debian
offers for a pin.

    python -m p4pmu.qemu_glue.linux_image [--policy] [--state] [--arch A] [--kernel K]
"""
from __future__ import annotations

import argparse
import sys

from p4pmu.qemu_glue.linux_image.cache import ensure_image, image_dir, image_state
from p4pmu.qemu_glue.linux_image.packages import print_policy
from p4pmu.qemu_glue.linux_image.pins import ARCHES, DEFAULT_KERNEL, KERNELS, pin_for
from p4pmu.qemu_glue.provision import ProvisionError


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m p4pmu.qemu_glue.linux_image",
                                 description="Build or inspect p4pmu's Linux guest images.")
    ap.add_argument("--arch", choices=ARCHES, default="amd64")
    ap.add_argument("--kernel", choices=KERNELS, default=DEFAULT_KERNEL)
    ap.add_argument("--policy", action="store_true",
                    help="show the kernel, perf and busybox versions Debian offers, and the pins")
    ap.add_argument("--state", action="store_true", help="only show the cache state")
    a = ap.parse_args(argv)
    try:
        if a.policy:
            return print_policy(pin_for(a.arch, a.kernel))
        if a.state:
            print(f"{image_dir(a.arch, a.kernel)}: {image_state(a.arch, a.kernel)}")
            return 0
        img = ensure_image(a.arch, kernel=a.kernel)
    except ProvisionError as e:
        print(f"p4pmu: error: {e}", file=sys.stderr)
        return 1
    print(img.kernel)
    print(img.initrd)
    return 0


if __name__ == "__main__":
    sys.exit(main())
