"""A user's own kernel booted with the image's userland (`p4pmu linux --kernel-image PATH`),
and a user's own modules (`--module FILE.ko`: built for the guest kernel's release, loaded
before COMMAND).

Checked before boot: the file is a bzImage or an uncompressed vmlinux ELF (booted through
PVH, so it needs the PVH entry note), of the guest's architecture; its release (``uname -r``,
for --module's vermagic) is read from the file; its configuration -- from --kernel-config,
else the one embedded in the kernel (CONFIG_IKCONFIG), else a ``config``, ``.config`` or
``config-<release>`` file beside it -- has every option the image's /init, the output
transport and perf need (`REQUIRED`), and those standard input, --fetch and --module need
when they are used.  A missing option is named with what needs it.
"""
from __future__ import annotations

import gzip
import re
import shlex
import struct
from dataclasses import dataclass
from pathlib import Path

from p4pmu.qemu_glue.errors import UsageError
from p4pmu.qemu_glue.linux_image.elf import Elf
from p4pmu.qemu_glue.linux_image.errors import ImageError
from p4pmu.qemu_glue.linux_image.kernel import extract_vmlinux, has_pvh_note

# option -> what needs it; "y": built in (a module of the user's kernel is not in the image)
REQUIRED = {
    "CONFIG_BLK_DEV_INITRD": "the initramfs that carries the userland and /init",
    "CONFIG_BINFMT_SCRIPT": "/init (a shell script)",
    "CONFIG_BINFMT_ELF": "busybox and perf",
    "CONFIG_DEVTMPFS": "/init mounts /dev as devtmpfs",
    "CONFIG_PROC_FS": "/proc (perf, the exit status)",
    "CONFIG_SYSFS": "/sys (perf finds the PMU there)",
    "CONFIG_TTY": "the console and the output UARTs",
    "CONFIG_SERIAL_8250": "the UARTs that carry the console, stdout and stderr",
    "CONFIG_SERIAL_8250_CONSOLE": "the kernel log on ttyS0",
    "CONFIG_FUTEX": "perf's threads",
    "CONFIG_PERF_EVENTS": "perf and the NMI watchdog",
    "CONFIG_CPU_SUP_INTEL": "the P4 PMU driver (arch/x86/events/intel/p4.c)",
    "CONFIG_X86_LOCAL_APIC": "performance-monitoring interrupts (the local APIC's LVT)",
}
WHEN_USED = {
    "stdin or --fetch": {"CONFIG_VIRTIO_PCI": "the virtio-serial device",
                         "CONFIG_VIRTIO_CONSOLE": "its ports"},
    "--module": {"CONFIG_MODULES": "loading a module"},
}


@dataclass
class UserKernel:
    path: Path
    boot: str  # "pvh" (an ELF vmlinux) or "bzimage"
    release: str  # uname -r
    config_from: str  # where the configuration was read


def check_kernel_image(spec: str, arch: str, config_spec: str | None,
                       uses: tuple[str, ...] = ()) -> UserKernel:
    """The checked kernel, or UsageError naming what is wrong."""
    path = Path(spec).expanduser().absolute()
    try:
        data = path.read_bytes()
    except OSError as e:
        raise UsageError(f"--kernel-image {spec}: {e.strerror}") from None
    boot, text = _format(spec, data, arch)
    release = _release(text)
    if release is None:
        raise UsageError(f"--kernel-image {spec}: no `Linux version` string found: not a "
                         "Linux kernel?")
    config, where = _config(path, data, release, config_spec)
    missing = [(opt, why) for opt, why in REQUIRED.items() if config.get(opt) != "y"]
    for use in uses:
        missing += [(opt, f"{why} ({use})") for opt, why in WHEN_USED[use].items()
                    if config.get(opt) != "y"]
    want64 = "y" if arch == "amd64" else None
    if config.get("CONFIG_64BIT") != want64:
        missing.append(("CONFIG_64BIT", f"{'set' if want64 else 'unset'} for --arch {arch}"))
    if missing:
        raise UsageError(f"--kernel-image {spec}: its configuration ({where}) lacks what the "
                         "guest needs built in (=y):\n" +
                         "\n".join(f"  {opt}: {why}" for opt, why in missing))
    return UserKernel(path, boot, release, where)


def _format(spec: str, data: bytes, arch: str) -> tuple[str, bytes]:
    """("pvh" | "bzimage", the bytes to look for the version string in)."""
    if data[:4] == b"\x7fELF":
        elf = Elf(data)
        if (elf.cls == 2) != (arch == "amd64"):
            raise UsageError(f"--kernel-image {spec}: a {32 * elf.cls}-bit kernel for --arch "
                             f"{arch}")
        if not has_pvh_note(data):
            raise UsageError(f"--kernel-image {spec}: an ELF kernel without the PVH entry note "
                             "(CONFIG_PVH): QEMU cannot boot it directly; give its bzImage "
                             "(arch/x86/boot/bzImage) instead")
        return "pvh", data
    if len(data) > 0x210 and data[0x202:0x206] == b"HdrS":
        try:
            text = extract_vmlinux(data)
        except ImageError:
            text = b""  # not XZ: the setup header's version string (below)
        return "bzimage", text + data[:0x4000]
    raise UsageError(f"--kernel-image {spec}: neither a bzImage (no `HdrS` boot header) nor an "
                     "ELF vmlinux")


def _release(data: bytes) -> str | None:
    m = re.search(rb"Linux version (\S+) \(", data)
    if m:
        return m.group(1).decode(errors="replace")
    if len(data) > 0x210 and data[0x202:0x206] == b"HdrS":  # the setup header's string
        off = struct.unpack_from("<H", data, 0x20E)[0] + 0x200
        return data[off:data.find(b"\0", off)].split(b" ", 1)[0].decode(errors="replace")
    return None


def _config(path: Path, data: bytes, release: str,
            config_spec: str | None) -> tuple[dict[str, str], str]:
    if config_spec:
        cfg = Path(config_spec).expanduser()
        try:
            return parse_config(cfg.read_text(errors="replace")), str(cfg)
        except OSError as e:
            raise UsageError(f"--kernel-config {config_spec}: {e.strerror}") from None
    start = data.find(b"IKCFG_ST")
    if start >= 0:  # CONFIG_IKCONFIG: gzip data between the markers (scripts/extract-ikconfig)
        end = data.find(b"IKCFG_ED", start)
        try:
            return parse_config(gzip.decompress(data[start + 8:end]).decode(errors="replace")), \
                "embedded (CONFIG_IKCONFIG)"
        except (OSError, EOFError):
            pass
    for name in ("config", ".config", f"config-{release}"):
        cand = path.parent / name
        if cand.is_file():
            return parse_config(cand.read_text(errors="replace")), str(cand)
    raise UsageError(f"--kernel-image {path}: its configuration cannot be checked: give "
                     "--kernel-config PATH (the kernel's .config), or build it with "
                     "CONFIG_IKCONFIG, or put `config` beside it")


def parse_config(text: str) -> dict[str, str]:
    """A kernel .config: option -> value ("y", "m", a string); `# X is not set` omitted."""
    out = {}
    for ln in text.splitlines():
        if ln.startswith("CONFIG_") and "=" in ln:
            k, v = ln.split("=", 1)
            out[k] = v.strip().strip('"')
    return out


def check_module(spec: str, release: str, kernel: str, arch: str) -> Path:
    """A --module file: a kernel module built for the guest kernel `release` (its vermagic);
    UsageError before boot otherwise."""
    path = Path(spec).expanduser().absolute()
    try:
        elf = Elf(path.read_bytes())
        info = elf.section(".modinfo")
    except OSError as e:
        raise UsageError(f"--module {spec}: {e.strerror}") from None
    except ValueError:
        info = None
    if not info:
        raise UsageError(f"--module {spec}: not a kernel module (no .modinfo section)")
    magic = next((e[9:].decode(errors="replace") for e in info.split(b"\0")
                  if e.startswith(b"vermagic=")), "")
    built_for = magic.split()[0] if magic else "(no vermagic)"
    if built_for != release:
        raise UsageError(f"--module {spec}: built for {built_for}; the guest runs {release}: "
                         f"p4pmu module build DIR --kernel {kernel} --arch {arch}")
    return path


def module_prelude(modules: list[Path], release: str, status: int) -> str:
    """The shell lines that load the --module files before COMMAND (a failed insmod ends the
    run with `status` and insmod's message on stderr)."""
    lines = []
    for m in modules:
        gp = shlex.quote(f"/lib/modules/{release}/extra/{m.name}")
        lines.append(f"insmod {gp} || {{ echo \"p4pmu linux: error: insmod {m.name} failed\" "
                     f">&2; exit {status}; }}")
    return "".join(ln + "\n" for ln in lines)
