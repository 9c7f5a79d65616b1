"""Simulated ibstat and ibv_devinfo against real captures, including a port that is down."""

import re

import pytest

from k3ops_lab.sim import infiniband

from ...conftest import real_output
from ..fake_host import bare_host, run

IBSTAT_ROCE = "infiniband/ibstat_h100-node_cx7-400g-roce_plus_cx6dx-100g_ethernet.txt"
IBSTAT_IB = "infiniband/ibstat_h100-node_cx7-mt4129_400g-ib_all-active.txt"
DEVINFO_DOWN = "infiniband/ibv_devinfo_h100-node_cx7-mt4129_ib_port-down_excerpt.txt"
DEVINFO_ACTIVE = "infiniband/ibv_devinfo_cx7-vf-4126_ib_port-active_excerpt.txt"
CA_LINE = re.compile(r"^CA '(?P<name>[^']+)'$")
FIELD = re.compile(r"^(?P<indent>\t*)(?P<key>[^:\t]+):(?: (?P<value>.*))?$")
DEVINFO_VALUE = re.compile(r"^(?P<prefix>\s*[^:]+:\s+)(?P<value>\S.*)$")


def ibstat_blocks(text):
    """{CA name: [(indent, key, value)]}: how a parser of real ibstat output reads it."""
    blocks, name = {}, None
    for line in text.rstrip("\n").split("\n"):
        if match := CA_LINE.match(line):
            name = match["name"]
            blocks[name] = []
        else:
            field = FIELD.match(line)
            blocks[name].append((len(field["indent"]), field["key"], field["value"]))
    return blocks


def layout(fields):
    return [(indent, key) for indent, key, _ in fields]


def values(fields):
    return {key: value for _, key, value in fields}


def test_ibstat_infiniband_blocks_match_the_real_layout_and_values(tmp_path, capsys):
    host, hardware = bare_host(tmp_path)
    _, out, _ = run(infiniband.ibstat_main, capsys, host)
    real = ibstat_blocks(real_output(IBSTAT_IB).replace(" " * 8, "\t"))
    sim = ibstat_blocks(out)
    assert list(sim) == sorted(nic["name"] for nic in hardware["nics"])
    reference = values(real["mlx5_0"])
    for fields in sim.values():
        assert layout(fields) == layout(real["mlx5_0"])
        port = values(fields)
        for key in ("CA type", "Number of ports", "Firmware version", "Hardware version", "State",
                    "Physical state", "Rate", "LMC", "SM lid", "Capability mask", "Link layer"):
            assert port[key] == reference[key], key
        assert port["Port GUID"] == port["Node GUID"] == port["System image GUID"]
        assert 0 < int(port["Base lid"]) < 0xC000


def test_ibstat_roce_ports_match_the_real_ethernet_capture(tmp_path, capsys):
    host, _ = bare_host(tmp_path, link_layer="Ethernet")
    _, out, _ = run(infiniband.ibstat_main, capsys, host, "mlx5_3")
    real = ibstat_blocks(real_output(IBSTAT_ROCE))
    sim = ibstat_blocks(out)
    assert list(sim) == ["mlx5_3"]
    assert layout(sim["mlx5_3"]) == layout(real["mlx5_0"])
    port, reference = values(sim["mlx5_3"]), values(real["mlx5_0"])
    for key in ("Base lid", "SM lid", "Capability mask", "Link layer", "State", "Rate"):
        assert port[key] == reference[key], key


def testroce_port_guid_is_derived_from_the_node_guid_as_on_real_cx7(tmp_path):
    real = ibstat_blocks(real_output(IBSTAT_ROCE))
    cx7 = [values(fields) for fields in real.values() if values(fields)["CA type"] == "MT4129"]
    assert cx7
    for port in cx7:
        assert infiniband.roce_port_guid(int(port["Node GUID"], 16)) == int(port["Port GUID"], 16)


def test_ibstat_lists_cas_and_rejects_unknown_ones(tmp_path, capsys):
    host, hardware = bare_host(tmp_path)
    assert run(infiniband.ibstat_main, capsys, host, "-l")[1].split() == sorted(nic["name"] for nic in hardware["nics"])
    status, out, err = run(infiniband.ibstat_main, capsys, host, "mlx5_9")
    assert status == 255 and out == ""
    assert re.fullmatch(r"ibpanic: \[\d+\] main: 'mlx5_9' IB device can't be found: No such file or directory\n", err)


@pytest.mark.parametrize("physical_state", [None, "Disabled"])
def test_ibstat_shows_a_down_port(tmp_path, capsys, physical_state):
    changes = {"port_state": "Down"} | ({"physical_state": physical_state} if physical_state else {})
    host, _ = bare_host(tmp_path, **changes)
    _, out, _ = run(infiniband.ibstat_main, capsys, host, "mlx5_0")
    port = values(ibstat_blocks(out)["mlx5_0"])
    assert (port["State"], port["Physical state"]) == ("Down", physical_state or "Polling")
    assert (port["Base lid"], port["SM lid"]) == ("65535", "0")


def test_ibv_devinfo_down_port_reproduces_the_real_capture(tmp_path, capsys):
    real = real_output(DEVINFO_DOWN)
    real_values = {m["prefix"].strip(): m["value"] for line in real.splitlines() if (m := DEVINFO_VALUE.match(line))}
    host, _ = bare_host(tmp_path, port_state="Down", fw_version=real_values["fw_ver:"],
                      node_guid="0x" + real_values["node_guid:"].replace(":", ""))
    status, out, _ = run(infiniband.ibv_devinfo_main, capsys, host, "-d", "mlx5_0")
    assert status == 0
    assert out.expandtabs(8) == real + "\n"


def test_ibv_devinfo_active_port_has_the_real_layout(tmp_path, capsys):
    host, hardware = bare_host(tmp_path)
    _, out, _ = run(infiniband.ibv_devinfo_main, capsys, host)
    blocks = out.expandtabs(8).rstrip("\n").split("\n\n")
    assert [block.split("\n")[0] for block in blocks] == [f"hca_id: {nic['name']}" for nic in hardware["nics"]]
    real = [DEVINFO_VALUE.match(line) for line in real_output(DEVINFO_ACTIVE).rstrip("\n").split("\n")]
    for block in blocks:
        sim = [DEVINFO_VALUE.match(line) for line in block.split("\n")]
        assert [m["prefix"] for m in sim] == [m["prefix"] for m in real]
        fields = {m["prefix"].strip(): m["value"] for m in sim}
        assert fields["state:"] == "PORT_ACTIVE (4)" and fields["active_mtu:"] == "4096 (5)"
        assert fields["sm_lid:"] == "1" and fields["vendor_part_id:"] == "4129"


def test_ibv_devinfo_lists_and_rejects_unknown_devices(tmp_path, capsys):
    host, _ = bare_host(tmp_path)
    _, out, _ = run(infiniband.ibv_devinfo_main, capsys, host, "-l")
    assert out.startswith("8 HCAs found:\n\tmlx5_0\n") and out.endswith("\tmlx5_7\n\n")
    status, out, err = run(infiniband.ibv_devinfo_main, capsys, host, "-d", "mlx5_9")
    assert (status, out, err) == (255, "", "IB device 'mlx5_9' wasn't found\n")
