"""What the engine's systemd units say on one host: the variables of templates/systemd/k3ops-engine*.j2.

The engine reads the model from the cache's `current` revision with the Hub switched off, so a
restart never downloads; containers get the GPUs the way the GPU host deploy configured them (CDI
devices on NVIDIA, /dev/kfd and /dev/dri on AMD); secrets arrive through one root-owned file.
"""

from __future__ import annotations

import ipaddress
import shlex

from ..onhost import layout
from .recipes import RECIPES, Recipe, command_line

GPU_DEVICES = {
    "nvidia": ("--device", "nvidia.com/gpu=all"),
    "amd": ("--device", "/dev/kfd", "--device", "/dev/dri", "--group-add", "video", "--group-add", "render"),
}


def unit_names(node_rank: int) -> list[str]:
    """The units a host of the engine gets, each from templates/systemd/<name>.j2.

    A multi-node worker serves no HTTP: the head's watchdog and readiness stand for the whole engine.
    """
    engine = [layout.ENGINE_UNIT]
    return engine if node_rank else [*engine, layout.WATCHDOG_SERVICE, layout.WATCHDOG_TIMER]


def health_host(bind: str) -> str:
    """Where a check on the host itself reaches the API: the bind address, or loopback for a wildcard."""
    return "127.0.0.1" if ipaddress.ip_address(bind).is_unspecified else bind


def engine_urls(engine, node_rank: int = 0) -> dict[str, str | None]:
    """Where a check on the host itself reaches the engine's API. Only the head of a multi-node engine
    serves HTTP; its /v1/models proves the model is loaded, not just that the port is open."""
    base = f"http://{health_host(engine.host)}:{engine.port or RECIPES[engine.recipe].port}"
    return {"health_url": f"{base}/health", "models_url": f"{base}/v1/models" if node_rank == 0 else None,
            "metrics_url": f"{base}/metrics", "chat_url": f"{base}/v1/chat/completions"}


def exec_start(found: Recipe, argv: list[str], gpu_vendor: str | None, model_dir: str, image: str | None,
               environment: dict[str, str]) -> str:
    """The unit's ExecStart: the engine itself, or `docker run` of its pinned image."""
    if image is None:
        return shlex.join(argv)
    docker = ["/usr/bin/docker", "run", "--rm", "--name", layout.ENGINE_CONTAINER, "--network", "host", "--ipc", "host",
              "--shm-size", "16g", "--ulimit", "memlock=-1", *GPU_DEVICES.get(gpu_vendor or "", ()),
              "--env-file", layout.ENGINE_SECRETS_FILE, "--env", "HF_HUB_OFFLINE=1", "--env", "TRANSFORMERS_OFFLINE=1",
              *(option for key, value in sorted(environment.items()) for option in ("--env", f"{key}={value}")),
              "--volume", f"{model_dir}:{model_dir}:ro", "--volume", f"{layout.ENGINE_STATE_DIR}/cache:/root/.cache",
              image, *argv]
    return shlex.join(docker)


def unit_variables(*, found: Recipe, engine, served_name: str, model_dir: str, cache_path: str, service_user: str,
                   gpu_vendor: str | None, node_rank: int = 0, head_address: str = "") -> dict:
    """Everything the engine and watchdog templates need, from the host's validated specs."""
    port = str(engine.port or found.port)
    model_path = f"{model_dir}/{layout.CURRENT_LINK}" + (f"/{engine.model_file}" if engine.model_file else "")
    values = {"model_path": model_path, "served_name": served_name, "host": engine.host, "port": port,
              "node_rank": str(node_rank), "head_address": head_address}
    argv = command_line(found, engine.args, values, node_rank)
    image = f"{engine.image or found.image}@{engine.image_digest}" if found.image else None
    environment = {**found.environment, **engine.environment}
    urls = engine_urls(engine, node_rank)
    return {
        "layout": layout, "engine": found.engine, "recipe": found.name, "served_name": served_name, "nodes": found.nodes,
        "node_rank": node_rank, "container": image is not None, "service_user": service_user,
        "cache_path": cache_path, "model_dir": model_dir, "environment": {} if image else environment,
        "exec_start": exec_start(found, argv, gpu_vendor, model_dir, image, environment),
        "start_timeout": engine.start_timeout_seconds, "interval": engine.health_interval_seconds,
        "failures": engine.health_failures, "health_url": urls["health_url"], "models_url": urls["models_url"],
        "argv": argv,
    }
