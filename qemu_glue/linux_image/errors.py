"""The error every Linux-image module raises: a message that says what to do."""
from __future__ import annotations

from p4pmu.qemu_glue.provision import ProvisionError


class ImageError(ProvisionError):
    """Building or finding a Linux guest image failed; the message says what to do."""
