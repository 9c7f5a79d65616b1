"""The NVIDIA operations driven by facts read from the lab's simulated tools, their commands run on
those tools, until nothing is left to do: the facts' real shapes meet the operations' expectations."""

import json
import shlex

import pytest
from pyinfra.context import ctx_host, ctx_state
from pyinfra_testing.util import FakeState, create_host

from k3ops.facts.docker import DOCKER_DAEMON_CONFIG, DockerDaemonConfig
from k3ops.facts.nvidia import CdiDevices, NvidiaGpus
from k3ops.operations import nvidia
from k3ops_lab.sim import nvidia_ctk, nvidia_smi
from k3ops_lab.sim.host import HARDWARE_DOCUMENT

from .fact_commands import tool_arguments
from ..lab.fake_host import freeze_clock, nvidia_host, run, write

TOOLS = {"nvidia-smi": nvidia_smi, "nvidia-ctk": nvidia_ctk}


@pytest.fixture(autouse=True)
def _frozen(monkeypatch):
    freeze_clock(monkeypatch)


def read_facts(host, capsys):
    """The facts the operations read, keyed as pyinfra-testing keys them."""
    def output(tool, fact):
        return run(TOOLS[tool], capsys, host, *tool_arguments(fact))[1].splitlines()

    daemon_config = host.path(DOCKER_DAEMON_CONFIG.lstrip("/"))
    return {
        "nvidia.NvidiaGpus": NvidiaGpus().process(output("nvidia-smi", NvidiaGpus)),
        "nvidia.CdiDevices": CdiDevices().process(output("nvidia-ctk", CdiDevices)),
        "docker.DockerDaemonConfig": {f"path={DOCKER_DAEMON_CONFIG}": DockerDaemonConfig().process(
            daemon_config.read_text().splitlines() if daemon_config.exists() else [])},
    }


def apply(operation, host, capsys):
    """Plan `operation` on the host's current facts and run its commands; returns them."""
    state = FakeState()
    fake_host = create_host(state, facts=read_facts(host, capsys))
    with ctx_state.use(state), ctx_host.use(fake_host):
        commands = [command.get_raw_value() for command in operation._inner()]
    for command in commands:
        tool, *arguments = shlex.split(command)
        status, _, err = run(TOOLS[tool], capsys, host, *arguments)
        assert status == 0, err
    return commands


def test_container_runtime_is_registered_once_and_keeps_the_config(tmp_path, capsys):
    host, _ = nvidia_host(tmp_path, toolkit="1.18.0")
    write(tmp_path, DOCKER_DAEMON_CONFIG.lstrip("/"), '{"log-driver": "journald"}')
    assert apply(nvidia.container_runtime, host, capsys) == ["nvidia-ctk runtime configure --runtime=docker"]
    assert apply(nvidia.container_runtime, host, capsys) == []
    assert json.loads((tmp_path / DOCKER_DAEMON_CONFIG.lstrip("/")).read_text())["log-driver"] == "journald"


def test_cdi_spec_is_generated_then_kept_until_a_gpu_falls_off_the_bus(tmp_path, capsys):
    host, hardware = nvidia_host(tmp_path, toolkit="1.18.0")
    generate = ["nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml"]
    assert apply(nvidia.cdi_spec, host, capsys) == generate
    assert apply(nvidia.cdi_spec, host, capsys) == []

    hardware["gpus"][3]["fallen_off_bus"] = True
    (tmp_path / HARDWARE_DOCUMENT).write_text(json.dumps(hardware))
    assert apply(nvidia.cdi_spec, host, capsys) == generate
    assert apply(nvidia.cdi_spec, host, capsys) == []


def test_cdi_spec_waits_for_the_reboot_after_a_driver_upgrade(tmp_path, capsys):
    host, _ = nvidia_host(tmp_path, driver="580.126.09", module="580.105.08", toolkit="1.18.0")
    assert apply(nvidia.cdi_spec, host, capsys) == []
