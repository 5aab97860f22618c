"""The PMU plugin library on the host: where it is, building it, recognising it.

The library itself is built by `p4pmu.plugin.build` (cffi's embedding mode, docs/
architecture.md); this module is the one place the host side asks for it.
"""
from __future__ import annotations

import importlib
import os
import sysconfig
from pathlib import Path

from p4pmu.qemu_glue.provision import ProvisionError


def site_packages() -> str:
    """The site-packages of the running interpreter's environment (the venv's when in one):
    the plugin's default ``pypath``, so that its embedded Python finds this p4pmu."""
    return sysconfig.get_paths()["purelib"]


def _plugin_build():
    """The plugin build module; a ProvisionError saying what to do when it is missing."""
    try:
        return importlib.import_module("p4pmu.plugin.build")
    except ModuleNotFoundError as e:
        if e.name not in ("p4pmu.plugin.build", "p4pmu.plugin"):
            raise
        raise ProvisionError("the plugin build module p4pmu.plugin.build is missing from this "
                             "installation, so the PMU plugin cannot be built or found; "
                             "reinstall p4pmu (`pip install -e .`), or pass a built plugin "
                             "with --plugin PATH") from None


def plugin_file(build: bool, progress: bool = True, must_exist: bool = True) -> Path:
    """The plugin's path; built first (if missing or stale) when ``build``."""
    mod = _plugin_build()
    if build:
        try:
            mod.ensure_built(progress)
        except ProvisionError:
            raise
        except Exception as e:  # the build module's own error: keep its message
            raise ProvisionError(f"building the PMU plugin failed: {e}") from e
    path = Path(mod.plugin_path())
    if must_exist and not path.is_file():
        raise ProvisionError(f"the PMU plugin {path} is not built; run `p4pmu setup`")
    return path


def plugin_status() -> tuple[Path | None, bool, str | None]:
    """(path, built, error) for `p4pmu info`: never builds, never raises."""
    try:
        p = Path(_plugin_build().plugin_path())
        return p, p.is_file(), None
    except Exception as e:
        return None, False, str(e)


def is_p4pmu_plugin(library: str, also: Path | None = None) -> bool:
    """Whether a ``-plugin`` library is p4pmu's: the built library's file name, or the same
    file as ``also`` (a --plugin PATH)."""
    path = Path(library).expanduser()
    try:
        if path.name == Path(_plugin_build().LIB_NAME).name:
            return True
    except (ProvisionError, AttributeError):
        pass
    if also is not None and path.exists() and also.exists():
        return os.path.samefile(path, also)
    return False
