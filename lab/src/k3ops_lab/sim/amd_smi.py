"""Simulated `amd-smi` (the amdsmi CLI) for the lab's AMD hosts: `version`, `list`, `firmware`, `topology`.

Human-readable output follows amdsmi's logger, which dumps each GPU's dictionary as YAML with
upper-cased keys, four-space indents and a blank line after every GPU; `--json` prints the same
dictionaries as an indented JSON list. Without a live amdgpu module it fails as amd-smi 26 does:
logging errors, then the version line, exit status 255.

`topology` prints amdsmi 25/26's tables (amdsmi_commands.py topology, amdsmi_logger.py
_convert_json_to_tabular): a header of bus ids, each right-aligned in 13 columns after 12 spaces,
then a row per GPU, its bus id and a space, then each cell left-aligned in 13 columns, trailing
spaces stripped. Without a table flag it prints all nine tables, one after the other with no blank
line between them (the real MI355X capture of amd-smi 26.0.2 in oci-gpu-quickstarts'
README-MI355X.md; the ROCm 6.1 sample in fixtures/real/amd has a blank line after each table and
only the first five), then two blank lines and the legend. XGMI pairs carry what that MI355X
capture shows (weight 0, 1 hop, NUMA bandwidth "0-0", coherent, 64- and 32-bit atomics, DMA,
bidirectional); MI300-class (gfx942) GPUs weigh 15 and show "50000-50000" as in the 6.1 sample.
A pair that reaches its peer over PCIe shows what amd-smi prints for such a pair in AMD's CHANGELOG
and in a 26.2.2 capture: access DISABLED, weight 40, 2 hops, N/A bandwidth and capabilities.

Faults, under "faults" in hardware.json:
  "xgmi_down_links": {"3": [5]}    the XGMI link between GPUs 3 and 5 (hardware indexes) is down:
                                    amd-smi shows that pair, both ways, as a PCIE path
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass

from .amdgpu import FIRMWARE, PARTITION_ID, AmdGpu, amd_gpus, driver_loaded, firmware_version
from .host import SimHost

# ROCm release -> (amdsmi tool and library version, build hash in the tool version); 7.1.0's AMD SMI is 26.1.0
# (ROCm's changelog), its hash the lab's own.
AMDSMI_RELEASES = {"6.4.1": ("25.4.2", "aca1101b"), "7.0.2": ("26.0.2", "39589fda"), "7.1.0": ("26.1.0", "5d0c1e27")}
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

# amd-smi topology: each table's flags, title, and the key its cells carry in --json.
TOPOLOGY_TABLES = (
    ("access", ("-a", "--access"), "ACCESS TABLE", "link_status", "Displays link accessibility between GPUs"),
    ("weight", ("-w", "--weight"), "WEIGHT TABLE", "weight", "Displays relative weight between GPUs"),
    ("hops", ("-o", "--hops"), "HOPS TABLE", "num_hops", "Displays the number of hops between GPUs"),
    ("link_type", ("-t", "--link-type"), "LINK TYPE TABLE", "link_type", "Displays the link type between GPUs"),
    ("numa_bw", ("-b", "--numa-bw"), "NUMA BW TABLE", "bandwidth", "Display max and min bandwidth between nodes"),
    ("coherent", ("-c", "--coherent"), "CACHE COHERANCY TABLE", "coherent",
     "Display cache coherant (or non-coherant) link capability between nodes"),
    ("atomics", ("-n", "--atomics"), "ATOMICS TABLE", "atomics",
     "Display 32 and 64-bit atomic io link capability between nodes"),
    ("dma", ("-d", "--dma"), "DMA TABLE", "dma",
     "Display P2P direct memory access (DMA) link capability between nodes"),
    ("bi_dir", ("-z", "--bi-dir"), "BI-DIRECTIONAL TABLE", "bi_dir",
     "Display P2P bi-directional link capability between nodes"),
)
# The order of a link's keys in --json, whichever tables were asked for.
JSON_LINK_ORDER = ("weight", "link_status", "link_type", "num_hops", "bandwidth", "coherent", "atomics", "dma",
                   "bi_dir")
TOPOLOGY_HEADER_INDENT = 12
TOPOLOGY_COLUMN = 13
# amdsmi 25 and 26 spell it "Coherant" (26.2.2 still does; later sources say "Coherent").
TOPOLOGY_LEGEND = "\n".join((
    "\n\nLegend:",
    "  SELF = Current GPU",
    "  ENABLED / DISABLED = Link is enabled or disabled",
    "  N/A = Not supported",
    "  T/F = True / False",
    "  C/NC = Coherant / Non-Coherant io links",
    "  64,32 = 64 bit and 32 bit atomic support",
    "  <BW from>-<BW to>",
))


@dataclass(frozen=True)
class Link:
    """What amd-smi reports of the path from one GPU to another, by its --json keys."""

    link_status: str
    weight: int
    link_type: str
    num_hops: int
    bandwidth: str
    coherent: str
    atomics: str
    dma: str
    bi_dir: str


SELF_LINK = Link("ENABLED", 0, "SELF", 0, "N/A", "SELF", "SELF", "SELF", "SELF")
PCIE_LINK = Link("DISABLED", 40, "PCIE", 2, "N/A", "N/A", "N/A", "N/A", "N/A")
# A direct XGMI link by GPU generation (gfx target): weight and NUMA bandwidth differ.
XGMI_LINKS = {
    "gfx942": Link("ENABLED", 15, "XGMI", 1, "50000-50000", "C", "64,32", "T", "T"),
    "gfx950": Link("ENABLED", 0, "XGMI", 1, "0-0", "C", "64,32", "T", "T"),
}


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
    if args.command == "topology":
        return _topology(host, gpus, args)
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
    description = "Displays topology information of the devices"
    topology = commands.add_parser("topology", help=description, description=description)
    topology.set_defaults(command="topology")
    for table, flags, _, _, help_text in TOPOLOGY_TABLES:
        topology.add_argument(*flags, dest=table, action="store_true", help=help_text)
    topology.add_argument("--json", action="store_true", help="Displays output in JSON format")
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


def links(host: SimHost, gpus: list[AmdGpu]) -> list[list[Link]]:
    """The path from each GPU to each GPU: XGMI on an XGMI board unless the link is down, else PCIe."""
    hardware = host.hardware()
    xgmi = XGMI_LINKS.get(gpus[0].gfx_version, XGMI_LINKS["gfx950"]) if gpus else None
    hardware_index = {gpu["pci_bus_id"]: gpu["index"] for gpu in hardware["gpus"]}
    down = set()
    for gpu, peers in hardware.get("faults", {}).get("xgmi_down_links", {}).items():
        down |= {frozenset((int(gpu), int(peer))) for peer in peers}

    def path(source: AmdGpu, destination: AmdGpu) -> Link:
        if source.bus_id == destination.bus_id:
            return SELF_LINK
        pair = frozenset((hardware_index[source.bus_id], hardware_index[destination.bus_id]))
        return xgmi if hardware.get("fabric") == "xgmi" and pair not in down else PCIE_LINK

    return [[path(source, destination) for destination in gpus] for source in gpus]


def _topology(host: SimHost, gpus: list[AmdGpu], args: argparse.Namespace) -> int:
    tables = [entry for entry in TOPOLOGY_TABLES if getattr(args, entry[0])] or list(TOPOLOGY_TABLES)
    paths = links(host, gpus)
    if args.json:
        keys = [key for _, _, _, key, _ in tables]
        document = [
            {"gpu": source.index, "bdf": source.bus_id,
             "links": [{"gpu": destination.index, "bdf": destination.bus_id,
                        **{key: getattr(link, key) for key in JSON_LINK_ORDER if key in keys}}
                       for destination, link in zip(gpus, row)]}
            for source, row in zip(gpus, paths)
        ]
        print(json.dumps(document, indent=4))
        return 0
    header = " " * TOPOLOGY_HEADER_INDENT + "".join(gpu.bus_id.rjust(TOPOLOGY_COLUMN) for gpu in gpus)
    for _, _, title, key, _ in tables:
        rows = [(f"{source.bus_id} " + "".join(str(getattr(link, key)).ljust(TOPOLOGY_COLUMN) for link in row)).rstrip()
                for source, row in zip(gpus, paths)]
        print("\n".join((f"{title}:", header, *rows)))
    print(TOPOLOGY_LEGEND)
    return 0
