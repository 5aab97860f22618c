"""The host side of gdb sessions, without QEMU: the session records (qemu_glue/sessions.py),
`p4pmu gdb`'s command line (qemu_glue/gdb_cmd.py), `p4pmu info`'s gdb_script, and the gdb
extension (qemu_glue/gdb_extension.py) loaded by the real gdb: its help texts, its setting
and the errors it gives without a control channel (docs/gdb.md)."""
from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import time
from pathlib import Path

import pytest

from p4pmu.qemu_glue import cli, gdb_cmd, info_cmd, sessions
from p4pmu.qemu_glue.errors import UsageError

EXTENSION = gdb_cmd.extension_path()


@pytest.fixture
def runtime_dir(tmp_path, monkeypatch) -> Path:
    """A private XDG_RUNTIME_DIR: the session files go to its p4pmu/ folder."""
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    return tmp_path / "p4pmu"


@pytest.fixture
def other_process():
    """A second live process (its pid for a second session)."""
    proc = subprocess.Popen(["sleep", "60"])
    yield proc.pid
    proc.kill()
    proc.wait()


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def _session(pid: int, port: int, started: float | None = None, **more) -> dict:
    info = {"p4pmu_pid": pid, "qemu_pid": pid + 1, "gdb_port": port,
            "control": f"/run/p4pmu-{port}/control.sock", "qmp": f"/run/p4pmu-{port}/qmp.sock",
            "dir": f"/run/p4pmu-{port}", "elf": None, "kind": "qemu",
            "started": time.time() if started is None else started}
    info.update(more)
    return info


# --------------------------------------------------------------------------------------------
# sessions.py


def test_register_writes_a_private_file(runtime_dir):
    info = _session(os.getpid(), 1234)
    path = sessions.register(info)
    assert path == runtime_dir / f"{os.getpid()}.json"
    assert json.loads(path.read_text()) == info
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(runtime_dir.stat().st_mode) == 0o700
    assert [p.name for p in runtime_dir.iterdir()] == [path.name]  # no temporary file left
    assert sessions.live_sessions() == [info]
    sessions.unregister(path)
    assert not path.exists() and sessions.live_sessions() == []
    sessions.unregister(path)  # already gone: no error


def test_without_xdg_runtime_dir_the_cache_holds_sessions(tmp_path, monkeypatch):
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    path = sessions.register(_session(os.getpid(), 1234))
    assert path.parent == tmp_path / ".cache" / "p4pmu" / "sessions"
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_dead_sessions_are_dropped(runtime_dir):
    dead = sessions.register(_session(_dead_pid(), 1235))
    (runtime_dir / "junk.json").write_text("{not json")
    live = _session(os.getpid(), 1234)
    sessions.register(live)
    assert sessions.live_sessions() == [live]
    assert not dead.exists() and not (runtime_dir / "junk.json").exists()


def test_a_file_that_is_not_a_session_is_dropped_alone(runtime_dir):
    runtime_dir.mkdir(mode=0o700)
    (runtime_dir / "junk.json").write_text("{not json")
    assert sessions.live_sessions() == []
    assert not (runtime_dir / "junk.json").exists()


def test_find_none(runtime_dir):
    with pytest.raises(UsageError, match=r"no p4pmu session with --gdb is running: start one "
                                         r"with `p4pmu qemu --gdb GUEST` or `p4pmu linux --gdb`"):
        sessions.find()
    with pytest.raises(UsageError, match="no p4pmu session with --gdb is running"):
        sessions.find(1234)


def test_find_one_and_by_port(runtime_dir, other_process):
    mine = _session(os.getpid(), 1234, started=time.time() - 10)
    sessions.register(mine)
    assert sessions.find() == mine
    other = _session(other_process, 1240, kind="linux", elf="/tmp/vmlinux")
    sessions.register(other)
    assert sessions.live_sessions() == [other, mine]  # newest first
    with pytest.raises(UsageError) as e:
        sessions.find()
    message = str(e.value)
    assert message.startswith("2 p4pmu sessions with --gdb are running: choose one with "
                              "--port N:")
    assert "port 1234: p4pmu qemu" in message and "port 1240: p4pmu linux" in message
    assert f"QEMU pid {other_process + 1}" in message and "ELF /tmp/vmlinux" in message
    assert sessions.find(1234) == mine and sessions.find(1240) == other
    with pytest.raises(UsageError, match="no p4pmu session with --gdb listens on port 99; "
                                         "running:\n  port 1240"):
        sessions.find(99)


# --------------------------------------------------------------------------------------------
# p4pmu gdb


def test_gdb_argv():
    session = _session(os.getpid(), 1234)
    argv = gdb_cmd.gdb_argv(session, "/tmp/guest.elf", ["info p4pmu", "p 1"], batch=True,
                            gdb_args=["-nx"])
    assert argv == ["gdb", "-q", "-iex", "set architecture i386:x86-64",
                    "-ex", f"source {EXTENSION}",
                    "-ex", f"set p4pmu socket {session['control']}",
                    "-ex", "p4pmu connect",
                    "-ex", "target remote localhost:1234",
                    "-ex", "info p4pmu", "-ex", "p 1",
                    "--batch", "/tmp/guest.elf", "-nx"]
    assert EXTENSION.is_absolute() and EXTENSION.is_file()
    plain = gdb_cmd.gdb_argv(session, None, [], batch=False)
    assert "--batch" not in plain and plain[-1] == "target remote localhost:1234"


def _p4pmu(capsys, *args) -> tuple[int, str, str]:
    """`p4pmu ARGS` in this process: (exit status, stdout, stderr)."""
    try:
        status = cli.main(list(args))
    except SystemExit as e:
        status = e.code
    out = capsys.readouterr()
    return status, out.out, out.err


def test_p4pmu_gdb_command_line(runtime_dir, capsys, tmp_path):
    elf = tmp_path / "guest.elf"
    elf.write_bytes(b"\x7fELF")
    sessions.register(_session(os.getpid(), 1234, elf=str(elf)))
    status, out, _ = _p4pmu(capsys, "gdb", "--dry-run", "-ex", "info p4pmu all", "--batch",
                            "--", "-nx")
    assert status == 0
    assert out.endswith("-ex 'target remote localhost:1234' -ex 'info p4pmu all' --batch "
                        f"{elf} -nx\n")
    assert f"-ex 'source {EXTENSION}'" in out and "-ex 'p4pmu connect'" in out


@pytest.mark.parametrize("args, message", [
    ((), "no p4pmu session with --gdb is running"),
    (("--port", "99"), "no p4pmu session with --gdb is running"),
    (("/nonexistent/guest.elf",), "/nonexistent/guest.elf: no such file"),
    (("--port", "70000"), "not a TCP port"),
    (("a.elf", "b.elf"), "gdb's own arguments go after `--`"),
])
def test_p4pmu_gdb_usage_errors(runtime_dir, capsys, args, message):
    if args and args[0] == "/nonexistent/guest.elf":
        sessions.register(_session(os.getpid(), 1234))
    status, _, err = _p4pmu(capsys, "gdb", "--dry-run", *args)
    assert status == 2 and message in err


def _no_qemu_lookup() -> dict:
    """info_cmd's QEMU section without looking for a QEMU."""
    keys = ("qemu", "qemu_version", "qemu_package_version", "qemu_source",
            "qemu_argv_prefix", "qemu_data_dirs")
    return {**dict.fromkeys(keys), "qemu_error": "not looked for in this test"}


def test_info_names_the_gdb_script(capsys, monkeypatch):
    monkeypatch.setattr(info_cmd, "_qemu_info", _no_qemu_lookup)
    status, out, _ = _p4pmu(capsys, "info", "--json")
    assert status == 0
    script = Path(json.loads(out)["gdb_script"])
    assert script.is_absolute() and script.is_file() and script == EXTENSION
    status, out, _ = _p4pmu(capsys, "info")
    assert status == 0 and f"gdb:     {EXTENSION}" in out


# --------------------------------------------------------------------------------------------
# the extension in the real gdb


def _gdb(*commands: str, env: dict | None = None) -> subprocess.CompletedProcess:
    if shutil.which("gdb") is None:
        pytest.skip("gdb is not installed (`p4pmu setup` / ./p4pmu.sh install it)")
    argv = ["gdb", "-batch", "-nx", "-ex", f"source {EXTENSION}"]
    for command in commands:
        argv += ["-ex", command]
    environment = {k: v for k, v in os.environ.items() if k != "P4PMU_CONTROL"}
    environment.update(env or {})
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, env=environment)


def test_extension_help_texts():
    r = _gdb("help p4pmu", "help info p4pmu", "show p4pmu socket", "help p4pmu break",
             "help function p4pmu_counter")
    assert r.stderr == ""
    out = r.stdout
    assert "The emulated Pentium 4 (NetBurst) PMU of a p4pmu QEMU." in out
    assert "List of p4pmu subcommands:" in out
    for sub in ("connect", "disconnect", "set", "break", "delete", "breakpoints", "trace",
                "why"):
        assert f"\np4pmu {sub} -- " in out, sub
    assert "Usage: info p4pmu [counters|cccr|escr|all|breakpoints] [lp N]" in out
    for kind in ("overflow", "pmi", "access"):
        assert f"\np4pmu break {kind} -- " in out, kind
    assert "The p4pmu control socket is not set" in out
    assert "$p4pmu_counter(N): counter N's value" in out


def test_extension_without_a_control_channel():
    r = _gdb("info p4pmu", "p $p4pmu_counter(0)", "p4pmu set IQ_CCCR0 0", "p4pmu why",
             "p4pmu connect")
    not_connected = "p4pmu: not connected to a control channel: `p4pmu connect [PATH]`"
    assert r.stderr.count(not_connected) == 4, r.stderr
    assert "p4pmu connect: which socket?" in r.stderr


def test_extension_socket_from_the_environment(tmp_path):
    socket_path = tmp_path / "control.sock"
    r = _gdb("show p4pmu socket", "p4pmu connect", "info p4pmu",
             env={"P4PMU_CONTROL": str(socket_path)})
    assert f'The p4pmu control socket is "{socket_path}" (not connected).' in r.stdout
    # `p4pmu connect`, and `info p4pmu` connecting by itself to the socket set
    assert r.stderr.count(f"p4pmu: no control socket at {socket_path}: is `p4pmu qemu "
                          "--gdb`") == 2, r.stderr


def test_extension_loads_twice():
    """A second `source` replaces the first and keeps its socket setting."""
    r = _gdb("set p4pmu socket /tmp/p4pmu-test.sock", f"source {EXTENSION}",
             "show p4pmu socket", "help p4pmu why")
    assert r.stderr == ""
    assert 'The p4pmu control socket is "/tmp/p4pmu-test.sock" (not connected).' in r.stdout
    assert "Say which P4PMU breakpoint last stopped the guest." in r.stdout


@pytest.mark.parametrize("args, message", [
    (["qemu", "--gdb", "--no-plugin", "--", "-display", "none"], "--gdb needs the plugin"),
    (["qemu", "--gdb", "--", "-S"], "--gdb gives QEMU -S itself"),
    (["qemu", "--gdb", "--plugin-opt", "control=/tmp/x.sock", "--", "-display", "none"],
     "--gdb sets the plugin options control= and qmp= itself"),
    (["qemu", "--gdb=70000", "--", "-display", "none"], "a TCP port is 1-65535"),
    (["linux", "--gdb", "--no-plugin", "--", "true"], "--gdb needs the plugin"),
    (["linux", "--gdb=0x10", "--", "true"], "invalid int value"),
    (["linux", "--gdb=65536", "--", "true"], "a TCP port is 1-65535"),
    (["linux", "--gdb", "--plugin-opt", "qmp=/tmp/q.sock", "--", "true"],
     "--gdb sets the plugin options control= and qmp= itself"),
])
def test_gdb_options_refuse_what_they_cannot_go_with(capsys, args, message):
    """One check for both commands (qemu_glue/gdb_launch.py), before anything is made."""
    status, _, err = _p4pmu(capsys, *args)
    assert status == 2 and message in err, err
