"""Simulated nvidia-ctk: its logs, and the config files and CDI specs it writes, as the real releases do."""

import json
import re
import sys
import tomllib

import pytest

from k3ops_lab.sim import nvidia_ctk
from k3ops_lab.sim.go_formats import go_toml

from ..fake_host import freeze_clock, nvidia_host, run

DAEMON_JSON = "etc/docker/daemon.json"
CONTAINERD_TOML = "etc/containerd/config.toml"
DROP_IN = "etc/containerd/config.d/99-nvidia.toml"
LOG_LINE = re.compile(r'^time="2026-07-03T22:11:09Z" level=(?P<level>info|warning|error) msg="(?P<message>.*)"$')
EXISTING_CONTAINERD = """version = 2
root = "/var/lib/containerd"

[grpc]
  address = "/run/containerd/containerd.sock"

[plugins."io.containerd.grpc.v1.cri".containerd]
  default_runtime_name = "runc"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  SystemdCgroup = true
"""
# What nvidia-ctk (go-toml v1) writes back: sorted keys, every table spelled out, two spaces per level.
RUNTIME_TABLES = """
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
          runtime_type = "io.containerd.runc.v2"

          [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
            BinaryName = "/usr/bin/nvidia-container-runtime"
            SystemdCgroup = true

        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
          runtime_type = "io.containerd.runc.v2"

          [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
            SystemdCgroup = true
"""
CRI_TABLES = """
[plugins]

  [plugins."io.containerd.grpc.v1.cri"]

    [plugins."io.containerd.grpc.v1.cri".containerd]
      default_runtime_name = "runc"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes]
"""


@pytest.fixture(autouse=True)
def _frozen(monkeypatch):
    freeze_clock(monkeypatch)


def logged(err):
    return [(LOG_LINE.match(line)["level"], LOG_LINE.match(line)["message"]) for line in err.splitlines()]


def test_version_names_the_release_and_its_commit(tmp_path, capsys):
    host, _ = nvidia_host(tmp_path, toolkit="1.17.8")
    status, out, _ = run(nvidia_ctk, capsys, host, "--version")
    assert status == 0
    assert out == "NVIDIA Container Toolkit CLI version 1.17.8\ncommit: f202b80a9b9d0db00d9b1d73c0128c8962c55f4d\n"


def test_docker_configure_merges_into_daemon_json(tmp_path, capsys):
    host, _ = nvidia_host(tmp_path, toolkit="1.18.0")
    daemon = tmp_path / DAEMON_JSON
    daemon.parent.mkdir(parents=True)
    daemon.write_text('{"log-driver": "json-file", "exec-opts": ["native.cgroupdriver=systemd"], "runtimes": '
                      '{"runc": {"path": "runc"}}, "data-root": "/srv/docker"}\n')
    status, _, err = run(nvidia_ctk, capsys, host, "runtime", "configure", "--runtime=docker", "--set-as-default")
    assert status == 0
    assert logged(err) == [("info", "Loading config from /etc/docker/daemon.json"),
                           ("info", "Wrote updated config to /etc/docker/daemon.json"),
                           ("info", "It is recommended that docker daemon be restarted.")]
    written = daemon.read_text()
    assert written == json.dumps(json.loads(written), indent=4, sort_keys=True)
    assert json.loads(written) == {
        "data-root": "/srv/docker", "default-runtime": "nvidia", "exec-opts": ["native.cgroupdriver=systemd"],
        "log-driver": "json-file",
        "runtimes": {"nvidia": {"args": [], "path": "nvidia-container-runtime"}, "runc": {"path": "runc"}},
    }
    run(nvidia_ctk, capsys, host, "runtime", "configure", "--runtime=docker", "--set-as-default")
    assert daemon.read_text() == written


def test_docker_configure_logs_like_logrus_on_a_terminal(tmp_path, capsys, monkeypatch):
    host, _ = nvidia_host(tmp_path, toolkit="1.17.8")
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    _, _, err = run(nvidia_ctk, capsys, host, "runtime", "configure", "--runtime", "docker",
                    "--config=/etc/docker/daemon.json")
    assert err.splitlines() == [
        "\x1b[36mINFO\x1b[0m[0000] Config file does not exist; using empty config ",
        "\x1b[36mINFO\x1b[0m[0000] Wrote updated config to /etc/docker/daemon.json ",
        "\x1b[36mINFO\x1b[0m[0000] It is recommended that docker daemon be restarted. ",
    ]
    assert (tmp_path / DAEMON_JSON).read_text() == (
        '{\n    "runtimes": {\n        "nvidia": {\n            "args": [],\n'
        '            "path": "nvidia-container-runtime"\n        }\n    }\n}')


def test_containerd_117_rewrites_config_toml_in_place(tmp_path, capsys):
    host, _ = nvidia_host(tmp_path, toolkit="1.17.8")
    config = tmp_path / CONTAINERD_TOML
    config.parent.mkdir(parents=True)
    config.write_text(EXISTING_CONTAINERD)
    status, _, err = run(nvidia_ctk, capsys, host, "runtime", "configure", "--runtime=containerd")
    assert status == 0
    assert logged(err) == [("info", "Using config version 2"),
                           ("info", 'Using CRI runtime plugin name \\"io.containerd.grpc.v1.cri\\"'),
                           ("info", "Wrote updated config to /etc/containerd/config.toml"),
                           ("info", "It is recommended that containerd daemon be restarted.")]
    written = config.read_text()
    assert written == ('root = "/var/lib/containerd"\nversion = 2\n\n[grpc]\n'
                       '  address = "/run/containerd/containerd.sock"\n' + CRI_TABLES + RUNTIME_TABLES)
    run(nvidia_ctk, capsys, host, "runtime", "configure", "--runtime=containerd")
    assert config.read_text() == written


def test_containerd_118_writes_a_drop_in_and_imports_it(tmp_path, capsys):
    host, _ = nvidia_host(tmp_path, toolkit="1.18.0")
    config = tmp_path / CONTAINERD_TOML
    config.parent.mkdir(parents=True)
    config.write_text(EXISTING_CONTAINERD)
    _, _, err = run(nvidia_ctk, capsys, host, "runtime", "configure", "--runtime=containerd", "--set-as-default")
    assert logged(err)[-2] == ("info", "Wrote updated config to /etc/containerd/config.d/99-nvidia.toml")
    drop_in = (tmp_path / DROP_IN).read_text()
    assert drop_in == ("version = 2\n" + CRI_TABLES + RUNTIME_TABLES).replace(
        'default_runtime_name = "runc"', 'default_runtime_name = "nvidia"')
    top_level = tomllib.loads(config.read_text())
    assert top_level["imports"] == ["/etc/containerd/config.d/*.toml"]
    assert top_level["grpc"] == {"address": "/run/containerd/containerd.sock"}
    assert "nvidia" not in top_level["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]
    before = config.read_text(), drop_in
    run(nvidia_ctk, capsys, host, "runtime", "configure", "--runtime=containerd", "--set-as-default")
    assert (config.read_text(), (tmp_path / DROP_IN).read_text()) == before


def test_containerd_without_a_low_level_runtime_warns_and_uses_defaults(tmp_path, capsys):
    host, _ = nvidia_host(tmp_path, toolkit="1.17.8")
    _, _, err = run(nvidia_ctk, capsys, host, "runtime", "configure", "--runtime=containerd")
    assert ("warning", "could not infer options from runtimes [runc crun]; using defaults") in logged(err)
    nvidia = tomllib.loads((tmp_path / CONTAINERD_TOML).read_text())["plugins"]["io.containerd.grpc.v1.cri"][
        "containerd"]["runtimes"]["nvidia"]
    assert nvidia == {"privileged_without_host_devices": False, "runtime_engine": "", "runtime_root": "",
                      "runtime_type": "io.containerd.runc.v2",
                      "options": {"BinaryName": "/usr/bin/nvidia-container-runtime"}}


def parse_yaml(text):
    """Just enough YAML for a CDI spec: block maps, block lists (go-yaml puts them at their key's indent)."""
    lines = [line for line in text.splitlines() if line.strip() and line != "---"]
    node, end = _yaml_block(lines, 0, 0)
    assert end == len(lines), lines[end]
    return node


def _indent(line):
    return len(line) - len(line.lstrip(" "))


def _yaml_scalar(text):
    return json.loads(text) if text.startswith('"') else text


def _yaml_block(lines, i, indent):
    if lines[i][indent:].startswith("- "):
        items = []
        while i < len(lines) and _indent(lines[i]) == indent and lines[i][indent:].startswith("- "):
            content = lines[i][indent + 2:]
            if re.match(r"^[\w.-]+:( |$)", content):
                lines[i] = " " * (indent + 2) + content
                item, i = _yaml_block(lines, i, indent + 2)
            else:
                item, i = _yaml_scalar(content), i + 1
            items.append(item)
        return items, i
    mapping = {}
    while i < len(lines) and _indent(lines[i]) == indent and not lines[i][indent:].startswith("- "):
        key, _, value = lines[i].strip().partition(":")
        i += 1
        if value.strip():
            mapping[key] = _yaml_scalar(value.strip())
        else:
            mapping[key], i = _yaml_block(lines, i, _indent(lines[i]))
    return mapping, i


def test_cdi_generate_writes_a_spec_and_list_reads_it(tmp_path, capsys):
    host, hardware = nvidia_host(tmp_path, toolkit="1.18.0")
    status, _, err = run(nvidia_ctk, capsys, host, "cdi", "generate", "--output=/etc/cdi/nvidia.yaml")
    assert status == 0 and logged(err)[-1] == ("info", "Generated CDI spec with version 0.5.0")
    text = (tmp_path / "etc/cdi/nvidia.yaml").read_text()
    assert text.startswith("---\ncdiVersion: 0.5.0\ncontainerEdits:\n")
    spec = parse_yaml(text)
    assert list(spec) == ["cdiVersion", "containerEdits", "devices", "kind"]
    assert spec["kind"] == "nvidia.com/gpu"
    uuids = [gpu["uuid"] for gpu in hardware["gpus"]]
    names = [device["name"] for device in spec["devices"]]
    assert names == [name for i, uuid in enumerate(uuids) for name in (str(i), uuid)] + ["all"]
    assert spec["devices"][-1]["containerEdits"]["deviceNodes"] == [{"path": f"/dev/nvidia{i}"} for i in range(8)]
    assert {"path": "/dev/nvidiactl"} in spec["containerEdits"]["deviceNodes"]
    assert spec["containerEdits"]["env"] == ["NVIDIA_VISIBLE_DEVICES=void"]
    assert {mount["hostPath"] for mount in spec["containerEdits"]["mounts"]} >= {
        "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.580.105.08", "/usr/bin/nvidia-smi"}
    status, out, err = run(nvidia_ctk, capsys, host, "cdi", "list")
    assert logged(err) == [("info", "Found 17 CDI devices")]
    assert out.splitlines() == sorted(f"nvidia.com/gpu={name}" for name in names)
    assert out.splitlines()[-1] == "nvidia.com/gpu=all"


def test_cdi_generate_needs_the_driver(tmp_path, capsys):
    host, _ = nvidia_host(tmp_path, toolkit="1.18.0", module=None)
    status, _, err = run(nvidia_ctk, capsys, host, "cdi", "generate", "--output=/etc/cdi/nvidia.yaml")
    assert status == 1 and logged(err) == [("error", "failed to generate CDI spec: failed to create device CDI specs: "
                                                     "failed to initialize NVML: Driver Not Loaded")]
    assert not (tmp_path / "etc/cdi/nvidia.yaml").exists()


def test_go_toml_spells_values_like_go_toml_v1():
    document = {
        "version": 2,
        "imports": ["/etc/containerd/config.d/*.toml", 'quote"d'],
        "oom_score": -999,
        "ratio": 1.0,
        "plugins": {"io.containerd.timeout.shim.cleanup": {}, "cri": {"disabled_plugins": [], "enabled": True}},
        "proxy_plugins": [{"type": "snapshot"}, {"type": "content"}],
    }
    assert go_toml(document) == (
        'imports = ["/etc/containerd/config.d/*.toml", "quote\\"d"]\noom_score = -999\nratio = 1.0\nversion = 2\n'
        "\n[plugins]\n"
        "\n  [plugins.cri]\n    disabled_plugins = []\n    enabled = true\n"
        '\n  [plugins."io.containerd.timeout.shim.cleanup"]\n'
        '\n[[proxy_plugins]]\n  type = "snapshot"\n'
        '\n[[proxy_plugins]]\n  type = "content"\n'
    )
    assert tomllib.loads(go_toml(document)) == document
