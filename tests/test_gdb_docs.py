"""docs/gdb.md's scripted session runs as written (every ```python block, in order, in one
namespace): Debian's gdb through pygdbmi against a real guest on the real QEMU."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[1] / "docs" / "gdb.md"

pytestmark = pytest.mark.guest


def test_the_scripted_session_of_docs_gdb_md_runs(guests, capsys):
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.S)
    assert blocks, "docs/gdb.md lost its scripted example"
    namespace: dict = {}
    for code in blocks:
        exec(compile(code, str(PAGE), "exec"), namespace)
    assert "overflowed" in capsys.readouterr().out
