"""Connect the NVIDIA driver to containers: the container runtime and the CDI spec."""

from __future__ import annotations

import re

from pyinfra import host
from pyinfra.api import OperationError, QuoteString, StringCommand, operation
from pyinfra.api.command import make_formatted_string_command

from k3ops.facts.docker import DOCKER_DAEMON_CONFIG, DockerDaemonConfig
from k3ops.facts.nvidia import CdiDevices, NvidiaGpus

NVIDIA_RUNTIME = "nvidia"
CDI_GPU_KIND = "nvidia.com/gpu"
# A whole GPU in a CDI spec, by index or UUID (MIG devices are named "0:1" or "MIG-...").
CDI_WHOLE_GPU_REGEX = rf"^{re.escape(CDI_GPU_KIND)}=(?:\d+|GPU-[0-9a-fA-F-]+)$"


@operation()
def container_runtime(runtime: str = "docker", config: str | None = None):
    """
    Register NVIDIA's container runtime with the container engine. ``nvidia-ctk`` merges it into
    the engine's existing config; restart the engine when this changes.

    + runtime: the container engine (only ``docker`` is supported)
    + config: the engine's config file, if not Docker's default /etc/docker/daemon.json

    **Example:**

    .. code:: python

        runtime = nvidia.container_runtime(name="Register the NVIDIA runtime with Docker")
        systemd.service(name="Restart Docker", service="docker", restarted=True, _if=runtime.did_change)
    """

    if runtime != "docker":
        raise OperationError(f"container_runtime: runtime {runtime!r} is not supported, only 'docker' is")

    path = config or DOCKER_DAEMON_CONFIG
    if NVIDIA_RUNTIME in host.get_fact(DockerDaemonConfig, path=path).get("runtimes", {}):
        host.noop(f"the {NVIDIA_RUNTIME} runtime is already in {path}")
        return

    arguments = ["--runtime=docker"]
    if config:
        arguments.append(make_formatted_string_command("--config={0}", QuoteString(config)))
    yield StringCommand("nvidia-ctk", "runtime", "configure", *arguments)


@operation()
def cdi_spec(output: str = "/etc/cdi/nvidia.yaml"):
    """
    Generate the CDI spec that names the host's GPUs for containers, again whenever it no longer
    matches them (a GPU changed, fell off the bus, or the driver was upgraded and the GPUs re-read).

    + output: where the spec goes

    **Example:**

    .. code:: python

        nvidia.cdi_spec(name="Describe the GPUs to containers")
    """

    gpus = list(host.get_fact(NvidiaGpus))
    if not gpus:
        host.noop("nvidia-smi sees no GPU: no CDI spec to generate")
        return

    wanted = {f"{CDI_GPU_KIND}=all"} | {
        f"{CDI_GPU_KIND}={name}" for gpu in gpus for name in (gpu["index"], gpu["uuid"])
    }
    listed = set(host.get_fact(CdiDevices))
    gone = {device for device in listed if re.match(CDI_WHOLE_GPU_REGEX, device)} - wanted
    if wanted <= listed and not gone:
        host.noop(f"the CDI spec names every GPU nvidia-smi sees ({len(gpus)})")
        return

    yield make_formatted_string_command("nvidia-ctk cdi generate --output={0}", QuoteString(output))
