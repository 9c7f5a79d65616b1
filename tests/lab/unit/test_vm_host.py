"""The VM backend's pieces that need no VM: the hosts `lab up` is asked for, a host's seed disk and network
file, and the QEMU command line (no way out, the root disk booted, the NVMe devices emulated)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile

import pytest

from k3ops_lab import faults, lab, state, vm
from k3ops_lab.host_files import HostFile


@pytest.mark.parametrize("count, backends, nvme, message", [
    (2, ["vm", "container", "vm"], None, "3 backends given for 2 hosts"),
    (1, ["kvm"], None, "unknown backend kvm"),
    (2, ["vm", "container"], 2, "gpu-02: --nvme-devices 2 needs the vm backend"),
    (1, [], 2, "gpu-01: --nvme-devices 2 needs the vm backend"),
    (1, ["vm"], 0, "--nvme-devices must be at least 1"),
])
def test_hosts_that_cannot_be_made_are_refused_before_anything_starts(count, backends, nvme, message):
    with pytest.raises(lab.LabError, match=message):
        lab._wanted_hosts(count, [], backends, nvme)


def test_one_backend_is_every_hosts_and_several_go_in_order():
    assert [host.backend for host in lab._wanted_hosts(3, ["cpu"], ["vm"], None)] == ["vm"] * 3
    hosts = lab._wanted_hosts(2, ["cpu", "mi355x8"], ["container", "vm"], None)
    assert [(host.name, host.profile, host.backend) for host in hosts] == [
        ("gpu-01", "cpu", "container"), ("gpu-02", "mi355x8", "vm")]


def test_a_vm_hosts_nvme_devices_are_numbered_one_bus_apart():
    host = state.LabHost(name="gpu-01", profile="cpu", address=state.host_address(0), backend="vm", nvme_devices=3)
    disks = host.hardware(nvme_size_gib=2)["nvme"]
    assert [(disk["name"], disk["pci_bus_id"], disk["size_gib"]) for disk in disks] == [
        ("nvme0n1", "0000:c1:00.0", 2), ("nvme1n1", "0000:c2:00.0", 2), ("nvme2n1", "0000:c3:00.0", 2)]
    assert len({disk["serial"] for disk in disks}) == 3


def test_the_seed_keeps_modes_and_roots_ssh_directory_private():
    files = {"root/.ssh/authorized_keys": HostFile(b"ssh-ed25519 AAAA lab\n", 0o600),
             "etc/hostname": HostFile(b"gpu-01\n")}
    with tarfile.open(fileobj=io.BytesIO(vm._tar(files))) as archive:
        members = {member.name: member for member in archive.getmembers()}
        assert archive.extractfile("etc/hostname").read() == b"gpu-01\n"
    assert {name: (member.isdir(), oct(member.mode), member.uid) for name, member in members.items()} == {
        "etc": (True, "0o755", 0), "root": (True, "0o755", 0), "root/.ssh": (True, "0o700", 0),
        "etc/hostname": (False, "0o644", 0), "root/.ssh/authorized_keys": (False, "0o600", 0)}


def test_the_network_file_gives_the_lab_address_and_nothing_from_the_wire():
    host = state.LabHost(name="gpu-03", profile="cpu", address=state.host_address(2), backend="vm")
    text = vm.network_file(host)
    assert f"MACAddress={vm.mac_address(host)}" in text and f"Address={host.address}/24" in text
    assert "Gateway" not in text and "DNS" not in text and "IPv6AcceptRA=no" in text


def test_the_command_line_has_no_default_nic_and_boots_the_root_disk(tmp_path, monkeypatch):
    monkeypatch.setattr(state, "STATE_DIR", tmp_path)
    monkeypatch.setattr(vm, "accelerator", lambda kernel: "tcg")
    host = state.LabHost(name="gpu-01", profile="cpu", address=state.host_address(0), backend="vm", nvme_devices=2)
    command = vm.command(host, tmp_path / "image")
    # No NIC but the tap: QEMU's default NIC (user networking, NAT to the world) is off, and no other.
    assert "-nodefaults" in command and command.count("-netdev") == 1 and "-nic" not in command
    assert command[command.index("-netdev") + 1].startswith("tap,id=lab,ifname=k3t-gpu-01,script=no")
    assert "virtio-blk-pci,drive=root,bootindex=0" in command
    assert [word for word in command if word.startswith("nvme,")] == [
        f"nvme,drive=nvme{index}n1,serial={disk['serial']}" for index, disk in enumerate(host.hardware()["nvme"])]


def test_each_fault_is_refused_with_the_reason_on_the_backend_that_cannot_show_it():
    """The simulated modules are a container host's; the driver's kernel log is a VM host's."""
    vm_host = state.LabHost(name="gpu-01", profile="h200x8", address=state.host_address(0), backend="vm")
    container_host = state.LabHost(name="gpu-01", profile="h200x8", address=state.host_address(0))
    assert "this VM host's kernel has its own" in faults.applies(faults.FAULTS["driver-mismatch"], vm_host)
    assert faults.applies(faults.FAULTS["driver-mismatch"], container_host) is None
    for name in ("gpu-lost-xid", "gsp-timeout"):
        assert "a container host's kernel (and log) is the controller's" in \
            faults.applies(faults.FAULTS[name], container_host)
        assert faults.applies(faults.FAULTS[name], vm_host) is None
    assert faults.applies(faults.FAULTS["gpu-lost"], vm_host) is None  # the hardware's only: any host
    assert faults.applies(faults.FAULTS["gpu-lost"], container_host) is None


def test_a_second_lab_instance_shares_no_name_address_or_apt_cache_with_the_first():
    """What two labs at once on one controller would fight over, as each instance names it."""
    names = ("STATE_DIR", "SUBNET_PREFIX", "BRIDGE", "NETNS_PREFIX", "VETH_PREFIX", "TAP_PREFIX", "CGROUP",
             "APT_CACHE_DIR")
    script = "from k3ops_lab import state; print(repr([str(getattr(state, n)) for n in %r]))" % (names,)
    values = {instance: eval(subprocess.run([sys.executable, "-c", script], env={**os.environ, "K3OPS_LAB_INSTANCE":
                                                                              instance}, capture_output=True, text=True,
                                            check=True).stdout) for instance in ("0", "1")}
    for first, second in zip(values["0"], values["1"], strict=True):
        assert first != second and not second.startswith(first + "/")
    assert len(f"{values['1'][names.index('VETH_PREFIX')]}gpu-01") <= 15  # a link name's limit
    assert subprocess.run([sys.executable, "-c", "import k3ops_lab.state"], env={**os.environ,
                          "K3OPS_LAB_INSTANCE": "12"}, capture_output=True, text=True).stderr.strip().endswith(
        "K3OPS_LAB_INSTANCE must be a number from 0 to 9, not '12'")
