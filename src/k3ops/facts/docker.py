"""Facts about the Docker engine's configuration."""

from __future__ import annotations

import json

from pyinfra.api import FactBase, QuoteString
from pyinfra.api.command import make_formatted_string_command
from pyinfra.api.exceptions import FactProcessError
from typing_extensions import override

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
        try:
            return json.loads("\n".join(output) or "{}")
        except json.JSONDecodeError as error:
            raise FactProcessError(f"Docker's daemon config is not valid JSON ({error}): fix or remove it") from error
