"""The engine units deploys/serving installs, rendered here as the deploy renders them (k3ops.deploys.rendered)."""

from __future__ import annotations

from k3ops.deploys import rendered
from k3ops.engines.recipes import RECIPES
from k3ops.engines.units import unit_names, unit_variables
from k3ops.onhost import layout
from k3ops.settings.engine import EngineSpec
from k3ops.settings.upgrade import UpgradeSpec

DIGEST = "sha256:" + "b" * 64
MODEL_DIR = "/srv/k3ops/models/kimi-k3"
HEAD_ADDRESS = "10.0.0.1"
SHUTDOWN_SECONDS = UpgradeSpec().upgrade_drain_timeout_seconds  # a host's default drain limit


def engine_variables(recipe: str, vendor: str | None = "nvidia", node_rank: int = 0, docker_source: str = "distribution",
                     devices: tuple[str, ...] = (), **engine) -> dict:
    """The units' variables for one recipe, as a host with default model and service settings has them."""
    spec = EngineSpec.model_validate({"recipe": recipe, **engine})
    return unit_variables(found=RECIPES[recipe], engine=spec, served_name="kimi-k3", model_dir=MODEL_DIR,
                          cache_path="/srv/k3ops/models", service_user="k3ops", gpu_vendor=vendor,
                          docker_source=docker_source, shutdown_seconds=SHUTDOWN_SECONDS, node_rank=node_rank,
                          head_address=HEAD_ADDRESS, devices=devices)


def rendered_watchdog_command() -> str:
    """The watchdog's launcher (layout.WATCHDOG_COMMAND), which the watchdog unit runs."""
    return rendered("k3ops/k3ops-engine-watchdog.j2", layout=layout)


def rendered_units(variables: dict) -> dict[str, str]:
    """Each unit the host gets, by name, with its text."""
    return {name: rendered(f"systemd/{name}.j2", **variables)
            for name in unit_names(variables["node_rank"])}
