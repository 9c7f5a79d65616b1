"""Facts about the AMD GPU driver, ROCm and the GPUs they see."""

from __future__ import annotations

import json
import re

from pyinfra.api import FactBase
from typing_extensions import override

from ..onhost.drivers import amdgpu_differs
from .util import first_line

ROCM_SMI_CARD_REGEX = r"^card(\d+)$"


class RocmGpus(FactBase[list[dict]]):
    """
    Returns the GPUs rocm-smi sees, or an empty list when amdgpu is not loaded:

    .. code:: python

        [{"card": 0, "bus_id": "0000:05:00.0", "product": "AMD Instinct MI355X"}]
    """

    command = "rocm-smi --showproductname --showbus --json || true"

    @override
    def requires_command(self) -> str:
        return "rocm-smi"

    default = list

    @override
    def process(self, output):
        # Anything rocm-smi warns about comes before the JSON document.
        start = next((number for number, line in enumerate(output) if line.startswith("{")), None)
        if start is None:
            return []
        document = json.loads("\n".join(output[start:]))
        gpus = []
        for key, fields in document.items():
            card = re.match(ROCM_SMI_CARD_REGEX, key)
            if card:
                # ROCm 6.1 capitalised the product fields ("Card series" became "Card Series").
                fields = {name.lower(): value for name, value in fields.items()}
                gpus.append({
                    "card": int(card.group(1)),
                    "bus_id": fields["pci bus"].lower(),
                    "product": fields["card series"],
                })
        return sorted(gpus, key=lambda gpu: gpu["card"])


class AmdgpuModule(FactBase[str | None]):
    """
    Returns the version of the loaded amdgpu module (ROCm's DKMS build), ``None`` when not loaded:

    .. code:: python

        "6.14.14"
    """

    command = "cat /sys/module/amdgpu/version 2>/dev/null || true"

    @override
    def process(self, output):
        return first_line(output)


def amdgpu_release(loaded: str | None, installed: str | None) -> str | None:
    """The ROCm release whose amdgpu the kernel runs: the installed amdgpu-dkms's (1:6.14.14.70002-2187269 is
    ROCm 7.0.2's), when the loaded module is that package's build; None when amdgpu is not loaded, or the loaded
    one is another build (the package moved, the host has not rebooted)."""
    if not loaded or not installed or amdgpu_differs(loaded, installed):
        return None
    number = int(installed.split(":")[-1].split("-")[0].rsplit(".", 1)[-1])
    return f"{number // 10000}.{number // 100 % 100}.{number % 100}"


class RocmVersion(FactBase[str | None]):
    """
    Returns the installed ROCm release, ``None`` when ROCm is not installed:

    .. code:: python

        "7.0.2-56"
    """

    command = "cat /opt/rocm/.info/version 2>/dev/null || true"

    @override
    def process(self, output):
        return first_line(output)
