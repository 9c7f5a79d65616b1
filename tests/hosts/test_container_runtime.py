"""Every GPU host runs Docker Engine, ready for the engine units (k3ops.deploys.container_runtime)."""

import pytest

from k3ops.vendor_units import DOCKER

pytestmark = pytest.mark.applies_to("nvidia", "amd")


def test_docker_engine_runs_and_starts_at_boot(host, spec):
    assert host.service(DOCKER).is_running
    assert host.service(DOCKER).is_enabled
    assert host.run("docker info --format '{{.ServerVersion}}'").rc == 0


def test_docker_can_load_its_apparmor_profile(host, spec):
    """With AppArmor on in the kernel (Debian's default), dockerd starts no container without apparmor_parser."""
    enabled = host.file("/sys/module/apparmor/parameters/enabled")
    if enabled.exists and enabled.content_string.strip() == "Y":
        assert host.exists("apparmor_parser"), "AppArmor is on and apparmor_parser is missing: install apparmor"
