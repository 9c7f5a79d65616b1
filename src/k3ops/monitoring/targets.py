"""What Prometheus scrapes on a fleet: each exporter's targets, from the inventory, with the labels that say what a
host is (Prometheus' file-based service discovery reads them; a changed inventory is a rewritten file, no reload)."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from dataclasses import dataclass

from ..engines.recipes import RECIPES
from ..settings import HostSettings, node_rank, settings_of

ROLE_NONE = "none"  # a host without an engine (the roles of one that has: "head" and "worker")


@dataclass(frozen=True)
class ScrapeJob:
    """One exporter: the job name its series carry, and where it listens on a host (None: not on that host)."""

    name: str
    port: Callable[[HostSettings, int], int | None]


def _engine_port(settings: HostSettings, rank: int) -> int | None:
    """The engine's API port, where vLLM, SGLang and llama-server serve /metrics: only a head serves HTTP, and only
    an engine bound off loopback can be reached from Prometheus."""
    engine = settings.engine.engine
    if engine is None or rank != 0 or ipaddress.ip_address(engine.host).is_loopback:
        return None
    return engine.port or RECIPES[engine.recipe].port


JOBS = (
    ScrapeJob("node", lambda settings, rank: settings.monitoring.node_exporter_port),  # node_exporter
    ScrapeJob("dcgm", lambda settings, rank: settings.monitoring.dcgm_exporter_port  # NVIDIA's DCGM exporter
              if settings.gpu.gpu_vendor == "nvidia" else None),
    ScrapeJob("amd", lambda settings, rank: settings.monitoring.amd_metrics_exporter_port  # AMD's metrics exporter
              if settings.gpu.gpu_vendor == "amd" else None),
    ScrapeJob("engine", _engine_port),  # the engine's own /metrics
)


def host_labels(name: str, settings: HostSettings, rank: int) -> dict[str, str]:
    """The labels every series of a host carries: which host, its hardware, and its part in serving."""
    engine, model = settings.engine.engine, settings.model.model
    role = ROLE_NONE if engine is None else "worker" if rank else "head"
    return {"host": name, "hardware_profile": settings.gpu.hardware_profile, "gpu_vendor": settings.gpu.gpu_vendor or "",
            "cluster": (engine.cluster or name) if engine else "", "model": model.name if model else "", "role": role}


def scrape_host(name: str, settings: HostSettings, job: ScrapeJob) -> str:
    """The host part of an exporter's address: where peers reach the host, unless the exporter (or the engine) binds
    one address of its own (IPv6 in brackets, as a target names it)."""
    engine = settings.engine.engine
    address = settings.model.address_for_peers(name)
    bound = engine.host if job.name == "engine" else settings.monitoring.exporter_address
    if not ipaddress.ip_address(bound).is_unspecified:
        address = bound
    return f"[{address}]" if ":" in address else address


def monitored(hosts: list[tuple[str, dict]]) -> list[tuple[str, dict]]:
    """The hosts whose data leaves monitoring on."""
    return [(name, data) for name, data in hosts if settings_of(data).monitoring.monitoring]


def metrics_key_file(settings: HostSettings) -> str | None:
    """The API key Prometheus must present to the host's engine for /metrics: llama-server guards every path but
    its health and model list with its key; vLLM's key guards /v1 alone, and SGLang's leaves /metrics open."""
    engine = settings.engine.engine
    if engine is None or RECIPES[engine.recipe].engine != "llama.cpp" or engine.api_key_file is None:
        return None
    return str(engine.api_key_file)


def key_files(hosts: list[tuple[str, dict]]) -> list[str]:
    """The engines' API key files Prometheus reads, in a fixed order: each its own scrape job (a job has one)."""
    return sorted({key for _, data in monitored(hosts) if (key := metrics_key_file(settings_of(data)))})


def keyed_job(index: int) -> str:
    """The scrape job of the engines behind the index-th key file; their series are relabelled job="engine"."""
    return f"engine-key-{index + 1}"


def target_groups(hosts: list[tuple[str, dict]]) -> dict[str, list[dict]]:
    """Each scrape job's file_sd groups (one per host: `{"targets": ["address:port"], "labels": {...}}`) for the
    monitored hosts among `hosts` (all of the inventory's, whose engine clusters give each host its rank); engines
    that want a key are in the job of their key file (`keyed_job`)."""
    keys = key_files(hosts)
    groups: dict[str, list[dict]] = {job.name: [] for job in JOBS} | {keyed_job(index): [] for index in range(len(keys))}
    for name, data in monitored(hosts):
        settings = settings_of(data)
        rank = node_rank(name, hosts)
        for job in JOBS:
            port = job.port(settings, rank)
            if port is not None:
                key = metrics_key_file(settings) if job.name == "engine" else None
                groups[job.name if key is None else keyed_job(keys.index(key))].append(
                    {"targets": [f"{scrape_host(name, settings, job)}:{port}"],
                     "labels": host_labels(name, settings, rank)})
    return groups
