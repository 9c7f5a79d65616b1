"""The running lab as pyinfra inventory groups: one group per hardware profile.

Host data carries what a deploy would read from a real inventory (SSH access, the host's hardware
profile and NVMe devices) plus the URLs of the lab's simulated vendor repositories, Hub and wheels in
place of the real ones, the lab Hub's tiny model pinned at its first revision, and an engine serving it.
"""

from __future__ import annotations

from k3ops.engines.recipes import RECIPES

from . import hub, llama_server, registry, state, vendor_repo, wheelhouse
from .profiles import get_profile
from .services import vendor_repo_url


# The lab's NVMe devices are a few GiB and its model a few MB; a peer is at most seconds behind.
LAB_HEADROOM_GIB = 0.25
LAB_PEER_WAIT_SECONDS = 300
LAB_CONTEXT = 2048  # the tiny model's context length, which bounds every engine's
# llama-server's threads wait for work without spinning (its default, --poll 50, spins them after every request):
# the lab's engines share the controller's two cores, and with spinning each answer cost about 180 ms of CPU
# where it takes 5 ms (40 requests in 20 s: 7.0 s of CPU, and 1.4 s with --poll 0).
LLAMA_SERVER_ARGS = {"--ctx-size": LAB_CONTEXT, "--poll": 0}
# Seconds between the engine watchdog's health checks: short, for the drills that wait on it, where a check
# costs little; on a VM host under TCG one check takes about 8 s of its one CPU, which a 5 s interval would keep
# busy for good, slowing every deploy, check and reboot after the engine starts.
WATCHDOG_INTERVAL_SECONDS = {"container": 5, "vm": 120}


class NoLabError(RuntimeError):
    pass


def repositories() -> dict[str, dict[str, str]]:
    """Vendor repositories as the lab serves them; `{rocm_release}` is filled in by the deploy."""
    base = vendor_repo_url()
    return {
        "cuda": {"url": f"{base}/{vendor_repo.CUDA_REPO_PATH}/", "key_url": f"{base}/{vendor_repo.SIGNING_KEY_PATHS[0]}"},
        "container_toolkit": {"url": f"{base}/{vendor_repo.CONTAINER_TOOLKIT_REPO_PATH}/",
                              "key_url": f"{base}/{vendor_repo.SIGNING_KEY_PATHS[1]}"},
        "amdgpu": {"url": f"{base}/amdgpu/{{rocm_release}}/ubuntu", "suite": vendor_repo.AMD_SUITE,
                   "key_url": f"{base}/{vendor_repo.SIGNING_KEY_PATHS[2]}"},
        "rocm": {"url": f"{base}/rocm/apt/{{rocm_release}}", "suite": vendor_repo.AMD_SUITE,
                 "key_url": f"{base}/{vendor_repo.SIGNING_KEY_PATHS[2]}"},
        "doca": {"url": f"{base}/{vendor_repo.DOCA_REPO_PATH}/", "key_url": f"{base}/{vendor_repo.SIGNING_KEY_PATHS[3]}"},
        "amd_metrics_exporter": {"url": f"{base}/{vendor_repo.AMD_METRICS_EXPORTER_REPO_PATH}",
                                 "suite": vendor_repo.AMD_SUITE, "key_url": f"{base}/{vendor_repo.SIGNING_KEY_PATHS[2]}"},
    }


def host_data(host: state.LabHost) -> dict:
    profile = get_profile(host.profile)
    return {
        "ssh_hostname": host.address,
        "ssh_user": "root",
        "ssh_key": str(state.ssh_key()),
        "ssh_strict_host_key_checking": "no",
        "ssh_known_hosts_file": "/dev/null",
        "hardware_profile": profile.name,
        "nvme_devices": [f"/dev/{disk.name}" for disk in profile.disks(host.nvme_devices)],
        "repositories": repositories(),
        "model": {"repo_id": hub.TINY_MODEL_REPO, "revision": hub.TINY_MODEL_REVISIONS[0], "name": "tiny-k3"},
        "allow_plain_http": True,  # the lab's Hub, wheels and signing keys, on its own network
        "hf_endpoint": hub.hub_url(),
        "python_find_links": wheelhouse.url(),
        "model_peer_key": str(state.CACHE_DIR / "ssh" / "peer_ed25519"),
        "nccl_mpi_key": str(state.CACHE_DIR / "ssh" / "nccl_ed25519"),
        "model_cache_headroom_gib": LAB_HEADROOM_GIB,
        "model_peer_wait_seconds": LAB_PEER_WAIT_SECONDS,
        "engine": engine(host),
        # A VM host runs under TCG, many times slower than a container host: it checks what only its own kernel
        # shows (DKMS, reboots, RAID, containers). The exporters, whose stand-ins are the same on both, are watched
        # on container hosts.
        "monitoring": host.backend != "vm",
    }


def container_recipe(host: state.LabHost) -> str | None:
    """The one-host vLLM recipe of the host's hardware, on a host that can run containers: a VM host."""
    if host.backend != "vm":
        return None
    return next((found.name for found in RECIPES.values()
                 if found.engine == "vllm" and found.nodes == 1 and host.profile in found.profiles), None)


def engine(host: state.LabHost) -> dict:
    """Every lab host serves the tiny model on its lab address with a key: the hardware's vLLM recipe where
    it has one and containers run (the registry's stand-in image, pinned by digest), else the tiny GGUF
    with llama-server on CPU."""
    common = {"host": host.address, "api_key_file": str(state.api_key()),
              "health_interval_seconds": WATCHDOG_INTERVAL_SECONDS[host.backend],
              "health_failures": 2, "start_timeout_seconds": 300, "ready_timeout_seconds": 300}
    recipe = container_recipe(host)
    if recipe is not None:
        return {"recipe": recipe, **registry.served(), "args": {"--max-model-len": LAB_CONTEXT}, **common}
    return {"recipe": "llama.cpp-gguf", "binary_url": llama_server.url(), "binary_sha256": llama_server.sha256(),
            "model_file": "tiny-k3.gguf", "args": LLAMA_SERVER_ARGS, **common}


def groups() -> dict[str, list[tuple[str, dict]]]:
    lab = state.load()
    if lab is None:
        raise NoLabError("no lab is up: run `k3ops lab up` first")
    grouped: dict[str, list[tuple[str, dict]]] = {}
    for host in lab.hosts:
        grouped.setdefault(host.profile, []).append((host.name, host_data(host)))
    return grouped
