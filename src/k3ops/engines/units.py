"""What the engine's systemd units say on one host: the variables of templates/systemd/k3ops-engine*.j2.

The engine reads the model from the cache's `current` revision with the Hub switched off, so a
restart never downloads; containers get the GPUs the way the GPU host deploy configured them and the
host's Docker supports; secrets reach the engine only through systemd, which reads them from a
root-only file into the environment (never a unit file, an argument or a file the service user reads).
Every value reaches the templates escaped for systemd (k3ops.escape), so no data can add a directive or
expand a specifier.
"""

from __future__ import annotations

import ipaddress

from ..escape import systemd_assignment, systemd_command, systemd_value, systemd_word
from ..onhost import layout
from .recipes import RECIPES, Recipe, command_line

# The GPUs in a container, by vendor and by what the host's Docker can do. CDI devices need Docker 25
# (Docker's own packages, docker_source "vendor"); Debian 12's docker.io is 20.10, where the nvidia
# runtime the GPU host deploy registers hands the container every GPU.
AMD_GPU_ACCESS = ("--device", "/dev/kfd", "--device", "/dev/dri", "--group-add", "video", "--group-add", "render")
GPU_ACCESS = {
    ("nvidia", "vendor"): ("--device", "nvidia.com/gpu=all"),
    ("nvidia", "distribution"): ("--runtime", "nvidia", "--env", "NVIDIA_VISIBLE_DEVICES=all"),
    ("amd", "vendor"): AMD_GPU_ACCESS,
    ("amd", "distribution"): AMD_GPU_ACCESS,
}
# Between what a stop waits on and what waits on it: the engine drains for shutdown_seconds, `docker stop`
# waits this much longer before it kills the container, and systemd this much longer again.
STOP_MARGIN_SECONDS = 30


def unit_names(node_rank: int) -> list[str]:
    """The units a host of the engine gets, each from templates/systemd/<name>.j2.

    A multi-node worker serves no HTTP: the head's watchdog and readiness stand for the whole engine.
    """
    engine = [layout.ENGINE_UNIT]
    return engine if node_rank else [*engine, layout.WATCHDOG_SERVICE, layout.WATCHDOG_TIMER]


def health_host(bind: str) -> str:
    """Where a check on the host itself reaches the API, as a URL names it: the bind address (IPv6 in
    brackets), or loopback for a wildcard."""
    address = ipaddress.ip_address(bind)
    if address.is_unspecified:
        return "127.0.0.1" if address.version == 4 else "[::1]"
    return bind if address.version == 4 else f"[{bind}]"


def engine_urls(engine, node_rank: int = 0) -> dict[str, str | None]:
    """Where a check on the host itself reaches the engine's API. Only the head of a multi-node engine
    serves HTTP; its /v1/models proves the model is loaded, not just that the port is open."""
    base = f"http://{health_host(engine.host)}:{engine.port or RECIPES[engine.recipe].port}"
    return {"health_url": f"{base}/health", "models_url": f"{base}/v1/models" if node_rank == 0 else None,
            "metrics_url": f"{base}/metrics", "chat_url": f"{base}/v1/chat/completions"}


def docker_run(found: Recipe, argv: list[str], gpu_vendor: str | None, docker_source: str, model_dir: str,
               image: str, environment: dict[str, str], devices: tuple[str, ...] = ()) -> list[str]:
    """`docker run` of the pinned image, with the host's GPUs and `devices` (an NVLink domain's IMEX channel). The
    API key is passed by name: the docker client copies it from the environment systemd gave it, so the value
    is in no argument and no file the client must read."""
    keys = [layout.API_KEY_VARIABLES[found.engine]] if found.engine in layout.API_KEY_VARIABLES else []
    return ["/usr/bin/docker", "run", "--rm", "--name", layout.ENGINE_CONTAINER, "--network", "host", "--ipc", "host",
            "--shm-size", "16g", "--ulimit", "memlock=-1", *GPU_ACCESS.get((gpu_vendor or "", docker_source), ()),
            *(option for device in devices for option in ("--device", device)),
            *(option for key in keys for option in ("--env", key)),
            "--env", "HF_HUB_OFFLINE=1", "--env", "TRANSFORMERS_OFFLINE=1",
            *(option for key, value in sorted(environment.items()) for option in ("--env", f"{key}={value}")),
            "--volume", f"{model_dir}:{model_dir}:ro", "--volume", f"{layout.ENGINE_STATE_DIR}/cache:/root/.cache",
            image, *argv]


def unit_variables(*, found: Recipe, engine, served_name: str, model_dir: str, cache_path: str, service_user: str,
                   gpu_vendor: str | None, docker_source: str, shutdown_seconds: int, node_rank: int = 0,
                   head_address: str = "", devices: tuple[str, ...] = ()) -> dict:
    """Everything the engine and watchdog templates need, from the host's validated specs. `shutdown_seconds`:
    how long a stop lets requests in flight finish (the engine's own graceful shutdown, where it has one),
    with the container's stop and the unit's stop timeout each STOP_MARGIN_SECONDS longer than what it waits on."""
    port = str(engine.port or found.port)
    model_path = f"{model_dir}/{layout.CURRENT_LINK}" + (f"/{engine.model_file}" if engine.model_file else "")
    values = {"model_path": model_path, "served_name": served_name, "host": engine.host, "port": port,
              "node_rank": str(node_rank), "head_address": head_address, "shutdown_seconds": str(shutdown_seconds)}
    argv = command_line(found, engine.args, values, node_rank)
    image = f"{engine.image or found.image}@{engine.image_digest}" if found.image else None
    environment = {**found.environment, **engine.environment}
    command = argv if image is None else docker_run(found, argv, gpu_vendor, docker_source, model_dir, image,
                                                   environment, devices)
    urls = engine_urls(engine, node_rank)
    watchdog = [layout.WATCHDOG_COMMAND, "--url", urls["health_url"],
                *(["--models-url", urls["models_url"], "--served-name", served_name] if urls["models_url"] else []),
                "--failures", str(engine.health_failures), "--start-timeout", str(engine.start_timeout_seconds),
                "--state", layout.WATCHDOG_STATE_FILE, "--unit", layout.ENGINE_UNIT,
                *(["--container", layout.ENGINE_CONTAINER] if image else [])]
    return {
        "layout": layout, "engine": found.engine, "recipe": found.name, "served_name": systemd_value(served_name),
        "nodes": found.nodes, "node_rank": node_rank, "container": image is not None,
        "service_user": systemd_value(service_user), "cache_path": systemd_value(cache_path),
        "current_link": systemd_word(f"{model_dir}/{layout.CURRENT_LINK}"),
        "environment": [] if image else [systemd_assignment(key, value) for key, value in sorted(environment.items())],
        "exec_start": systemd_command(command), "watchdog_start": systemd_command(watchdog),
        "start_timeout": engine.start_timeout_seconds, "interval": engine.health_interval_seconds,
        "failures": engine.health_failures,
        "container_stop_seconds": shutdown_seconds + STOP_MARGIN_SECONDS,
        "stop_timeout": shutdown_seconds + 2 * STOP_MARGIN_SECONDS,
    }
