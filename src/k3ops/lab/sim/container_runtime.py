"""NVIDIA's container runtime shim and nvidia-container-cli, simulated.

Containers cannot start inside a lab host (its cgroup tree is read-only), so the runtime shim only
answers `--version` and otherwise hands over to runc as the real one does; `nvidia-container-cli
info` reports the driver and GPUs the way the real library sees them.
"""

from __future__ import annotations

import os
import sys

from .host import SimHost, cuda_version

CLI_INFO_HEADER = "NVRM version:   {driver}\nCUDA version:   {cuda}\n"
CLI_INFO_DEVICE = (
    "\nDevice Index:   {index}\nDevice Minor:   {minor}\nModel:          {name}\nBrand:          Nvidia\n"
    "GPU UUID:       {uuid}\nBus Location:   {bus}\nArchitecture:   {arch}\n"
)


def runtime_main(argv: list[str], host: SimHost | None = None) -> int:
    host = host or SimHost()
    if argv[:1] == ["--version"]:
        print(f"NVIDIA Container Runtime version {host.package_version('nvidia-container-toolkit')}")
        return 0
    os.execvp("runc", ["runc", *argv])
    return 127  # execvp does not return


def cli_main(argv: list[str], host: SimHost | None = None) -> int:
    host = host or SimHost()
    if argv[:1] == ["--version"]:
        print(f"cli-version: {host.package_version('nvidia-container-toolkit')}")
        return 0
    if argv[:1] != ["info"]:
        print("Usage: nvidia-container-cli [OPTION...] info|list|configure", file=sys.stderr)
        return 64
    driver = host.nvidia_module_version()
    if driver is None or driver != host.nvidia_userspace_version():
        print("nvidia-container-cli: initialization error: nvml error: driver/library version mismatch"
              if driver else "nvidia-container-cli: initialization error: nvml error: driver not loaded",
              file=sys.stderr)
        return 1
    model = host.hardware()["gpu_model"]
    sys.stdout.write(CLI_INFO_HEADER.format(driver=driver, cuda=cuda_version(driver)))
    for gpu in host.visible_gpus():
        domain, rest = gpu["pci_bus_id"].split(":", 1)
        sys.stdout.write(CLI_INFO_DEVICE.format(
            index=gpu["index"], minor=gpu["minor_number"], name=model["name"], uuid=gpu["uuid"],
            bus=f"{int(domain, 16):08x}:{rest}", arch=model["compute_capability"],
        ))
    return 0
