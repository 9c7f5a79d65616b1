"""What the engine's systemd units say on one host: the variables of templates/systemd/k3ops-engine*.j2.

The engine reads the model from the cache's `current` revision with the Hub switched off, so a
restart never downloads; containers get the GPUs the way the GPU host deploy configured them (CDI
devices on NVIDIA, /dev/kfd and /dev/dri on AMD); secrets arrive through one root-owned file.
"""

from __future__ import annotations

import ipaddress
import shlex

from .recipes import Recipe, command_line

UNIT = "k3ops-engine.service"
CONTAINER_NAME = "k3ops-engine"
SECRETS_FILE = "/etc/k3ops/engine.env"
STATE_DIR = "/var/lib/k3ops/engine"
REVISION_FILE = f"{STATE_DIR}/revision"  # the revision the engine loaded at its last start
WATCHDOG = "/opt/k3ops/bin/k3ops-engine-watchdog"
# How each engine takes its API key without it appearing on a command line.
API_KEY_VARIABLE = {"vllm": "VLLM_API_KEY", "llama.cpp": "LLAMA_API_KEY"}
WATCHDOG_SERVICE = "k3ops-engine-watchdog.service"  # one health check
WATCHDOG_TIMER = "k3ops-engine-watchdog.timer"
GPU_DEVICES = {
    "nvidia": ("--device", "nvidia.com/gpu=all"),
    "amd": ("--device", "/dev/kfd", "--device", "/dev/dri", "--group-add", "video", "--group-add", "render"),
}


def unit_names(node_rank: int) -> list[str]:
    """The units a host of the engine gets, each from templates/systemd/<name>.j2.

    A multi-node worker serves no HTTP: the head's watchdog and readiness stand for the whole engine.
    """
    return [UNIT] if node_rank else [UNIT, WATCHDOG_SERVICE, WATCHDOG_TIMER]


def health_host(bind: str) -> str:
    """Where a check on the host itself reaches the API: the bind address, or loopback for a wildcard."""
    return "127.0.0.1" if ipaddress.ip_address(bind).is_unspecified else bind


def exec_start(found: Recipe, argv: list[str], gpu_vendor: str | None, model_dir: str, image: str | None,
               environment: dict[str, str]) -> str:
    """The unit's ExecStart: the engine itself, or `docker run` of its pinned image."""
    if image is None:
        return shlex.join(argv)
    docker = ["/usr/bin/docker", "run", "--rm", "--name", CONTAINER_NAME, "--network", "host", "--ipc", "host",
              "--shm-size", "16g", "--ulimit", "memlock=-1", *GPU_DEVICES.get(gpu_vendor or "", ()),
              "--env-file", SECRETS_FILE, "--env", "HF_HUB_OFFLINE=1", "--env", "TRANSFORMERS_OFFLINE=1",
              *(option for key, value in sorted(environment.items()) for option in ("--env", f"{key}={value}")),
              "--volume", f"{model_dir}:{model_dir}:ro", "--volume", f"{STATE_DIR}/cache:/root/.cache",
              image, *argv]
    return shlex.join(docker)


def unit_variables(*, found: Recipe, engine, served_name: str, model_dir: str, cache_path: str, service_user: str,
                   gpu_vendor: str | None, node_rank: int = 0, head_address: str = "") -> dict:
    """Everything the engine and watchdog templates need, from the host's validated specs."""
    port = str(engine.port or found.port)
    model_path = f"{model_dir}/current" + (f"/{engine.model_file}" if engine.model_file else "")
    values = {"model_path": model_path, "served_name": served_name, "host": engine.host, "port": port,
              "node_rank": str(node_rank), "head_address": head_address}
    argv = command_line(found, engine.args, values, node_rank)
    image = f"{engine.image or found.image}@{engine.image_digest}" if found.image else None
    environment = {**found.environment, **engine.environment}
    base = f"http://{health_host(engine.host)}:{port}"
    return {
        "engine": found.engine, "recipe": found.name, "served_name": served_name, "nodes": found.nodes,
        "node_rank": node_rank, "container": image is not None, "container_name": CONTAINER_NAME,
        "service_user": service_user, "cache_path": cache_path, "state_dir": STATE_DIR, "model_dir": model_dir,
        "revision_file": REVISION_FILE,
        "secrets_file": SECRETS_FILE, "environment": {} if image else environment,
        "exec_start": exec_start(found, argv, gpu_vendor, model_dir, image, environment),
        "start_timeout": engine.start_timeout_seconds, "interval": engine.health_interval_seconds,
        "failures": engine.health_failures, "watchdog": WATCHDOG, "health_url": f"{base}/health",
        # Only the head of a multi-node engine serves HTTP; /v1/models proves the model, not just the port.
        "models_url": f"{base}/v1/models" if node_rank == 0 else None, "argv": argv,
    }
