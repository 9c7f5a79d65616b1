"""The simulated sysfs and SMBIOS layers, read by the real Debian `lspci` and `dmidecode`."""

import re
import shutil
import subprocess

import pytest

from k3ops_lab.profiles import get_profile
from k3ops_lab.sim.sysfs import DMI_TABLES, PCI_DEVICES, render_smbios, write_sysfs

needs_lspci = pytest.mark.skipif(shutil.which("lspci") is None, reason="pciutils is not installed")
needs_dmidecode = pytest.mark.skipif(shutil.which("dmidecode") is None, reason="dmidecode is not installed")
DEVICE_LINE = re.compile(r"^(?P<bdf>[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.\d) .*\[(?P<ids>[0-9a-f]{4}:[0-9a-f]{4})\]")
DUMP_TABLE_OFFSET = 32  # dmidecode --dump-bin puts the table right after a 32-byte entry point


def sysfs(tmp_path, profile, drivers=None, **faults):
    hardware = get_profile(profile).hardware("gpu-01") | faults
    write_sysfs(hardware, tmp_path / "sys", drivers)
    return hardware


def lspci(tmp_path, *args):
    result = subprocess.run(["lspci", "-A", "linux-sysfs", "-O", f"sysfs.path={tmp_path}/sys/bus/pci", *args],
                            capture_output=True, text=True, check=True)
    return result.stdout


def device_blocks(verbose_output):
    """`lspci -vv` output split into {bus id: its block}."""
    return {block.split(" ", 1)[0]: block for block in verbose_output.strip().split("\n\n")}


@needs_lspci
@pytest.mark.parametrize("profile, ids, count", [
    ("h200x8", "10de:2335", 8), ("h200x8", "10de:22a3", 4), ("h200x8", "15b3:1021", 8),
    ("h200x8", "144d:a80a", 1), ("b300x8", "10de:3182", 8), ("mi355x8", "1002:75a3", 8),
    ("gb300x4", "10de:31c2", 4), ("cpu", "144d:a80a", 1),
])
def test_lspci_lists_the_profile_devices_with_their_ids(tmp_path, profile, ids, count):
    sysfs(tmp_path, profile)
    listed = [match["ids"] for line in lspci(tmp_path, "-D", "-nn").splitlines()
              if (match := DEVICE_LINE.match(line))]
    assert listed.count(ids) == count


@needs_lspci
@pytest.mark.parametrize("profile", ["h200x8", "b300x8", "gb300x4", "cpu"])
def test_gpu_class_filter_finds_exactly_the_gpus(tmp_path, profile):
    hardware = sysfs(tmp_path, profile)
    listed = [line.split()[0] for line in lspci(tmp_path, "-D", "-d", "10de::0302").splitlines()]
    assert listed == [gpu["pci_bus_id"] for gpu in hardware["gpus"]]


@needs_lspci
@pytest.mark.parametrize("profile, speed", [("h200x8", "32GT/s"), ("b300x8", "64GT/s"), ("mi355x8", "32GT/s")])
def test_gpu_links_train_at_their_generation_and_full_width(tmp_path, profile, speed):
    hardware = sysfs(tmp_path, profile)
    blocks = device_blocks(lspci(tmp_path, "-D", "-vv"))
    for gpu in hardware["gpus"]:
        assert f"LnkSta:\tSpeed {speed}, Width x16\n" in blocks[gpu["pci_bus_id"]]
        assert "downgraded" not in blocks[gpu["pci_bus_id"]]
    link = tmp_path / "sys" / PCI_DEVICES / hardware["gpus"][0]["pci_bus_id"]
    assert (link / "current_link_speed").read_text() == f"{speed[:-4]}.0 GT/s PCIe\n"


@needs_lspci
def test_gpus_and_nics_sit_behind_their_pcie_switch(tmp_path):
    sysfs(tmp_path, "h200x8")
    paths = {line.split()[0].split("/")[-1]: line.split()[0] for line in lspci(tmp_path, "-PP").splitlines()}
    assert paths["18:00.0"] == "00:05.0/15:00.0/16:00.0/18:00.0"
    assert paths["19:00.0"] == "00:05.0/15:00.0/16:01.0/19:00.0"
    assert paths["c1:00.0"] == "00:0c.0/c1:00.0"


@needs_lspci
@pytest.mark.parametrize("enabled, flag", [(False, "SrcValid-"), (True, "SrcValid+")])
def test_acs_on_root_and_switch_downstream_ports_follows_the_bios_setting(tmp_path, enabled, flag):
    hardware = sysfs(tmp_path, "h200x8", pcie_acs_enabled=enabled)
    blocks = device_blocks(lspci(tmp_path, "-D", "-vv"))
    with_acs = {bdf for bdf, block in blocks.items() if "ACSCtl:" in block}
    downstream = {bdf for bdf, block in blocks.items() if "Express (v2) Downstream Port" in block}
    roots = {bdf for bdf, block in blocks.items() if "Express (v2) Root Port" in block}
    assert with_acs == downstream | roots
    assert len(downstream) == 2 * len(hardware["pcie_switches"])
    assert all(f"ACSCtl:\t{flag} " in blocks[bdf] for bdf in with_acs)


@needs_lspci
def test_kernel_driver_shows_only_once_bound_and_rebinding_replaces_it(tmp_path):
    hardware = sysfs(tmp_path, "h200x8")
    first, second = (gpu["pci_bus_id"] for gpu in hardware["gpus"][:2])
    assert "Kernel driver in use" not in lspci(tmp_path, "-k", "-s", first)
    write_sysfs(hardware, tmp_path / "sys", {first: "nvidia"})
    assert "Kernel driver in use: nvidia" in lspci(tmp_path, "-k", "-s", first)
    write_sysfs(hardware, tmp_path / "sys", {second: "nvidia"})
    assert "Kernel driver in use" not in lspci(tmp_path, "-k", "-s", first)
    assert "Kernel driver in use: nvidia" in lspci(tmp_path, "-k", "-s", second)
    assert "Kernel driver in use: pcieport" in lspci(tmp_path, "-k", "-s", "15:00.0")
    bound = sorted(path.name for path in (tmp_path / "sys/bus/pci/drivers/nvidia").iterdir())
    assert bound == [second]


@needs_lspci
def test_a_gpu_fallen_off_the_bus_reads_all_ones(tmp_path):
    hardware = get_profile("h200x8").hardware("gpu-01")
    hardware["gpus"][3]["fallen_off_bus"] = True
    write_sysfs(hardware, tmp_path / "sys")
    blocks = device_blocks(lspci(tmp_path, "-D", "-vv"))
    assert "!!! Unknown header type 7f" in blocks[hardware["gpus"][3]["pci_bus_id"]]
    assert "!!!" not in blocks[hardware["gpus"][2]["pci_bus_id"]]


@needs_lspci
def test_bridge_windows_cover_the_bars_behind_them(tmp_path):
    hardware = sysfs(tmp_path, "h200x8")
    blocks = device_blocks(lspci(tmp_path, "-D", "-vv"))
    gpu = blocks[hardware["gpus"][0]["pci_bus_id"]]
    bar1 = int(re.search(r"Region 1: Memory at ([0-9a-f]+) \(64-bit, prefetchable\) \[size=256G\]", gpu)[1], 16)
    window = re.search(r"Prefetchable memory behind bridge: ([0-9a-f]+)-([0-9a-f]+)", blocks["0000:16:00.0"])
    assert int(window[1], 16) <= bar1 and bar1 + (256 << 30) - 1 <= int(window[2], 16)


def dmidecode(tmp_path, hardware, *args):
    entry_point, table = render_smbios(hardware, table_address=DUMP_TABLE_OFFSET)
    dump = tmp_path / "dmi.bin"
    dump.write_bytes(entry_point.ljust(DUMP_TABLE_OFFSET, b"\0") + table)
    return subprocess.run(["dmidecode", "--from-dump", str(dump), *args],
                          capture_output=True, text=True, check=True).stdout


@needs_dmidecode
@pytest.mark.parametrize("profile", ["h200x8", "gb300x4", "mi355x8", "cpu"])
def test_dmidecode_reads_system_and_bios_strings(tmp_path, profile):
    system = get_profile(profile).hardware("gpu-01")["system"]
    hardware = {"system": system}
    for keyword, value in (("system-product-name", "product_name"), ("system-manufacturer", "manufacturer"),
                           ("system-serial-number", "serial_number"), ("system-uuid", "uuid"),
                           ("bios-vendor", "bios_vendor"), ("bios-version", "bios_version"),
                           ("bios-release-date", "bios_release_date")):
        assert dmidecode(tmp_path, hardware, "-s", keyword) == system[value] + "\n"


@needs_dmidecode
def test_dmidecode_decodes_the_bios_structure(tmp_path):
    system = get_profile("h200x8").hardware("gpu-01")["system"]
    output = dmidecode(tmp_path, {"system": system}, "-t", "bios")
    assert "SMBIOS 3.3.0 present." in output
    assert "Handle 0x0000, DMI type 0, 26 bytes\nBIOS Information\n" in output
    assert f"\tVendor: {system['bios_vendor']}\n\tVersion: 2.1\n\tRelease Date: 03/12/2024\n" in output
    assert "\tBIOS Revision: 2.1\n" in output and "UEFI is supported" in output


def test_sysfs_tables_are_an_smbios3_entry_point_and_its_table(tmp_path):
    write_sysfs(get_profile("h200x8").hardware("gpu-01"), tmp_path / "sys")
    entry_point = (tmp_path / "sys" / DMI_TABLES / "smbios_entry_point").read_bytes()
    table = (tmp_path / "sys" / DMI_TABLES / "DMI").read_bytes()
    assert entry_point[:5] == b"_SM3_" and sum(entry_point) % 256 == 0
    assert int.from_bytes(entry_point[0x0C:0x10], "little") == len(table)
    assert table.endswith(bytes([127, 4, 2, 0, 0, 0]))
