"""deploys/gpu_host.py on a fresh lab: converges (rebooting where needed), passes the host checks,
changes nothing on a second run, and repairs drift."""

from __future__ import annotations

import base64
import json
import os
import urllib.request

import pytest

from k3ops.escape import systemd_assignment, systemd_command
from k3ops.facts.monitoring import exposition
from k3ops.facts.nvidia import IMEX_CHANNEL, ImexChannel
from k3ops.onhost import layout
from k3ops.vendor_units import DCGM_EXPORTER, NODE_EXPORTER
from k3ops_lab import faults
from k3ops_lab.inventory import groups
from k3ops_lab.sim import boot as boot_layer

from ..engine_units import DIGEST, engine_variables, rendered_units, rendered_watchdog_command
from .conftest import (GPU_HOST_CHECKS, changed_operations, deploy_report, host_checks, k3ops, lab_inventory, on_host,
                       pyinfra, reboot)

LAB_PROFILES = ("h200x8", "b300x8", "mi355x8", "cpu", "gb300x4")
# This module runs deploys/gpu_host.py only; the model's and the engine's checks belong to
# tests/lab/test_model.py and tests/lab/test_serving.py.
# vLLM and SGLang cannot run without GPUs (or a registry): their units are installed on the GPU hosts this
# deploy prepared, and systemd itself checks them. (host, GPU vendor, recipe, node rank, data); the lab has
# no GB300 tray, and an H200 host has everything a GB300 unit needs from a host.
CONTAINER_ENGINES = [
    ("gpu-02", "nvidia", "vllm-b300x8", 0, {}),
    ("gpu-02", "nvidia", "sglang-b300x8", 0, {"args": {"--mamba-full-memory-ratio": "0.7"}}),
    ("gpu-03", "amd", "vllm-mi355x8", 0, {}),
    ("gpu-01", "nvidia", "vllm-h200x8-2node", 0, {"cluster": "h200-a"}),
    ("gpu-01", "nvidia", "vllm-h200x8-2node", 1, {"cluster": "h200-a"}),
    ("gpu-01", "nvidia", "vllm-gb300x4-2node", 0, {"cluster": "gb300-a"}),
    ("gpu-01", "nvidia", "vllm-gb300x4-2node", 1, {"cluster": "gb300-a"}),
]


def deploy() -> dict:
    """deploys/gpu_host.py on the whole lab; returns pyinfra's JSON report."""
    return deploy_report("deploys/gpu_host.py")


def set_secure_boot(host: str, enabled: bool) -> None:
    """Secure Boot in the firmware (the lab's hardware document), in effect from the next boot."""
    on_host(host, faults.edit_hardware(f"h['secure_boot'] = {enabled}"))
    reboot(host)


def test_a_fresh_host_with_secure_boot_stops_before_any_driver_is_installed(lab):
    """No mokutil, no pciutils: the deploy reads Secure Boot from the firmware variable, not a tool it
    would install in the same run, and stops before any operation runs."""
    on_host("gpu-02", "DEBIAN_FRONTEND=noninteractive apt-get purge -y -q mokutil pciutils >/dev/null 2>&1; "
                      "! command -v mokutil && ! command -v lspci")
    set_secure_boot("gpu-02", True)
    try:
        result = pyinfra("deploys/gpu_host.py", "--limit", "gpu-02")
        assert result.returncode != 0
        assert "gpu-02: Secure Boot is on and would refuse unsigned NVIDIA modules" in result.stdout + result.stderr
        installed = on_host("gpu-02", "dpkg-query -W -f '${Package} ${Status}\n' 'nvidia-*' 'mokutil' 'pciutils' "
                                      "2>/dev/null | grep -c ' installed$' || true").stdout.strip()
        assert installed == "0"
    finally:
        set_secure_boot("gpu-02", False)


def test_deploy_converges_and_keeps_existing_runtime_settings(lab):
    on_host("gpu-01", "mkdir -p /etc/docker && echo '{\"log-driver\": \"journald\"}' > /etc/docker/daemon.json")
    report = deploy()
    assert changed_operations(report)
    # Every vendor's source and pin goes in first, then apt's lists are read again once (each time costs seconds).
    refreshes = [name for name in changed_operations(report) if "Refresh apt" in name]
    assert len(refreshes) == 1, refreshes
    daemon = json.loads(on_host("gpu-01", "cat /etc/docker/daemon.json").stdout)
    assert daemon["log-driver"] == "journald" and "nvidia" in daemon["runtimes"]


def test_host_checks_pass_after_the_deploy(lab):
    checks = host_checks("inventory/lab/hosts.py", *GPU_HOST_CHECKS)
    assert checks.returncode == 0, checks.stdout[-4000:]
    assert " passed" in checks.stdout and " failed" not in checks.stdout


def test_second_run_changes_nothing(lab):
    assert changed_operations(deploy()) == []


def verify_units(host: str, variables: dict, edit: str = "true") -> str:
    """Installs the engine's units in a directory of their own on `host`, with the watchdog's launcher
    where the deploy puts it (then runs `edit` there), and returns what `systemd-analyze verify` says
    about them: nothing at all when they are sound."""
    directory = f"/run/k3ops-verify/{variables['recipe']}-{variables['node_rank']}"
    units = rendered_units(variables)

    def written(text: str, path: str) -> str:
        return f"echo {base64.b64encode(text.encode()).decode()} | base64 -d > {path}"

    launcher = layout.WATCHDOG_COMMAND
    script = [f"mkdir -p {os.path.dirname(launcher)}", written(rendered_watchdog_command(), launcher),
              f"chmod 755 {launcher}", f"rm -rf {directory}", f"mkdir -p {directory}", f"cd {directory}"]
    script += [written(text, name) for name, text in units.items()]
    script += [edit, f"systemd-analyze verify {' '.join(units)}"]
    result = on_host(host, " && ".join(script), check=False)
    return result.stdout + result.stderr + (f"exit status {result.returncode}" if result.returncode else "")


@pytest.mark.parametrize(("host", "vendor", "recipe", "rank", "data"), CONTAINER_ENGINES,
                         ids=[f"{recipe}-rank{rank}" for _, _, recipe, rank, _ in CONTAINER_ENGINES])
def test_container_engine_units_pass_systemd_analyze_verify(lab, host, vendor, recipe, rank, data):
    variables = engine_variables(recipe, vendor, rank, image_digest=DIGEST, **data)
    assert verify_units(host, variables) == ""


def test_unit_verification_finds_a_missing_runtime_and_a_bad_value(lab):
    """The check above has teeth: no Docker on the cpu host, and a value systemd only warns about."""
    variables = engine_variables("vllm-b300x8", "nvidia", image_digest=DIGEST)
    assert "Command /usr/bin/docker is not executable" in verify_units("gpu-04", variables)
    warned = verify_units("gpu-02", variables, edit="sed -i 's/^Restart=always/Restart=allways/' k3ops-engine.service")
    assert "Failed to parse service restart specifier" in warned


HOSTILE = 'a %n $HOME ${PATH} "quoted" \\back ; ExecStartPre=/bin/false'


def install_unit(host: str, name: str, text: str, then: str) -> str:
    """Load `text` as a unit on `host`, run `then`, remove it again; returns what `then` printed."""
    path = f"/run/systemd/system/{name}"
    return on_host(host, f"echo {base64.b64encode(text.encode()).decode()} | base64 -d > {path} && "
                         f"systemctl daemon-reload && {then}; rm -f {path}; systemctl daemon-reload").stdout


def test_hostile_values_reach_an_engine_unit_as_data_not_directives(lab):
    """systemd reads the engine unit made from data full of specifiers, variables and quotes: it warns
    about nothing, finds no extra directive, and expands no specifier."""
    variables = engine_variables("vllm-b300x8", "nvidia", image_digest=DIGEST, environment={"K3_NOTE": HOSTILE},
                                 args={"--alias": HOSTILE})
    assert verify_units("gpu-02", variables) == ""
    unit = rendered_units(variables)[layout.ENGINE_UNIT]
    shown = install_unit("gpu-02", "k3ops-hostile-engine.service", unit,
                         "systemctl show --property ExecStart --property ExecStartPre k3ops-hostile-engine.service")
    written = sum(line.startswith("ExecStartPre=") for line in unit.splitlines())
    assert sum(line.startswith("ExecStartPre=") for line in shown.splitlines()) == written
    assert "--alias a %n " in shown and "K3_NOTE=a %n " in shown  # %n (the unit's name) not expanded


def test_hostile_values_reach_a_process_exactly_as_written(lab):
    """A unit built with the engine units' own escaping runs and prints its argument and its
    environment variable: both are the value, byte for byte, after systemd's unescaping."""
    script = 'printf "%s\\n" "$1" "$K3_NOTE"'
    unit = ("[Service]\nType=oneshot\n"
            f"Environment={systemd_assignment('K3_NOTE', HOSTILE)}\n"
            f"ExecStart={systemd_command(['/bin/sh', '-c', script, 'sh', HOSTILE])}\n")
    printed = install_unit("gpu-02", "k3ops-hostile-echo.service", unit,
                           "systemctl start k3ops-hostile-echo.service && "
                           "journalctl --unit k3ops-hostile-echo.service --output cat --no-pager")
    assert [line for line in printed.splitlines() if "k3ops-hostile-echo" not in line] == [HOSTILE, HOSTILE]


def test_amd_host_booted_with_iommu_pass_through(lab):
    assert "iommu=pt" in on_host("gpu-03", "cat /proc/cmdline").stdout.split()
    assert on_host("gpu-03", "rocm-smi --showproductname --json").stdout.count("AMD Instinct MI355X") == 8


def test_cpu_host_gets_no_gpu_packages(lab):
    packages = on_host("gpu-04", "dpkg-query -W -f '${Package}\\n'").stdout.split()
    assert not [name for name in packages if name.startswith(("nvidia", "libnvidia", "cuda", "amdgpu", "rocm", "docker"))]


def test_drift_is_repaired_by_a_rerun(lab):
    on_host("gpu-01", "apt-mark unhold nvidia-driver"
                      " && systemctl stop nvidia-persistenced"
                      " && python3 -c \"import json; p='/etc/docker/daemon.json'; c=json.load(open(p));"
                      " c['runtimes'].pop('nvidia'); json.dump(c, open(p, 'w'))\" && systemctl restart docker"
                      " && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --allow-downgrades"
                      " --allow-change-held-packages nvidia-fabricmanager=580.105.08-1")
    # gpu-03 runs the amdgpu of the release before, as after a deploy killed before its reboot
    k3ops("lab", "fault", "gpu-03", "rocm-mismatch")
    # gpu-05's IMEX channel made by hand from the wrong line of /proc/devices (nvidia-uvm's major)
    on_host("gpu-05", f"rm {IMEX_CHANNEL} && mknod -m 666 {IMEX_CHANNEL} c {boot_layer.NVIDIA_UVM_MAJOR} 0")
    drifted = host_checks("inventory/lab/hosts.py", *GPU_HOST_CHECKS)
    assert drifted.returncode != 0
    for symptom in ("test_driver_packages_are_held", "test_persistence_daemon", "test_docker_has_the_nvidia_runtime",
                    "test_fabric_manager_runs_at_the_driver_version", "test_amdgpu_driver_is_held_and_loaded",
                    "test_nvlink_domain_trays_have_imex_channel_0"):
        assert symptom in drifted.stdout
    boot = on_host("gpu-03", "cat /proc/sys/kernel/random/boot_id").stdout
    changed = changed_operations(deploy())
    assert any("| Reboot to load amdgpu" in name for name in changed), changed
    assert on_host("gpu-03", "cat /proc/sys/kernel/random/boot_id").stdout != boot
    repaired = host_checks("inventory/lab/hosts.py", *GPU_HOST_CHECKS)
    assert repaired.returncode == 0, repaired.stdout[-4000:]
    k3ops("lab", "fault", "gpu-03", "--clear")  # only the fault's record is left: the reboot loaded the driver


def test_secure_boot_stops_the_nvidia_deploy_with_a_message(lab):
    """Secure Boot turned on in the firmware (the lab's hardware document) takes effect at the next boot."""
    set_secure_boot("gpu-02", True)
    try:
        assert on_host("gpu-02", "mokutil --sb-state").stdout.strip() == "SecureBoot enabled"
        result = pyinfra("deploys/gpu_host.py", "--limit", "gpu-02")
        assert result.returncode != 0
        assert "gpu-02: Secure Boot is on and would refuse unsigned NVIDIA modules" in result.stdout + result.stderr
    finally:  # under Secure Boot the kernel refuses the unsigned modules already installed: off again for the rest
        set_secure_boot("gpu-02", False)


def test_changing_the_driver_version_moves_driver_and_fabric_manager_together(lab, tmp_path):
    """A fleet driver change (here a rollback to 580.105.08) is one data change: the deploy moves the
    driver, its pin, its hold and fabric manager together, reboots, and the host checks agree."""
    inventory = tmp_path / "rollback.py"
    inventory.write_text(
        "from k3ops_lab.inventory import groups\n"
        "from k3ops.inventory import validate_inventory\n\n"
        "globals().update({profile: [(name, {**data, 'nvidia_driver_version': '580.105.08'})\n"
        "                            for name, data in hosts if name == 'gpu-01']\n"
        "                  for profile, hosts in groups().items() if profile == 'h200x8'})\n"
        "validate_inventory(__file__)\n")
    result = pyinfra("deploys/gpu_host.py", inventory=str(inventory))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert on_host("gpu-01", "cat /sys/module/nvidia/version").stdout.strip() == "580.105.08"
    checks = host_checks(str(inventory), *GPU_HOST_CHECKS)
    assert checks.returncode == 0, checks.stdout[-4000:]


def test_fabric_manager_off_stops_it_and_the_checks_agree(lab, tmp_path):
    """fabric_manager 'off' on an NVSwitch host stops and disables it, and the host checks expect exactly
    that; back to 'auto', it runs again and the checks expect it running."""
    off = lab_inventory(tmp_path / "fabric-manager-off.py", fabric_manager="off")
    result = pyinfra("deploys/gpu_host.py", "--limit", "gpu-01", inventory=off)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for query, state in (("is-active", "active"), ("is-enabled", "enabled")):
        assert on_host("gpu-01", f"systemctl {query} nvidia-fabricmanager", check=False).stdout.strip() != state
    checks = host_checks(off, *GPU_HOST_CHECKS, "-k", "gpu-01 and fabric_manager")
    assert checks.returncode == 0 and " passed" in checks.stdout, checks.stdout[-4000:]
    expecting_it = host_checks("inventory/lab/hosts.py", *GPU_HOST_CHECKS, "-k", "gpu-01 and fabric_manager")
    assert expecting_it.returncode != 0
    result = pyinfra("deploys/gpu_host.py", "--limit", "gpu-01")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    checks = host_checks("inventory/lab/hosts.py", *GPU_HOST_CHECKS, "-k", "gpu-01")
    assert checks.returncode == 0, checks.stdout[-4000:]


def test_peermem_is_loaded_again_after_a_reboot(lab):
    """Named in modules-load.d, so a reboot (the kernel forgets every module) brings it back."""
    reboot("gpu-02")
    assert on_host("gpu-02", "cat /sys/module/nvidia_peermem/initstate").stdout.strip() == "live"


def test_an_nvlink_domain_tray_runs_imex_with_its_nodes_and_channel_after_a_reboot(lab):
    """A reboot removes every node under /dev: the tray comes back with IMEX and channel 0, made from the
    major this boot's driver registered."""
    reboot("gpu-05")
    assert on_host("gpu-05", "systemctl is-active nvidia-imex").stdout.strip() == "active"
    assert on_host("gpu-05", "cat /etc/nvidia-imex/nodes_config.cfg").stdout.split() == [
        on_host("gpu-05", "hostname -I").stdout.split()[0]]
    channel = ImexChannel().process(on_host("gpu-05", ImexChannel.command).stdout.splitlines())
    assert channel["ready"] and channel["registered_major"] == boot_layer.NVIDIA_CAPS_IMEX_MAJOR, channel
    assert on_host("gpu-05", f"stat -c %a {IMEX_CHANNEL}").stdout.strip() == "666"


def test_the_exporters_listen_where_the_data_says_and_stop_when_monitoring_is_off(lab, tmp_path):
    """An exporter address and port in the data move node_exporter and the DCGM exporter there (Prometheus reaches
    them from the controller; nothing answers at the old port); monitoring off stops them and k3ops' series, and
    keeps them from starting at boot. Last in the module: gpu-01 is left unwatched."""
    address = dict(groups()["h200x8"])["gpu-01"]["ssh_hostname"]
    moved = lab_inventory(tmp_path / "exporters-moved.py",
                          per_host={"gpu-01": {"exporter_address": address, "node_exporter_port": 9111}})
    result = pyinfra("deploys/gpu_host.py", "--limit", "gpu-01", inventory=moved)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    page = exposition(urllib.request.urlopen(f"http://{address}:9111/metrics", timeout=10).read().decode()
                      .splitlines())
    assert page["k3ops_gpu_driver_mismatch"]["samples"] == [{"labels": {"module": "nvidia"}, "value": 0.0}]
    assert "DCGM_FI_DEV_GPU_TEMP" in exposition(
        urllib.request.urlopen(f"http://{address}:9400/metrics", timeout=10).read().decode().splitlines())
    assert on_host("gpu-01", "python3 -c \"import socket; socket.create_connection(('127.0.0.1', 9100), 2)\"",
                   check=False).returncode != 0  # the default port is free again
    checks = host_checks(moved, *GPU_HOST_CHECKS, "-k", "gpu-01 and (node_exporter or dcgm_exporter)")
    assert checks.returncode == 0 and " passed" in checks.stdout, checks.stdout[-4000:]
    off = lab_inventory(tmp_path / "monitoring-off.py", per_host={"gpu-01": {"monitoring": False}})
    result = pyinfra("deploys/gpu_host.py", "--limit", "gpu-01", inventory=off)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for unit in (NODE_EXPORTER, layout.METRICS_TIMER, DCGM_EXPORTER):
        states = on_host("gpu-01", f"systemctl is-active {unit}; systemctl is-enabled {unit}", check=False)
        assert states.stdout.split() == ["inactive", "disabled"], (unit, states.stdout)
