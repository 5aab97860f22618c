"""The bare-metal test guests of a source checkout (tests/guests), for `p4pmu setup`,
`p4pmu bench` and `p4pmu demo --replay`: the one place the host side finds their builder."""
from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]  # an editable install: the checkout


def guest_builder():
    """(tests/guests/build.py of the checkout, None), or (None, why) when there is none with
    build_all(progress).

    Loaded as the package ``p4pmu_test_guests`` (its relative imports work, and no top-level
    ``tests`` package of some other distribution can get in the way)."""
    gdir = REPO_ROOT / "tests" / "guests"
    if not (gdir / "build.py").is_file():
        return None, f"{gdir / 'build.py'} not found (not a source checkout?)"
    name = "p4pmu_test_guests"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            name, gdir / "__init__.py", submodule_search_locations=[str(gdir)])
        pkg = importlib.util.module_from_spec(spec)
        sys.modules[name] = pkg
        spec.loader.exec_module(pkg)  # type: ignore[union-attr]
    mod = importlib.import_module(f"{name}.build")
    if not hasattr(mod, "build_all"):
        return None, f"{gdir / 'build.py'} has no build_all(progress)"
    return mod, None
