"""`k3ops monitoring config`: its files pass Prometheus' and Alertmanager's own checks, every alert names a runbook
and the runbook's metric, and the rules fire (and stay quiet) on series labelled as the real exporters label them,
evaluated by `promtool test rules` (Debian's prometheus package)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import yaml

from k3ops.doctor.runbooks import runbooks
from k3ops.monitoring.alerts import ALERT_NAME_REGEX, ALERTS, alert_table, rules_file
from k3ops.monitoring.dashboard import dashboard

from ..conftest import REPO_ROOT

MODEL = {"repo_id": "moonshotai/Kimi-K3", "revision": "0123456789abcdef0123456789abcdef01234567", "name": "kimi-k3"}
DIGEST = "sha256:" + "a" * 64
# A valid host name whose dot, unescaped in a regular expression, would match any character; and a name the
# inventory refuses (not a host name) but rules_file is given directly, which would end a selector unescaped.
DOTTED = "b300.rack1"
HOSTILE = 'x"} or vector(1) or {a=".*|.'
RUNBOOKS_URL = "https://wiki.example.com/k3ops/runbooks"


def fleet(key: Path, odd: tuple[str, ...] = (DOTTED,)) -> list[tuple[str, dict]]:
    engine = {"recipe": "vllm-h200x8-2node", "image_digest": DIGEST, "cluster": "h200-a", "host": "0.0.0.0",
              "api_key_file": str(key)}
    return [("h200-01", {"ssh_hostname": "10.0.0.1", "hardware_profile": "h200x8", "model": MODEL, "engine": engine}),
            ("h200-02", {"ssh_hostname": "10.0.0.2", "hardware_profile": "h200x8", "model": MODEL, "engine": engine}),
            ("mi355x-01", {"ssh_hostname": "fd00::3", "hardware_profile": "mi355x8", "model": MODEL,
                           "model_cache_headroom_gib": 100}),
            *((name, {"ssh_hostname": f"10.0.1.{i}", "hardware_profile": "b300x8", "model": MODEL,
                      "model_cache_path": "/data/models"}) for i, name in enumerate(odd)),
            ("cpu-01", {"ssh_hostname": "10.0.0.4", "hardware_profile": "cpu", "monitoring": False})]


def api_key(tmp_path: Path) -> Path:
    key = tmp_path / "api-key"
    key.write_text("k3-key-0123456789abcdef\n")
    key.chmod(0o600)
    return key


def run(*command: str) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, text=True)


def test_every_alert_names_a_runbook_and_reads_the_metric_its_header_names():
    books = runbooks()
    for alert in ALERTS:
        assert re.match(ALERT_NAME_REGEX, alert.name), alert.name
        assert alert.runbook in books, alert.name
        assert alert.metric in books[alert.runbook].metrics, (alert.name, books[alert.runbook].metrics)


def test_every_runbook_with_a_metric_has_an_alert_whose_rule_reads_it(tmp_path):
    rules = rules_file(fleet(api_key(tmp_path)), RUNBOOKS_URL)["groups"][0]["rules"]
    with_metrics = [book for book in runbooks().values() if book.metrics]
    assert len(with_metrics) >= 10
    for book in with_metrics:
        for metric in book.metrics:
            assert any(rule["labels"]["runbook"] == book.id and re.search(rf"\b{metric}\b", rule["expr"])
                       for rule in rules), (book.id, metric)
    assert {rule["annotations"]["runbook_url"] for rule in rules} == {
        f"{RUNBOOKS_URL}/{rule['labels']['runbook']}.md" for rule in rules}


def test_runbooks_readme_shows_the_alerts_as_they_are():
    assert alert_table() in (REPO_ROOT / "runbooks" / "README.md").read_text()


def test_the_command_writes_files_prometheus_and_alertmanager_accept(tmp_path):
    """The command end to end on a written inventory; the files pass promtool's and amtool's checks, and each
    exporter's targets are the hosts that run it."""
    key = api_key(tmp_path)
    inventory = tmp_path / "fleet.py"
    inventory.write_text(f"hosts = {fleet(key)!r}\n")
    out = tmp_path / "monitoring"
    result = subprocess.run([sys.executable, "-m", "k3ops.cli", "monitoring", "config", str(inventory), "--out",
                             str(out), "--runbooks-url", RUNBOOKS_URL], capture_output=True, text=True, cwd=REPO_ROOT)
    assert result.returncode == 0, result.stderr
    checked = run("promtool", "check", "config", str(out / "prometheus.yml"))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS" in run("promtool", "check", "rules", str(out / "rules/k3ops.rules.yml")).stdout
    manager = run("amtool", "check-config", str(out / "alertmanager.example.yml"))
    assert manager.returncode == 0, manager.stdout + manager.stderr
    assert json.loads((out / "dashboards/k3ops.json").read_text()) == dashboard()
    targets = {job: json.loads((out / f"targets/{job}.json").read_text()) for job in ("node", "dcgm", "amd", "engine")}
    hosts = {job: [group["labels"]["host"] for group in groups] for job, groups in targets.items()}
    assert hosts == {"node": ["h200-01", "h200-02", "mi355x-01", DOTTED], "dcgm": ["h200-01", "h200-02", DOTTED],
                     "amd": ["mi355x-01"], "engine": ["h200-01"]}  # only a cluster's head serves HTTP
    assert targets["amd"][0]["targets"] == ["[fd00::3]:5000"]
    assert targets["engine"][0]["labels"] | {"cluster": "h200-a", "role": "head", "model": "kimi-k3"} == \
        targets["engine"][0]["labels"]


# Series as the exporters label them. dcgm-exporter: NVIDIA/dcgm-exporter@d5e5f51
# internal/pkg/rendermetrics/render_metrics.go (gpu, UUID, pci_bus_id, device, modelName, hostname) and its
# collectors' own labels (xid_collector.go: xid, window_size_in_ms; clock_events_collector.go: clock_event);
# AMD's device metrics exporter: ROCm/device-metrics-exporter@afd0fe8 pkg/amdgpu/gpuagent (gpu_nodes_total,
# labelled hostname only); node_exporter: collector/infiniband_linux.go (device, port), filesystem (device, fstype,
# mountpoint). Each
# target adds the labels of targets/<job>.json (host, hardware_profile, ...) and Prometheus job and instance.
def target(job: str, host: str, port: int, profile: str = "h200x8") -> str:
    return (f'job="{job}",instance={json.dumps(f"{host}.example:{port}")},host={json.dumps(host)},'
            f'hardware_profile="{profile}"')


def gpu(index: int, host: str = "h200-01") -> str:
    return (f'gpu="{index}",UUID="GPU-6a1e9c1f-0b6e-4b1d-9d0c-00000000000{index}",pci_bus_id="00000000:{index + 0x18:02X}:00.0",'
            f'device="nvidia{index}",modelName="NVIDIA H200",hostname="{host}",{target("dcgm", host, 9400)}')


def labels_of(labels: str) -> dict[str, str]:
    """A selector's labels, its values unquoted as PromQL reads them."""
    return {key: json.loads(value) for key, value in re.findall(r'(\w+)=("(?:[^"\\]|\\.)*")', labels)}


def series(metric: str, labels: str, values: str) -> dict:
    return {"series": f"{metric}{{{labels}}}", "values": values}


def alert(name: str, at: str, *firing: dict) -> dict:
    return {"eval_time": at, "alertname": name, "exp_alerts": list(firing)}


def firing(rules: dict, name: str, labels: dict, summary: str) -> dict:
    """What promtool should see of alert `name`: the series' labels and its rule's, and the annotations rendered
    for that host (its summary as given)."""
    rule = next(rule for rule in rules["groups"][0]["rules"] if rule["alert"] == name)
    return {"exp_labels": {**labels, **rule["labels"]},
            "exp_annotations": {"summary": summary, "runbook_url": f"{RUNBOOKS_URL}/{rule['labels']['runbook']}.md",
                                "doctor": f"k3ops doctor INVENTORY --limit {labels['host']}"}}


def test_the_rules_fire_on_the_exporters_series_and_stay_quiet_on_a_healthy_host(tmp_path):
    """Each rule on a faulty host's series, against the same series of a healthy host, with promtool."""
    hosts = fleet(api_key(tmp_path), (DOTTED, HOSTILE))
    rules = rules_file(hosts, RUNBOOKS_URL)
    (tmp_path / "k3ops.rules.yml").write_text(yaml.safe_dump(rules))
    gpus_01 = [series("DCGM_FI_DEV_GPU_TEMP", gpu(index), "40x10" if index else "40 40 stale")
               for index in range(8)]  # GPU 0 of h200-01 is gone after 2 minutes
    gpus_02 = [series("DCGM_FI_DEV_GPU_TEMP", gpu(index, "h200-02"), "40x10") for index in range(8)]
    node = target("node", "h200-01", 9100)
    healthy_node = target("node", "h200-02", 9100)
    inputs = [
        *gpus_01, *gpus_02,
        series("DCGM_FI_DEV_ROW_REMAP_FAILURE", gpu(3), "0 0 1x8"),
        series("DCGM_FI_DEV_ROW_REMAP_FAILURE", gpu(3, "h200-02"), "0x10"),
        series("DCGM_FI_DEV_ROW_REMAP_PENDING", gpu(4), "0 0 1x8"),
        series("DCGM_FI_DEV_ROW_REMAP_PENDING", gpu(4, "h200-02"), "0x10"),
        series("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", gpu(5), "0 0 1x8"),
        series("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", gpu(5, "h200-02"), "2x10"),  # old remaps: no new one
        series("DCGM_EXP_XID_ERRORS_COUNT", f'{gpu(6)},xid="79",window_size_in_ms="300000"', "0 1x9"),
        series("DCGM_EXP_XID_ERRORS_COUNT", f'{gpu(2, "h200-02")},xid="13",window_size_in_ms="300000"', "1x10"),
        series("DCGM_EXP_CLOCK_EVENTS_COUNT", f'{gpu(1)},clock_event="hw_power_brake",window_size_in_ms="300000"',
               "0 2x9"),
        series("DCGM_EXP_CLOCK_EVENTS_COUNT", f'{gpu(1, "h200-02")},clock_event="gpu_idle",window_size_in_ms="300000"',
               "5x10"),
        series("node_infiniband_state_id", f'{node},device="mlx5_3",port="1"', "4 4 1x8"),
        series("node_infiniband_state_id", f'{healthy_node},device="mlx5_3",port="1"', "4x10"),
        series("node_infiniband_link_downed_total", f'{healthy_node},device="mlx5_0",port="1"', "7x10"),
        series("node_filesystem_avail_bytes", f'{node},device="/dev/md127",fstype="xfs",mountpoint="/srv/k3ops/models"',
               f"{20 * 1024**3}x2 {10 * 1024**3}x8"),
        series("node_filesystem_avail_bytes",
               f'{healthy_node},device="/dev/md127",fstype="xfs",mountpoint="/srv/k3ops/models"', f"{20 * 1024**3}x10"),
        # the odd hosts' headroom rule names them alone: full disks at their path on other hosts stay quiet, among
        # them one that an unescaped dot would take for b300.rack1; the hostile name's own disk fires
        *(series("node_filesystem_avail_bytes", f'{target("node", name, 9100)},device="/dev/sdb1",fstype="xfs",'
                 f'mountpoint="/data/models"', "0x10") for name in ("h200-02", "b300xrack1", "x")),
        series("node_filesystem_avail_bytes", f'{target("node", HOSTILE, 9100)},device="/dev/sdb1",fstype="xfs",'
               f'mountpoint="/data/models"', "0x10"),
        series("up", 'job="engine",instance="10.0.0.1:8000",host="h200-01"', "1 1 0x8"),
        series("up", 'job="engine",instance="10.0.0.2:8000",host="h200-02"', "1x10"),
        series("gpu_nodes_total", f'hostname="mi355x-01",{target("amd", "mi355x-01", 5000, "mi355x8")}', "8 8 7x8"),
        series("gpu_nodes_total", f'hostname="mi355x-02",{target("amd", "mi355x-02", 5000, "mi355x8")}', "8x10"),
        # node_exporter's systemd collector and k3ops' textfile series
        series("node_systemd_unit_state", f'{node},name="nvidia-persistenced.service",state="active",type="simple"',
               "1 1 0x8"),
        series("node_systemd_unit_state", f'{healthy_node},name="nvidia-persistenced.service",state="active",'
               'type="simple"', "1x10"),
        series("k3ops_gpu_driver_mismatch", f'{node},module="nvidia"', "0 1x15"),
        series("k3ops_gpu_driver_mismatch", f'{healthy_node},module="nvidia"', "0x15"),
        series("k3ops_gpu_driver_mismatch", f'{target("node", "mi355x-01", 9100, "mi355x8")},module="amdgpu"',
               "1x15"),
        series("k3ops_model_verified", f'{node},model="kimi-k3"', "1 1 0x8"),
        series("k3ops_model_verified", f'{healthy_node},model="kimi-k3"', "1x10"),
        series("k3ops_fabric_check_passed", f'{node},verdict="fail"', "0x10"),
        series("k3ops_fabric_check_passed", f'{healthy_node},verdict="pass"', "1x10"),
        # h200-02 is drained by a live rollout (deadline 1h ahead); mi355x-01 was left past its deadline (60 s
        # after the epoch the test starts at)
        series("k3ops_maintenance", f'{healthy_node},state="live",by="k3ops upgrade"', "1x10"),
        series("k3ops_maintenance_deadline_timestamp_seconds", healthy_node, "3600x10"),
        series("k3ops_maintenance", f'{target("node", "mi355x-01", 9100, "mi355x8")},state="live",by="ops"',
               "1x10"),
        series("k3ops_maintenance_deadline_timestamp_seconds", target("node", "mi355x-01", 9100, "mi355x8"),
               "60x10"),
    ]
    dcgm = lambda index: labels_of(gpu(index))  # noqa: E731
    node_labels = labels_of(node)
    amd_node = labels_of(target("node", "mi355x-01", 9100, "mi355x8"))
    window = {"window_size_in_ms": "300000"}
    tests = [
        alert("K3GpuRowRemapFailure", "3m", firing(rules, "K3GpuRowRemapFailure", dcgm(3),
                                                   "GPU 3 of h200-01 failed to remap a row")),
        alert("K3GpuRowRemapPending", "3m", firing(
            rules, "K3GpuRowRemapPending", dcgm(4),
            "GPU 4 of h200-01 has a row remap pending: drain, then reset the GPU")),
        alert("K3GpuRowRemapped", "3m", firing(
            rules, "K3GpuRowRemapped", dcgm(5),
            "GPU 5 of h200-01 remapped a row for an uncorrectable error: drain, then reset")),
        alert("K3XidGpuFallenOffBus", "2m", firing(rules, "K3XidGpuFallenOffBus", {**dcgm(6), "xid": "79", **window},
                                                   "Xid 79 on GPU 6 of h200-01")),
        alert("K3XidGpuXidError", "5m"),  # an application's Xid 13: no alert
        alert("K3GpuPowerBrake", "2m", firing(rules, "K3GpuPowerBrake", {**dcgm(1), "clock_event": "hw_power_brake",
                                                                          **window},
                                              "The system's power brake slowed GPU 1 of h200-01")),
        alert("K3GpuMissing", "9m", firing(rules, "K3GpuMissing", {"host": "h200-01"},
                                           "h200-01 shows 7 GPUs, fewer than its board has")),
        alert("K3AmdGpuMissing", "9m", firing(rules, "K3AmdGpuMissing", {"host": "mi355x-01"},
                                              "mi355x-01 shows 7 GPUs, fewer than its board has")),
        alert("K3InfinibandPortDown", "5m", firing(rules, "K3InfinibandPortDown",
                                                   {**node_labels, "device": "mlx5_3", "port": "1"},
                                                   "mlx5_3 port 1 of h200-01 is not active")),
        alert("K3InfinibandLinkFlapping", "9m"),  # a constant count: old flaps, none now
        alert("K3ModelCacheFull", "9m",
              firing(rules, "K3ModelCacheFull", {**node_labels, "device": "/dev/md127", "fstype": "xfs",
                                                 "mountpoint": "/srv/k3ops/models"},
                     "h200-01: 10GiB free on the model cache, under its headroom"),
              firing(rules, "K3ModelCacheFull", {**labels_of(target("node", HOSTILE, 9100)), "device": "/dev/sdb1",
                                                 "fstype": "xfs", "mountpoint": "/data/models"},
                     f"{HOSTILE}: 0B free on the model cache, under its headroom")),
        alert("K3EngineDown", "5m", firing(rules, "K3EngineDown",
                                           {"job": "engine", "instance": "10.0.0.1:8000", "host": "h200-01"},
                                           "The engine of h200-01 does not answer Prometheus")),
        alert("K3PersistencedDown", "5m", firing(
            rules, "K3PersistencedDown", {**node_labels, "name": "nvidia-persistenced.service", "state": "active",
                                          "type": "simple"},
            "nvidia-persistenced is not running on h200-01")),
        alert("K3NvidiaDriverMismatch", "12m", firing(
            rules, "K3NvidiaDriverMismatch", {**node_labels, "module": "nvidia"},
            "The NVIDIA kernel module of h200-01 is not the installed driver's: reboot it")),
        alert("K3NvidiaDriverMismatch", "8m"),  # not yet 10 minutes: a reboot may be under way
        alert("K3AmdDriverMismatch", "12m", firing(
            rules, "K3AmdDriverMismatch", {**amd_node, "module": "amdgpu"},
            "The amdgpu module of mi355x-01 is not the installed ROCm's: reboot it")),
        alert("K3CheckpointNotVerified", "3m", firing(
            rules, "K3CheckpointNotVerified", {**node_labels, "model": "kimi-k3"},
            "The active checkpoint of kimi-k3 on h200-01 failed its last verification")),
        alert("K3FabricCheckFailed", "3m", firing(rules, "K3FabricCheckFailed", {**node_labels, "verdict": "fail"},
                                                  "The last fabric check of h200-01 did not pass")),
        alert("K3HostLeftInMaintenance", "3m", firing(
            rules, "K3HostLeftInMaintenance", amd_node,
            "mi355x-01 is out of service past its maintenance deadline, or a rollout failed on it")),
        alert("K3HostInMaintenance", "3m",
              firing(rules, "K3HostInMaintenance", {**labels_of(healthy_node), "state": "live", "by": "k3ops upgrade"},
                     "h200-02 is in maintenance (k3ops upgrade): its other alerts are held back"),
              firing(rules, "K3HostInMaintenance", {**amd_node, "state": "live", "by": "ops"},
                     "mi355x-01 is in maintenance (ops): its other alerts are held back")),
    ]
    (tmp_path / "test.yml").write_text(yaml.safe_dump({
        "rule_files": ["k3ops.rules.yml"], "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": inputs, "alert_rule_test": tests}]}))
    result = run("promtool", "test", "rules", str(tmp_path / "test.yml"))
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_dashboard_shows_what_an_sre_looks_at_and_every_query_parses(tmp_path):
    """The issue's panels, each query parsed by Prometheus' own parser (as recording rules, promtool check rules)."""
    board = dashboard()
    titles = " | ".join(panel["title"] for panel in board["panels"])
    for topic in ("GPUs seen", "Xid", "ECC", "Remapped rows", "NVLink", "RDMA", "running", "waiting",
                  "first token", "KV cache", "Model revision", "maintenance"):
        assert topic in titles, topic
    queries = [target["expr"] for panel in board["panels"] for target in panel["targets"]]
    assert all('host=~"$host"' in query for query in queries)
    rules = {"groups": [{"name": "dashboard", "rules": [{"record": f"k3ops:panel_{index}", "expr": query}
                                                        for index, query in enumerate(queries)]}]}
    (tmp_path / "panels.yml").write_text(yaml.safe_dump(rules))
    checked = run("promtool", "check", "rules", str(tmp_path / "panels.yml"))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert len({panel["id"] for panel in board["panels"]}) == len(board["panels"])


def test_bad_flags_are_refused_before_anything_is_written(tmp_path):
    """A runbooks URL lands in every alert's annotations, which Prometheus expands as templates; an Alertmanager
    address in its configuration: each is checked, with argparse's usage status, and nothing is written."""
    inventory = tmp_path / "fleet.py"
    inventory.write_text(f"hosts = {fleet(api_key(tmp_path))!r}\n")
    for flag, value in (("--runbooks-url", "https://wiki.example.com/{{ $labels.host }}"),
                        ("--runbooks-url", "javascript:alert(1)"), ("--runbooks-url", "https://a b"),
                        ("--alertmanager", "alertmanager:99999"), ("--alertmanager", "a b:9093")):
        result = subprocess.run([sys.executable, "-m", "k3ops.cli", "monitoring", "config", str(inventory), "--out",
                                 str(tmp_path / "out"), flag, value], capture_output=True, text=True, cwd=REPO_ROOT)
        assert result.returncode == 2 and f"argument {flag}: {value!r}" in result.stderr, (flag, value, result.stderr)
    assert not (tmp_path / "out").exists()
