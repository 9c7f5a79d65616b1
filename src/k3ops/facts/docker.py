"""Facts about the Docker engine's configuration."""

from __future__ import annotations

from pyinfra.api import FactBase, QuoteString
from pyinfra.api.command import make_formatted_string_command
from typing_extensions import override

from .util import json_document

DOCKER_DAEMON_CONFIG = "/etc/docker/daemon.json"


class DockerDaemonConfig(FactBase[dict]):
    """
    Returns Docker's daemon configuration, ``{}`` when the file is absent:

    .. code:: python

        {
            "log-driver": "journald",
            "runtimes": {"nvidia": {"args": [], "path": "nvidia-container-runtime"}},
        }
    """

    @override
    def command(self, path: str = DOCKER_DAEMON_CONFIG):
        return make_formatted_string_command("cat {0} 2>/dev/null || true", QuoteString(path))

    default = dict

    @override
    def process(self, output):
        return json_document(output, "Docker's daemon config (fix or remove it)")


class DockerRuntimes(FactBase[dict]):
    """
    Returns the runtimes the running Docker daemon has loaded (``{}`` when it does not answer):

    .. code:: python

        {"nvidia": {"path": "nvidia-container-runtime"}, "runc": {"path": "runc"}}
    """

    # Asked of the daemon, not its config file: a config written but never loaded does not count.
    command = "docker info --format '{{json .Runtimes}}' 2>/dev/null || true"

    @override
    def requires_command(self) -> str:
        return "docker"

    default = dict

    @override
    def process(self, output):
        return json_document(output, "docker info's runtimes")
