"""The repository cites only what it contains: no reference files from outside it, no
development history in source, tests or documentation (CHANGELOG.md holds the history).

Every text file tracked by git is searched for citations of files that are not in this
repository (`../shared/...`, the external reference notes, the numbered SDM excerpts) and
for history words ("issue 4", "session 7", "stage 5").  Facts are cited by their source
instead: the Intel SDM (volume, section, table), a Linux source file by path, or a page under
docs/.  A failure names every offending file:line.
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXEMPT = {"CHANGELOG.md", "tests/test_docs.py"}

FORBIDDEN = [
    ("a path outside the repository",
     re.compile(r"\.\./shared|\bshared/(reference|seeds)\b|/work/")),
    ("an external reference file", re.compile(
        r"\b(behaviour|msr-map|register-layout|linux-p4-driver)\.md\b")),
    ("a numbered SDM excerpt", re.compile(r"\bseeds? 0\d", re.IGNORECASE)),
    ("development history", re.compile(r"\b(issue|session|stage)s? [0-9]+\b",
                                       re.IGNORECASE)),
]


def _tracked_text_files():
    names = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True,
                           capture_output=True).stdout.decode().split("\0")
    for name in filter(None, names):
        path = ROOT / name
        if name in EXEMPT or not path.is_file():
            continue
        data = path.read_bytes()
        if b"\0" in data:
            continue  # binary
        try:
            yield name, data.decode("utf-8")
        except UnicodeDecodeError:
            continue


def _offences():
    for name, text in _tracked_text_files():
        for lineno, line in enumerate(text.splitlines(), 1):
            for what, pattern in FORBIDDEN:
                match = pattern.search(line)
                if match:
                    yield f"{name}:{lineno}: {what}: {match.group(0)!r}"


def test_no_external_citations_or_history():
    offences = list(_offences())
    if offences:
        pytest.fail(f"{len(offences)} line(s) cite files outside the repository or "
                    "development history:\n" + "\n".join(offences), pytrace=False)
