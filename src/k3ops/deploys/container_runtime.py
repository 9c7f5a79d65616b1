"""Docker Engine from the distribution: the runtime the engine units start their containers with."""

from __future__ import annotations

from pyinfra.api import deploy
from pyinfra.operations import apt, systemd


@deploy("Container runtime")
def container_runtime() -> None:
    apt.packages(name="Install Docker Engine", packages=["docker.io"], no_recommends=True)
    systemd.service(name="Run Docker", service="docker", running=True, enabled=True)
