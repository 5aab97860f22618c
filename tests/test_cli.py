"""The `p4pmu` command with the real QEMU.

The guest here is a 64 KiB real-mode firmware image assembled with `as`: it prints CPUID
leaves and IA32_MISC_ENABLE on COM1 and leaves through isa-debug-exit, so QEMU's exit status
is (EXITVAL << 1) | 1.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from p4pmu.emulator.models import DEFAULT_MODEL, MODELS, get_model
from p4pmu.qemu_glue import cpu, qemu_argv, run_options
from p4pmu.qemu_glue.plugin_lib import plugin_file, site_packages
from p4pmu.qemu_glue.provision import ensure_qemu

P4PMU = [sys.executable, "-m", "p4pmu.qemu_glue.cli"]

BIOS_S = r"""
        .code16
        .text
        .globl _start
_start: cli
        xorw    %ax, %ax
        movw    %ax, %ss
        movw    $0x7000, %sp
        movw    %cs, %ax
        movw    %ax, %ds
        movw    $leaves, %si
next:   movl    (%si), %eax
        cmpl    $0xffffffff, %eax
        je      done
        movl    %eax, %ebp
        xorl    %ecx, %ecx
        cpuid
        pushl   %edx
        pushl   %ecx
        pushl   %ebx
        pushl   %eax
        movl    %ebp, %eax
        call    hex32
        movb    $':', %al
        call    putc
        movw    $4, %di
1:      movb    $' ', %al
        call    putc
        popl    %eax
        call    hex32
        decw    %di
        jnz     1b
        movb    $'\n', %al
        call    putc
        addw    $4, %si
        jmp     next
done:   movb    $'M', %al       /* "M 000001A0: EDX EAX" of RDMSR IA32_MISC_ENABLE */
        call    putc
        movb    $' ', %al
        call    putc
        movl    $0x1a0, %ecx
        movl    %ecx, %eax
        call    hex32
        rdmsr
        pushl   %eax
        pushl   %edx
        movb    $':', %al
        call    putc
        movw    $2, %di
5:      movb    $' ', %al
        call    putc
        popl    %eax
        call    hex32
        decw    %di
        jnz     5b
        movb    $'\n', %al
        call    putc
        movb    $EXITVAL, %al
        outb    %al, $0xf4
2:      hlt
        jmp     2b

hex32:  pushl   %ebx            /* %eax as 8 hex digits on COM1 */
        pushw   %cx
        movl    %eax, %ebx
        movw    $8, %cx
3:      roll    $4, %ebx
        movb    %bl, %al
        andb    $0xf, %al
        addb    $'0', %al
        cmpb    $'9', %al
        jbe     4f
        addb    $7, %al
4:      call    putc
        loop    3b
        popw    %cx
        popl    %ebx
        ret

putc:   pushw   %dx             /* %al on COM1 */
        movw    $0x3f8, %dx
        outb    %al, %dx
        popw    %dx
        ret

        .balign 4
leaves: .long 0, 1, 0x80000000, 0x80000001, 0x80000002, 0x80000003, 0x80000004
        .long 0xffffffff

        .org    0xfff0          /* the reset vector, F000:FFF0 */
        ljmp    $0xf000, $_start
        .org    0x10000
"""


@pytest.fixture(scope="session")
def qemu():
    return ensure_qemu(progress=False)


@pytest.fixture(scope="session")
def bios(tmp_path_factory):
    """bios(exitval) -> path of a firmware image that exits with that isa-debug-exit value."""
    if not (shutil.which("as") and shutil.which("ld")):
        pytest.skip("binutils (as, ld) not installed")
    d = tmp_path_factory.mktemp("bios")
    src = d / "bios.S"
    src.write_text(BIOS_S)
    made = {}

    def build(exitval: int) -> Path:
        if exitval not in made:
            obj, out = d / f"bios{exitval}.o", d / f"bios{exitval}.bin"
            subprocess.run(["as", "--32", f"--defsym=EXITVAL={exitval}", "-o", obj, src],
                           check=True)
            subprocess.run(["ld", "-m", "elf_i386", "-Ttext=0", "--oformat", "binary",
                            "-o", out, obj], check=True)
            assert out.stat().st_size == 0x10000
            made[exitval] = out
        return made[exitval]

    return build


def guest_args(image: Path) -> list[str]:
    return ["-machine", "pc", "-display", "none", "-nodefaults", "-serial", "stdio",
            "-device", "isa-debug-exit,iobase=0xf4,iosize=4", "-bios", str(image)]


def p4pmu(*args: str, timeout: float = 60, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([*P4PMU, *args], capture_output=True, text=True, timeout=timeout,
                          **kw)


def parse_cpuid(stdout: str) -> dict[int, tuple[int, int, int, int]]:
    out = {}
    for line in stdout.splitlines():
        m = re.fullmatch(r"([0-9A-F]{8}): ([0-9A-F]{8}) ([0-9A-F]{8}) ([0-9A-F]{8}) ([0-9A-F]{8})",
                         line.strip())
        if m:
            out[int(m.group(1), 16)] = tuple(int(m.group(i), 16) for i in range(2, 6))
    return out


def misc_enable(stdout: str) -> int:
    m = re.search(r"^M 000001A0: ([0-9A-F]{8}) ([0-9A-F]{8})$", stdout, flags=re.M)
    assert m, stdout
    return int(m.group(1), 16) << 32 | int(m.group(2), 16)


def brand(leaves) -> str:
    raw = b"".join(r.to_bytes(4, "little") for leaf in (0x80000002, 0x80000003, 0x80000004)
                   for r in leaves[leaf])
    return raw.rstrip(b"\0").decode().strip()


# --------------------------------------------------------------------------------------------
# info, help, usage errors


def test_info_json(qemu):
    r = p4pmu("info", "--json")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    for key in ("qemu", "qemu_version", "plugin", "plugin_built", "models"):
        assert key in info
    assert info["qemu"] == str(qemu.binary)
    assert info["qemu_version"] == qemu.version
    assert [m["key"] for m in info["models"]] == list(MODELS)
    for m in info["models"]:
        model = MODELS[m["key"]]
        assert int(m["signature"], 16) == model.signature
        assert m["codename"] == model.codename and m["brand"] == model.brand
        assert m["features"]["long_mode"] == model.long_mode
        assert m["features"]["sse3"] == model.sse3
        assert m["cpu_option"] == cpu.cpu_option(model)
    assert info["default_model"] == DEFAULT_MODEL


def test_info_text():
    r = p4pmu("info")
    assert r.returncode == 0, r.stderr
    for m in MODELS.values():
        assert m.key in r.stdout and m.codename in r.stdout
    assert "QEMU:" in r.stdout and "plugin:" in r.stdout


@pytest.mark.parametrize("sub", [None, "qemu", "info", "setup", "demo"])
def test_help(sub):
    r = p4pmu(*([sub] if sub else []), "--help")
    assert r.returncode == 0, r.stderr
    assert "usage:" in r.stdout
    if sub == "qemu":
        for word in ("--model", "--plugin-opt", "--stepping", "QEMU_ARGS", *MODELS):
            assert word in r.stdout


def test_bad_model_exits_2():
    r = p4pmu("qemu", "--model", "0F_05", "--", "-display", "none")
    assert r.returncode == 2
    assert "unknown CPU model '0F_05'" in r.stderr
    assert all(k in r.stderr for k in MODELS)


@pytest.mark.parametrize("args, message", [
    (["--stepping", "16"], "stepping must be 0-15"),
    (["--plugin-opt", "colour=red"], "unknown key 'colour'"),
    (["--plugin-opt", "threads=4"], "expected 1 or 2"),
    (["--plugin-opt", "strict=maybe"], "expected on or off"),
    (["--plugin-opt", "nokeyvalue"], "expected KEY=VALUE"),
    (["--plugin-opt", "log=/nonexistent-dir/x.log"], "does not exist"),
    (["--plugin-opt", "trace=/nonexistent-dir/x.trace"], "does not exist"),
    (["--plugin-opt", "control=/nonexistent-dir/c.sock"], "does not exist"),
    (["--plugin-opt", "trace=/tmp"], "is a folder, expected a file name"),
    (["--plugin-opt", "model=0F_02", "--model", "0F_04"], "disagree"),
    (["--", "-cpu", "pentium4"], "remove -cpu"),
    (["--", "-accel", "kvm"], "needs TCG"),
    (["--", "-machine", "pc,accel=kvm"], "needs TCG"),
    (["--", "-smp", "4,threads=4"], "at most two hardware threads"),
    (["--plugin-opt", "threads=2", "--", "-smp", "2"], "needs sibling threads"),
    (["-kernel", "vmlinux"], "go after `--`"),
])
def test_usage_errors_exit_2(args, message):
    if "--" not in args and args[0] != "-kernel":
        args = [*args, "--", "-display", "none"]
    r = p4pmu("qemu", *args)
    assert r.returncode == 2, r.stderr
    assert message in r.stderr


def test_missing_plugin_file_is_reported():
    r = p4pmu("qemu", "--plugin", "/nonexistent/p4pmu.so", "--", "-display", "none")
    assert r.returncode == 2
    assert "/nonexistent/p4pmu.so: no such file" in r.stderr


def test_no_qemu_arguments_is_refused_instead_of_opening_a_display():
    r = p4pmu("qemu", timeout=60)
    assert r.returncode == 2, r.stderr
    assert "no QEMU arguments" in r.stderr and "VNC" in r.stderr


# --------------------------------------------------------------------------------------------
# Composing the command line (the real Qemu object, no QEMU run)


def test_compose(qemu, tmp_path):
    plugin = tmp_path / "lib,p4pmu.so"  # a comma must reach QEMU escaped
    m = get_model("0F_02")
    cmd = qemu_argv.compose_qemu_argv(
        qemu, m, ["-smp", "2,threads=2", "-m", "64"],
        run_options.parse_plugin_opts(["strict=yes", f"log={tmp_path}/l"]), plugin)
    assert cmd[:len(qemu.argv())] == qemu.argv()
    rest = cmd[len(qemu.argv()):]
    assert rest[:2] == ["-accel", "tcg"]
    assert rest[2:4] == ["-cpu", cpu.cpu_option(m)]
    assert rest[4] == "-plugin"
    parts = rest[5].replace(",,", "\0").split(",")
    assert parts[0] == str(plugin).replace(",", "\0")
    assert parts[1:] == ["model=0F_02", "stepping=9", "strict=on", f"log={tmp_path}/l",
                         "threads=2", f"pypath={site_packages()}"]
    assert rest[6:8] == ["-d", "plugin"]  # the plugin's messages (plugin/messages.c)
    assert rest[8:] == ["-smp", "2,threads=2", "-m", "64"]  # unchanged, at the end
    # the user's accelerator choice is kept; no plugin
    cmd = qemu_argv.compose_qemu_argv(qemu, m, ["-accel", "tcg,one-insn-per-tb=on"], {}, None)
    assert "-plugin" not in cmd and cmd.count("-accel") == 1
    cmd = qemu_argv.compose_qemu_argv(qemu, m, ["-M", "pc,accel=tcg"], {}, None)
    assert "-accel" not in cmd


@pytest.mark.parametrize("qargs, want", [
    (["-m", "64"], ["-d", "plugin", "-m", "64"]),
    (["-d", "int,cpu_reset", "-m", "64"], ["-d", "int,cpu_reset,plugin", "-m", "64"]),
    # QEMU takes the last -d only: that one gets the plugin's output
    (["-d", "int", "-D", "/tmp/q.log", "--d", "exec"],
     ["-d", "int", "-D", "/tmp/q.log", "--d", "exec,plugin"]),
    (["-d", "plugin,int"], ["-d", "plugin,int"]),
    (["-d", "help"], ["-d", "help"]),
])
def test_compose_adds_plugin_log(qemu, tmp_path, qargs, want):
    """The plugin prints through QEMU's log (qemu_plugin_outs, shown with -d plugin): the
    composition asks for it, merged into the caller's own -d; without the plugin, no -d."""
    m = get_model("0F_04")
    cmd = qemu_argv.compose_qemu_argv(qemu, m, qargs, {}, tmp_path / "p.so")
    rest = cmd[len(qemu.argv()):]
    assert rest[:4] == ["-accel", "tcg", "-cpu", cpu.cpu_option(m)]
    assert rest[4] == "-plugin" and rest[6:] == want
    cmd = qemu_argv.compose_qemu_argv(qemu, m, qargs, {}, None)
    assert cmd[len(qemu.argv()) + 4:] == qargs


def test_cpu_option_per_model():
    o2, o4 = cpu.cpu_option("0F_02"), cpu.cpu_option("0F_04")
    for o, m in ((o2, MODELS["0F_02"]), (o4, MODELS["0F_04"])):
        assert o.startswith("qemu64,vendor=GenuineIntel,family=15,")
        assert f",model={m.model},stepping={m.stepping}," in o
        assert f",level={m.cpuid_level}," in o and ",-hypervisor" in o and ",-svm" in o
    assert ",-lm" in o2 and ",-pni" in o2 and ",-nx" in o2
    assert ",-lm" not in o4 and ",-pni" not in o4
    assert cpu.cpu_option("0F_04", stepping=1).count("stepping=1,") == 1
    m = MODELS["0F_04"]
    import dataclasses
    odd = dataclasses.replace(m, brand="Intel(R) Pentium(R) 4, rev. 2")
    assert "model-id=Intel(R) Pentium(R) 4,, rev. 2," in cpu.cpu_option(odd)


# --------------------------------------------------------------------------------------------
# Running real guests


def boot_bios(bios, model: str, exitval: int = 0x21, *extra: str, plugin: bool = False):
    args = ["qemu", "--model", model, *extra]
    if not plugin:
        args.append("--no-plugin")
    return p4pmu(*args, "--", *guest_args(bios(exitval)))


@pytest.mark.parametrize("exitval", [0x00, 0x21, 0x7f])
def test_exit_status_passthrough(bios, exitval):
    r = boot_bios(bios, "0F_02", exitval)
    assert r.returncode == (exitval << 1) | 1, r.stderr
    assert "00000001:" in r.stdout


@pytest.mark.parametrize("key", list(MODELS))
def test_guest_sees_the_model_cpuid(bios, key):
    m = MODELS[key]
    r = boot_bios(bios, key)
    assert r.returncode == 0x43, r.stderr
    leaves = parse_cpuid(r.stdout)
    eax0, ebx0, ecx0, edx0 = leaves[0]
    assert eax0 == m.cpuid_level <= 5  # no leaf 0Ah: no architectural perfmon
    vendor = b"".join(x.to_bytes(4, "little") for x in (ebx0, edx0, ecx0)).decode()
    assert vendor == "GenuineIntel"
    eax1, _, ecx1, edx1 = leaves[1]
    assert eax1 == m.signature
    assert not ecx1 & (1 << 31)  # no hypervisor bit
    assert bool(ecx1 & 1) == m.sse3  # SSE3 (pni)
    assert bool(ecx1 & (1 << 13)) == m.long_mode  # CMPXCHG16B only on the EM64T parts
    assert edx1 & (1 << 26)  # SSE2
    _, _, ecx81, edx81 = leaves[0x80000001]
    assert bool(edx81 & (1 << 29)) == m.long_mode  # LM
    assert bool(edx81 & (1 << 20)) == m.long_mode  # NX
    assert not ecx81 & (1 << 2)  # no SVM
    assert brand(leaves) == m.brand


def test_stepping_option_reaches_the_guest(bios):
    r = boot_bios(bios, "0F_04", 0x21, "--stepping", "10")
    assert parse_cpuid(r.stdout)[1][0] == get_model("0F_04", 10).signature


def test_0F_02_and_0F_04_differ_where_the_table_says(bios):
    a = parse_cpuid(boot_bios(bios, "0F_02").stdout)
    b = parse_cpuid(boot_bios(bios, "0F_04").stdout)
    assert a[1][0] == 0xF29 and b[1][0] == 0xF43
    assert a[0][0] == 3 and b[0][0] == 5
    assert not a[0x80000001][3] & (1 << 29) and b[0x80000001][3] & (1 << 29)


def test_signals_are_forwarded(tmp_path):
    """SIGTERM to p4pmu reaches QEMU (which then shuts down); the exit status says so; no
    QEMU is left behind."""
    pidfile, sock = tmp_path / "qemu.pid", tmp_path / "qmp.sock"
    p = subprocess.Popen([*P4PMU, "qemu", "--no-plugin", "--", "-machine", "pc", "-display",
                          "none", "-nodefaults", "-S", "-pidfile", str(pidfile),
                          "-qmp", f"unix:{sock},server=on,wait=off"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    qpid = None
    try:
        # QEMU sets its signal handlers late in its start-up (a SIGTERM before then kills it
        # silently): wait until its main loop has answered a QMP command.
        deadline = time.monotonic() + 20
        while True:
            assert time.monotonic() < deadline and p.poll() is None, "QEMU did not come up"
            try:
                with socket.socket(socket.AF_UNIX) as c:
                    c.settimeout(10)
                    c.connect(str(sock))
                    buf = c.recv(4096)
                    c.sendall(b'{"execute": "qmp_capabilities"}\n'
                              b'{"execute": "query-status"}\n')
                    while buf.count(b'"return"') < 2:
                        more = c.recv(4096)
                        assert more, "QMP closed"
                        buf += more
                    break
            except (ConnectionRefusedError, FileNotFoundError):
                time.sleep(0.05)
        qpid = int(pidfile.read_text())
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=20)
    finally:
        if p.poll() is None:
            p.kill()
        if qpid:
            with contextlib.suppress(ProcessLookupError):
                if p.returncode != 0:
                    os.kill(qpid, signal.SIGKILL)
    assert f"terminating on signal 15 from pid {p.pid}" in err  # sent on by p4pmu
    # QEMU's own status after a SIGTERM is 0; p4pmu says it was stopped, as a shell would
    assert p.returncode == 128 + signal.SIGTERM
    assert "p4pmu: QEMU stopped by signal 15 (SIGTERM)" in err
    with pytest.raises(ProcessLookupError):
        os.kill(qpid, 0)


# --------------------------------------------------------------------------------------------
# With the plugin


@pytest.mark.parametrize("exitval", [0x00, 0x21])
def test_exit_status_passthrough_with_plugin(bios, exitval, tmp_path):
    r = boot_bios(bios, "0F_02", exitval, "--plugin-opt", f"log={tmp_path}/pmu.log",
                  plugin=True)
    assert r.returncode == (exitval << 1) | 1, r.stderr
    assert parse_cpuid(r.stdout)[1][0] == 0xF29
    assert (tmp_path / "pmu.log").exists()


def test_a_plugin_that_refuses_to_load_exits_2_not_the_guests_status_1(bios, tmp_path):
    """The plugin cannot import p4pmu from an empty pypath folder and does not load; QEMU
    exits 1 as a guest's isa-debug-exit 0 would: p4pmu says so and exits 2."""
    empty = tmp_path / "site"
    empty.mkdir()
    r = boot_bios(bios, "0F_02", 0x00, "--plugin-opt", f"pypath={empty}", plugin=True)
    assert r.returncode == 2, r.stderr
    assert "cannot import the p4pmu package inside QEMU" in r.stderr
    assert "the plugin did not load" in r.stderr


@pytest.mark.parametrize("second", ["same path", "a copy"])
def test_plugin_loaded_twice(qemu, bios, tmp_path, second):
    """QEMU's -plugin given twice with the plugin.  A copy at another path (which does not
    share the first one's statics) is refused at installation: QEMU stops with an error
    instead of running with every PMU access and block counted twice.  The same path given
    twice is one plugin to QEMU (it merges -plugin options naming the same file): installed
    once, the guest runs."""
    plugin = plugin_file(build=True, progress=False)
    other = plugin
    if second == "a copy":
        other = tmp_path / "copy-of-libp4pmu_plugin.so"
        shutil.copyfile(plugin, other)
    cmd = qemu_argv.compose_qemu_argv(qemu, get_model("0F_04"), guest_args(bios(0x21)),
                                            run_options.parse_plugin_opts([]), plugin)
    i = cmd.index("-plugin")
    cmd[i + 2:i + 2] = ["-plugin", cmd[i + 1].replace(str(plugin), str(other), 1)]
    assert cmd.count("-plugin") == 2
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60,
                       stdin=subprocess.DEVNULL)
    if second == "a copy":
        assert r.returncode not in (0, (0x21 << 1) | 1), r.stderr
        assert "p4pmu: the plugin is loaded twice" in r.stderr, r.stderr
    else:
        assert r.returncode == (0x21 << 1) | 1, r.stderr
        assert "loaded twice" not in r.stderr, r.stderr


@pytest.mark.parametrize("key", ["0F_02", "0F_04"])
def test_plugin_serves_the_model(bios, key):
    """The -plugin option reaches the bridge: IA32_MISC_ENABLE is what the emulator says
    for this model, and differs from bare TCG's (no performance monitoring)."""
    from p4pmu.emulator.pmu import PMU
    bare = misc_enable(boot_bios(bios, key).stdout)
    r = boot_bios(bios, key, plugin=True)
    assert r.returncode == 0x43, r.stderr
    want = PMU(get_model(key), ht=False, strict=False).misc_enable(bare)
    assert misc_enable(r.stdout) == want
    assert want & (1 << 7) and not bare & (1 << 7)  # performance monitoring available


def test_setup_skipping_everything_is_quick():
    r = p4pmu("setup", "--skip-plugin", "--skip-guests")
    assert r.returncode == 0, r.stderr
    assert "ready" in r.stderr
