"""The monitoring deploy's files: the exporters' drop-ins as systemd reads them, k3ops' textfile series as Prometheus
parses them (hostile values in every label), and the settings that place the exporters."""

from __future__ import annotations

import configparser
import json
import re
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

from k3ops.deploys import rendered
from k3ops.deploys.monitoring import (DCGM_EXPORTER_PROGRAM, HOSTENGINE, NODE_EXPORTER_PROGRAM,
                                      dcgm_exporter_command, node_exporter_command)
from k3ops.escape import systemd_command
from k3ops.facts.monitoring import exposition
from k3ops.monitoring.config import write
from k3ops.monitoring.targets import target_groups
from k3ops.onhost import layout, metrics
from k3ops.settings import host_errors, settings_of

HOSTILE = 'ki"mi\\k3\n} 1\n# TYPE x counter'  # ends a label value, a sample and adds a family, unescaped
REVISION = "0123456789abcdef0123456789abcdef01234567"


def drop_in(argv: list[str]) -> configparser.ConfigParser:
    unit = configparser.ConfigParser(strict=False, interpolation=None, delimiters=("="))
    unit.optionxform = str
    unit.read_string(rendered("systemd/exporter-dropin.conf.j2", why="test", exec_start=systemd_command(argv)))
    return unit


def unquoted(command: str) -> list[str]:
    """A systemd command line as systemd splits the words we write (double quotes with C escapes, %% and $$)."""
    return [word.replace("%%", "%").replace("$$", "$") for word in shlex.split(command)]


@pytest.mark.parametrize("address", ["0.0.0.0", "10.9.8.7", "fd00::7"])
def test_node_exporter_listens_where_the_data_says_and_reads_k3ops_series_and_the_gpu_units(address):
    settings = settings_of({"hardware_profile": "h200x8", "exporter_address": address, "node_exporter_port": 9111})
    argv = node_exporter_command(settings.monitoring.listen(9111))
    service = drop_in(argv)["Service"]
    # The drop-in empties the packaged ExecStart first: a second ExecStart= would run both (or be refused).
    assert service["ExecStart"] != "" and unquoted(service["ExecStart"]) == argv
    assert argv[0] == NODE_EXPORTER_PROGRAM
    listen = next(word.split("=", 1)[1] for word in argv if word.startswith("--web.listen-address="))
    assert listen == (f"[{address}]:9111" if ":" in address else f"{address}:9111")
    assert f"--collector.textfile.directory={layout.TEXTFILE_DIR}" in argv
    include = next(word.split("=", 1)[1] for word in argv if word.startswith("--collector.systemd.unit-include="))
    for unit in ("nvidia-fabricmanager.service", "nvidia-persistenced.service", layout.ENGINE_UNIT):
        assert re.fullmatch(include, unit), unit
    assert not re.fullmatch(include, "nvidia-persistencedXservice")  # the dots are literal
    assert service["Restart"] == "always"


def test_the_dcgm_exporter_reads_the_hosts_hostengine_and_k3ops_counters():
    argv = dcgm_exporter_command("10.9.8.7:9400")
    unit = drop_in(argv)
    assert unquoted(unit["Service"]["ExecStart"]) == argv
    assert argv[0] == DCGM_EXPORTER_PROGRAM
    assert argv[argv.index("-r") + 1] == HOSTENGINE and argv[argv.index("-a") + 1] == "10.9.8.7:9400"
    assert argv[argv.index("-f") + 1] == layout.DCGM_EXPORTER_COUNTERS
    # no Requires=: a runbook's stop and start of nvidia-dcgm (for a GPU reset) would leave it stopped
    assert not unit.has_section("Unit")
    assert unit["Service"]["Restart"] == "always"  # the packaged unit restarts only on an abort


@pytest.mark.parametrize("address", ["0.0.0.0 --web.config.file=/tmp/x", "10.0.0.7\nExecStartPre=/bin/reboot",
                                     "gpu-01", "::ffff:10.0.0.7", "fd00::07"])
def test_a_bad_exporter_address_is_refused_naming_the_host_and_field(address):
    errors = host_errors("gpu-01", {"hardware_profile": "h200x8", "exporter_address": address})
    assert errors and all(error.startswith("gpu-01: exporter_address: ") for error in errors), errors


def test_the_dcgm_exporter_release_is_the_one_paired_with_dcgm_or_the_data_names_it():
    assert settings_of({"hardware_profile": "h200x8"}).gpu.dcgm_exporter_package_version == "4.6.0-1"
    unpaired = {"hardware_profile": "h200x8", "dcgm_version": "1:4.2.3-1"}
    assert host_errors("gpu-01", unpaired) == [
        "gpu-01: dcgm_exporter_version: k3ops knows no DCGM exporter release paired with DCGM 4.2.3 (it knows "
        "4.4.1); set the exporter's package version that NVIDIA builds on that DCGM"]
    assert host_errors("gpu-01", {**unpaired, "dcgm_exporter_version": "4.2.0-1"}) == []
    assert host_errors("gpu-01", {**unpaired, "monitoring": False}) == []  # no exporter to pair
    assert host_errors("gpu-01", {"hardware_profile": "h200x8", "dcgm_exporter_version": "4.6.0-1\nPin: *"})


def test_prometheus_scrapes_the_exporters_at_the_address_they_listen_on():
    hosts = [("gpu-01", {"ssh_hostname": "10.0.0.1", "hardware_profile": "h200x8", "exporter_address": "10.9.0.1"}),
             ("gpu-02", {"ssh_hostname": "10.0.0.2", "hardware_profile": "h200x8"})]
    groups = target_groups(hosts)
    assert [group["targets"] for group in groups["node"]] == [["10.9.0.1:9100"], ["10.0.0.2:9100"]]
    assert [group["targets"] for group in groups["dcgm"]] == [["10.9.0.1:9400"], ["10.0.0.2:9400"]]


def written_host(tmp_path, name: str = HOSTILE, by: str = HOSTILE) -> dict:
    """A host's k3ops state under tmp_path: one model (its store says it is active and verified), a failed fabric
    check, a rollout's maintenance marker."""
    cache, configs = tmp_path / "models", tmp_path / "etc-models"
    configs.mkdir()
    (configs / "kimi.json").write_text(json.dumps({"name": name, "revision": REVISION, "cache_path": str(cache)}))
    store = cache / name
    store.mkdir(parents=True)
    (store / layout.STORE_STATE_FILE).write_text(json.dumps({"active": REVISION, "verification": "ok",
                                                              "verified_at": "2026-12-07T10:00:00+00:00"}))
    (tmp_path / "fabric.json").write_text(json.dumps({"verdict": "fail", "time": "2026-12-07T11:00:00+00:00"}))
    (tmp_path / "marker.json").write_text(json.dumps({"by": by, "state": "live", "reason": "driver upgrade",
                                                       "deadline": "2026-12-07T12:00:00+00:00"}))
    return {"config_dir": configs, "fabric_result": tmp_path / "fabric.json", "marker_file": tmp_path / "marker.json",
            "unit": "k3ops-no-such-engine.service"}


def parsed(page: str) -> dict[tuple[str, tuple], float]:
    """Samples as the host checks read them (each label decoded), once promtool found no syntax error."""
    checked = subprocess.run(["promtool", "check", "metrics"], input=page, capture_output=True, text=True)
    assert checked.returncode in (0, 3) and "parsing error" not in checked.stdout + checked.stderr, checked.stdout
    return {(name, tuple(sample["labels"].items())): sample["value"]
            for name, family in exposition(page.splitlines()).items() for sample in family["samples"]}


def test_k3ops_series_parse_and_carry_hostile_names_literally(tmp_path):
    page = metrics.page(**written_host(tmp_path))
    samples = parsed(page)
    types = [line for line in page.splitlines() if line.startswith("# TYPE ")]
    assert "# TYPE x counter" not in types and len(types) == len({name for name, _ in samples})
    assert samples[("k3ops_model_revision_info", (("model", HOSTILE), ("pinned", REVISION), ("active", REVISION)))] == 1
    assert samples[("k3ops_model_verified", (("model", HOSTILE),))] == 1
    assert samples[("k3ops_fabric_check_passed", (("verdict", "fail"),))] == 0
    assert samples[("k3ops_maintenance", (("state", "live"), ("by", HOSTILE)))] == 1
    assert samples[("k3ops_maintenance_deadline_timestamp_seconds", ())] == 1796644800.0
    assert not any(name.startswith("k3ops_engine_") for name, _ in samples)  # no such unit on this machine


def test_a_host_without_k3ops_state_says_so_and_nothing_else(tmp_path):
    samples = parsed(metrics.page(config_dir=tmp_path / "none", fabric_result=tmp_path / "none.json",
                                  marker_file=tmp_path / "none.json", unit="k3ops-no-such-engine.service"))
    names = {name for name, _ in samples}
    assert samples[("k3ops_maintenance", (("state", ""), ("by", "")))] == 0
    assert not names & {"k3ops_model_revision_info", "k3ops_fabric_check_passed"}


def test_an_unverified_or_unpinned_model_reads_zero_and_the_file_is_replaced_whole(tmp_path):
    where = written_host(tmp_path, name="kimi-k3", by="k3ops upgrade")
    state = tmp_path / "models/kimi-k3" / layout.STORE_STATE_FILE
    state.write_text(json.dumps({"active": "f" * 40, "verification": "2 bad files"}))
    samples = parsed(metrics.page(**where))
    assert samples[("k3ops_model_revision_pinned", (("model", "kimi-k3"),))] == 0
    assert samples[("k3ops_model_verified", (("model", "kimi-k3"),))] == 0
    out = tmp_path / "textfile" / "k3ops.prom"
    assert metrics.main(["--out", str(out)]) == 0
    assert out.stat().st_mode & 0o777 == 0o644 and [path.name for path in out.parent.iterdir()] == ["k3ops.prom"]
    assert ("k3ops_metrics_timestamp_seconds", ()) in parsed(out.read_text())


def test_llama_servers_are_scraped_with_their_api_key_and_labelled_as_the_other_engines(tmp_path):
    """llama-server answers /metrics only with its API key: each key file is a scrape job presenting it, whose
    series Prometheus relabels job="engine"; vLLM's /metrics is open, so its engines stay in the plain job.
    promtool reads the key file as Prometheus would (a missing one fails the check)."""
    keys = []
    for name in ("a", "b"):
        key = tmp_path / f"{name}.key"
        key.write_text(f"k3-key-{name}-0123456789abcdef\n")
        key.chmod(0o600)
        keys.append(str(key))
    model = {"repo_id": "moonshotai/Kimi-K3", "revision": REVISION, "name": "kimi-k3"}
    llama = {"recipe": "llama.cpp-gguf", "binary_url": "https://example.com/llama-server",
             "binary_sha256": "1" * 64, "model_file": "k3.gguf", "host": "0.0.0.0"}
    vllm = {"recipe": "vllm-b300x8", "image_digest": "sha256:" + "a" * 64, "host": "0.0.0.0", "api_key_file": keys[0]}
    hosts = [(f"gpu-0{index}", {"ssh_hostname": f"10.0.0.{index}", "hardware_profile": profile, "model": model,
                                "engine": engine})
             for index, (profile, engine) in enumerate([("h200x8", {**llama, "api_key_file": keys[1]}),
                                                        ("h200x8", {**llama, "api_key_file": keys[0]}),
                                                        ("b300x8", vllm)], start=1)]
    out = tmp_path / "monitoring"
    write(out, hosts, "https://wiki.example.com/runbooks", "localhost:9093", "fleet.py")
    config = yaml.safe_load((out / "prometheus.yml").read_text())
    keyed = {job["job_name"]: job for job in config["scrape_configs"] if "authorization" in job}
    assert {name: (job["authorization"]["credentials_file"], job["relabel_configs"]) for name, job in keyed.items()} == {
        "engine-key-1": (keys[0], [{"target_label": "job", "replacement": "engine"}]),
        "engine-key-2": (keys[1], [{"target_label": "job", "replacement": "engine"}])}
    scraped = {job: [group["labels"]["host"] for group in json.loads((out / f"targets/{job}.json").read_text())]
               for job in ("engine", "engine-key-1", "engine-key-2")}
    assert scraped == {"engine": ["gpu-03"], "engine-key-1": ["gpu-02"], "engine-key-2": ["gpu-01"]}
    checked = subprocess.run(["promtool", "check", "config", str(out / "prometheus.yml")], capture_output=True,
                             text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    Path(keys[1]).unlink()
    missing = subprocess.run(["promtool", "check", "config", str(out / "prometheus.yml")], capture_output=True,
                             text=True)
    assert missing.returncode != 0
