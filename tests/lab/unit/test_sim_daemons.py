"""The simulated daemons refuse to start where their real counterparts would: fabric manager on an
NVLink 5 board without the subnet manager at its version, IMEX outside an NVLink domain or without nodes."""

import pytest

from k3ops_lab.sim import daemons
from k3ops_lab.sim.host import PACKAGE_VERSIONS

from ..fake_host import nvidia_host, write

DRIVER = "580.126.09"


@pytest.fixture(autouse=True)
def _no_serving(monkeypatch):
    """A daemon that passes its checks serves until stopped: here it returns at once."""
    monkeypatch.setattr(daemons, "_serve_until_stopped", lambda cleanup=None: 0)


def test_fabric_manager_on_nvlink_5_needs_the_subnet_manager_at_its_version(tmp_path, capsys):
    host, _ = nvidia_host(tmp_path, "b300x8", driver=DRIVER, module=DRIVER)
    write(tmp_path, f"{PACKAGE_VERSIONS}/nvidia-fabricmanager", DRIVER + "\n")
    (tmp_path / "var/log").mkdir(parents=True)
    assert daemons.fabricmanager_main([], host) == 1
    assert "nvlsm" in capsys.readouterr().err
    write(tmp_path, f"{PACKAGE_VERSIONS}/nvlsm", "580.105.08\n")
    assert daemons.fabricmanager_main([], host) == 1
    write(tmp_path, f"{PACKAGE_VERSIONS}/nvlsm", DRIVER + "\n")
    assert daemons.fabricmanager_main([], host) == 0


def test_fabric_manager_on_hopper_needs_no_subnet_manager(tmp_path):
    host, _ = nvidia_host(tmp_path, "h200x8", driver=DRIVER, module=DRIVER)
    write(tmp_path, f"{PACKAGE_VERSIONS}/nvidia-fabricmanager", DRIVER + "\n")
    (tmp_path / "var/log").mkdir(parents=True)
    assert daemons.fabricmanager_main([], host) == 0


def imex_host(tmp_path, profile, nodes):
    host, _ = nvidia_host(tmp_path, profile, driver=DRIVER, module=DRIVER)
    write(tmp_path, daemons.IMEX_CONFIG, "IMEX_NODE_CONFIG_FILE=/etc/nvidia-imex/nodes_config.cfg\n")
    write(tmp_path, "etc/nvidia-imex/nodes_config.cfg", nodes)
    return host


def test_imex_runs_on_an_nvlink_domain_tray_with_its_nodes(tmp_path):
    assert daemons.imex_main([], imex_host(tmp_path, "gb300x4", "10.0.0.11\n10.0.0.12\n")) == 0


def test_imex_without_nodes_does_not_start(tmp_path, capsys):
    assert daemons.imex_main([], imex_host(tmp_path, "gb300x4", "")) == 1
    assert "names no node" in capsys.readouterr().err


def test_imex_outside_an_nvlink_domain_does_not_start(tmp_path, capsys):
    assert daemons.imex_main([], imex_host(tmp_path, "h200x8", "10.0.0.11\n")) == 1
    assert "multi-node NVLink domain" in capsys.readouterr().err
