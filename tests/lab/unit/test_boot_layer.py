"""The boot layer loads only what a driver package staged, and only for hardware that is present; a boot
clears the faults a reboot clears; Secure Boot refuses the unsigned modules; modprobe loads the GPU modules."""

import json
import os

import pytest

from k3ops_lab.sim import amd_smi, boot, nvidia_smi, rocm_smi
from k3ops_lab.sim.host import KERNEL_MODULE_STAGING

from ..fake_host import DRIVER, amd_host, bare_host, nvidia_host, run, write


def test_nothing_is_loaded_before_a_driver_is_installed(tmp_path):
    host, hardware = bare_host(tmp_path, "h200x8")
    assert boot.load_kernel_modules(host) == {}
    drivers = boot.kernel_drivers(hardware, {})
    assert all(gpu["pci_bus_id"] not in drivers for gpu in hardware["gpus"])
    assert drivers[hardware["nics"][0]["pci_bus_id"]] == "mlx5_core"


def test_staged_open_module_loads_with_its_version_and_taint(tmp_path):
    host, hardware = bare_host(tmp_path, "h200x8", staged_modules={"nvidia": {"version": "580.105.08", "flavour": "open"}})
    assert boot.load_kernel_modules(host) == {"nvidia": "580.105.08"}
    assert host.nvidia_module_version() == "580.105.08"
    assert (tmp_path / "sys/module/nvidia/taint").read_text().strip() == "OE"
    drivers = boot.kernel_drivers(hardware, {"nvidia": "580.105.08"})
    assert {drivers[gpu["pci_bus_id"]] for gpu in hardware["gpus"]} == {"nvidia"}


def test_proprietary_module_taints_the_kernel(tmp_path):
    host, _ = bare_host(tmp_path, "b300x8", staged_modules={"nvidia": {"version": "580.126.09", "flavour": "proprietary"}})
    boot.load_kernel_modules(host)
    assert (tmp_path / "sys/module/nvidia/taint").read_text().strip() == "POE"


def test_a_module_for_absent_hardware_does_not_load(tmp_path):
    host, _ = bare_host(tmp_path, "mi355x8", staged_modules={"nvidia": {"version": "580.105.08", "flavour": "open"},
                                              "amdgpu": {"version": "6.14.14", "flavour": "dkms"}})
    assert boot.load_kernel_modules(host) == {"amdgpu": "6.14.14"}
    assert host.nvidia_module_version() is None


def test_a_gpu_fallen_off_the_bus_loses_its_driver(tmp_path):
    host, hardware = bare_host(tmp_path, "h200x8")
    hardware["gpus"][3]["fallen_off_bus"] = True
    drivers = boot.kernel_drivers(hardware, {"nvidia": "580.105.08"})
    assert hardware["gpus"][3]["pci_bus_id"] not in drivers
    assert drivers[hardware["gpus"][2]["pci_bus_id"]] == "nvidia"


def test_secure_boot_variable_is_laid_out_as_the_kernel_sysfs_interface(tmp_path):
    host, _ = bare_host(tmp_path, "h200x8")
    boot.write_secure_boot_state(host, True)
    variable = tmp_path / f"sys/firmware/efi/vars/SecureBoot-{boot.EFI_GLOBAL_VARIABLE}"
    raw = (variable / "raw_var").read_bytes()
    assert len(raw) == 2084  # sizeof(struct efi_variable) on 64-bit
    assert raw[:20] == "SecureBoot".encode("utf-16-le") and raw[1040:1048] == (1).to_bytes(8, "little")
    assert raw[1048] == 1 and (variable / "data").read_bytes() == b"\x01"


def test_kernel_command_line_is_what_grub_defaults_ask_for(tmp_path):
    host, _ = bare_host(tmp_path, "mi355x8")
    assert "iommu=pt" not in boot.kernel_command_line(host)
    (tmp_path / "etc/default").mkdir(parents=True)
    (tmp_path / "etc/default/grub").write_text('GRUB_CMDLINE_LINUX=""\nGRUB_CMDLINE_LINUX_DEFAULT="quiet iommu=pt"\n')
    line = boot.kernel_command_line(host)
    assert line.startswith("BOOT_IMAGE=/boot/vmlinuz-") and line.endswith(" ro quiet iommu=pt")


def test_sysctl_d_values_apply_in_systemd_sysctl_order(tmp_path):
    host, _ = bare_host(tmp_path, "h200x8")
    for relative, content in (("usr/lib/sysctl.d/50-default.conf", "kernel.numa_balancing = 1\n"),
                              ("etc/sysctl.d/90-k3ops-gpu.conf", "# GPU hosts\nkernel.numa_balancing = 0\n")):
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text(content)
    assert boot.configured_sysctls(host) == {"kernel.numa_balancing": "0"}


PEERMEM = {"nvidia": {"version": "580.126.09", "flavour": "open"},
           "nvidia_peermem": {"version": "580.126.09", "flavour": "open"}}


def test_peermem_loads_at_boot_only_when_modules_load_d_names_it(tmp_path):
    host, _ = bare_host(tmp_path, "h200x8", staged_modules=PEERMEM)
    boot.load_kernel_modules(host)
    assert boot.modules_to_load_at_boot(host) == []
    (tmp_path / "etc/modules-load.d").mkdir(parents=True)
    (tmp_path / "etc/modules-load.d/k3ops.conf").write_text("# GPUDirect RDMA\nnvidia-peermem\n")
    assert boot.modules_to_load_at_boot(host) == ["nvidia_peermem"]
    assert boot.load_on_demand_module(host, "nvidia_peermem") is None
    assert (tmp_path / "sys/module/nvidia_peermem/initstate").read_text() == "live\n"


@pytest.mark.parametrize("module", ["nvidia_peermem", "nvidia_uvm"])
def test_modprobe_of_the_drivers_other_modules_needs_the_nvidia_module_first(tmp_path, capsys, module):
    host, _ = bare_host(tmp_path, "h200x8", staged_modules={**PEERMEM, module: PEERMEM["nvidia"]})
    name = module.replace("_", "-")
    assert boot.modprobe_main([name], host) == 1
    assert f"modprobe: ERROR: could not insert '{module}'" in capsys.readouterr().err
    boot.load_kernel_modules(host)
    assert boot.modprobe_main([name], host) == 0
    assert boot.modprobe_main([name], host) == 0  # loaded already: nothing to do, as kmod
    assert (tmp_path / f"sys/module/{module}/version").read_text().strip() == "580.126.09"


def test_modprobe_without_the_driver_package_finds_no_module(tmp_path, capsys):
    host, _ = bare_host(tmp_path, "h200x8", staged_modules={"nvidia": PEERMEM["nvidia"]})
    boot.load_kernel_modules(host)
    assert boot.modprobe_main(["nvidia-peermem"], host) == 1
    assert "Module nvidia_peermem not found" in capsys.readouterr().err


@pytest.fixture
def device_nodes(monkeypatch):
    """The character devices the boot layer makes, by name (mknod needs CAP_MKNOD, which tests may lack)."""
    made = {}

    def mknod(path, mode=0o600, device=0):
        made[os.path.basename(path)] = (os.major(device), os.minor(device))
        open(path, "w").close()

    monkeypatch.setattr(os, "mknod", mknod)
    return made


@pytest.fixture
def container_boot(monkeypatch, tmp_path):
    """boot() on a container host (nspawn's marker in /run) without the steps that mount over /proc and probe
    block devices (the lab host's own)."""
    write(tmp_path, boot.CONTAINER_MARKER, "systemd-nspawn\n")
    for step in ("boot_with_command_line", "simulate_sysctls", "simulate_proc_devices", "refresh_disk_links",
                 "mount_fstab_block_devices"):
        monkeypatch.setattr(boot, step, lambda *args: None)


NVIDIA_BUILD = {"nvidia": {"version": DRIVER, "flavour": "open"}}


def bound_driver(root, bus_id):
    link = root / "sys/bus/pci/devices" / bus_id / "driver"
    return os.path.basename(os.readlink(link)) if link.is_symlink() else None


def test_a_boot_clears_the_transient_faults_and_keeps_the_inforom(tmp_path):
    faults = {"nvlink_down_links": {"3": [0, 1]}, "xgmi_down_links": {"2": [0]}, "remapped_rows_pending": [5],
              "remapped_rows": {"1": 2}, "row_remap_failure": [6], "nic_throughput_share": 0.5}
    host, hardware = bare_host(tmp_path, "h200x8", faults=faults)
    hardware["gpus"][3]["fallen_off_bus"] = True
    host.write_hardware(hardware)
    assert boot.clear_transient_faults(host)
    after = host.hardware()
    assert not any("fallen_off_bus" in gpu for gpu in after["gpus"])
    assert after["faults"] == {"remapped_rows": {"1": 2, "5": 1}, "row_remap_failure": [6], "nic_throughput_share": 0.5}
    assert after["gpus"][3] == {key: value for key, value in hardware["gpus"][3].items() if key != "fallen_off_bus"}
    document = tmp_path / "etc/k3ops-lab/hardware.json"
    written = document.stat().st_mtime_ns
    assert not boot.clear_transient_faults(host) and document.stat().st_mtime_ns == written


def test_boot_sees_the_healthy_hardware(tmp_path, container_boot, device_nodes):
    host, hardware = bare_host(tmp_path, "h200x8", staged_modules=NVIDIA_BUILD)
    hardware["gpus"][3]["fallen_off_bus"] = True
    host.write_hardware(hardware)
    boot.boot(host)
    assert bound_driver(tmp_path, hardware["gpus"][3]["pci_bus_id"]) == "nvidia"
    assert device_nodes["nvidia3"] == (195, 3) and device_nodes["nvidiactl"] == (195, 255)
    assert len(host.visible_gpus()) == 8


# A controller's /proc/devices (Debian 12, 6.1 kernel), as the kernel prints it.
KERNEL_DEVICES = """Character devices:
  1 mem
  4 /dev/vc/0
 10 misc
226 drm
254 gpiochip

Block devices:
  7 loop
259 blkext
"""


def test_proc_devices_lists_the_drivers_character_devices_in_major_order():
    listed = boot.proc_devices(KERNEL_DEVICES, list(boot.NVIDIA_CHARACTER_DEVICES))
    character, block = listed.split("\n\n")
    assert character.splitlines() == ["Character devices:", "  1 mem", "  4 /dev/vc/0", " 10 misc", "195 nvidia",
                                      "226 drm", "254 gpiochip", "509 nvidia-caps-imex-channels", "510 nvidia-uvm"]
    assert block == "Block devices:\n  7 loop\n259 blkext\n"
    assert boot.proc_devices(KERNEL_DEVICES, []) == KERNEL_DEVICES


def test_a_host_with_its_own_kernel_gets_only_the_hardware(tmp_path, monkeypatch, device_nodes):
    """On a VM host the boot layer asks the real kmod for the GPUs' driver, as udev would on their modalias,
    binds the simulated GPUs to the module the kernel shows loaded, makes the device nodes as nvidia-modprobe
    does, and leaves the kernel's part (command line, sysctl, modules-load, udev) to the kernel."""
    host, hardware = bare_host(tmp_path, "h200x8")
    hardware["gpus"][3]["fallen_off_bus"] = True
    host.write_hardware(hardware)
    asked = tmp_path / "modprobe-asked"
    modprobe = tmp_path / "kmod-modprobe"
    # kmod's modprobe, as far as the kernel goes: it loads the module (its /sys/module entry appears).
    modprobe.write_text(f"#!/bin/sh\necho \"$@\" >> {asked}\nmkdir -p {tmp_path}/sys/module/nvidia\n"
                        f"echo {DRIVER} > {tmp_path}/sys/module/nvidia/version\n"
                        f"echo live > {tmp_path}/sys/module/nvidia/initstate\n")
    modprobe.chmod(0o755)
    monkeypatch.setattr(boot, "KMOD_MODPROBE", str(modprobe))
    mounted = []
    monkeypatch.setattr(boot, "mount_simulated_sysfs", lambda host: mounted.append(host))
    for step in ("boot_with_command_line", "simulate_sysctls", "load_kernel_modules", "load_on_demand_modules_at_boot",
                 "refresh_disk_links", "mount_fstab_block_devices"):
        monkeypatch.setattr(boot, step, lambda host, step=step: pytest.fail(f"{step} on a host with its own kernel"))
    boot.boot(host)
    assert asked.read_text() == "--quiet nvidia\n"
    assert mounted == [host]
    assert all(bound_driver(tmp_path, gpu["pci_bus_id"]) == "nvidia" for gpu in hardware["gpus"])
    assert device_nodes["nvidia7"] == (195, 7) and device_nodes["nvidiactl"] == (195, 255)
    assert (tmp_path / f"sys/firmware/efi/vars/SecureBoot-{boot.EFI_GLOBAL_VARIABLE}/data").read_bytes() == b"\x00"


def test_a_host_with_its_own_kernel_and_no_driver_yet_binds_nothing(tmp_path, monkeypatch, device_nodes, capsys):
    """Before the driver deploy kmod finds no nvidia module: nothing is bound, no node made, nothing logged."""
    host, hardware = bare_host(tmp_path, "h200x8")
    monkeypatch.setattr(boot, "KMOD_MODPROBE", "/bin/false")
    monkeypatch.setattr(boot, "mount_simulated_sysfs", lambda host: None)
    boot.boot(host)
    assert bound_driver(tmp_path, hardware["gpus"][0]["pci_bus_id"]) is None
    assert not device_nodes
    assert capsys.readouterr().err == ""


def test_secure_boot_refuses_the_unsigned_modules(tmp_path, capsys, container_boot, device_nodes):
    host, hardware = nvidia_host(tmp_path, module=None)
    for module, build in {**PEERMEM, "nvidia": {"version": DRIVER, "flavour": "open"}}.items():
        write(tmp_path, f"{KERNEL_MODULE_STAGING}/{module}", json.dumps(build))
    write(tmp_path, "etc/modules-load.d/k3ops.conf", "nvidia-peermem\n")
    host.write_hardware({**hardware, "secure_boot": True})
    boot.boot(host)
    assert capsys.readouterr().err.splitlines() == [
        "k3ops-lab: kernel: Loading of unsigned module is rejected",
        "k3ops-lab: systemd-udevd: Failed to insert module 'nvidia': Key was rejected by service",
        "k3ops-lab: kernel: Loading of unsigned module is rejected",
        "k3ops-lab: systemd-modules-load: Failed to insert module 'nvidia_peermem': Key was rejected by service",
    ]
    assert host.nvidia_module_version() is None and not device_nodes
    assert bound_driver(tmp_path, hardware["gpus"][0]["pci_bus_id"]) is None
    assert (tmp_path / f"sys/firmware/efi/vars/SecureBoot-{boot.EFI_GLOBAL_VARIABLE}/data").read_bytes() == b"\x01"
    status, out, _ = run(nvidia_smi, capsys, host, "-L")
    assert status == 9 and out.startswith("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA "
                                          "driver. Make sure that the latest NVIDIA driver is installed and running.")
    for module in ("nvidia", "nvidia-peermem"):
        status, _, err = run(boot.modprobe_main, capsys, host, module)
        name = module.replace("-", "_")
        assert status == 1 and err == f"modprobe: ERROR: could not insert '{name}': Key was rejected by service\n"
    assert host.nvidia_module_version() is None


def test_modprobe_loads_the_staged_nvidia_module_as_a_boot_would(tmp_path, capsys, device_nodes):
    host, hardware = nvidia_host(tmp_path, module=None)
    write(tmp_path, f"{KERNEL_MODULE_STAGING}/nvidia", json.dumps(NVIDIA_BUILD["nvidia"]))
    assert run(nvidia_smi, capsys, host, "-L")[0] == 9
    status, out, err = run(boot.modprobe_main, capsys, host, "nvidia")
    assert (status, out, err) == (0, "", "")
    assert host.nvidia_module_version() == DRIVER
    assert (tmp_path / "sys/module/nvidia/taint").read_text() == "OE\n"
    assert (tmp_path / "sys/module/nvidia/initstate").read_text() == "live\n"
    assert {bound_driver(tmp_path, gpu["pci_bus_id"]) for gpu in hardware["gpus"]} == {"nvidia"}
    assert bound_driver(tmp_path, hardware["nvswitches"][0]["pci_bus_id"]) == "nvidia-nvswitch"
    assert bound_driver(tmp_path, hardware["nics"][0]["pci_bus_id"]) == "mlx5_core"
    assert {f"nvidia{index}" for index in range(8)} | {"nvidiactl", "nvidia-uvm"} == set(device_nodes)
    status, out, _ = run(nvidia_smi, capsys, host, "-L")
    assert status == 0 and len(out.splitlines()) == 8
    assert run(boot.modprobe_main, capsys, host, "nvidia")[:2] == (0, "")  # loaded already: nothing to do
    assert boot.modprobe_main(["nvidia-peermem"], host) == 1  # not staged here: kmod's error, below
    assert "Module nvidia_peermem not found" in capsys.readouterr().err


def test_modprobe_loads_the_staged_amdgpu_module(tmp_path, capsys, device_nodes):
    host, _ = amd_host(tmp_path, amdgpu="")
    write(tmp_path, f"{KERNEL_MODULE_STAGING}/amdgpu", '{"version": "6.14.14", "flavour": "dkms"}')
    assert not (tmp_path / "sys/module/amdgpu/initstate").exists()
    assert run(rocm_smi, capsys, host, "--showproductname")[2].startswith("ERROR:root:Driver not initialized")
    assert run(boot.modprobe_main, capsys, host, "amdgpu")[0] == 0
    assert (tmp_path / "sys/module/amdgpu/initstate").read_text() == "live\n"
    assert host.amdgpu_module_version() == "6.14.14"
    assert device_nodes["kfd"] == (511, 0) and device_nodes["renderD128"] == (226, 128)
    status, out, err = run(rocm_smi, capsys, host, "--showproductname")
    assert status == 0 and "Card Series" in out and not err
    assert run(amd_smi, capsys, host, "version")[0] == 0


def test_modprobe_leaves_removal_and_unstaged_modules_to_kmod(tmp_path, monkeypatch):
    host, _ = bare_host(tmp_path, "h200x8", staged_modules=NVIDIA_BUILD)
    calls = []

    def execv(path, args):
        calls.append(args)
        raise SystemExit(0)

    monkeypatch.setattr(os, "execv", execv)
    for argv in (["-r", "nvidia"], ["amdgpu"], ["bonding"]):
        with pytest.raises(SystemExit):
            boot.modprobe_main(argv, host)
    assert calls == [[boot.KMOD_MODPROBE, "-r", "nvidia"], [boot.KMOD_MODPROBE, "amdgpu"],
                     [boot.KMOD_MODPROBE, "bonding"]]
