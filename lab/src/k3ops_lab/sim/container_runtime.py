"""NVIDIA's container runtime shim and nvidia-container-cli, simulated.

The runtime is what Docker runs for `--runtime nvidia`: on `create` it gives the container the GPUs its
NVIDIA_VISIBLE_DEVICES names (all, none, or indexes and UUIDs), as the real one's OCI spec edits do, by
adding their device nodes and device cgroup rules to the bundle's config.json, then hands over to runc.
A driver whose loaded module is not its userspace's fails the create with the real library's error. (The
real runtime also mounts the driver's libraries and tools; the lab's stand-in images need none.) On a
container host no container starts (its cgroup tree is read-only); on a VM host, they do.
`nvidia-container-cli info` reports the driver and GPUs the way the real library sees them.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from .boot import nvidia_device_nodes
from .host import SimHost, cuda_version

CLI_INFO_HEADER = "NVRM version:   {driver}\nCUDA version:   {cuda}\n"
CLI_INFO_DEVICE = (
    "\nDevice Index:   {index}\nDevice Minor:   {minor}\nModel:          {name}\nBrand:          Nvidia\n"
    "GPU UUID:       {uuid}\nBus Location:   {bus}\nArchitecture:   {arch}\n"
)


NO_GPUS = ("", "void")  # NVIDIA_VISIBLE_DEVICES values (or its absence) that leave the spec alone


def runtime_main(argv: list[str], host: SimHost | None = None) -> int:
    host = host or SimHost()
    if argv[:1] == ["--version"]:
        print(f"NVIDIA Container Runtime version {host.package_version('nvidia-container-toolkit')}")
        return 0
    bundle = _option(argv, "--bundle") if "create" in argv else None
    if bundle is not None:
        error = add_gpus(Path(bundle) / "config.json", host)
        if error:
            print(error, file=sys.stderr)
            return 1
    os.execvp("runc", ["runc", *argv])
    return 127  # execvp does not return


def _option(argv: list[str], name: str) -> str | None:
    """A runc option's value, given as `--name VALUE` or `--name=VALUE`."""
    for index, word in enumerate(argv):
        if word == name and index + 1 < len(argv):
            return argv[index + 1]
        if word.startswith(name + "="):
            return word.split("=", 1)[1]
    return None


def driver_error(host: SimHost) -> str | None:
    """The library's initialization error when the driver is not loaded or is not its userspace's version."""
    driver = host.nvidia_module_version()
    if driver is None:
        return "nvidia-container-cli: initialization error: nvml error: driver not loaded"
    if driver != host.nvidia_userspace_version():
        return "nvidia-container-cli: initialization error: nvml error: driver/library version mismatch"
    return None


def add_gpus(config: Path, host: SimHost) -> str | None:
    """Give the container of this OCI spec the GPUs it asks for; the error that refuses it, if any."""
    spec = json.loads(config.read_text())
    environment = dict(item.split("=", 1) for item in spec.get("process", {}).get("env", []) if "=" in item)
    wanted = environment.get("NVIDIA_VISIBLE_DEVICES", "")
    if wanted in NO_GPUS:
        return None
    error = driver_error(host)
    if error:
        return error
    gpus = host.visible_gpus()
    if wanted != "all" and wanted != "none":
        names = wanted.split(",")
        unknown = [name for name in names if not any(name in (str(gpu["index"]), gpu["uuid"]) for gpu in gpus)]
        if unknown:
            return f"nvidia-container-cli: device error: {unknown[0]}: unknown device"
        gpus = [gpu for gpu in gpus if str(gpu["index"]) in names or gpu["uuid"] in names]
    linux = spec.setdefault("linux", {})
    for path, major, minor in nvidia_device_nodes([] if wanted == "none" else gpus):
        linux.setdefault("devices", []).append({"path": f"/{path}", "type": "c", "major": major, "minor": minor,
                                                "fileMode": 0o666, "uid": 0, "gid": 0})
        linux.setdefault("resources", {}).setdefault("devices", []).append(
            {"allow": True, "type": "c", "major": major, "minor": minor, "access": "rwm"})
    written = config.with_name(config.name + ".k3ops-lab")
    written.write_text(json.dumps(spec))
    written.replace(config)
    return None


def cli_main(argv: list[str], host: SimHost | None = None) -> int:
    host = host or SimHost()
    if argv[:1] == ["--version"]:
        print(f"cli-version: {host.package_version('nvidia-container-toolkit')}")
        return 0
    if argv[:1] != ["info"]:
        print("Usage: nvidia-container-cli [OPTION...] info|list|configure", file=sys.stderr)
        return 64
    error = driver_error(host)
    if error:
        print(error, file=sys.stderr)
        return 1
    driver, model = host.nvidia_module_version(), host.hardware()["gpu_model"]
    sys.stdout.write(CLI_INFO_HEADER.format(driver=driver, cuda=cuda_version(driver)))
    for gpu in host.visible_gpus():
        domain, rest = gpu["pci_bus_id"].split(":", 1)
        sys.stdout.write(CLI_INFO_DEVICE.format(
            index=gpu["index"], minor=gpu["minor_number"], name=model["name"], uuid=gpu["uuid"],
            bus=f"{int(domain, 16):08x}:{rest}", arch=model["compute_capability"],
        ))
    return 0
