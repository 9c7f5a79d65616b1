"""Simulated `amd-smi` (the amdsmi CLI) for the lab's AMD hosts: `version`, `list`, `firmware`.

Human-readable output follows amdsmi's logger, which dumps each GPU's dictionary as YAML with
upper-cased keys, four-space indents and a blank line after every GPU; `--json` prints the same
dictionaries as an indented JSON list. Without a live amdgpu module it fails as amd-smi 26 does:
logging errors, then the version line, exit status 255.
"""

from __future__ import annotations

import argparse
import json
import sys

from .amdgpu import FIRMWARE, PARTITION_ID, AmdGpu, amd_gpus, driver_loaded, firmware_version
from .host import SimHost

# ROCm release -> (amdsmi tool and library version, build hash in the tool version)
AMDSMI_RELEASES = {"6.4.1": ("25.4.2", "aca1101b"), "7.0.2": ("26.0.2", "39589fda")}
NOT_AVAILABLE = "N/A"
VERSION_LINE = "AMDSMI Tool: {tool} | AMDSMI Library version: {library} | ROCm version: {rocm}"
DRIVER_VERSIONS = " | amdgpu version: {amdgpu} | amd_hsmp version: {hsmp}"
INDENT = "    "
DRIVER_NOT_LOADED_ERRORS = (
    "ERROR:root:Unable to get devices, driver not initialized (amdgpu not found in modules)",
    "ERROR:root:Unable to detect any GPU devices, check amdgpu version and module status (sudo modprobe amdgpu)",
    "ERROR:root:Unable to detect any CPU devices, check amd_hsmp (or) hsmp_acpi version and module status "
    "(sudo modprobe amd_hsmp (or) sudo modprobe hsmp_acpi)",
)
DRIVER_NOT_LOADED_STATUS = 255


def main(argv: list[str], host: SimHost | None = None) -> int:
    host = host or SimHost("/")
    args = _parser().parse_args(argv)
    if not driver_loaded(host):
        for error in DRIVER_NOT_LOADED_ERRORS:
            print(error, file=sys.stderr)
        print(_version_line(host, with_drivers=False))
        return DRIVER_NOT_LOADED_STATUS
    if args.command == "version":
        if args.json:
            print(json.dumps([_version(host)], indent=4))
        else:
            print(_version_line(host, with_drivers=True))
        return 0
    gpus = amd_gpus(host)
    if args.command == "list":
        devices = [_list_entry(gpu) for gpu in gpus]
    else:
        devices = [_firmware_entry(gpu.index, args.json) for gpu in gpus]
    if args.json:
        print(json.dumps(devices, indent=4))
    else:
        print("".join(human_readable(device) + "\n" for device in devices))
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="amd-smi", description="AMD System Management Interface")
    commands = parser.add_subparsers(dest="command", required=True)
    for name, description in (("version", "Display version information"),
                              ("list", "List GPU information"),
                              ("firmware", "Gets firmware information about the specified GPU")):
        command = commands.add_parser(name, help=description, description=description,
                                      aliases=["ucode"] if name == "firmware" else [])
        command.set_defaults(command=name)
        command.add_argument("--json", action="store_true", help="Displays output in JSON format")
    return parser


def _version(host: SimHost) -> dict[str, str]:
    rocm = host.rocm_version()
    release = rocm.split("-")[0] if rocm else None
    library, build = AMDSMI_RELEASES.get(release, (release or NOT_AVAILABLE, "00000000"))
    return {
        "tool": "AMDSMI Tool",
        "version": f"{library}+{build}",
        "amdsmi_library_version": library,
        "rocm_version": release or NOT_AVAILABLE,
        "amdgpu_version": host.amdgpu_module_version() or NOT_AVAILABLE,
        "amd_hsmp_driver_version": NOT_AVAILABLE,
    }


def _version_line(host: SimHost, with_drivers: bool) -> str:
    version = _version(host)
    line = VERSION_LINE.format(tool=version["version"], library=version["amdsmi_library_version"],
                               rocm=version["rocm_version"])
    if with_drivers:
        line += DRIVER_VERSIONS.format(amdgpu=version["amdgpu_version"], hsmp=version["amd_hsmp_driver_version"])
    return line


def _list_entry(gpu: AmdGpu) -> dict:
    return {"gpu": gpu.index, "bdf": gpu.bus_id, "uuid": gpu.uuid, "kfd_id": gpu.gpu_id,
            "node_id": gpu.node_id, "partition_id": PARTITION_ID}


def _firmware_entry(index: int, as_json: bool) -> dict:
    """amdsmi names each firmware entry "FW <n>" in human-readable output and not in JSON."""
    entries = [{"fw_id": block, "fw_version": firmware_version(block, raw)} for block, raw in FIRMWARE]
    if not as_json:
        entries = [{f"FW {number}": entry} for number, entry in enumerate(entries)]
    return {"gpu": index, "fw_list": entries}


def human_readable(device: dict) -> str:
    """One GPU the way amdsmi's logger prints it: "GPU: n", then its fields indented below."""
    lines = [f"GPU: {device['gpu']}"]
    for key, value in device.items():
        if key != "gpu":
            _render(key, value, 1, lines)
    return "\n".join(lines) + "\n"


def _render(key: str, value, depth: int, lines: list[str]) -> None:
    label = INDENT * depth + key.upper()
    if isinstance(value, dict):
        lines.append(label + ":")
        for child_key, child in value.items():
            _render(child_key, child, depth + 1, lines)
    elif isinstance(value, list):
        lines.append(label + ":")
        for item in value:
            for child_key, child in item.items():
                _render(child_key, child, depth + 1, lines)
    else:
        lines.append(f"{label}: {value}")
