"""The kernel pins: the one table that names the Linux guests' kernels (`p4pmu linux --kernel`).

Each pin names the Debian kernel package, the perf package of the same source version, the
busybox-static of the same release, the apt suites to read them from and how QEMU boots the
kernel.  Everything else about an image (its folder, its recipe, its build) is derived from
the pin (docs/linux-guest.md, "The kernels").
"""
from __future__ import annotations

from dataclasses import dataclass

from p4pmu.qemu_glue.linux_image.errors import ImageError

# 5.10 (the default) is Debian 11 "bullseye"'s LTS kernel from its final point release (11.11,
# a suite that no longer changes).  Its P4 driver writes the counter's *current* period twice
# (erratum N15, inside x86_perf_event_set_period), so perf counts right from the first command.
# 6.1 is Debian 12 "bookworm"'s.  Its p4_pmu_set_period writes the *previous* period as the
# second write: the counts of a counter's first use, of a task switched out and back in and of
# multiplexed events are nonsense, on a real Pentium 4 as here (docs/linux-guest.md, "Linux
# 6.1's p4_pmu_set_period quirk").  6.1 is the 12.x point release's kernel on both
# architectures: bookworm-security replaces its kernel and perf with every update (and their
# Debian revisions need not agree: kernel 6.1.192-2 came with perf 6.1.192-3), so a pin there
# stops resolving within weeks; the point release's holds until the next point release, and
# bookworm-security's i386 index could not be fetched from the mirror this was built against
# ("File has unexpected size", persistently).  To move a pin:
# `python -m p4pmu.qemu_glue.linux_image --policy --kernel K --arch A` shows what the archive
# offers.


@dataclass(frozen=True)
class KernelPin:
    kernel: str  # the --kernel choice: "5.10" or "6.1"
    arch: str  # Debian architecture of the guest: amd64 or i386
    flavour: str  # amd64 or 686
    abi: str  # "6.1.0-50": part of the package name and of `uname -r`
    version: str  # Debian version of linux-image-<abi>-<flavour> and of the perf package
    perf_package: str  # linux-perf-5.10 (bullseye), linux-perf (bookworm): same source
    busybox_version: str  # busybox-static of the same Debian release
    debian: str  # "11 bullseye", "12 bookworm": for messages and /etc/os-release
    suites: tuple[str, ...]  # apt suites to read (the -security ones live on their own mirror)
    boot: str  # "pvh": the uncompressed vmlinux through PVH; "bzimage": the bzImage as is
    set_period_quirk: bool  # the driver's second counter write installs the previous period

    @property
    def kernel_package(self) -> str:
        return f"linux-image-{self.abi}-{self.flavour}"

    @property
    def release(self) -> str:
        """`uname -r` in the guest."""
        return f"{self.abi}-{self.flavour}"

    @property
    def codename(self) -> str:
        return self.debian.split()[-1]


_BULLSEYE = ("bullseye",)
_BOOKWORM = ("bookworm", "bookworm-updates")
_BB_BULLSEYE = "1:1.30.1-6+b3"
_BB_BOOKWORM = "1:1.35.0-4+deb12u1+b1"
PINS: dict[tuple[str, str], KernelPin] = {(p.kernel, p.arch): p for p in (
    KernelPin("5.10", "amd64", "amd64", "5.10.0-32", "5.10.223-1", "linux-perf-5.10",
              _BB_BULLSEYE, "11 bullseye", _BULLSEYE, "pvh", False),
    KernelPin("5.10", "i386", "686", "5.10.0-32", "5.10.223-1", "linux-perf-5.10",
              _BB_BULLSEYE, "11 bullseye", _BULLSEYE, "bzimage", False),
    KernelPin("6.1", "amd64", "amd64", "6.1.0-50", "6.1.176-1", "linux-perf",
              _BB_BOOKWORM, "12 bookworm", _BOOKWORM, "pvh", True),
    KernelPin("6.1", "i386", "686", "6.1.0-50", "6.1.176-1", "linux-perf",
              _BB_BOOKWORM, "12 bookworm", _BOOKWORM, "bzimage", True),
)}
KERNELS = tuple(dict.fromkeys(k for k, _ in PINS))  # ("5.10", "6.1")
ARCHES = tuple(dict.fromkeys(a for _, a in PINS))  # ("amd64", "i386")
DEFAULT_KERNEL = "5.10"
BUSYBOX_PACKAGE = "busybox-static"


@dataclass(frozen=True)
class GuestTool:
    """Programs the image carries besides busybox and perf, from their Debian package (of the
    pin's release, with the libraries they need)."""
    package: str
    programs: tuple[str, ...]  # guest paths (symlinks in the package are followed)
    why: str
    data: tuple[str, ...] = ()  # folders copied as they are


GUEST_TOOLS = (
    GuestTool("msr-tools", ("/usr/sbin/rdmsr", "/usr/sbin/wrmsr"),
              "read and write MSRs from the shell through /dev/cpu/N/msr (the msr module)"),
    GuestTool("binutils", ("/usr/bin/addr2line", "/usr/bin/objdump"),
              "perf report's source lines and DWARF call graphs (addr2line), perf annotate "
              "(objdump)"),
    GuestTool("ncurses-base", (), "terminal descriptions for perf's screens (libslang2: perf "
              "top, perf report) in an interactive session", data=("/lib/terminfo",)),
)
# Kernel modules the image carries (with every module they depend on, from the modules'
# own .modinfo): msr for /dev/cpu/N/msr; virtio_pci and virtio_console for the virtio-serial
# ports that carry standard input and --fetch (docs/linux-guest.md).
GUEST_MODULES = ("msr", "virtio_pci", "virtio_console")


def pin_for(arch: str, kernel: str = DEFAULT_KERNEL) -> KernelPin:
    """The pin of a guest; ImageError for an unknown architecture or kernel."""
    if arch not in ARCHES:
        raise ImageError(f"unknown guest architecture {arch!r} (known: {', '.join(ARCHES)})")
    try:
        return PINS[(kernel, arch)]
    except KeyError:
        raise ImageError(f"unknown guest kernel {kernel!r} (known: {', '.join(KERNELS)})") \
            from None
