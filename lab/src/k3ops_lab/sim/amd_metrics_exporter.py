"""AMD's device metrics exporter of the lab's amdgpu-exporter package: gpuagent, through which the real exporter
reads the GPUs (a Unix socket, while amdgpu is loaded), and amd-metrics-exporter, which serves /metrics on the
configuration file's ServerPort.

The page has the real exporter's layout (tests/fixtures/real/exporters/, ROCm/device-metrics-exporter): gauges
whose series carry its labels in its order (alphabetical; the Kubernetes and Slurm ones empty on bare metal), and
`gpu_nodes_total` labelled with the host name alone. The readings are the lab's idle ones (sim/amdgpu.py), which
rocm-smi and amd-smi show too.
"""

from __future__ import annotations

import json
import os
import socket
import sys

from .amdgpu import COMPUTE_PARTITION, MEMORY_PARTITION, PARTITION_ID, AmdGpu, amd_gpus, driver_loaded
from .daemons import _serve_until_stopped
from .host import SimHost
from .metrics_http import serve_metrics

GPUAGENT_SOCKET = "var/run/gpuagent.sock"
DEFAULT_CONFIG = "/etc/metrics/config.json"
DEFAULT_PORT = 5000
CARD_VENDOR = "AMD"
# The labels of a GPU's series, in the exporter's order (the issue #171 capture's, ROCm/device-metrics-exporter).
GPU_LABELS = ("card_model", "card_series", "card_vendor", "cluster_name", "container", "driver_version",
              "gpu_compute_partition_type", "gpu_id", "gpu_memory_partition_type", "gpu_partition_id", "gpu_uuid",
              "hostname", "job_id", "job_partition", "job_user", "namespace", "pod", "serial_number", "usergroup_id",
              "vbios_version", "workload_id")
# (name, help, reading of one GPU)
GPU_GAUGES = (
    ("gpu_edge_temperature", "Current edge temperature in Celsius", lambda gpu, model: gpu.junction_c - 4),
    ("gpu_junction_temperature", "Current junction/hotspot temperature in Celsius", lambda gpu, model: gpu.junction_c),
    ("gpu_package_power", "Current socket package power in Watts", lambda gpu, model: gpu.socket_power_w),
    ("gpu_average_package_power", "Average package power in Watts", lambda gpu, model: gpu.socket_power_w),
    ("gpu_gfx_activity", "Graphics engine usage in percent", lambda gpu, model: 0),
    ("gpu_total_vram", "Total VRAM memory of the GPU (in MB)", lambda gpu, model: model["memory_total_mib"]),
    ("gpu_free_vram", "Free VRAM memory of the GPU (in MB)", lambda gpu, model: model["memory_total_mib"]),
    ("gpu_used_vram", "Used VRAM memory of the GPU (in MB)", lambda gpu, model: 0),
)


def _labels(labels: dict[str, str]) -> str:
    return ",".join(f'{key}="{value}"' for key, value in labels.items())


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value}"


def page(host: SimHost, hostname: str) -> str:
    hardware = host.hardware()
    model, gpus = hardware["gpu_model"], amd_gpus(host)
    serials = {gpu["uuid"]: gpu.get("serial", "") for gpu in hardware["gpus"]}

    def labels(gpu: AmdGpu) -> dict[str, str]:
        found = dict.fromkeys(GPU_LABELS, "")
        found.update(card_model=model["board_part_number"], card_series=gpu.name, card_vendor=CARD_VENDOR,
                     driver_version=host.amdgpu_module_version() or "",
                     gpu_compute_partition_type=COMPUTE_PARTITION.lower(),
                     gpu_id=str(gpu.index), gpu_memory_partition_type=MEMORY_PARTITION.lower(),
                     gpu_partition_id=str(PARTITION_ID), gpu_uuid=gpu.uuid, hostname=hostname,
                     serial_number=serials.get(gpu.uuid, ""), vbios_version=gpu.vbios)
        return found

    lines = ["# HELP gpu_nodes_total Number of nodes with GPUs", "# TYPE gpu_nodes_total gauge",
             f'gpu_nodes_total{{hostname="{hostname}"}} {len(gpus)}']
    for name, help_text, reading in GPU_GAUGES:
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge",
                  *(f"{name}{{{_labels(labels(gpu))}}} {_number(reading(gpu, model))}" for gpu in gpus)]
    return "\n".join(lines) + "\n"


def gpuagent_main(argv: list[str], host: SimHost | None = None) -> int:
    """gpuagent: answers on its socket while amdgpu is loaded; the exporter reads the GPUs through it."""
    host = host or SimHost()
    if not driver_loaded(host):
        print("gpuagent: no amdgpu device found: is the amdgpu driver loaded?", file=sys.stderr)
        return 1
    path = host.path(GPUAGENT_SOCKET)
    path.unlink(missing_ok=True)
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(path))
    listener.listen()
    print(f"gpuagent listening on {path}", flush=True)
    return _serve_until_stopped(lambda: (listener.close(), path.unlink(missing_ok=True)))


def _agent_answers(host: SimHost) -> bool:
    try:
        with socket.socket(socket.AF_UNIX) as client:
            client.connect(str(host.path(GPUAGENT_SOCKET)))
    except OSError:
        return False
    return True


def main(argv: list[str], host: SimHost | None = None) -> int:
    """amd-metrics-exporter [-amd-metrics-config FILE]: /metrics on the file's ServerPort, every address."""
    host = host or SimHost()
    config = argv[argv.index("-amd-metrics-config") + 1] if "-amd-metrics-config" in argv else DEFAULT_CONFIG
    try:
        port = int(json.loads(open(config).read()).get("ServerPort", DEFAULT_PORT))
    except (OSError, ValueError) as error:
        print(f"amd-metrics-exporter: {config}: {error}", file=sys.stderr)
        return 1
    if not _agent_answers(host):
        print(f"amd-metrics-exporter: gpuagent does not answer on /{GPUAGENT_SOCKET}", file=sys.stderr, flush=True)
        return 1
    hostname = socket.gethostname()

    print(f"amd-metrics-exporter serving on :{port} (pid {os.getpid()})", file=sys.stderr, flush=True)
    serve_metrics("0.0.0.0", port, lambda: page(host, hostname))  # every address: the file names a port alone
    return 0
