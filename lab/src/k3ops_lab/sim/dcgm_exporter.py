"""dcgm-exporter of the lab's datacenter-gpu-manager-exporter: /metrics for the fields its counters file (-f)
names, read from the host's GPUs as the lab's nv-hostengine sees them.

The page has the real exporter's layout (tests/fixtures/real/exporters/, NVIDIA/dcgm-exporter 4.x): HELP and TYPE
lines from the counters file, one series per GPU labelled gpu, UUID, pci_bus_id, device, modelName, Hostname and,
when the file names the `label` field DCGM_FI_DRIVER_VERSION, the driver's version; floating-point fields print
with six decimals. Like the real exporter in remote mode (-r), it serves nothing while nv-hostengine is away and
exits when it cannot reach it at start, so systemd's restart policy is what brings it back.
"""

from __future__ import annotations

import argparse
import socket
import sys

from . import nvidia_devices as devices
from .dcgmi import hostengine_reachable
from .host import SimHost
from .metrics_http import serve_metrics
from .nvidia_devices import NvidiaGpu

DEFAULT_COUNTERS = "/etc/dcgm-exporter/default-counters.csv"
DEFAULT_ADDRESS = ":9400"
WINDOW_MS = 300000  # -x and --clock-events-count-window-size: five minutes
FLOAT_FIELDS = {"DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
                "DCGM_FI_PROF_DRAM_ACTIVE"}
# The lab's GPUs run no kernels and have no link or memory faults besides those injected: every error and
# violation counter not listed reads 0.
ZERO_FIELDS = {"DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_POWER_VIOLATION", "DCGM_FI_DEV_THERMAL_VIOLATION",
               "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
               "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
               "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
               "DCGM_FI_DEV_ENC_UTIL", "DCGM_FI_DEV_DEC_UTIL"}
NO_ERROR = {"err_code": "0", "err_msg": "No Error"}  # DCGM_FI_DEV_XID_ERRORS' labels while no Xid was seen
CLOCK_EVENTS = {"power_brake": "hw_power_brake"}  # the lab's faults that DCGM counts as clock events


def counters(path: str) -> list[tuple[str, str, str]]:
    """The counters file: `field, type, help` lines, # comments and blank lines skipped."""
    found = []
    with open(path) as file:
        for line in file:
            if line.strip() and not line.lstrip().startswith("#"):
                field, kind, help_text = (part.strip() for part in line.split(",", 2))
                found.append((field, kind, help_text))
    return found


def _value(field: str, gpu: NvidiaGpu) -> float | int | None:
    facts = gpu.architecture
    values = {
        "DCGM_FI_DEV_SM_CLOCK": facts.idle_graphics_mhz,
        "DCGM_FI_DEV_MEM_CLOCK": facts.max_memory_mhz,
        "DCGM_FI_DEV_GPU_TEMP": gpu.temperature_c,
        "DCGM_FI_DEV_MEMORY_TEMP": gpu.memory_temperature_c,
        "DCGM_FI_DEV_POWER_USAGE": gpu.power_draw_w,
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": 0,
        "DCGM_FI_DEV_GPU_UTIL": gpu.utilization_percent,
        "DCGM_FI_DEV_MEM_COPY_UTIL": gpu.utilization_percent,
        "DCGM_FI_DEV_FB_FREE": gpu.memory_free_mib,
        "DCGM_FI_DEV_FB_USED": gpu.memory_used_mib,
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE": gpu.utilization_percent / 100,
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": gpu.utilization_percent / 100,
        "DCGM_FI_PROF_DRAM_ACTIVE": gpu.utilization_percent / 100,
        "DCGM_FI_DEV_XID_ERRORS": 0,
        # The lab's remaps are of rows that saw correctable errors, counted from the moment they are marked, as
        # nvidia-smi's simulator counts them (nvidia_smi_query.row_remapping).
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": gpu.remapped_rows + int(gpu.row_remap_pending),
        "DCGM_FI_DEV_ROW_REMAP_PENDING": int(gpu.row_remap_pending),
        "DCGM_FI_DEV_ROW_REMAP_FAILURE": int(gpu.row_remap_failure),
    }
    return 0 if field in ZERO_FIELDS else values.get(field)


def _number(field: str, value: float | int) -> str:
    return f"{float(value):f}" if field in FLOAT_FIELDS else str(int(value))


def _labels(labels: dict[str, str]) -> str:
    return ",".join(f'{key}="{text}"' for key, text in labels.items())


def page(host: SimHost, fields: list[tuple[str, str, str]], hostname: str) -> str:
    """The /metrics page: each field a family, in the counters file's order."""
    gpus = devices.nvidia_gpus(host)
    with_driver = any(field == "DCGM_FI_DRIVER_VERSION" and kind == "label" for field, kind, _ in fields)

    def labels(gpu: NvidiaGpu) -> dict[str, str]:
        found = {"gpu": str(gpu.index), "UUID": gpu.uuid, "pci_bus_id": gpu.pci.nvidia,
                 "device": f"nvidia{gpu.minor_number}", "modelName": gpu.name, "Hostname": hostname}
        if with_driver:
            found["DCGM_FI_DRIVER_VERSION"] = host.nvidia_module_version() or ""
        return found

    lines = []
    for field, kind, help_text in fields:
        if kind == "label":
            continue
        samples = []
        for gpu in gpus:
            if field == "DCGM_FI_DEV_XID_ERRORS":
                samples.append(f"{field}{{{_labels({**labels(gpu), **NO_ERROR})}}} 0")
            elif field == "DCGM_EXP_CLOCK_EVENTS_COUNT":
                window = {"window_size_in_ms": str(WINDOW_MS)}
                samples += [f"{field}{{{_labels({**labels(gpu), 'clock_event': event, **window})}}} 1"
                            for fault, event in CLOCK_EVENTS.items() if getattr(gpu, fault)]
            elif field == "DCGM_EXP_XID_ERRORS_COUNT":
                continue  # a series per Xid seen in the window: the lab's driver logs none that DCGM sees
            elif (value := _value(field, gpu)) is not None:
                samples.append(f"{field}{{{_labels(labels(gpu))}}} {_number(field, value)}")
        if samples:
            lines += [f"# HELP {field} {help_text}", f"# TYPE {field} {kind}", *samples]
    return "\n".join(lines) + "\n"


def _listen_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


def main(argv: list[str], host: SimHost | None = None) -> int:
    host = host or SimHost()
    parser = argparse.ArgumentParser(prog="dcgm-exporter")
    parser.add_argument("-f", "--collectors", default=DEFAULT_COUNTERS)
    parser.add_argument("-a", "--address", default=DEFAULT_ADDRESS)
    parser.add_argument("-r", "--remote-hostengine-info", default=None)
    args = parser.parse_args(argv)
    fields = counters(args.collectors)
    remote = args.remote_hostengine_info
    if remote is None:
        print("dcgm-exporter (k3ops lab): only the remote mode (-r) is simulated", file=sys.stderr)
        return 1
    if not hostengine_reachable(remote) or devices.driver_state(host) is not devices.DriverState.READY:
        print(f'level=ERROR msg="Failed to connect to DCGM host engine" address={remote}', file=sys.stderr, flush=True)
        return 1
    hostname = socket.gethostname()

    bind, port = _listen_address(args.address)
    print(f'level=INFO msg="Starting webserver" address={args.address}', file=sys.stderr, flush=True)
    serve_metrics(bind or "0.0.0.0", port,
                  lambda: page(host, fields, hostname) if hostengine_reachable(remote) else None,
                  "DCGM host engine unreachable")
    return 0
