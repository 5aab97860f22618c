#!/usr/bin/env bash
# p4pmu.sh: set up everything a fresh Debian/Ubuntu machine needs, then run the main job or
# the tests.  Idempotent: a second run only checks and goes straight to the job.
#
#   ./p4pmu.sh demo    boot the demo guest under the emulated Pentium 4 PMU
#   ./p4pmu.sh test    run the whole test suite (extra arguments go to pytest)
#   ./p4pmu.sh setup   only set up
#
# What needs root: installing missing Debian packages (through apt-get; sudo is used when you
# are not root).  Everything else (the virtual environment in .venv, QEMU 11.1 unpacked into
# a per-user cache, the plugin and guest builds under build/) needs no privileges.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$here"

say() { printf '\033[1m[p4pmu setup]\033[0m %s\n' "$*" >&2; }
die() { printf '\033[1;31m[p4pmu setup] error:\033[0m %s\n' "$*" >&2; exit 1; }

usage() {  # the comment block at the top of this file, up to its first other line
    awk 'NR == 1 { next } !/^#/ { exit } { sub(/^# ?/, ""); print }' "$0"
}

cmd=${1:-}
case "$cmd" in
    demo|test|setup) shift ;;
    -h|--help|help) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
esac

# ---------------------------------------------------------------------------------------------
# 1. System packages (Debian's archive, by name)
# ---------------------------------------------------------------------------------------------
command -v apt-get >/dev/null 2>&1 && command -v dpkg-query >/dev/null 2>&1 ||
    die "this set-up needs a Debian or Ubuntu system (apt-get and dpkg were not found).
  On another distribution install by hand: Python >= 3.10 with venv and a shared libpython +
  headers, gcc with 32-bit support, gdb, and a QEMU 11.1 built with plugin support."

# gcc-multilib: the 32-bit bare-metal test guests; python3-dev: cffi's embedding build of the
# plugin; gdb: the scripted-GDB features; xz-utils and cpio: guest images; g++ and the host's
# perf (linux-perf): host-built programs in the guest and guest recordings read on the host;
# clang-format: the C style check of the plugin (tests/test_plugin_layers.py).
pkgs=(gcc gcc-multilib g++ make binutils python3 python3-venv python3-dev gdb xz-utils cpio
      ca-certificates gnupg debian-archive-keyring linux-perf clang-format)
if ! grep -qi debian /etc/os-release 2>/dev/null; then
    # Ubuntu has no debian-archive-keyring in main under that name on every release, and
    # ships perf as linux-tools-common (with a kernel-specific linux-tools-<release>)
    pkgs=("${pkgs[@]/debian-archive-keyring/}")
    pkgs=("${pkgs[@]/linux-perf/linux-tools-common}")
fi
missing=()
for p in "${pkgs[@]}"; do
    [ -n "$p" ] || continue
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$p")
    fi
done
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" -eq 0 ]; then sudo=""; elif command -v sudo >/dev/null 2>&1; then sudo="sudo"
    else die "missing Debian packages: ${missing[*]}
  Install them as root:  apt-get install -y ${missing[*]}"; fi
    say "installing Debian packages (needs root): ${missing[*]}"
    $sudo apt-get update -q || die "apt-get update failed (no network to the Debian archive?)"
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q "${missing[@]}" ||
        die "apt-get install failed for: ${missing[*]}"
fi

# ---------------------------------------------------------------------------------------------
# 2. The virtual environment in the checkout (.venv) with the Python dependencies
# ---------------------------------------------------------------------------------------------
py=${P4PMU_PYTHON:-python3}
command -v "$py" >/dev/null 2>&1 || die "no $py found"
"$py" -c 'import sys; sys.exit(sys.version_info < (3, 10))' ||
    die "Python >= 3.10 is needed ($($py --version 2>&1) found)"

if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c 'import sys' 2>/dev/null; then
    say "creating the virtual environment .venv"
    rm -rf .venv
    "$py" -m venv .venv || die "python3 -m venv failed (install python3-venv)"
fi
stamp=.venv/.p4pmu-installed
want=$(cat pyproject.toml | sha256sum | cut -c1-16)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    say "installing Python dependencies into .venv (numpy, cffi, pygdbmi, matplotlib, pytest, hypothesis, xdist)"
    .venv/bin/python -m pip install -q --upgrade pip >&2 ||
        die "pip could not be upgraded (no network to PyPI?)"
    .venv/bin/python -m pip install -q -e '.[test,plot]' >&2 || die "pip install failed (see above)"
    echo "$want" > "$stamp"
fi

# ---------------------------------------------------------------------------------------------
# 3. QEMU 11.1, the plugin, the test guests (all idempotent, progress on stderr)
# ---------------------------------------------------------------------------------------------
.venv/bin/p4pmu setup

case "$cmd" in
    setup) say "set-up complete" ;;
    demo) exec .venv/bin/p4pmu demo "$@" ;;
    # one pytest worker per core, each test file on one worker (its module fixtures shared);
    # "-n 0" among the arguments runs them one at a time
    # the rewritten test files are cached in __pycache__ (PYTHONDONTWRITEBYTECODE would make
    # every worker rewrite them again); the longest files are given out first (conftest.py)
    test) exec env -u PYTHONDONTWRITEBYTECODE .venv/bin/python -m pytest -n auto --dist loadfile --no-loadscope-reorder "$@" ;;
esac
