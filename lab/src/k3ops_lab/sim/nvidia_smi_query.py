"""nvidia-smi's query outputs: the -q report and the --query-gpu / --query-compute-apps CSV.

The -q layout is the 590 driver's (nvidia-smi-q/h200-x1_590.48.01 fixture): labels padded to
column 55, the Fabric block with its Health sub-block, Remapped Rows. The CSV headers, units and
"[N/A]" spellings are those of query-gpu-csv/h100-x1_590.48.01_all-fields.

Fabric State and Status (-q, and fabric.state / fabric.status): on an NVSwitch board fabric manager
registers the GPUs with the NVLink fabric, which goes "Not Started" -> "In Progress" -> "Completed"
(NVIDIA's fabric manager guide, as NVSentinel issue 883 cites it), Status "N/A" until it completes,
then "Success". The simulation reads what the simulated nv-fabricmanager leaves on the host (no pid
file or socket): at every successful start it appends to /var/log/fabricmanager.log that it
configured the NVSwitches. Written no earlier than the driver was loaded (the boot layer writes
/sys/module/nvidia/version at every boot), the GPUs show Completed / Success, and keep it after
fabric manager stops, as registered GPUs do until a GPU reset or driver reload; otherwise (fabric
manager not started, or refused to start, since the boot) they show Not Started / N/A.
Configuration is instant here, so "In Progress" is never shown. GB300 trays, whose NVLink domain is
run from the switch trays, show Completed / Success.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from . import nvidia_devices as devices
from .daemons import FM_CONFIGURED, FM_LOG
from .host import NVIDIA_MODULE_VERSION, SimHost, cuda_version
from .nvidia_devices import NvidiaGpu

EXIT_INVALID_ARGUMENT = 2
INVALID_ARGUMENTS = "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n"
INVALID_FIELD = 'Field "{field}" is not a valid field to query.\n'

Q_BANNER = ("", "==============NVSMI LOG==============", "")
Q_LABEL_COLUMN = 55  # where the ": " of every -q line starts
Q_GPU_HEADING = "GPU {bus_id}"
DEPRECATED = "Requested functionality has been deprecated"
NOT_AVAILABLE = "N/A"
# -q -d TYPE: the top-level blocks each display type keeps.
DISPLAY_SECTIONS = {
    "MEMORY": ("FB Memory Usage", "BAR1 Memory Usage", "Conf Compute Protected Memory Usage"),
    "ECC": ("ECC Mode", "ECC Errors"),
    "PAGE_RETIREMENT": ("Retired Pages",),
    "ROW_REMAPPER": ("Remapped Rows",),
    "TEMPERATURE": ("Temperature",),
    "COMPUTE": ("Compute Mode",),
    "PIDS": ("Processes",),
}

# "GPU T.Limit Temp" is the margin left before the GPU slows down, at 87 C.
SLOWDOWN_TEMPERATURE_C = 87
PCIE_IDLE_THROUGHPUT_KBPS = 560
NVL_DOMAIN_CLIQUE_ID = 32766  # the clique IMEX assigns to a whole NVL72 rack
# (State, Status) of the GPUs' registration with the NVLink fabric.
FABRIC_COMPLETED = ("Completed", "Success")
FABRIC_NOT_STARTED = ("Not Started", NOT_AVAILABLE)
NULL_UUID = "00000000-0000-0000-0000-000000000000"

CSV_TIMESTAMP = "%Y/%m/%d %H:%M:%S"
CSV_NOT_AVAILABLE = "[N/A]"
# Every name --query-gpu accepts for the fields the simulation knows, mapped to the name it prints.
GPU_FIELD_ALIASES = {
    "gpu_name": "name", "gpu_serial": "serial", "gpu_uuid": "uuid", "gpu_bus_id": "pci.bus_id",
    "clocks.gr": "clocks.current.graphics", "clocks.sm": "clocks.current.sm",
    "clocks.mem": "clocks.current.memory", "clocks.video": "clocks.current.video",
    "clocks.max.gr": "clocks.max.graphics", "clocks.max.mem": "clocks.max.memory",
}
GPU_FIELD_UNITS = {
    "fan.speed": "%", "memory.total": "MiB", "memory.reserved": "MiB", "memory.used": "MiB", "memory.free": "MiB",
    "utilization.gpu": "%", "utilization.memory": "%", "power.draw": "W", "power.draw.average": "W",
    "power.draw.instant": "W", "power.limit": "W", "enforced.power.limit": "W", "power.default_limit": "W",
    "power.min_limit": "W", "power.max_limit": "W", "clocks.current.graphics": "MHz", "clocks.current.sm": "MHz",
    "clocks.current.memory": "MHz", "clocks.current.video": "MHz", "clocks.max.graphics": "MHz",
    "clocks.max.sm": "MHz", "clocks.max.memory": "MHz",
}
COMPUTE_APP_FIELD_ALIASES = {"name": "process_name", "used_memory": "used_gpu_memory"}
COMPUTE_APP_FIELDS = {
    "timestamp": None, "gpu_name": None, "gpu_bus_id": None, "gpu_serial": None, "gpu_uuid": None, "pid": None,
    "process_name": None, "used_gpu_memory": "MiB",
}


@dataclass(frozen=True)
class Item:
    """One -q line: a label with a value, a block heading with items under it, or both."""

    label: str
    value: str | None = None
    children: tuple[Item, ...] = ()


def block(label: str, *children: Item) -> Item:
    return Item(label, None, children)


def active(flag: bool) -> str:
    """A clock event reason's state, as `-q` prints it."""
    return "Active" if flag else "Not Active"


def values(**pairs) -> tuple[Item, ...]:
    """Items from keyword arguments, underscores standing for spaces: values(Host_ID=1)."""
    return tuple(Item(label.replace("_", " "), str(value)) for label, value in pairs.items())


def run_q(host: SimHost, all_gpus: list[NvidiaGpu], gpus: list[NvidiaGpu], display: str | None) -> int:
    if display is None:
        kept = None
    else:
        types = display.upper().split(",")
        if any(kind not in DISPLAY_SECTIONS for kind in types):
            print(INVALID_ARGUMENTS)
            return EXIT_INVALID_ARGUMENT
        kept = {label for kind in types for label in DISPLAY_SECTIONS[kind]}
    driver = host.nvidia_module_version()
    lines = [
        *Q_BANNER,
        _q_line("", "Timestamp", devices.ctime()),
        _q_line("", "Driver Version", driver),
        _q_line("", "CUDA Version", cuda_version(driver)),
        "",
        _q_line("", "Attached GPUs", str(len(all_gpus))),
    ]
    hardware, persistence = host.hardware(), host.persistence_mode()
    registration = fabric_registration(host, hardware)
    for gpu in gpus:
        lines.append(Q_GPU_HEADING.format(bus_id=gpu.pci.nvidia))
        for item in _gpu_report(hardware, driver, persistence, registration, gpu):
            if kept is None or item.label in kept:
                lines += _render(item, "    ")
        lines.append("")
    print("\n".join(lines))
    return 0


def _q_line(indent: str, label: str, value: str) -> str:
    return f"{indent}{label:<{Q_LABEL_COLUMN - len(indent)}}: {value}"


def _render(item: Item, indent: str) -> list[str]:
    lines = [indent + item.label if item.value is None else _q_line(indent, item.label, item.value)]
    for child in item.children:
        lines += _render(child, indent + "    ")
    return lines


@dataclass(frozen=True)
class Fabric:
    state: str
    status: str
    clique_id: str
    cluster_uuid: str
    health: dict[str, str]


def fabric_registration(host: SimHost, hardware: dict) -> tuple[str, str]:
    """The GPUs' (State, Status) in the NVLink fabric; see the module's docstring."""
    if hardware["fabric"] != "nvswitch" or _fabric_manager_configured(host):
        return FABRIC_COMPLETED
    return FABRIC_NOT_STARTED


def _fabric_manager_configured(host: SimHost) -> bool:
    """Fabric manager logged that it configured the NVSwitches, and did so since the driver was loaded."""
    log = host.path(FM_LOG)
    try:
        since_load = log.stat().st_mtime_ns >= host.path(NVIDIA_MODULE_VERSION).stat().st_mtime_ns
        return since_load and FM_CONFIGURED in log.read_text()
    except OSError:
        return False


def fabric(hardware: dict, registration: tuple[str, str], gpu: NvidiaGpu) -> Fabric:
    """NVLink fabric registration: HGX Hopper reports no health; Blackwell and NVL domains do."""
    if hardware["fabric"] == "nvlink-domain":
        clique, cluster = str(NVL_DOMAIN_CLIQUE_ID), hardware["cluster_uuid"]
    else:
        clique, cluster = "0", NULL_UUID
    if gpu.model["architecture"] == "Hopper":
        health = dict.fromkeys(("Summary", "Bandwidth", "Route Recovery in progress", "Route Unhealthy",
                                "Access Timeout Recovery", "Incorrect Configuration"), NOT_AVAILABLE)
    else:
        degraded = bool(gpu.down_links)
        health = {
            "Summary": "Limited Capacity" if degraded else "Healthy",
            "Bandwidth": "Degraded" if degraded else "Full",
            "Route Recovery in progress": "False",
            "Route Unhealthy": "False",
            "Access Timeout Recovery": "False",
            "Incorrect Configuration": "None",
        }
    return Fabric(*registration, clique, cluster, health)


@dataclass(frozen=True)
class RowRemapping:
    correctable_rows: int
    pending: bool
    failure: bool
    histogram: dict[str, int]
    dram_correctable: int  # volatile: since the last GPU reset or driver load
    dram_correctable_aggregate: int  # over the GPU's life, kept in the InfoROM


def row_remapping(gpu: NvidiaGpu) -> RowRemapping:
    """The remapper as the row-remapper fixture shows it: a row marked for remapping is counted at once
    (Correctable Error 1 with Pending Yes) and spends one bank's spare rows; the reset that activates it
    keeps the count and clears Pending, and zeroes the volatile ECC counts (the aggregate ones stay).
    Each remap follows the correctable errors that made the driver mark the row. A remap that failed
    found its bank with no spare row left."""
    rows = gpu.remapped_rows + int(gpu.row_remap_pending)
    failure = int(gpu.row_remap_failure)
    histogram = {"Max": gpu.architecture.remap_banks - rows - failure, "High": rows, "Partial": 0, "Low": 0,
                 "None": failure}
    volatile = devices.DRAM_CORRECTABLE_BEFORE_REMAP if gpu.row_remap_pending else 0
    return RowRemapping(rows, gpu.row_remap_pending, gpu.row_remap_failure, histogram, volatile,
                        devices.DRAM_CORRECTABLE_BEFORE_REMAP * rows)


def _gpu_report(hardware: dict, driver: str, persistence: bool, registration: tuple[str, str],
                gpu: NvidiaGpu) -> list[Item]:
    model, facts = gpu.model, gpu.architecture
    grace = hardware["fabric"] == "nvlink-domain"
    remap = row_remapping(gpu)
    nvfabric = fabric(hardware, registration, gpu)
    def ecc_counts(dram_correctable: int) -> tuple[Item, ...]:
        return (
            Item("SRAM Correctable", "0"),
            Item("SRAM Uncorrectable Parity", "0"),
            Item("SRAM Uncorrectable SEC-DED", "0"),
            Item("DRAM Correctable", str(dram_correctable)),
            Item("DRAM Uncorrectable", "0"),
        )
    power = f"{gpu.power_draw_w:.2f} W"
    limit = f"{gpu.power_limit_w:.2f} W"
    return [
        Item("Product Name", gpu.name),
        Item("Product Brand", "NVIDIA"),
        Item("Product Architecture", model["architecture"]),
        Item("Display Mode", DEPRECATED),
        Item("Display Attached", "No"),
        Item("Display Active", "Disabled"),
        Item("Persistence Mode", "Enabled" if persistence else "Disabled"),
        Item("Addressing Mode", "ATS" if grace else "None"),
        block("MIG Mode", *values(Current="Disabled", Pending="Disabled")),
        Item("Accounting Mode", "Disabled"),
        Item("Accounting Mode Buffer Size", "4000"),
        block("Driver Model", *values(Current=NOT_AVAILABLE, Pending=NOT_AVAILABLE)),
        Item("Serial Number", gpu.serial),
        Item("GPU UUID", gpu.uuid),
        Item("GPU PDI", "0x" + gpu.uuid.replace("-", "")[-16:]),
        Item("Minor Number", str(gpu.minor_number)),
        Item("VBIOS Version", model["vbios_version"]),
        Item("MultiGPU Board", "No"),
        Item("Board ID", gpu.board_id),
        Item("Board Part Number", model["board_part_number"]),
        Item("GPU Part Number", gpu.gpu_part_number),
        Item("FRU Part Number", NOT_AVAILABLE),
        block("Platform Info", *_platform_info(hardware, gpu, grace)),
        block("Inforom Version", *values(Image_Version=gpu.inforom_image, OEM_Object="2.1", ECC_Object="7.16",
                                         Power_Management_Object=NOT_AVAILABLE)),
        block("Inforom BBX Object Flush", *values(Latest_Timestamp=NOT_AVAILABLE, Latest_Duration=NOT_AVAILABLE)),
        block("GPU Operation Mode", *values(Current=NOT_AVAILABLE, Pending=NOT_AVAILABLE)),
        Item("GPU C2C Mode", "Enabled" if grace else "Disabled"),
        block("GPU Virtualization Mode", Item("Virtualization Mode", "None"), Item("Host VGPU Mode", NOT_AVAILABLE),
              Item("vGPU Heterogeneous Mode", NOT_AVAILABLE)),
        Item("GPU Recovery Action", "None"),
        Item("GSP Firmware Version", driver),
        block("IBMNPU", Item("Relaxed Ordering Mode", NOT_AVAILABLE)),
        block(
            "PCI",
            Item("Bus", f"0x{gpu.pci.bus:02X}"),
            Item("Device", f"0x{gpu.pci.device:02X}"),
            Item("Domain", f"0x{gpu.pci.domain:04X}"),
            Item("Base Classcode", "0x3"),
            Item("Sub Classcode", "0x2"),
            Item("Device Id", gpu.nvml_device_id),
            Item("Bus Id", gpu.pci.nvidia),
            Item("Sub System Id", gpu.nvml_subsystem_id),
            block(
                "GPU Link Info",
                block("PCIe Generation", *values(Max=model["pcie_generation"], Current=model["pcie_generation"],
                                                 Device_Current=model["pcie_generation"],
                                                 Device_Max=model["pcie_generation"],
                                                 Host_Max=model["pcie_generation"])),
                block("Link Width", *values(Max=f"{model['pcie_width']}x", Current=f"{model['pcie_width']}x")),
            ),
            block("Bridge Chip", *values(Type=NOT_AVAILABLE, Firmware=NOT_AVAILABLE)),
            Item("Replays Since Reset", "0"),
            Item("Replay Number Rollovers", "0"),
            Item("Tx Throughput", f"{PCIE_IDLE_THROUGHPUT_KBPS + gpu.index * 13} KB/s"),
            Item("Rx Throughput", f"{PCIE_IDLE_THROUGHPUT_KBPS + gpu.index * 29} KB/s"),
            Item("Atomic Caps Outbound", NOT_AVAILABLE),
            Item("Atomic Caps Inbound", NOT_AVAILABLE),
        ),
        Item("Fan Speed", NOT_AVAILABLE),
        Item("Performance State", gpu.pstate),
        block(
            "Clocks Event Reasons",
            Item("Idle", "Active"),
            Item("Applications Clocks Setting", "Not Active"),
            Item("SW Power Cap", "Not Active"),
            Item("HW Slowdown", active(gpu.power_brake), (Item("HW Thermal Slowdown", "Not Active"),
                                                           Item("HW Power Brake Slowdown", active(gpu.power_brake)))),
            Item("Sync Boost", "Not Active"),
            Item("SW Thermal Slowdown", "Not Active"),
            Item("Display Clock Setting", "Not Active"),
        ),
        block("Clocks Event Reasons Counters", *(Item(label, "0 us") for label in (
            "SW Power Capping", "Sync Boost", "SW Thermal Slowdown", "HW Thermal Slowdown", "HW Power Braking"))),
        Item("Sparse Operation Mode", "Disabled"),
        block("FB Memory Usage", *values(Total=f"{gpu.memory_total_mib} MiB", Reserved=f"{gpu.memory_reserved_mib} MiB",
                                         Used=f"{gpu.memory_used_mib} MiB", Free=f"{gpu.memory_free_mib} MiB")),
        block("BAR1 Memory Usage", *values(Total=f"{gpu.bar1_total_mib} MiB", Used="1 MiB",
                                           Free=f"{gpu.bar1_total_mib - 1} MiB")),
        block("Conf Compute Protected Memory Usage", *values(Total="0 MiB", Used="0 MiB", Free="0 MiB")),
        Item("Compute Mode", "Default"),
        block("Utilization", *(Item(label, f"{gpu.utilization_percent} %")
                               for label in ("GPU", "Memory", "Encoder", "Decoder", "JPEG", "OFA"))),
        block("Encoder Stats", *values(Active_Sessions=0, Average_FPS=0, Average_Latency=0)),
        block("FBC Stats", *values(Active_Sessions=0, Average_FPS=0, Average_Latency=0)),
        block("DRAM Encryption Mode", *values(Current=NOT_AVAILABLE, Pending=NOT_AVAILABLE)),
        block("ECC Mode", *values(Current="Enabled", Pending="Enabled")),
        block(
            "ECC Errors",
            block("Volatile", *ecc_counts(remap.dram_correctable)),
            block("Aggregate", *ecc_counts(remap.dram_correctable_aggregate), Item("SRAM Threshold Exceeded", "No")),
            block("Aggregate Uncorrectable SRAM Sources", *(Item(f"SRAM {source}", "0") for source in (
                "L2", "SM", "Microcontroller", "PCIE", "Other"))),
            Item("Channel Repair Pending", "No"),
            Item("TPC Repair Pending", "No"),
            Item("Unrepairable Memory", "No"),
        ),
        block("Retired Pages", *values(Single_Bit_ECC=NOT_AVAILABLE, Double_Bit_ECC=NOT_AVAILABLE,
                                       Pending_Page_Blacklist=NOT_AVAILABLE)),
        block(
            "Remapped Rows",
            Item("Correctable Error", str(remap.correctable_rows)),
            Item("Uncorrectable Error", "0"),
            Item("Pending", "Yes" if remap.pending else "No"),
            Item("Remapping Failure Occurred", "Yes" if remap.failure else "No"),
            block("Bank Remap Availability Histogram",
                  *(Item(level, f"{banks} bank(s)") for level, banks in remap.histogram.items())),
        ),
        block(
            "Temperature",
            Item("GPU Current Temp", f"{gpu.temperature_c} C"),
            Item("GPU T.Limit Temp", f"{SLOWDOWN_TEMPERATURE_C - gpu.temperature_c} C"),
            Item("GPU Shutdown T.Limit Temp", "-8 C"),
            Item("GPU Slowdown T.Limit Temp", "-2 C"),
            Item("GPU Max Operating T.Limit Temp", "0 C"),
            Item("GPU Target Temperature", NOT_AVAILABLE),
            Item("Memory Current Temp", f"{gpu.memory_temperature_c} C"),
            Item("Memory Max Operating T.Limit Temp", "0 C"),
        ),
        block(
            "GPU Power Readings",
            Item("Average Power Draw", power),
            Item("Instantaneous Power Draw", power),
            Item("Current Power Limit", limit),
            Item("Requested Power Limit", limit),
            Item("Default Power Limit", limit),
            Item("Min Power Limit", f"{gpu.power_min_limit_w:.2f} W"),
            Item("Max Power Limit", limit),
        ),
        block("GPU Memory Power Readings ", Item("Average Power Draw", f"{gpu.power_draw_w * 0.15:.2f} W"),
              Item("Instantaneous Power Draw", NOT_AVAILABLE)),
        block("Module Power Readings", *(Item(label, NOT_AVAILABLE) for label in (
            "Average Power Draw", "Instantaneous Power Draw", "Current Power Limit", "Requested Power Limit",
            "Default Power Limit", "Min Power Limit", "Max Power Limit"))),
        Item("Power Smoothing", NOT_AVAILABLE),
        block("Workload Power Profiles", *values(Requested_Profiles=NOT_AVAILABLE, Enforced_Profiles=NOT_AVAILABLE)),
        Item("EDPp Multiplier", "100.00%"),
        block("Clocks", *values(Graphics=f"{facts.idle_graphics_mhz} MHz", SM=f"{facts.idle_graphics_mhz} MHz",
                                Memory=f"{facts.max_memory_mhz} MHz", Video=f"{facts.idle_video_mhz} MHz")),
        block("Applications Clocks", *values(Graphics=DEPRECATED, Memory=DEPRECATED)),
        block("Default Applications Clocks", *values(Graphics=DEPRECATED, Memory=DEPRECATED)),
        block("Deferred Clocks", Item("Memory", NOT_AVAILABLE)),
        block("Max Clocks", *values(Graphics=f"{facts.max_graphics_mhz} MHz", SM=f"{facts.max_graphics_mhz} MHz",
                                    Memory=f"{facts.max_memory_mhz} MHz", Video=f"{facts.max_video_mhz} MHz")),
        block("Max Customer Boost Clocks", Item("Graphics", f"{facts.max_graphics_mhz} MHz")),
        block("Clock Policy", *values(Auto_Boost=NOT_AVAILABLE, Auto_Boost_Default=NOT_AVAILABLE)),
        block(
            "Fabric",
            Item("State", nvfabric.state),
            Item("Status", nvfabric.status),
            Item("CliqueId", nvfabric.clique_id),
            Item("ClusterUUID", nvfabric.cluster_uuid),
            block("Health", *(Item(label, value) for label, value in nvfabric.health.items())),
        ),
        Item("Processes", "None"),
        block("Capabilities", Item("EGM", "disabled")),
    ]


def _platform_info(hardware: dict, gpu: NvidiaGpu, grace: bool) -> tuple[Item, ...]:
    """Rack placement: only trays of an NVL rack know theirs; HGX boards report the module id alone."""
    if grace:
        return values(Chassis_Serial_Number=hardware["system"]["serial_number"], Slot_Number=1, Tray_Index=0,
                      Host_ID=1, Peer_Type="Switch Connected", Module_Id=gpu.module_id,
                      GPU_Fabric_GUID="0x" + gpu.uuid.replace("-", "")[4:20])
    return values(Chassis_Serial_Number=NOT_AVAILABLE, Slot_Number=NOT_AVAILABLE, Tray_Index=NOT_AVAILABLE,
                  Host_ID=NOT_AVAILABLE, Peer_Type=NOT_AVAILABLE, Module_Id=gpu.module_id,
                  GPU_Fabric_GUID=NOT_AVAILABLE)


@dataclass(frozen=True)
class QueryMoment:
    """What one --query-gpu run reads once for all its rows."""

    timestamp: str
    driver: str
    gpu_count: int
    persistence: bool
    hardware: dict
    fabric_registration: tuple[str, str]


def run_gpu_query(host: SimHost, all_gpus: list[NvidiaGpu], gpus: list[NvidiaGpu], fields: str,
                  output_format: str) -> int:
    moment = devices.now()
    hardware = host.hardware()
    query = QueryMoment(f"{moment:{CSV_TIMESTAMP}}.{moment.microsecond // 1000:03d}", host.nvidia_module_version(),
                        len(all_gpus), host.persistence_mode(), hardware, fabric_registration(host, hardware))
    names = [GPU_FIELD_ALIASES.get(field, field) for field in fields.split(",")]
    known = _gpu_fields(query, all_gpus[0])
    for requested, name in zip(fields.split(","), names):
        if name not in known:
            print(INVALID_FIELD.format(field=requested))
            return EXIT_INVALID_ARGUMENT
    rows = [[_gpu_fields(query, gpu)[name] for name in names] for gpu in gpus]
    return _print_csv(names, GPU_FIELD_UNITS, rows, output_format)


def _gpu_fields(query: QueryMoment, gpu: NvidiaGpu) -> dict[str, str]:
    """Every --query-gpu field the simulation answers, by its printed name, without units."""
    facts, model = gpu.architecture, gpu.model
    remap, nvfabric = row_remapping(gpu), fabric(query.hardware, query.fabric_registration, gpu)
    power, limit = f"{gpu.power_draw_w:.2f}", f"{gpu.power_limit_w:.2f}"
    return {
        "timestamp": query.timestamp,
        "driver_version": query.driver,
        "count": str(query.gpu_count),
        "index": str(gpu.index),
        "name": gpu.name,
        "serial": gpu.serial,
        "uuid": gpu.uuid,
        "pci.bus_id": gpu.pci.nvidia,
        "pci.domain": f"0x{gpu.pci.domain:04X}",
        "pci.bus": f"0x{gpu.pci.bus:02X}",
        "pci.device": f"0x{gpu.pci.device:02X}",
        "pci.device_id": gpu.nvml_device_id,
        "pci.sub_device_id": gpu.nvml_subsystem_id,
        "pcie.link.gen.current": str(model["pcie_generation"]),
        "pcie.link.gen.max": str(model["pcie_generation"]),
        "pcie.link.width.current": str(model["pcie_width"]),
        "pcie.link.width.max": str(model["pcie_width"]),
        "persistence_mode": "Enabled" if query.persistence else "Disabled",
        "vbios_version": model["vbios_version"],
        "inforom.img": gpu.inforom_image,
        "fan.speed": CSV_NOT_AVAILABLE,
        "pstate": gpu.pstate,
        "memory.total": str(gpu.memory_total_mib),
        "memory.reserved": str(gpu.memory_reserved_mib),
        "memory.used": str(gpu.memory_used_mib),
        "memory.free": str(gpu.memory_free_mib),
        "compute_mode": "Default",
        "compute_cap": model["compute_capability"],
        "utilization.gpu": str(gpu.utilization_percent),
        "utilization.memory": str(gpu.utilization_percent),
        "ecc.mode.current": "Enabled",
        "ecc.mode.pending": "Enabled",
        "ecc.errors.corrected.volatile.total": str(remap.dram_correctable),
        "ecc.errors.corrected.aggregate.total": str(remap.dram_correctable_aggregate),
        "ecc.errors.uncorrected.volatile.total": "0",
        "ecc.errors.uncorrected.aggregate.total": "0",
        "retired_pages.pending": CSV_NOT_AVAILABLE,
        "remapped_rows.correctable": str(remap.correctable_rows),
        "remapped_rows.uncorrectable": "0",
        "remapped_rows.pending": "Yes" if remap.pending else "No",
        "remapped_rows.failure": "Yes" if remap.failure else "No",
        "temperature.gpu": str(gpu.temperature_c),
        "temperature.memory": str(gpu.memory_temperature_c),
        "power.draw": power,
        "power.draw.average": power,
        "power.draw.instant": power,
        "power.limit": limit,
        "enforced.power.limit": limit,
        "power.default_limit": limit,
        "power.min_limit": f"{gpu.power_min_limit_w:.2f}",
        "power.max_limit": limit,
        "clocks.current.graphics": str(facts.idle_graphics_mhz),
        "clocks.current.sm": str(facts.idle_graphics_mhz),
        "clocks.current.memory": str(facts.max_memory_mhz),
        "clocks.current.video": str(facts.idle_video_mhz),
        "clocks.max.graphics": str(facts.max_graphics_mhz),
        "clocks.max.sm": str(facts.max_graphics_mhz),
        "clocks.max.memory": str(facts.max_memory_mhz),
        "mig.mode.current": "Disabled",
        "mig.mode.pending": "Disabled",
        "fabric.state": nvfabric.state,
        "fabric.status": nvfabric.status,
        "fabric.cliqueId": nvfabric.clique_id,
        "fabric.clusterUuid": nvfabric.cluster_uuid,
    }


def run_compute_apps_query(fields: str, output_format: str) -> int:
    """The lab's GPUs run no CUDA processes: the header alone, as on an idle host."""
    names = [COMPUTE_APP_FIELD_ALIASES.get(field, field) for field in fields.split(",")]
    for requested, name in zip(fields.split(","), names):
        if name not in COMPUTE_APP_FIELDS:
            print(INVALID_FIELD.format(field=requested))
            return EXIT_INVALID_ARGUMENT
    return _print_csv(names, COMPUTE_APP_FIELDS, [], output_format)


def _print_csv(names: list[str], units: dict[str, str | None], rows: list[list[str]], output_format: str) -> int:
    """--format=csv[,noheader][,nounits]: ", "-separated, units in the header and after each value."""
    options = set(output_format.split(","))
    if "csv" not in options or not options <= {"csv", "noheader", "nounits"}:
        print(INVALID_ARGUMENTS)
        return EXIT_INVALID_ARGUMENT
    with_units = "nounits" not in options
    lines = []
    if "noheader" not in options:
        lines.append(", ".join(f"{name} [{units[name]}]" if with_units and units.get(name) else name
                               for name in names))
    for row in rows:
        lines.append(", ".join(
            f"{value} {units[name]}" if with_units and units.get(name) and value != CSV_NOT_AVAILABLE else value
            for name, value in zip(names, row)))
    if lines:
        sys.stdout.write("\n".join(lines) + "\n")
    return 0
