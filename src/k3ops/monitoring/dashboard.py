"""A Grafana dashboard of the fleet (`dashboards/k3ops.json` in the config directory): the GPUs, their errors, the
fabric, the engines and k3ops' own series (model revision, maintenance), per host, on the same metrics the alerts
read.

Engine panels sum each engine's own names: vLLM's (`vllm:`; serving.md 1.3), SGLang's (`sglang:`, with
--enable-metrics) and llama-server's (`llamacpp:`, with --metrics), so one panel shows a mixed fleet.
"""

from __future__ import annotations

from dataclasses import dataclass

GRID_WIDTH = 24
PANEL_HEIGHT = 8


@dataclass(frozen=True)
class Panel:
    title: str
    unit: str
    queries: tuple[tuple[str, str], ...]  # (legend, PromQL)


def selector(metric: str, labels: str = "") -> str:
    """`metric` on the hosts the dashboard's host variable selects (and `labels`, matchers without braces)."""
    return f'{metric}{{host=~"$host"{"," + labels if labels else ""}}}'


PANELS = (
    Panel("GPUs seen per host", "none", (
        ("{{host}}", f"count by (host) ({selector('DCGM_FI_DEV_GPU_TEMP')})"),)),
    Panel("Xid events (dcgm-exporter's window)", "none", (
        ("{{host}} Xid {{xid}}", f"sum by (host, xid) ({selector('DCGM_EXP_XID_ERRORS_COUNT')})"),)),
    Panel("Uncorrectable ECC errors since the last reset", "none", (
        ("{{host}} GPU {{gpu}}", f"sum by (host, gpu) ({selector('DCGM_FI_DEV_ECC_DBE_VOL_TOTAL')})"),)),
    Panel("Remapped rows", "none", (
        ("{{host}} GPU {{gpu}} uncorrectable", f"sum by (host, gpu) ({selector('DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS')})"),
        ("{{host}} GPU {{gpu}} correctable", f"sum by (host, gpu) ({selector('DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS')})"),
        ("{{host}} GPU {{gpu}} pending", f"max by (host, gpu) ({selector('DCGM_FI_DEV_ROW_REMAP_PENDING')})"),
        ("{{host}} GPU {{gpu}} remap failed", f"max by (host, gpu) ({selector('DCGM_FI_DEV_ROW_REMAP_FAILURE')})"))),
    Panel("NVLink errors per second", "ops", (
        ("{{host}} CRC flit", f"sum by (host) (rate({selector('DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL')}[5m]))"),
        ("{{host}} replay", f"sum by (host) (rate({selector('DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL')}[5m]))"),
        ("{{host}} recovery",
         f"sum by (host) (rate({selector('DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL')}[5m]))"))),
    Panel("RDMA port errors per second", "ops", (
        ("{{host}} {{device}}:{{port}} symbol",
         f"sum by (host, device, port) (rate({selector('node_infiniband_symbol_error_total')}[5m]))"),
        ("{{host}} {{device}}:{{port}} link downed",
         f"sum by (host, device, port) (rate({selector('node_infiniband_link_downed_total')}[5m]))"))),
    Panel("Engine requests running", "none", (
        ("{{host}}", f"sum by (host) ({selector('vllm:num_requests_running')}) or sum by (host) "
                     f"({selector('sglang:num_running_reqs')}) or sum by (host) ({selector('llamacpp:requests_processing')})"),)),
    Panel("Engine requests waiting", "none", (
        ("{{host}}", f"sum by (host) ({selector('vllm:num_requests_waiting')}) or sum by (host) "
                     f"({selector('sglang:num_queue_reqs')}) or sum by (host) ({selector('llamacpp:requests_deferred')})"),)),
    Panel("Time to first token, 95th percentile", "s", (
        ("{{host}}", "histogram_quantile(0.95, sum by (host, le) "
                     f"(rate({selector('vllm:time_to_first_token_seconds_bucket')}[5m]) or "
                     f"rate({selector('sglang:time_to_first_token_seconds_bucket')}[5m])))"),)),
    Panel("Model revision per host (k3ops' series)", "none", (
        ("{{host}} {{model}} active {{active}}, pinned {{pinned}}",
         f"max by (host, model, active, pinned) ({selector('k3ops_model_revision_info')})"),
        ("{{host}} {{model}} verified", f"max by (host, model) ({selector('k3ops_model_verified')})"))),
    Panel("Hosts in maintenance, GPU driver awaiting a reboot", "none", (
        ("{{host}} in maintenance ({{by}})", f"max by (host, by) ({selector('k3ops_maintenance')})"),
        ("{{host}} {{module}} loaded is not installed", f"max by (host, module) ({selector('k3ops_gpu_driver_mismatch')})"))),
    Panel("KV cache in use", "percentunit", (
        ("{{host}}", f"max by (host) ({selector('vllm:kv_cache_usage_perc')}) or max by (host) "
                     f"({selector('sglang:token_usage')})"),)),
)


def dashboard() -> dict:
    """The dashboard as Grafana imports it (schema of Grafana 10+), its data source chosen at import."""
    panels = []
    for index, panel in enumerate(PANELS):
        panels.append({
            "id": index + 1, "type": "timeseries", "title": panel.title,
            "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "gridPos": {"x": (index % 2) * GRID_WIDTH // 2, "y": (index // 2) * PANEL_HEIGHT, "w": GRID_WIDTH // 2,
                        "h": PANEL_HEIGHT},
            "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []},
            "targets": [{"refId": chr(ord("A") + number), "expr": expr, "legendFormat": legend}
                        for number, (legend, expr) in enumerate(panel.queries)],
        })
    return {
        "title": "k3ops fleet", "uid": "k3ops-fleet", "schemaVersion": 39, "version": 1, "editable": True,
        "time": {"from": "now-6h", "to": "now"}, "refresh": "30s", "tags": ["k3ops"],
        "templating": {"list": [
            {"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Prometheus"},
            {"name": "host", "type": "query", "label": "host", "multi": True, "includeAll": True, "allValue": ".*",
             "datasource": {"type": "prometheus", "uid": "${datasource}"},
             "query": {"query": "label_values(up, host)", "refId": "hosts"}, "refresh": 2},
        ]},
        "panels": panels,
    }
