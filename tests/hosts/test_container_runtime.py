"""Every GPU host runs Docker Engine, ready for the engine units (k3ops.deploys.container_runtime)."""

import pytest

pytestmark = pytest.mark.applies_to("nvidia", "amd")


def test_docker_engine_runs_and_starts_at_boot(host, spec):
    assert host.service("docker").is_running
    assert host.service("docker").is_enabled
    assert host.run("docker info --format '{{.ServerVersion}}'").rc == 0
