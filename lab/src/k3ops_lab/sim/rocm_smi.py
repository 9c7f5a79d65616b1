"""Simulated `rocm-smi` (ROCm SMI, the rocm-smi-lib Python CLI) for the lab's AMD hosts.

Prints what rocm_smi.py prints on ROCm 7: the concise table sized to its content, the per-GPU log
sections framed by '=' spacers, and `--json` documents keyed card0..cardN plus "system". Without a
live amdgpu module it stops the way the real tool does, with a logging error and exit status 0.
"""

from __future__ import annotations

import argparse
import json
import sys

from .amdgpu import (
    COMPUTE_PARTITION, MEMORY_CLOCK_MHZ, MEMORY_PARTITION, PARTITION_ID, PERFORMANCE_LEVEL, VENDOR_NAME,
    AmdGpu, amd_gpus, driver_loaded,
)
from .host import SimHost

APP_WIDTH = 90
HEADER = " ROCm System Management Interface "
FOOTER = " End of ROCm SMI Log "
CONCISE_TITLE = " Concise Info "
DEGREE_SIGN = "\N{DEGREE SIGN}"
ITALICS, RESET = "\033[3m", "\033[0m"
GPU_LOG_LINE = "GPU[{device}]\t\t: {metric}: {value}"
DRIVER_NOT_INITIALIZED = "ERROR:root:Driver not initialized (amdgpu not found in modules)"
CONCISE_JSON_UNSUPPORTED = "NOT_SUPPORTED: Cannot print JSON/CSV output for concise output"
CONCISE_HEADER = ["Device", "Node", "IDs", "", "Temp", "Power", "Partitions",
                  "SCLK", "MCLK", "Fan", "Perf", "PwrCap", "VRAM%", "GPU%"]
CONCISE_SUBHEADER = ["", "", "(DID,", "GUID)", "(Junction)", "(Socket)", "(Mem, Compute, ID)",
                     "", "", "", "", "", "", ""]
# ROCm 6.1 aligned the product fields with the other device identifiers and renamed them.
PRODUCT_FIELDS_SINCE = (6, 1)


def main(argv: list[str], host: SimHost | None = None) -> int:
    host = host or SimHost("/")
    args = _parser().parse_args(argv)
    if not driver_loaded(host):
        print(DRIVER_NOT_INITIALIZED, file=sys.stderr)
        return 0
    gpus = amd_gpus(host)
    if not (args.showdriverversion or args.showbus or args.showproductname):  # only --json or --loglevel
        return _concise(gpus, args.json)
    output = Output(args.json, gpus)
    output.line("\n")
    output.spacer(HEADER)
    if args.showdriverversion:
        output.spacer(" Version of System Component ")
        output.system("Driver version", host.amdgpu_module_version())
        output.spacer()
    if args.showbus:
        output.spacer(" PCI Bus ID ")
        for gpu in gpus:
            output.gpu(gpu.index, "PCI Bus", gpu.bus_id.upper())
        output.spacer()
    if args.showproductname:
        output.spacer(" Product Info ")
        for gpu in gpus:
            for metric, value in _product_fields(gpu, host.rocm_version()):
                output.gpu(gpu.index, metric, value)
        output.spacer()
    output.spacer(FOOTER)
    output.flush()
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rocm-smi", description="AMD ROCm System Management Interface")
    parser.add_argument("--showdriverversion", action="store_true", help="Show kernel driver version")
    parser.add_argument("--showbus", action="store_true", help="Show PCI bus number")
    parser.add_argument("--showproductname", action="store_true", help="Show product details")
    parser.add_argument("--json", action="store_true", help="Print output in JSON format")
    # rocm_smi.py's own logging level (ROCm's cluster validation suite passes `--loglevel error`): what the
    # program logs of itself, never the report.
    parser.add_argument("--loglevel", metavar="LEVEL", choices=("debug", "info", "warning", "error", "critical"),
                        help="How much output will be printed for what program is doing, one of "
                             "debug/info/warning/error/critical")
    return parser


class Output:
    """rocm_smi.py's printLog/printLogSpacer: text lines, or the JSON document they feed instead."""

    def __init__(self, as_json: bool, gpus: list[AmdGpu]):
        self.as_json = as_json
        self.lines: list[str] = []
        self.document: dict[str, dict[str, str]] = {f"card{gpu.index}": {} for gpu in gpus}

    def line(self, text: str) -> None:
        if not self.as_json:
            self.lines.append(text)

    def spacer(self, title: str = "", width: int = APP_WIDTH) -> None:
        self.line(log_spacer(title, width))

    def gpu(self, device: int, metric: str, value: str) -> None:
        self.document[f"card{device}"][metric] = value.strip()
        self.line(GPU_LOG_LINE.format(device=device, metric=metric, value=value))

    def system(self, metric: str, value: str) -> None:
        self.document.setdefault("system", {})[metric] = value.strip()
        self.line(f"{metric}: {value}")

    def flush(self) -> None:
        if self.as_json:
            print(json.dumps({key: values for key, values in self.document.items() if values}))
        else:
            print("\n".join(self.lines))


def log_spacer(title: str = "", width: int = APP_WIDTH, fill: str = "=") -> str:
    """printLogSpacer: the title centred in '=' on an even width."""
    width += width % 2
    if not title:
        return fill * width
    if len(title) % 2:
        title += fill
    side = fill * ((width - len(title)) // 2)
    return side + title + side


def _concise(gpus: list[AmdGpu], as_json: bool) -> int:
    if as_json:
        print(CONCISE_JSON_UNSUPPORTED)
        return 1
    header, subheader = list(CONCISE_HEADER), list(CONCISE_SUBHEADER)
    for column, (title, subtitle) in enumerate(zip(header, subheader, strict=True)):
        width = max(len(title), len(subtitle))
        header[column], subheader[column] = title.ljust(width), subtitle.ljust(width)
    rows = [_concise_row(gpu) for gpu in gpus]
    widths = [max([len(title) + 2] + [len(row[column]) + 2 for row in rows]) for column, title in enumerate(header)]
    header_line = _columns(header, widths)
    table_width = len(header_line)
    lines = ["\n", log_spacer(HEADER, table_width), log_spacer(CONCISE_TITLE, table_width), header_line,
             ITALICS + _columns(subheader, widths) + RESET, log_spacer(width=table_width)]
    lines += [_columns(row, widths) for row in rows]
    lines += [log_spacer(width=table_width), log_spacer(FOOTER, table_width)]
    print("\n".join(lines))
    return 0


def _concise_row(gpu: AmdGpu) -> list[str]:
    return [
        str(gpu.index), str(gpu.node_id), f"{gpu.device_id}, ", str(gpu.gpu_id),
        f"{gpu.junction_c:.1f}{DEGREE_SIGN}C", f"{gpu.socket_power_w:.1f}W",
        f"{MEMORY_PARTITION}, {COMPUTE_PARTITION}, {PARTITION_ID}",
        f"{gpu.sclk_mhz}Mhz", f"{MEMORY_CLOCK_MHZ}Mhz", "0%", PERFORMANCE_LEVEL,
        f"{float(gpu.power_cap_w)}W", "0%", "0%",
    ]


def _columns(cells: list[str], widths: list[int]) -> str:
    return "".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True))


def _product_fields(gpu: AmdGpu, rocm_version: str | None) -> list[tuple[str, str]]:
    """showProduct's lines; their values carry the tab padding the real tool puts in them."""
    if rocm_version and _release(rocm_version) < PRODUCT_FIELDS_SINCE:
        return [("Card series", "\t\t" + gpu.name), ("Card model", "\t\t" + gpu.subsystem_id),
                ("Card vendor", "\t\t" + VENDOR_NAME), ("Card SKU", "\t\t" + gpu.sku)]
    return [
        ("Card Series", "\t\t" + gpu.name), ("Card Model", "\t\t" + gpu.device_id),
        ("Card Vendor", "\t\t" + VENDOR_NAME), ("Card SKU", "\t\t" + gpu.sku),
        ("Subsystem ID", "\t" + gpu.subsystem_id), ("Device Rev", "\t\t" + gpu.revision),
        ("Node ID", "\t\t" + str(gpu.node_id)), ("GUID", "\t\t" + str(gpu.gpu_id)),
        ("GFX Version", "\t\t" + gpu.gfx_version),
    ]


def _release(version: str) -> tuple[int, int]:
    major, minor = (version.split("-")[0].split(".") + ["0"])[:2]
    return int(major), int(minor)
