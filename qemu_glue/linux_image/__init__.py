"""Linux guest images for `p4pmu linux`, built from Debian's archive by package name.

An image is one pinned kernel plus a base initramfs with busybox-static, ``perf`` of the same
source version as the kernel, the shared libraries perf needs, stub libraries in place of
perf's optional scripting and UI libraries, ``/init`` and the helper scripts.  Nothing is
installed system-wide (docs/linux-guest.md).  One module per job:

- `pins`: the kernel pins (`PINS`, `DEFAULT_KERNEL`, `pin_for`);
- `cache`: the image cache (`ensure_image`, `find_image`, `LinuxImage`, the stamp) and the
  build that fills it;
- `packages`: resolving a pin to Debian packages, downloading and verifying them;
- `kernel`: /boot out of the kernel package, vmlinux out of the bzImage, the PVH note;
- `root_tree`: the initramfs (the DT_NEEDED closure of perf, the loader check);
- `guest_init`: /init, the helper scripts and the per-run protocol with the host;
- `elf`, `stub_library`, `cpio`: an ELF reader, a stub-library writer, a newc cpio writer;
- `errors`: `ImageError`.

``python -m p4pmu.qemu_glue.linux_image`` is the command line (`__main__`).
"""
