"""The Python sources pass the project's linter: ruff, configured in pyproject.toml
([tool.ruff]: pycodestyle, pyflakes, bugbear, isort and pyupgrade rules, 100 columns).

`ruff check .` from the repository's root is what this runs; `ruff check --fix .` repairs
most findings (import order, old-style annotations).
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


def _ruff() -> str:
    here = Path(sys.executable).with_name("ruff")  # the virtual environment's, from .[test]
    found = str(here) if here.is_file() else shutil.which("ruff")
    if found is None:
        pytest.fail("ruff is not installed: ./p4pmu.sh setup installs it (the test extra)")
    return found


def test_python_sources_pass_ruff():
    r = subprocess.run([_ruff(), "check", "--no-cache", "."], cwd=REPO_ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"ruff check found problems:\n{r.stdout}{r.stderr}"
