"""`k3ops upgrade driver` refuses bad arguments and plans without touching a host: every case here runs with
connections to anything but this machine's loopback refused, and the CUDA repository is a real HTTP server."""

from __future__ import annotations

import json
import socket

import pytest

from k3ops.cli import main
from k3ops.upgrade.record import Rollout, inventory_digest, record_path, unfinished
from k3ops.upgrade.versions import versions_in_index

from .upgrade_fleet import DIGEST, MODEL, PACKAGES, cuda_index



@pytest.fixture
def repository(tmp_path):
    with cuda_index(tmp_path) as url:
        yield url


@pytest.fixture(autouse=True)
def nothing_but_loopback(monkeypatch, tmp_path):
    """A connection to a host (anything but loopback) fails the test; rollouts are recorded under tmp_path."""
    connect = socket.socket.connect

    def guarded(self, address):
        if isinstance(address, tuple) and address[0] not in ("127.0.0.1", "::1"):
            raise AssertionError(f"connected to {address} before refusing or planning")
        return connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", guarded)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


def inventory(tmp_path, repository: str, hosts: dict[str, dict]) -> str:
    """Hosts at TEST-NET addresses (never reached), h200x8 with the test's CUDA repository."""
    defaults = {"hardware_profile": "h200x8", "nvidia_driver_version": "580.105.08", "allow_plain_http": True,
                "repositories": {"cuda": {"url": repository, "key_url": repository + "key.gpg"}}}
    entries = [(name, {"ssh_hostname": f"192.0.2.{index}", **defaults, **data})
               for index, (name, data) in enumerate(hosts.items(), 10)]
    path = tmp_path / "fleet.py"
    path.write_text(f"hgx = {entries!r}\n")
    return str(path)


def clustered(cluster: str) -> dict:
    return {"model": MODEL, "engine": {"recipe": "vllm-h200x8-2node", "image_digest": DIGEST, "cluster": cluster}}


def recorded(fleet: str, status: str, groups: list[dict]) -> Rollout:
    """A whole record of a rollout of `fleet` to 580.126.09, as new_rollout and `start` write it, saved."""
    record = {"id": "5f0c2a91d3e4b6a7", "release": "driver", "inventory": fleet,
              "inventory_sha256": inventory_digest(fleet),
              "to": "580.126.09", "canary": 1,
              "max_unavailable": "1", "budget": 1, "max_failures": 0, "limit": [], "skipped": [],
              "started": "2026-12-01T19:00:00+00:00", "status": status,
              "groups": [{"canary": False, "to": "580.126.09", "failures": 0, "detail": "", **group} for group in groups]}
    rollout = Rollout(record_path(fleet), record)
    rollout.save()
    return rollout


def upgrade(capsys, *arguments: str) -> tuple[int, str, str]:
    status = main(["upgrade", *arguments])
    out, err = capsys.readouterr()
    return status, out, err


def test_the_dry_run_prints_groups_order_and_batches_and_records_nothing(tmp_path, repository, capsys):
    fleet = inventory(tmp_path, repository, {"gpu-01": {}, "gpu-02": clustered("a"), "gpu-03": clustered("a"),
                                             "gpu-04": {}, "gpu-05": {}})
    status, out, _ = upgrade(capsys, "driver", fleet, "--to", "580.126.09", "--max-unavailable", "2", "--dry-run")
    assert status == 0
    assert "5 engine groups" not in out and "4 engine groups, at most 2 hosts out of service at once" in out
    assert "1. canary, then a soak: gpu-01 (gpu-01)\n  2. batch: a (gpu-02, gpu-03)\n" \
           "  3. batch: gpu-04 (gpu-04); gpu-05 (gpu-05)" in out, out
    assert not record_path(fleet).exists()


# 1: refused; 2: bad input (invalid host data at the new version, a --limit that selects nothing)
@pytest.mark.parametrize(("arguments", "message", "exit_status"), [
    (("--to", "580.999.99"), "gpu-01: --to 580.999.99: http://127.0.0.1:", 1),
    (("--to", "580.126"), "has no nvidia-driver 580.126-1 (its 580 releases: 580.105.08-1, 580.126.09-1)", 1),
    (("--to", "latest"), "--to: 'latest' is not an exact driver version", 1),
    (("--to", "570.195.03"), "gpu-01: nvidia_driver_version: 570.195.03 is branch 570, which supports CUDA", 2),
    (("--to", "580.126.09", "--max-unavailable", "0"), "--max-unavailable: 0 would never let a host out", 1),
    (("--to", "580.126.09", "--max-unavailable", "20%"), "20% of 3 hosts is no host at all", 1),
    (("--to", "580.126.09"), "engine group a (gpu-02, gpu-03) has 2 hosts, more than --max-unavailable allows", 1),
    (("--to", "580.126.09", "--max-unavailable", "2", "--limit", "gpu-02"),
     "engine group a: --limit selects gpu-02 but not gpu-03; a multi-node engine moves whole", 1),
    (("--to", "580.126.09", "--max-unavailable", "2", "--limit", "gpu-9*"), "--limit: 'gpu-9*' matches no host", 2),
    (("--to", "580.126.09", "--max-unavailable", "2", "--canary", "3"), "--canary: 3 groups, but the rollout has 2",
     1),
])
def test_bad_arguments_are_refused_before_any_host_is_touched(tmp_path, repository, capsys, arguments, message,
                                                              exit_status):
    fleet = inventory(tmp_path, repository, {"gpu-01": {}, "gpu-02": clustered("a"), "gpu-03": clustered("a")})
    status, out, err = upgrade(capsys, "driver", fleet, *arguments)
    assert status == exit_status and message in err, err
    assert not record_path(fleet).exists()


def test_a_rocm_rollout_moves_the_amd_hosts_to_a_release_their_repositories_list(tmp_path, repository, capsys):
    source = {"url": repository, "key_url": repository + "key.gpg"}
    amd = {"hardware_profile": "mi355x8", "rocm_release": "7.0.2", "repositories": {"amdgpu": source, "rocm": source}}
    fleet = inventory(tmp_path, repository, {"gpu-01": {}, "gpu-02": amd, "gpu-03": amd})
    status, out, _ = upgrade(capsys, "rocm", fleet, "--to", "7.1.0", "--dry-run")
    assert status == 0 and "to ROCm 7.1.0: 2 engine groups" in out and "not in the rollout: gpu-01: no AMD GPUs" in out
    status, _, err = upgrade(capsys, "rocm", fleet, "--to", "7.2.0")
    assert status == 1 and f"gpu-02: --to 7.2.0: {repository} has no amdgpu-dkms 1:*.70200-*" in err
    assert f"gpu-03: --to 7.2.0: {repository} has no rocm 7.2.0.* (its 7 releases: 7.0.2.70002-1, 7.1.0.70100-1)" in err
    status, _, err = upgrade(capsys, "rocm", fleet, "--to", "6.4.1")  # listed, but not for this GPU
    assert status == 2 and "gpu-02: rocm_release: 6.4.1 does not support the AMD Instinct MI355X" in err
    status, _, err = upgrade(capsys, "rocm", fleet, "--to", "7.1")
    assert status == 1 and "--to: '7.1' is not a ROCm release like '7.0.2'" in err
    assert not record_path(fleet).exists()


def test_the_controller_and_hosts_that_may_not_reboot_are_refused(tmp_path, repository, capsys):
    fleet = inventory(tmp_path, repository, {"gpu-01": {"ssh_hostname": "127.0.0.1"},
                                             "gpu-02": {"reboot_policy": "never"}})
    status, _, err = upgrade(capsys, "driver", fleet, "--to", "580.126.09")
    assert status == 1
    assert "gpu-01: is the machine running k3ops; a rollout never reboots its own controller" in err
    assert "gpu-02: reboot_policy is 'never', and a new driver needs a reboot" in err


def test_a_repository_the_controller_cannot_read_is_refused(tmp_path, repository, capsys):
    fleet = inventory(tmp_path, "http://127.0.0.1:9/", {"gpu-01": {}})  # discard port: nothing listens
    status, _, err = upgrade(capsys, "driver", fleet, "--to", "580.126.09")
    assert status == 1 and "cannot read the package index of http://127.0.0.1:9/ from this controller" in err


def test_an_unfinished_rollout_is_resumed_or_aborted_not_replaced(tmp_path, repository, capsys):
    fleet = inventory(tmp_path, repository, {"gpu-01": {}})
    recorded(fleet, "halted", [{"name": "gpu-01", "hosts": ["gpu-01"], "state": "failed", "canary": True,
                                "failures": 1}])
    status, _, err = upgrade(capsys, "driver", fleet, "--to", "580.126.09")
    assert status == 1 and "is halted" in err and "`k3ops upgrade resume` or `k3ops upgrade abort` it first" in err
    assert unfinished(None).record["inventory"] == fleet  # the only unfinished one: no need to name it
    status, out, _ = upgrade(capsys, "abort")
    assert status == 0 and "gpu-01 (gpu-01): failed" in out  # out of service, and said so
    assert json.loads(record_path(fleet).read_text())["status"] == "aborted"
    status, _, err = upgrade(capsys, "resume")
    assert status == 1 and "0 unfinished rollouts" in err


def test_the_status_shows_each_group(tmp_path, repository, capsys):
    fleet = inventory(tmp_path, repository, {"gpu-01": {}})
    recorded(fleet, "running", [{"name": "gpu-01", "hosts": ["gpu-01"], "state": "rebooting",
                                 "since": "2026-12-01T20:00:00+00:00", "detail": "the GPU host deploy ran at 580.126.09"}])
    status, out, _ = upgrade(capsys, "status", fleet)
    assert status == 0 and "to 580.126.09: running" in out
    assert "gpu-01" in out and "rebooting" in out and "2026-12-01T20:00:00+00:00" in out


def test_an_index_lists_each_version_of_the_package():
    assert versions_in_index(PACKAGES, "nvidia-driver") == {"580.105.08-1", "580.126.09-1"}
    assert versions_in_index(PACKAGES, "nvidia-fabricmanager") == set()


def test_hand_drained_groups_are_held_and_groups_already_there_are_done(tmp_path, capsys):
    """Decided from what each host shows before a batch: a person's marker, or another rollout's, holds its group
    (the canary passes to the next), a host on the version that serves needs nothing, a host this rollout took out
    of service is left to it."""
    from k3ops.upgrade.rollout import hold_hand_drained, skip_current
    from k3ops.upgrade.steps import Run

    names = ("gpu-01", "gpu-02", "gpu-03", "gpu-04", "gpu-05")
    groups = [{"name": name, "hosts": [name], "state": "pending", "canary": name == "gpu-01", "to": "580.126.09",
               "failures": 0} for name in names]
    run = Run(Rollout(tmp_path / "rollout.json", {"id": "5f0c2a91d3e4b6a7", "to": "580.126.09", "groups": groups}),
              tmp_path / "rollout.log")
    ours = {"reason": "driver upgrade to 580.126.09", "by": "k3ops upgrade", "rollout": "5f0c2a91d3e4b6a7"}
    theirs = {**ours, "rollout": "0badc0ffee000001", "controller": "bob@bastion-2", "state": "failed"}
    seen = {"gpu-01": {"marker": {"reason": "RMA ticket 4711", "by": "ops: alice"}, "out": "marked", "current": False},
            "gpu-02": {"marker": None, "out": None, "current": False},
            "gpu-03": {"marker": None, "out": None, "current": True},
            "gpu-04": {"marker": ours, "out": "marked", "current": True},  # ours, as a dead controller left it
            "gpu-05": {"marker": theirs, "out": "marked", "current": False}}  # left failed by another rollout
    hold_hand_drained(run, seen)
    skip_current(run, seen)
    assert {group["name"]: (group["state"], group["canary"]) for group in groups} == {
        "gpu-01": ("held", False), "gpu-02": ("pending", True), "gpu-03": ("done", False), "gpu-04": ("pending", False),
        "gpu-05": ("held", False)}
    assert "RMA ticket 4711 (by ops: alice)" in groups[0]["detail"]
    assert "(by k3ops upgrade (rollout 0badc0ffee000001 from bob@bastion-2))" in groups[4]["detail"]
    assert json.loads((tmp_path / "rollout.json").read_text())["groups"][2]["state"] == "done"  # recorded


def test_a_dead_rollout_taken_over_by_name_has_its_hosts_moved_not_held(tmp_path):
    from k3ops.upgrade.rollout import hold_hand_drained
    from k3ops.upgrade.steps import Run

    groups = [{"name": "gpu-05", "hosts": ["gpu-05"], "state": "pending", "canary": True, "to": "580.126.09",
               "failures": 0}]
    record = {"id": "5f0c2a91d3e4b6a7", "to": "580.126.09", "groups": groups, "taken_over": ["0badc0ffee000001"]}
    run = Run(Rollout(tmp_path / "rollout.json", record), tmp_path / "rollout.log")
    theirs = {"reason": "driver upgrade to 580.126.09", "by": "k3ops upgrade", "rollout": "0badc0ffee000001",
              "state": "upgrading"}
    hold_hand_drained(run, {"gpu-05": {"marker": theirs, "out": "marked", "current": False}})
    assert groups[0]["state"] == "pending"


def test_take_over_takes_a_rollout_id_only(tmp_path, repository, capsys):
    fleet = inventory(tmp_path, repository, {"gpu-01": {}})
    status, _, err = upgrade(capsys, "driver", fleet, "--to", "580.126.09", "--take-over", "bob's rollout")
    assert status == 1 and "--take-over: \"bob's rollout\" is not a rollout id (16 hex digits" in err, err


def test_a_canary_already_on_the_version_passes_the_canary_on(tmp_path):
    """It would prove nothing: the next group in line is the canary, so the first group upgraded is still one."""
    from k3ops.upgrade.rollout import skip_current
    from k3ops.upgrade.steps import Run

    groups = [{"name": name, "hosts": [name], "state": "pending", "canary": name == "gpu-01", "to": "580.126.09",
               "failures": 0} for name in ("gpu-01", "gpu-02", "gpu-03")]
    run = Run(Rollout(tmp_path / "rollout.json", {"id": "5f0c2a91d3e4b6a7", "to": "580.126.09", "groups": groups}),
              tmp_path / "rollout.log")
    skip_current(run, {"gpu-01": {"marker": None, "out": None, "current": True},
                       **{name: {"marker": None, "out": None, "current": False} for name in ("gpu-02", "gpu-03")}})
    assert [(group["state"], group["canary"]) for group in groups] == [("done", False), ("pending", True),
                                                                       ("pending", False)]


@pytest.mark.parametrize(("installed", "held", "switches", "is_current"), [
    ({"nvidia-driver": "580.126.09-1", "nvidia-fabricmanager": "580.126.09-1"},
     ["nvidia-driver", "nvidia-fabricmanager"], ["0000:05:00.0"], True),
    ({"nvidia-driver": "580.126.09-1", "nvidia-fabricmanager": "580.105.08-1"},  # fabric manager left behind
     ["nvidia-driver", "nvidia-fabricmanager"], ["0000:05:00.0"], False),
    ({"nvidia-driver": "580.126.09-1", "nvidia-fabricmanager": "580.126.09-1"}, ["nvidia-driver"],  # not held
     ["0000:05:00.0"], False),
    ({"nvidia-driver": "580.126.09-1", "nvidia-fabricmanager": None}, ["nvidia-driver"], [], True),  # off in data
])
def test_a_host_is_current_only_with_the_driver_and_its_fabric_manager_at_the_release(installed, held, switches,
                                                                                       is_current):
    from k3ops.facts.apt import AptHeldPackages, AptPolicyVersion
    from k3ops.facts.nvidia import NvidiaKernelModule, NvSwitches
    from k3ops.settings import settings_of
    from k3ops.upgrade.releases import NVIDIA_DRIVER

    from .test_doctor import FactHost

    host = FactHost({NvidiaKernelModule: {"version": "580.126.09"}, NvSwitches: switches, AptHeldPackages: held,
                     AptPolicyVersion: lambda package: {"installed": installed[package]}})
    spec = settings_of({"hardware_profile": "h200x8", "nvidia_driver_version": "580.126.09",
                        "fabric_manager": "auto" if switches else "off"}).gpu
    assert NVIDIA_DRIVER.current(host, spec, "580.126.09") is is_current


@pytest.mark.parametrize(("loaded", "installed", "rocm", "held", "is_current"), [
    ("6.14.14", "1:6.14.14.70002-2187269.24.04", "7.0.2-56", ["amdgpu-dkms"], True),
    ("6.12.12", "1:6.14.14.70002-2187269.24.04", "7.0.2-56", ["amdgpu-dkms"], False),  # not rebooted onto it
    ("6.14.14", "1:6.14.14.70002-2187269.24.04", "6.4.1-83", ["amdgpu-dkms"], False),  # userspace left behind
    ("6.14.14", "1:6.14.14.70002-2187269.24.04", "7.0.2-56", [], False),  # not held
    (None, "1:6.14.14.70002-2187269.24.04", "7.0.2-56", ["amdgpu-dkms"], False),  # amdgpu not loaded
])
def test_an_amd_host_is_current_only_running_the_releases_amdgpu_with_its_rocm(loaded, installed, rocm, held,
                                                                                is_current):
    from k3ops.facts.amd import AmdgpuModule, RocmVersion
    from k3ops.facts.apt import AptHeldPackages, AptPolicyVersion
    from k3ops.settings import settings_of
    from k3ops.upgrade.releases import ROCM

    from .test_doctor import FactHost

    host = FactHost({AmdgpuModule: loaded, RocmVersion: rocm, AptHeldPackages: held,
                     AptPolicyVersion: lambda package: {"installed": {"amdgpu-dkms": installed}[package]}})
    spec = settings_of({"hardware_profile": "mi355x8", "rocm_release": "7.0.2"}).gpu
    assert ROCM.current(host, spec, "7.0.2") is is_current


def test_the_balancer_is_told_of_a_multi_node_engines_head_only(tmp_path):
    """Its worker ranks serve nothing: the balancer never knew them."""
    from k3ops.upgrade.steps import Run, balancer

    told = tmp_path / "told"
    command = ["sh", "-c", f'echo "$0 $1" >> {told}']
    lb = {"upgrade_lb_deregister_command": [*command, "deregister", "{host}"],
          "upgrade_lb_register_command": [*command, "register", "{host}"]}
    fleet = inventory(tmp_path, "http://192.0.2.1/cuda/", {"gpu-01": {**clustered("h200-a"), **lb},
                                                           "gpu-02": {**clustered("h200-a"), **lb}})
    group = {"name": "h200-a", "hosts": ["gpu-01", "gpu-02"], "to": "580.126.09"}
    record = {"id": "5f0c2a91d3e4b6a7", "release": "driver", "inventory": fleet, "groups": [group]}
    run = Run(Rollout(tmp_path / "rollout.json", record), tmp_path / "rollout.log")
    balancer(run, group, "deregister")
    balancer(run, group, "register")
    assert told.read_text().splitlines() == ["deregister gpu-01", "register gpu-01"]


@pytest.mark.parametrize(("status", "found"), [
    ("exit 0", None),
    ("exit 1", "not behind the load balancer (sh exited 1)"),
    ("sleep 5", "the load balancer's status command sh did not answer"),  # unknown is out, never in
])
def test_the_balancers_status_command_tells_a_host_taken_out_by_hand(tmp_path, monkeypatch, status, found):
    from k3ops.upgrade import steps

    monkeypatch.setattr(steps, "LB_COMMAND_TIMEOUT_SECONDS", 1)
    asked = tmp_path / "asked"
    data = {"hardware_profile": "h200x8", "ssh_hostname": "192.0.2.10", "upgrade_lb_deregister_command": ["true"],
            "upgrade_lb_register_command": ["true"],
            "upgrade_lb_status_command": ["sh", "-c", f'echo "$0" > {asked}; {status}', "{host}"]}
    said = steps.off_balancer("gpu-01", data)
    assert (said or "").startswith(found or "") and (said is None) is (found is None)
    assert asked.read_text() == "gpu-01\n"
    assert steps.off_balancer("gpu-01", {"hardware_profile": "h200x8"}) is None  # no status command: not asked


def test_a_group_whose_host_is_out_of_the_balancer_with_no_marker_is_held(tmp_path):
    """A person took it out of the balancer by hand, without a marker: never touched, never re-admitted."""
    from k3ops.upgrade.rollout import hold_hand_drained
    from k3ops.upgrade.steps import Run

    groups = [{"name": name, "hosts": [name], "state": "pending", "canary": name == "gpu-01", "to": "580.126.09",
               "failures": 0} for name in ("gpu-01", "gpu-02")]
    run = Run(Rollout(tmp_path / "rollout.json", {"id": "5f0c2a91d3e4b6a7", "to": "580.126.09", "groups": groups}),
              tmp_path / "rollout.log")
    off = "not behind the load balancer (lbctl exited 1)"
    hold_hand_drained(run, {"gpu-01": {"marker": None, "out": off, "current": False, "off_balancer": off},
                            "gpu-02": {"marker": None, "out": None, "current": False, "off_balancer": None}})
    assert [(group["state"], group["canary"]) for group in groups] == [("held", False), ("pending", True)]
    assert groups[0]["detail"].endswith(f"gpu-01: {off}, with no maintenance marker")


def test_a_model_rollout_plans_the_serving_hosts_of_one_model_and_refuses_a_branch(tmp_path, repository, capsys):
    """`k3ops upgrade model`: hosts that serve no model are listed out; hosts that serve two models are refused
    (one rollout moves one model); a branch is not a revision; none of it touches a host."""
    other = {**MODEL, "repo_id": "moonshotai/Kimi-K3-Instruct", "name": "kimi-k3-instruct"}
    fleet = inventory(tmp_path, repository, {"gpu-01": clustered("a"), "gpu-02": clustered("a"), "gpu-03": {},
                                             "gpu-04": {"model": other, "engine": clustered("b")["engine"]},
                                             "gpu-05": {"model": other, "engine": clustered("b")["engine"]}})
    to = "89abcdef" * 5
    status, out, _ = upgrade(capsys, "model", fleet, "--to", to, "--limit", "gpu-0[1-3]", "--max-unavailable", "2",
                             "--dry-run")
    assert status == 0 and f"to model revision {to}: 1 engine groups" in out, out
    assert "1. canary, then a soak: a (gpu-01, gpu-02)" in out and "gpu-03: serves no model" in out, out
    status, _, err = upgrade(capsys, "model", fleet, "--to", to, "--dry-run")
    assert status == 1 and "the selected hosts serve 2 different models" in err, err
    assert "--limit the rollout to one model's hosts" in err
    status, _, err = upgrade(capsys, "model", fleet, "--to", "main", "--limit", "gpu-01,gpu-02")
    assert status == 1 and "--to: 'main' is not a full 40-hex commit sha" in err, err
    assert not (tmp_path / "state").exists() or not list((tmp_path / "state").rglob("*.json"))
