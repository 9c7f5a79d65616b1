"""The boot layer loads only what a driver package staged, and only for hardware that is present."""

from k3ops.lab.sim import boot

from ..fake_host import bare_host


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


def test_modprobe_of_peermem_needs_the_nvidia_module_first(tmp_path, capsys):
    host, _ = bare_host(tmp_path, "h200x8", staged_modules=PEERMEM)
    assert boot.modprobe_main(["nvidia-peermem"], host) == 1
    assert "modprobe: ERROR: could not insert 'nvidia_peermem'" in capsys.readouterr().err
    boot.load_kernel_modules(host)
    assert boot.modprobe_main(["nvidia-peermem"], host) == 0
    assert boot.modprobe_main(["nvidia-peermem"], host) == 0  # loaded already: nothing to do, as kmod
    assert (tmp_path / "sys/module/nvidia_peermem/version").read_text().strip() == "580.126.09"


def test_modprobe_without_the_driver_package_finds_no_module(tmp_path, capsys):
    host, _ = bare_host(tmp_path, "h200x8", staged_modules={"nvidia": PEERMEM["nvidia"]})
    boot.load_kernel_modules(host)
    assert boot.modprobe_main(["nvidia-peermem"], host) == 1
    assert "Module nvidia_peermem not found" in capsys.readouterr().err
