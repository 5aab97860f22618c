"""The virtio-serial ports of a `p4pmu linux` run: standard input in, fetched files out.

Both are ports of one ``virtio-serial-pci`` device, present only when the run needs them
(a run without them has the same devices as before); /init loads the guest's virtio modules
on first use and finds a port by its name (qemu_glue/linux_image/guest_init.py):

- ``p4pmu.stdin`` (`guest_init.STDIN_PORT`): the host's standard input, when it is a pipe,
  a file or a socket (not /dev/null, not a terminal).  QEMU reads it from one end of a
  socket pair; the host copies its stdin into the other end and shuts its writing side at
  EOF, which QEMU passes on as the port's disconnection: the guest's read returns 0 once the
  data is read, as at the end of a pipe.
- ``p4pmu.fetch`` (`guest_init.FETCH_PORT`): after COMMAND ends (whatever its status), /init
  sends each path of --fetch as a record (`guest_init.FETCH_MARKER`: an index, a size and a
  tar archive).  QEMU writes the stream straight into a temporary file of the host (the
  chardev's file is that file's descriptor), not a pipe that the host must keep reading: a
  file never makes QEMU wait, so nothing the guest sent is still queued in QEMU when the
  guest powers off, however loaded the host.  After QEMU's exit the host unpacks each record
  where --fetch said, with tarfile's "data" filter (no absolute paths, no links out of the
  destination, no devices); a record cut short is an error naming its --fetch.
"""
from __future__ import annotations

import os
import shutil
import socket
import stat
import tarfile
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from p4pmu.qemu_glue.errors import UsageError
from p4pmu.qemu_glue.linux_image import guest_init


@dataclass
class FetchSpec:
    guest: str  # absolute guest path
    host: Path  # where it lands: the file or folder itself
    spec: str  # as given, for messages


def parse_fetch(spec: str) -> FetchSpec:
    """GUEST_PATH[:HOST_PATH]: HOST_PATH defaults to ./<name>; an existing folder or one
    ending in / receives <name>.  A relative GUEST_PATH is under /root."""
    guest, host = (spec.split(":", 1) + [""])[:2]
    if not guest or guest.rstrip("/") in ("", "."):
        raise UsageError(f"--fetch {spec}: name a file or folder of the guest")
    if not guest.startswith("/"):
        guest = f"{guest_init.GUEST_WORKDIR}/{guest}"
    guest = os.path.normpath(guest)
    if guest == "/":
        raise UsageError(f"--fetch {spec}: the guest's whole file system cannot be fetched")
    name = os.path.basename(guest)
    hp = Path(host or ".").expanduser()
    if not host or host.endswith("/") or hp.is_dir():
        if not hp.is_dir() and not hp.parent.is_dir():
            raise UsageError(f"--fetch {spec}: {hp.parent} is not an existing folder")
        hp = hp / name  # (a missing last folder is made)
    elif not hp.parent.is_dir():
        raise UsageError(f"--fetch {spec}: {hp.parent} is not an existing folder")
    return FetchSpec(guest, hp.absolute(), spec)


def stdin_wanted() -> bool:
    """Whether the host's standard input goes to COMMAND: a pipe, a file or a socket."""
    try:
        st = os.fstat(0)
    except OSError:
        return False  # closed
    if os.isatty(0):
        return False
    return stat.S_ISFIFO(st.st_mode) or stat.S_ISREG(st.st_mode) or stat.S_ISSOCK(st.st_mode)


class Ports:
    """The run's virtio-serial ports: their QEMU arguments, the thread that copies standard
    input in, and the fetched files unpacked at the end."""

    def __init__(self, stdin: bool, fetches: list[FetchSpec]):
        self.stdin = stdin
        self.fetches = fetches
        self._stdin_thread: threading.Thread | None = None
        self._spool = tempfile.TemporaryFile(prefix="p4pmu-fetch-") if fetches else None
        self._host_sock: socket.socket | None = None

    @property
    def needed(self) -> bool:
        return self.stdin or bool(self.fetches)

    def run_files(self) -> dict[str, bytes]:
        """The per-run files /init reads: /p4pmu/stdin, /p4pmu/fetch."""
        files = {}
        if self.stdin:
            files["stdin"] = b""
        if self.fetches:
            files["fetch"] = "".join(f"{f.guest}\n" for f in self.fetches).encode()
        return files

    def qemu_args(self, machine) -> list[str]:
        """The device and its ports; the descriptors go to `machine` (P4Machine.pass_fd)."""
        if not self.needed:
            return []
        args = ["-device", "virtio-serial-pci,id=p4pmu_vser"]
        if self.stdin:
            mine, qemus = socket.socketpair()
            self._host_sock = mine
            fd = os.dup(qemus.fileno())
            qemus.close()
            n = machine.pass_fd(fd).rsplit("/", 1)[1]
            args += ["-chardev", f"socket,id=p4pmu_in,fd={n}",
                     "-device", f"virtserialport,bus=p4pmu_vser.0,chardev=p4pmu_in,"
                                f"name={guest_init.STDIN_PORT}"]
        if self.fetches:
            assert self._spool is not None
            # QEMU opens /dev/fd/N anew (the same file, its own offset, truncated: empty)
            spool = machine.pass_fd(os.dup(self._spool.fileno()))
            args += ["-chardev", f"file,id=p4pmu_fetch,path={spool}",
                     "-device", f"virtserialport,bus=p4pmu_vser.0,chardev=p4pmu_fetch,"
                                f"name={guest_init.FETCH_PORT}"]
        return args

    def start(self) -> None:
        """After QEMU started: copy stdin in (QEMU writes the fetch stream itself)."""
        if self._host_sock is not None:
            self._stdin_thread = threading.Thread(target=self._pump_stdin, daemon=True)
            self._stdin_thread.start()

    def close_unstarted(self) -> None:
        """QEMU did not start: close what start() would have used."""
        if self._host_sock is not None:
            self._host_sock.close()

    def _pump_stdin(self) -> None:
        sock = self._host_sock
        assert sock is not None
        try:
            while chunk := os.read(0, 1 << 16):
                sock.sendall(chunk)
            # a half close: QEMU reads the rest and then the end (a full close would be a
            # hang-up, which QEMU acts on at once, dropping what it has not read yet)
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the guest is gone (or stdin failed): nothing more to send

    def join(self) -> None:
        """After QEMU is gone (stdin's thread may still wait on the host's stdin; it is a
        daemon)."""
        if self._host_sock is not None:
            self._host_sock.close()  # (a pump still blocked on stdin gets an error: it ends)

    def unpack(self) -> list[str]:
        """Unpack what the guest sent; one message per --fetch that did not arrive whole."""
        if self._spool is None:
            return []
        spool = self._spool
        total = os.fstat(spool.fileno()).st_size
        spool.seek(0)
        got: dict[int, int] = {}
        errors = []
        while header := spool.readline():
            record = _parse_record(header, len(self.fetches))
            if record is None:
                errors.append("the guest's fetch stream is damaged; what came before is kept")
                break
            i, size = record
            got[i] = size
            if size < 0:
                continue
            f, data_end = self.fetches[i], spool.tell() + size
            if data_end > total:
                errors.append(f"--fetch {f.spec}: cut short ({total - spool.tell():,} of "
                              f"{size:,} bytes came back); nothing of it was unpacked")
                break
            try:
                self._extract(f, size)
            except (tarfile.TarError, OSError) as e:
                errors.append(f"--fetch {f.spec}: cannot unpack it into {f.host}: {e}")
            spool.seek(data_end)
        for i, f in enumerate(self.fetches):
            size = got.get(i)
            if size is None:
                errors.append(f"--fetch {f.spec}: nothing came back (the guest ended before "
                              "/init sent it)")
            elif size == -1:
                errors.append(f"--fetch {f.spec}: {f.guest} does not exist in the guest")
            elif size == -2:
                errors.append(f"--fetch {f.spec}: tar failed in the guest (its message is in "
                              "the kernel log)")
        spool.close()
        return errors

    def _extract(self, f: FetchSpec, size: int) -> None:
        """One record's tar archive into f.host (replacing a file there; into a folder)."""
        name = os.path.basename(f.guest)
        f.host.parent.mkdir(exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=".p4pmu-fetch-", dir=f.host.parent) as tmp:
            with tarfile.open(fileobj=_Window(self._spool, size), mode="r|") as tf:
                tf.extractall(tmp, filter="data")
            src = Path(tmp) / name
            if f.host.is_dir() and not f.host.is_symlink() and src.is_dir():
                shutil.copytree(src, f.host, symlinks=True, dirs_exist_ok=True)
            else:
                if f.host.is_dir() and not f.host.is_symlink():
                    shutil.rmtree(f.host)
                elif f.host.exists() or f.host.is_symlink():
                    f.host.unlink()
                os.replace(src, f.host)


def _parse_record(header: bytes, n_fetches: int) -> tuple[int, int] | None:
    """A record's header line, FETCH_MARKER <index> <bytes>: (index, bytes), None if damaged."""
    parts = header.decode("ascii", "replace").split()
    if len(parts) != 3 or parts[0] != guest_init.FETCH_MARKER:
        return None
    try:
        i, size = int(parts[1]), int(parts[2])
    except ValueError:
        return None
    return (i, size) if 0 <= i < n_fetches and size >= -2 else None


class _Window:
    """The next `size` bytes of a file, as a stream (tarfile's "r|" mode reads it once)."""

    def __init__(self, f, size: int):
        self.f = f
        self.left = size

    def read(self, n: int = -1) -> bytes:
        if n < 0 or n > self.left:
            n = self.left
        data = self.f.read(n)
        self.left -= len(data)
        return data

