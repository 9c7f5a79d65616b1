"""The simulated nvidia-container-runtime's OCI spec edit on `create`: the GPUs NVIDIA_VISIBLE_DEVICES asks for,
as device nodes and device cgroup rules, or the library's error; runc then runs the edited bundle."""

import json

import pytest

from k3ops_lab.sim import container_runtime

from ..fake_host import DRIVER, nvidia_host

NVIDIA_MAJOR = 195
# What Docker's runc shim passes an OCI runtime for `create`.
CREATE = ["--root", "/var/run/docker/runtime-runc/moby", "--log", "/run/log.json", "--log-format", "json", "create",
          "--bundle", "{bundle}", "--pid-file", "/run/init.pid", "0123abcd"]


def bundle(tmp_path, environment):
    """An OCI bundle as Docker writes one: its process environment, the default device cgroup rule."""
    directory = tmp_path / "bundle"
    directory.mkdir()
    spec = {"process": {"env": ["PATH=/usr/bin", *environment]},
            "linux": {"resources": {"devices": [{"allow": False, "access": "rwm"}]}}}
    (directory / "config.json").write_text(json.dumps(spec))
    return directory


def create(tmp_path, host, environment, monkeypatch):
    """Run the runtime's `create`; (status, the spec runc was given, runc's argv or None)."""
    directory = bundle(tmp_path, environment)
    handed = []
    monkeypatch.setattr(container_runtime.os, "execvp", lambda program, argv: handed.append(argv))
    argv = [word.format(bundle=directory) for word in CREATE]
    status = container_runtime.runtime_main(argv, host)
    return status, json.loads((directory / "config.json").read_text()), handed[0] if handed else None


def devices(spec):
    return sorted((device["path"], device["major"], device["minor"]) for device in spec["linux"].get("devices", []))


def test_all_gpus_become_device_nodes_and_cgroup_rules(tmp_path, monkeypatch):
    host, hardware = nvidia_host(tmp_path / "root")
    _, spec, runc = create(tmp_path, host, ["NVIDIA_VISIBLE_DEVICES=all"], monkeypatch)
    assert runc == ["runc", *(word.format(bundle=tmp_path / "bundle") for word in CREATE)]
    minors = [gpu["minor_number"] for gpu in hardware["gpus"]]
    assert devices(spec) == sorted([(f"/dev/nvidia{minor}", NVIDIA_MAJOR, minor) for minor in minors]
                                   + [("/dev/nvidia-uvm", 510, 0), ("/dev/nvidiactl", NVIDIA_MAJOR, 255)])
    rules = spec["linux"]["resources"]["devices"]
    assert rules[0] == {"allow": False, "access": "rwm"}  # Docker's deny-all stays first
    assert {(rule["major"], rule["minor"]) for rule in rules[1:] if rule["allow"]} == \
        {(major, minor) for _, major, minor in devices(spec)}


def test_some_gpus_by_index_or_uuid(tmp_path, monkeypatch):
    host, hardware = nvidia_host(tmp_path / "root")
    wanted = f"1,{hardware['gpus'][5]['uuid']}"
    _, spec, _ = create(tmp_path, host, [f"NVIDIA_VISIBLE_DEVICES={wanted}"], monkeypatch)
    gpus = [path for path, _, _ in devices(spec) if path[len("/dev/nvidia"):].isdigit()]
    assert gpus == sorted(f"/dev/nvidia{hardware['gpus'][index]['minor_number']}" for index in (1, 5))


def test_a_gpu_fallen_off_the_bus_is_not_given(tmp_path, monkeypatch):
    host, hardware = nvidia_host(tmp_path / "root")
    hardware["gpus"][3]["fallen_off_bus"] = True
    (tmp_path / "root/etc/k3ops-lab/hardware.json").write_text(json.dumps(hardware))
    _, spec, _ = create(tmp_path, host, ["NVIDIA_VISIBLE_DEVICES=all"], monkeypatch)
    assert len([path for path, _, _ in devices(spec) if path[len("/dev/nvidia"):].isdigit()]) == 7


@pytest.mark.parametrize("environment", [[], ["NVIDIA_VISIBLE_DEVICES=void"], ["NVIDIA_VISIBLE_DEVICES="]])
def test_a_container_that_asks_for_no_gpus_is_left_alone(tmp_path, monkeypatch, environment):
    host, _ = nvidia_host(tmp_path / "root", module=None)  # not even the driver is needed
    _, spec, runc = create(tmp_path, host, environment, monkeypatch)
    assert runc is not None and devices(spec) == []


def test_none_gives_the_control_devices_only(tmp_path, monkeypatch):
    host, _ = nvidia_host(tmp_path / "root")
    _, spec, _ = create(tmp_path, host, ["NVIDIA_VISIBLE_DEVICES=none"], monkeypatch)
    assert [path for path, _, _ in devices(spec)] == ["/dev/nvidia-uvm", "/dev/nvidiactl"]


@pytest.mark.parametrize("module, error", [
    (None, "nvidia-container-cli: initialization error: nvml error: driver not loaded"),
    ("570.195.03", "nvidia-container-cli: initialization error: nvml error: driver/library version mismatch"),
])
def test_a_driver_not_loaded_or_not_its_userspaces_fails_the_create(tmp_path, monkeypatch, capsys, module, error):
    host, _ = nvidia_host(tmp_path / "root", driver=DRIVER, module=module)
    status, spec, runc = create(tmp_path, host, ["NVIDIA_VISIBLE_DEVICES=all"], monkeypatch)
    assert (status, runc, devices(spec)) == (1, None, [])
    assert capsys.readouterr().err.strip() == error


def test_an_unknown_device_fails_the_create(tmp_path, monkeypatch, capsys):
    host, _ = nvidia_host(tmp_path / "root")
    status, _, runc = create(tmp_path, host, ["NVIDIA_VISIBLE_DEVICES=9"], monkeypatch)
    assert (status, runc) == (1, None)
    assert capsys.readouterr().err.strip() == "nvidia-container-cli: device error: 9: unknown device"


def test_other_commands_go_straight_to_runc(tmp_path, monkeypatch):
    host, _ = nvidia_host(tmp_path / "root")
    handed = []
    monkeypatch.setattr(container_runtime.os, "execvp", lambda program, argv: handed.append(argv))
    container_runtime.runtime_main(["--root", "/r", "delete", "0123abcd"], host)
    assert handed == [["runc", "--root", "/r", "delete", "0123abcd"]]
