"""The fleet's alert rules: each fires on a real exporter's metric and names the runbook the doctor names for the
same fault, so an alert, `k3ops doctor` and the runbook's Remedy are one path.

Rules read the exporters' own names and labels (NVIDIA/dcgm-exporter etc/default-counters.csv and its
collectors; ROCm/device-metrics-exporter's pkg/amdgpu/gpuagent; node_exporter's collectors), joined on the `host`
label every target carries (targets.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..doctor import xids
from ..doctor.runbooks import runbooks
from ..escape import promql_string, re2_literal
from ..hardware import BOARD_PROFILES
from ..settings import settings_of
from ..vendor_units import PERSISTENCED

# dcgm-exporter's windowed counts (DCGM_EXP_*, off in its default counters: the fleet's counters file turns them
# on): an Xid's count in the last window, labelled with the Xid; a clock event's, with its name.
XID_COUNT = "DCGM_EXP_XID_ERRORS_COUNT"
CLOCK_EVENTS_COUNT = "DCGM_EXP_CLOCK_EVENTS_COUNT"
DRIVER_MISMATCH = "k3ops_gpu_driver_mismatch"
MAINTENANCE = "k3ops_maintenance"
MAINTENANCE_ALERT = "K3HostInMaintenance"
INFINIBAND_ACTIVE = 4  # node_infiniband_state_id: "4: active"
ALERT_NAME_REGEX = r"^K3[A-Z][A-Za-z0-9]+$"


Fleet = list[tuple[str, dict]]  # the monitored hosts' (name, data), in inventory order


@dataclass(frozen=True)
class Alert:
    """One alerting rule: its name, the runbook it names, the exporter metric it reads, and its expression for a
    fleet (None where the fleet has nothing it applies to)."""

    name: str
    runbook: str
    metric: str
    summary: str
    expression: Callable[[Fleet], str | None]
    for_: str = "0m"
    severity: str | None = None  # default: the runbook's

    def rule(self, hosts: Fleet, runbooks_url: str) -> dict | None:
        """The rule as Prometheus reads it, the runbook as a label (Alertmanager routes on it) and its URL."""
        expr = self.expression(hosts)
        if expr is None:
            return None
        book = runbooks()[self.runbook]
        return {"alert": self.name, "expr": expr, "for": self.for_,
                "labels": {"severity": self.severity or book.severity, "runbook": self.runbook},
                "annotations": {"summary": self.summary, "runbook_url": f"{runbooks_url.rstrip('/')}/{book.path.name}",
                                "doctor": "k3ops doctor INVENTORY --limit {{ $labels.host }}"}}


def always(expr: str) -> Callable[[Fleet], str]:
    """An expression the fleet's data does not change."""
    return lambda hosts: expr


def xid_alerts() -> list[Alert]:
    """One alert per runbook an Xid calls for, over the codes of NVIDIA's catalogue (k3ops.doctor.xids) that call
    for it: the doctor's reading of the same events."""
    codes: dict[str, list[int]] = {}
    for entry in xids.XID_CATALOGUE.values():
        if (book := xids.runbook(entry)) is not None:
            codes.setdefault(book, []).append(entry.code)
    return [Alert(f"K3Xid{''.join(word.title() for word in book.split('-'))}", book, XID_COUNT,
                  "Xid {{ $labels.xid }} on GPU {{ $labels.gpu }} of {{ $labels.host }}",
                  always(f'{XID_COUNT}{{xid=~"{"|".join(str(code) for code in sorted(found))}"}} > 0'))
            for book, found in sorted(codes.items())]


def profiles(hosts: Fleet, vendor: str) -> list[str]:
    """The hardware profiles of the fleet's hosts with `vendor`'s GPUs."""
    return sorted({settings_of(data).gpu.hardware_profile for _, data in hosts
                   if settings_of(data).gpu.gpu_vendor == vendor})


def missing_nvidia_gpus(hosts: Fleet) -> str | None:
    """Fewer GPUs than the board has, per NVIDIA hardware profile in the fleet: dcgm-exporter lists each GPU it
    sees."""
    return " or ".join(f"count by (host) (DCGM_FI_DEV_GPU_TEMP{{hardware_profile={promql_string(profile)}}}) "
                       f"< {BOARD_PROFILES[profile].gpu_count}" for profile in profiles(hosts, "nvidia")) or None


def missing_amd_gpus(hosts: Fleet) -> str | None:
    """The same on AMD hosts: the device metrics exporter counts the GPUs it sees (`gpu_nodes_total`)."""
    return " or ".join(f"max by (host) (gpu_nodes_total{{hardware_profile={promql_string(profile)}}}) "
                       f"< {BOARD_PROFILES[profile].gpu_count}" for profile in profiles(hosts, "amd")) or None


def model_cache_short(hosts: Fleet) -> str | None:
    """Less free space on the model cache than its headroom (`model_cache_headroom_gib`, as the doctor judges
    it), for each cache path and headroom the fleet uses, on the hosts that use them."""
    groups: dict[tuple[str, int], list[str]] = {}
    for name, data in hosts:
        model = settings_of(data).model
        if model.model is not None:
            groups.setdefault((model.model_cache_path, model.model_cache_headroom_bytes), []).append(name)
    return " or ".join(
        f"node_filesystem_avail_bytes{{mountpoint={promql_string(path)},"
        f"host=~{promql_string('|'.join(re2_literal(name) for name in names))}}} < {headroom}"
        for (path, headroom), names in sorted(groups.items())) or None


ALERTS = (
    Alert("K3GpuRowRemapFailure", "gpu-memory-errors", "DCGM_FI_DEV_ROW_REMAP_FAILURE",
          "GPU {{ $labels.gpu }} of {{ $labels.host }} failed to remap a row",
          always("DCGM_FI_DEV_ROW_REMAP_FAILURE > 0"), severity="critical"),
    Alert("K3GpuRowRemapPending", "gpu-memory-errors", "DCGM_FI_DEV_ROW_REMAP_PENDING",
          "GPU {{ $labels.gpu }} of {{ $labels.host }} has a row remap pending: drain, then reset the GPU",
          always("DCGM_FI_DEV_ROW_REMAP_PENDING > 0"), severity="warning"),
    Alert("K3GpuRowRemapped", "gpu-memory-errors", "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
          "GPU {{ $labels.gpu }} of {{ $labels.host }} remapped a row for an uncorrectable error: drain, then reset",
          always("increase(DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS[1h]) > 0"), severity="warning"),
    Alert("K3GpuPowerBrake", "gpu-power-brake", CLOCK_EVENTS_COUNT,
          "The system's power brake slowed GPU {{ $labels.gpu }} of {{ $labels.host }}",
          always(f'{CLOCK_EVENTS_COUNT}{{clock_event="hw_power_brake"}} > 0')),
    Alert("K3GpuMissing", "gpu-count-below-spec", "DCGM_FI_DEV_GPU_TEMP",
          "{{ $labels.host }} shows {{ $value }} GPUs, fewer than its board has", missing_nvidia_gpus, for_="5m"),
    Alert("K3AmdGpuMissing", "gpu-count-below-spec", "gpu_nodes_total",
          "{{ $labels.host }} shows {{ $value }} GPUs, fewer than its board has", missing_amd_gpus, for_="5m"),
    *xid_alerts(),
    Alert("K3InfinibandPortDown", "infiniband-port-degraded", "node_infiniband_state_id",
          "{{ $labels.device }} port {{ $labels.port }} of {{ $labels.host }} is not active",
          always(f"node_infiniband_state_id != {INFINIBAND_ACTIVE}"), for_="2m"),
    Alert("K3InfinibandLinkFlapping", "infiniband-port-degraded", "node_infiniband_link_downed_total",
          "{{ $labels.device }} port {{ $labels.port }} of {{ $labels.host }} went down and came back",
          always("increase(node_infiniband_link_downed_total[15m]) > 0"), severity="warning"),
    Alert("K3ModelCacheFull", "model-cache-disk-full", "node_filesystem_avail_bytes",
          "{{ $labels.host }}: {{ $value | humanize1024 }}B free on the model cache, under its headroom",
          model_cache_short, for_="5m"),
    Alert("K3EngineDown", "engine-not-running", "up", "The engine of {{ $labels.host }} does not answer Prometheus",
          always('up{job="engine"} == 0'), for_="2m"),
    # k3ops' own series (node_exporter's textfile collector) and the GPU units' states (its systemd collector)
    Alert("K3PersistencedDown", "persistenced-down", "node_systemd_unit_state",
          "nvidia-persistenced is not running on {{ $labels.host }}",
          always(f'node_systemd_unit_state{{name="{PERSISTENCED}.service",state="active"}} == 0'), for_="2m"),
    Alert("K3NvidiaDriverMismatch", "nvml-driver-mismatch", DRIVER_MISMATCH,
          "The NVIDIA kernel module of {{ $labels.host }} is not the installed driver's: reboot it",
          always(f'{DRIVER_MISMATCH}{{module="nvidia"}} == 1'), for_="10m"),
    Alert("K3AmdDriverMismatch", "rocm-driver-mismatch", DRIVER_MISMATCH,
          "The amdgpu module of {{ $labels.host }} is not the installed ROCm's: reboot it",
          always(f'{DRIVER_MISMATCH}{{module="amdgpu"}} == 1'), for_="10m"),
    Alert("K3CheckpointNotVerified", "checkpoint-corrupt", "k3ops_model_verified",
          "The active checkpoint of {{ $labels.model }} on {{ $labels.host }} failed its last verification",
          always("k3ops_model_verified == 0")),
    Alert("K3FabricCheckFailed", "nccl-check-failed", "k3ops_fabric_check_passed",
          "The last fabric check of {{ $labels.host }} did not pass", always("k3ops_fabric_check_passed == 0")),
    Alert("K3HostLeftInMaintenance", "host-left-in-maintenance", MAINTENANCE,
          "{{ $labels.host }} is out of service past its maintenance deadline, or a rollout failed on it",
          always(f'{MAINTENANCE}{{state="failed"}} == 1 or {MAINTENANCE}_deadline_timestamp_seconds < time()')),
    # No page: while it fires, Alertmanager holds back the host's other alerts (alertmanager.example.yml).
    Alert(MAINTENANCE_ALERT, "host-left-in-maintenance", MAINTENANCE,
          "{{ $labels.host }} is in maintenance ({{ $labels.by }}): its other alerts are held back",
          always(f"{MAINTENANCE} == 1"), severity="info"),
)


def rules_file(hosts: Fleet, runbooks_url: str) -> dict:
    """Prometheus' rules file for a fleet: one group of k3ops' alerts."""
    rules = [rule for alert in ALERTS if (rule := alert.rule(hosts, runbooks_url)) is not None]
    return {"groups": [{"name": "k3ops", "rules": rules}]}


def alert_table() -> str:
    """runbooks/README.md's table of alerts, made from ALERTS so the two cannot disagree."""
    rows = ["| alert | fires on | runbook | the doctor's check | severity |", "|---|---|---|---|---|"]
    for alert in ALERTS:
        book = runbooks()[alert.runbook]
        rows.append(f"| {alert.name} | `{alert.metric}` | [{book.id}]({book.path.name}) | {', '.join(book.checks)} "
                    f"| {alert.severity or book.severity} |")
    return "\n".join(rows)
