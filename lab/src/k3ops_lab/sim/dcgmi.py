"""dcgmi of the lab's DCGM 4.4.1 (datacenter-gpu-manager-4-core): diag, discovery -l and dmon.

Layouts follow DCGM 4.4.1's dcgmi sources (Diag.cpp, Query.cpp, DcgmiOutput.cpp, DeviceMonitor.cpp)
and the DCGM 4.x outputs users post: the diag table of DCGM 4 names plugins ("software", "memory",
"pcie"...) with a line per GPU, not DCGM 2's "Blacklist"/"Page Retirement" rows of the dcgmi/
fixtures. Like the real one, `dcgmi diag` starts an embedded host engine when nv-hostengine is not
listening, while discovery and dmon need nv-hostengine (127.0.0.1:5555, or --host).
"""

from __future__ import annotations

import socket
import sys
from dataclasses import dataclass

from . import nvidia_devices as devices
from .host import SimHost
from .nvidia_devices import DriverState, NvidiaGpu

DCGM_PACKAGE = "datacenter-gpu-manager-4-core"
DEFAULT_HOST = "localhost"
HOSTENGINE_PORT = 5555
UNIX_SOCKET_PREFIX = "unix://"
CONNECT_TIMEOUT_S = 1.0

# Errors as dcgmi prints them (Command.cpp, Diag.cpp); exit statuses are dcgmReturn_t & 0xff.
NO_CONNECTION = "Error: unable to establish a connection to the specified host: {host}"
CONNECTION_INVALID = "Error: Unable to connect to host engine. Host engine connection invalid/disconnected."
NO_EMBEDDED_ENGINE = "Error: Unable to start an embedded host engine. DCGM initialization error."
EXIT_CONNECTION_NOT_VALID = 256 - 21  # DCGM_ST_CONNECTION_NOT_VALID
EXIT_INIT_ERROR = 256 - 7  # DCGM_ST_INIT_ERROR
EXIT_DIAG_FAILED = 256 - 30  # DCGM_ST_NVVS_ERROR
EXIT_USAGE = 2

# dcgmi diag: a 25 + 46 character two-column table; long messages wrap at 45 characters.
DIAG_BORDER = "+---------------------------+------------------------------------------------+"
DIAG_HEADER = (
    "Successfully ran diagnostic for group.",
    DIAG_BORDER,
    "| Diagnostic                | Result                                         |",
    "+===========================+================================================+",
)
DIAG_ROW = "| {name:<25} | {info:<46} |"
DIAG_MESSAGE_WIDTH = 45
DIAG_CATEGORY_HEADINGS = {
    "Metadata": "|-----  Metadata  ----------+------------------------------------------------|",
    "Deployment": "|-----  Deployment  --------+------------------------------------------------|",
    "Hardware": "+-----  Hardware  ----------+------------------------------------------------+",
    "Integration": "+-----  Integration  -------+------------------------------------------------+",
    "Stress": "+-----  Stress  ------------+------------------------------------------------+",
}
# Tests by run level in the order nvvs runs them (NvidiaValidationSuite.cpp), with their category.
DIAG_TESTS = (
    (1, "Deployment", "software"),
    (2, "Hardware", "memory"),
    (3, "Hardware", "diagnostic"),
    (3, "Hardware", "nvbandwidth"),
    (4, "Stress", "memtest"),
    (4, "Hardware", "pulse_test"),
    (2, "Integration", "pcie"),
    (3, "Stress", "memory_bandwidth"),
    (3, "Stress", "targeted_stress"),
    (3, "Stress", "targeted_power"),
)
RUN_LEVELS = {"1": 1, "short": 1, "quick": 1, "2": 2, "medium": 2, "3": 3, "long": 3, "4": 4, "xlong": 4}
# Messages of the software plugin's checks (dcgm_errors.h: _MSG, then " " and _NEXT).
SYSTEM_TRIAGE = "Check DCGM and system logs for errors. Reset GPU. Restart DCGM. Rerun diagnostics."
ROW_REMAP_PENDING = "GPU {gpu} had memory errors and row remappings are pending " + SYSTEM_TRIAGE
PERSISTENCE_DISABLED = (
    'Persistence mode for GPU {gpu} is disabled. Enable persistence mode by running "nvidia-smi -i <gpuId> -pm '
    '1 " as root.'
)

# dcgmi discovery -l: DcgmiOutputColumns tables.
ENTITY_TABLE_WIDTHS = (8, 70)
SWITCH_TABLE_WIDTHS = (11,)
CONNECTX_TABLE_WIDTHS = (10,)
GRACE_CPU_NAME = "Grace TH500"

# dcgmi dmon: field id -> (short name, unit, value width) from dcgm_fields.cpp.
DMON_FIELDS = {
    100: ("SMCLK", "", 5),
    101: ("MMCLK", "", 5),
    140: ("MMTMP", "C", 10),
    150: ("TMPTR", " C", 5),
    155: ("POWER", " W", 10),
    203: ("GPUTL", "", 10),
    204: ("MCUTL", "", 10),
    250: ("FBTTL", "", 10),
    251: ("FBFRE", "", 10),
    252: ("FBUSD", "", 10),
    396: ("RRP", "", 20),
    # Profiling (DCP) fields, served on Hopper and later by DCGM's open build (NVIDIA/DCGM issue 72): activity
    # ratios (doubles) and byte rates (int64), every unit empty (NVIDIA/DCGM@72fa3fe dcgm_fields.cpp 4317-4436).
    1001: ("GRACT", "", 5), 1002: ("SMACT", "", 5), 1003: ("SMOCC", "", 5), 1004: ("TENSO", "", 5),
    1005: ("DRAMA", "", 5), 1006: ("FP64A", "", 5), 1007: ("FP32A", "", 5), 1008: ("FP16A", "", 5),
    1009: ("PCITX", "", 20), 1010: ("PCIRX", "", 20), 1011: ("NVLTX", "", 20), 1012: ("NVLRX", "", 20),
}
PROFILING_RATIOS = range(1001, 1009)
PROFILING_BYTE_RATES = range(1009, 1013)
PROFILING_FIELDS = range(PROFILING_RATIOS.start, PROFILING_BYTE_RATES.stop)
# DeviceMonitor prints a blank value as this: a profiling field's first tick, before its first sample
# (the 8-GPU capture in NVIDIA/DCGM issue 244: every cell N/A, then values).
DMON_BLANK = "N/A"
DMON_ENTITY_WIDTH = 11
DMON_PADDING = 2
DMON_VALUE_EXTRA = 6  # DeviceMonitor widens every field by this much
DMON_FLOAT_DECIMALS = 3


def main(argv: list[str], host: SimHost | None = None) -> int:
    host = host or SimHost()
    if not argv or argv[0] not in COMMANDS:
        print("ERROR: Invalid subsystem.")
        return EXIT_USAGE
    options = _options(argv[1:])
    return COMMANDS[argv[0]](host, options)


def _options(arguments: list[str]) -> dict[str, str]:
    """TCLAP's forms: `-r 3`, `--host=addr`, `--host addr`; switches map to ""."""
    options: dict[str, str] = {}
    switches = {"-l", "--list"}
    while arguments:
        argument = arguments.pop(0)
        name, has_value, value = argument.partition("=")
        if name in switches:
            options[name.lstrip("-")[0]] = ""
            continue
        if not has_value and arguments:
            value = arguments.pop(0)
        options[name.lstrip("-")] = value
    return options


def hostengine_reachable(address: str) -> bool:
    """nv-hostengine answers where dcgmi connects: TCP host[:port], or unix://path."""
    try:
        if address.startswith(UNIX_SOCKET_PREFIX):
            with socket.socket(socket.AF_UNIX) as connection:
                connection.settimeout(CONNECT_TIMEOUT_S)
                connection.connect(address.removeprefix(UNIX_SOCKET_PREFIX))
        else:
            name, _, port = address.partition(":")
            socket.create_connection((name, int(port or HOSTENGINE_PORT)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError:
        return False
    return True


def _connected(host: SimHost, options: dict[str, str]) -> bool:
    """Whether a command that needs nv-hostengine gets one; prints dcgmi's errors when not."""
    address = options.get("host", DEFAULT_HOST)
    if hostengine_reachable(address) and devices.driver_state(host) is DriverState.READY:
        return True
    print(NO_CONNECTION.format(host=address))
    print(CONNECTION_INVALID)
    return False


def _selected_gpus(host: SimHost, options: dict[str, str]) -> list[NvidiaGpu]:
    gpus = devices.nvidia_gpus(host)
    wanted = options.get("i", options.get("gpuList", "*"))
    if wanted == "*":
        return gpus
    indexes = {int(part.removeprefix("gpu:")) for part in wanted.split(",")}
    return [gpu for gpu in gpus if gpu.index in indexes]


def diag(host: SimHost, options: dict[str, str]) -> int:
    level = RUN_LEVELS.get(options.get("r", "").lower())
    if level is None:
        print(f"dcgmi diag (k3ops lab): run level {options.get('r')!r} is not simulated", file=sys.stderr)
        return EXIT_USAGE
    if "host" in options and not hostengine_reachable(options["host"]):
        print(NO_CONNECTION.format(host=options["host"]))
    if devices.driver_state(host) is not DriverState.READY:
        print(NO_EMBEDDED_ENGINE)
        return EXIT_INIT_ERROR
    gpus = _selected_gpus(host, options)
    results = [_test_result(test, host, gpus) for run_level, _, test in DIAG_TESTS if run_level <= level]
    lines = list(DIAG_HEADER)
    lines.append(DIAG_CATEGORY_HEADINGS["Metadata"])
    lines.append(DIAG_ROW.format(name="DCGM Version", info=host.package_version(DCGM_PACKAGE)))
    lines.append(DIAG_ROW.format(name="Driver Version Detected", info=host.nvidia_module_version()))
    lines.append(DIAG_ROW.format(name="GPU Device IDs Detected", info=", ".join(gpu.device_id for gpu in gpus)))
    for category in ("Deployment", "Hardware", "Integration", "Stress"):
        tests = [result for result in results if result.category == category]
        if tests:
            lines.append(DIAG_CATEGORY_HEADINGS[category])
        for result in tests:
            lines += result.rows()
    lines.append(DIAG_BORDER)
    print("\n".join(lines))
    return EXIT_DIAG_FAILED if any(result.overall != "Pass" for result in results) else 0


@dataclass(frozen=True)
class TestResult:
    name: str
    category: str
    overall: str  # Pass, Warn or Fail
    per_gpu: tuple[tuple[int, str], ...]
    warnings: tuple[tuple[int, str], ...]  # (gpu index, message) shown under that GPU's line

    def rows(self) -> list[str]:
        rows = [DIAG_ROW.format(name=self.name, info=self.overall)]
        for gpu, result in self.per_gpu:
            rows.append(DIAG_ROW.format(name="", info=f"GPU{gpu}: {result}"))
            for warned_gpu, message in self.warnings:
                if warned_gpu == gpu:
                    rows += _wrapped(f"Warning: GPU{gpu}", message)
        return rows


def _wrapped(name: str, message: str) -> list[str]:
    chunks = [message[start:start + DIAG_MESSAGE_WIDTH] for start in range(0, len(message), DIAG_MESSAGE_WIDTH)]
    return [DIAG_ROW.format(name=name if number == 0 else "", info=chunk) for number, chunk in enumerate(chunks)]


def _test_result(test: str, host: SimHost, gpus: list[NvidiaGpu]) -> TestResult:
    """All tests pass on healthy hardware; the software checks see persistence mode and pending remaps."""
    category = next(category for _, category, name in DIAG_TESTS if name == test)
    if test != "software":
        return TestResult(test, category, "Pass", tuple((gpu.index, "Pass") for gpu in gpus), ())
    if not host.persistence_mode():
        # The check warns for the whole test on the first GPU and stops; warnings show as Fail per GPU.
        first = gpus[0].index
        return TestResult(test, category, "Warn", tuple((gpu.index, "Fail") for gpu in gpus),
                          ((first, PERSISTENCE_DISABLED.format(gpu=first)),))
    pending = [gpu.index for gpu in gpus if gpu.row_remap_pending]
    return TestResult(
        test, category, "Fail" if pending else "Pass",
        tuple((gpu.index, "Fail" if gpu.index in pending else "Pass") for gpu in gpus),
        tuple((gpu, ROW_REMAP_PENDING.format(gpu=gpu)) for gpu in pending),
    )


def discovery(host: SimHost, options: dict[str, str]) -> int:
    if "l" not in options:
        print("ERROR: Invalid subsystem.")
        return EXIT_USAGE
    if not _connected(host, options):
        return EXIT_CONNECTION_NOT_VALID
    hardware = host.hardware()
    gpus = devices.nvidia_gpus(host)
    lines = [_found(len(gpus), "GPU", "GPUs")]
    lines += _columns(ENTITY_TABLE_WIDTHS, ("GPU ID", "Device Information"), [
        (str(gpu.index), [f"Name: {gpu.name}", f"PCI Bus ID: {gpu.pci.nvidia}", f"Device UUID: {gpu.uuid}"])
        for gpu in gpus
    ], separate_sections=True)
    switches = hardware["nvswitches"]
    lines.append(_found(len(switches), "NvSwitch", "NvSwitches"))
    lines += _columns(SWITCH_TABLE_WIDTHS, ("Switch ID",), [(str(number), []) for number in range(len(switches))])
    lines.append(_found(0, "ConnectX", "ConnectX"))
    lines += _columns(CONNECTX_TABLE_WIDTHS, ("ConnectX",), [])
    grace = hardware["cpu_model"] == "NVIDIA Grace"
    grace_sockets = sorted({gpu["numa_node"] for gpu in hardware["gpus"]}) if grace else []
    lines.append(_found(len(grace_sockets), "CPU", "CPUs"))
    lines += _columns(ENTITY_TABLE_WIDTHS, ("CPU ID", "Device Information"), [
        (str(cpu), [f"Name: {GRACE_CPU_NAME}", f"Serial number : {hardware['system']['serial_number']}{cpu}",
                    "Cores: " + devices.cpu_affinity(hardware, cpu)])
        for cpu in grace_sockets
    ], separate_sections=True)
    print("\n".join(lines))
    return 0


def _found(count: int, singular: str, plural: str) -> str:
    return f"{count} {singular if count == 1 else plural} found."


def _columns(widths: tuple[int, ...], labels: tuple[str, ...], sections: list[tuple[str, list[str]]],
             separate_sections: bool = False) -> list[str]:
    """DcgmiOutputColumns::str(): a first column of ids, a second of lines; "| a | b |" rows."""
    rule = "+" + "+".join("-" * width for width in widths) + "+"

    def row(cells: tuple[str, ...]) -> str:
        return "| " + " | ".join(f"{cell:<{width - 2}}" for cell, width in zip(cells, widths)) + " |"

    lines = [rule, row(labels), rule]
    for number, (identifier, details) in enumerate(sections):
        if separate_sections and number:
            lines.append(rule)
        if len(widths) == 1:
            lines.append(row((identifier,)))
            continue
        lines.append(row((identifier, details[0])))
        lines += [row(("", detail)) for detail in details[1:]]
    lines.append(rule)
    return lines


def dmon(host: SimHost, options: dict[str, str]) -> int:
    field_ids = [int(field) for field in options.get("e", "").split(",") if field]
    unknown = [field for field in field_ids if field not in DMON_FIELDS]
    if not field_ids or unknown:
        print(f"dcgmi dmon (k3ops lab): field ids {unknown or '(none)'} are not simulated", file=sys.stderr)
        return EXIT_USAGE
    if not _connected(host, options):
        return EXIT_CONNECTION_NOT_VALID
    gpus = _selected_gpus(host, options)
    header = f"{'#Entity':<{DMON_ENTITY_WIDTH}}"
    units = f"{'ID':<{DMON_ENTITY_WIDTH}}"
    for field in field_ids:
        name, unit, width = DMON_FIELDS[field]
        header += f"{name:<{width + DMON_VALUE_EXTRA + DMON_PADDING}}"
        units += f"{unit:<{width + DMON_VALUE_EXTRA + DMON_PADDING}}"
    lines = [header, units]
    for tick in range(int(options.get("c", "1"))):
        for gpu in gpus:
            row = f"{f'GPU {gpu.index}':<{DMON_ENTITY_WIDTH}}"
            for field in field_ids:
                width = DMON_FIELDS[field][2] + DMON_VALUE_EXTRA + DMON_PADDING
                value = DMON_BLANK if tick == 0 and field in PROFILING_FIELDS else _dmon_value(field, gpu)
                row += f"{value:<{width}}"
            lines.append(row)
    print("\n".join(lines))
    return 0


def _dmon_value(field: int, gpu: NvidiaGpu) -> str:
    """A field's value now. The lab's GPUs run no kernels: each engine and pipe is as active as the GPU's
    utilization says, and no bytes move over PCIe or NVLink."""
    if field in PROFILING_RATIOS:
        return f"{gpu.utilization_percent / 100:.{DMON_FLOAT_DECIMALS}f}"
    if field in PROFILING_BYTE_RATES:
        return "0"
    facts = gpu.architecture
    value = {
        100: facts.idle_graphics_mhz,
        101: facts.max_memory_mhz,
        140: gpu.memory_temperature_c,
        150: gpu.temperature_c,
        155: gpu.power_draw_w,
        203: gpu.utilization_percent,
        204: gpu.utilization_percent,
        250: gpu.memory_total_mib,
        251: gpu.memory_free_mib,
        252: gpu.memory_used_mib,
        396: int(gpu.row_remap_pending),
    }[field]
    return f"{value:.{DMON_FLOAT_DECIMALS}f}" if isinstance(value, float) else str(value)


COMMANDS = {"diag": diag, "discovery": discovery, "dmon": dmon}
