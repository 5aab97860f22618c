"""The library page's examples run as written (docs/library.md: every ```python block, each
in a fresh namespace), and the facade's argument checks."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from p4pmu.emulator.library import SimulatedPMU

PAGE = Path(__file__).resolve().parents[1] / "docs" / "library.md"
BLOCKS = re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.S)


def test_the_page_has_examples():
    assert len(BLOCKS) >= 4


@pytest.mark.parametrize("code", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_example(code, capsys):
    exec(compile(code, str(PAGE), "exec"), {"__name__": "docs_library"})


def test_bad_arguments_say_what_is_wrong():
    pmu = SimulatedPMU("0F_04")
    with pytest.raises(KeyError, match="no PMU register named 'MSR_NOPE'"):
        pmu.rdmsr("MSR_NOPE")
    with pytest.raises(ValueError, match="name the mask bit"):
        pmu.run(1, events={"instr_retired": 1})
    with pytest.raises(ValueError, match="0-15"):
        pmu.run(1, events={"instr_retired:NBOGUSNTAG": 16})
    with pytest.raises(ValueError, match="needs ht=True"):
        pmu.run(1, other={"instr_retired:NBOGUSNTAG": 1})


def test_the_readme_session():
    """README.md's driver-developer session (its first python block) runs as written."""
    readme = (PAGE.parents[1] / "README.md").read_text()
    code = re.findall(r"```python\n(.*?)```", readme, re.S)
    assert code, "README.md lost its python example"
    exec(compile(code[0], "README.md", "exec"), {"__name__": "readme"})
