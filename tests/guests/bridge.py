"""Helpers shared by tests/test_bridge_*.py: which (guest width, model) runs exist and how a
part of a run is checked against the oracle."""
from __future__ import annotations

from p4pmu.emulator.models import MODELS

from .oracle import compare, format_problems

# every model in 32-bit mode; the long-mode models in 64-bit mode
CONFIGS = [(32, k) for k in MODELS] + [(64, k) for k, m in MODELS.items() if m.long_mode]
STRICT_CONFIGS = [(32, "0F_02"), (32, "0F_04"), (64, "0F_04")]


def config_id(c) -> str:
    return f"{c[0]}bit-{c[1]}"


def check(br, *tags, prefix=None, indices=None) -> None:
    """Assert that the records with any of `tags` (or whose tag starts with `prefix`, or the
    given indices) got the oracle's answer and passed the guest-side checks."""
    idx = set(indices or ())
    idx |= {i for t in tags for i in br.script.indices(t)}
    if prefix:
        idx |= set(br.script.indices(prefix=prefix))
    assert idx, f"no records tagged {tags} {prefix}"
    problems = compare(br.script, br.out, br.expects, sorted(idx))
    assert not problems, (f"{br.bits}-bit guest, model {br.model}"
                          f"{' (strict)' if br.strict else ''}: " + format_problems(problems))


def write_read_pairs(br, write_tag, read_tags):
    """(write op, write answer, read op, read answer) for each write of `write_tag` directly
    followed by a read of the same address with one of `read_tags`."""
    ops, ans = br.script.ops, br.out.answers
    for i in br.script.indices(write_tag):
        j = i + 1
        if j < len(ops) and ops[j].op == "RDMSR" and ops[j].ecx == ops[i].ecx and \
                ops[j].tag in read_tags:
            yield ops[i], ans[i], ops[j], ans[j]
