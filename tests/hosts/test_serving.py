"""The engine serving the model (k3ops.deploys.serving): unit, user, bind address, secrets, watchdog, health.

A multi-node engine's workers serve no HTTP: the head's port, watchdog and health stand for the whole engine.
"""

import ipaddress

import pytest

from k3ops.engines.recipes import RECIPES
from k3ops.engines.units import engine_urls
from k3ops.facts.engine import EngineState
from k3ops.facts.network import ListeningAddresses
from k3ops.onhost import layout
from k3ops.onhost.layout import ENGINE_SECRETS_FILE, ENGINE_UNIT, WATCHDOG_SERVICE, WATCHDOG_TIMER

from .secrets import secret_values, shown_nowhere


def test_engine_runs_as_the_service_user_and_restarts_always(host, spec, engine):
    service = host.service(ENGINE_UNIT)
    assert service.is_enabled and service.is_running
    shown = host.check_output(f"systemctl show {ENGINE_UNIT} --property User --property Restart")
    assert f"User={spec.service_user}" in shown and "Restart=always" in shown


@pytest.mark.engine_role("head")
def test_the_watchdog_checks_the_engine(host, spec, engine):
    assert host.service(WATCHDOG_TIMER).is_enabled and host.service(WATCHDOG_TIMER).is_running


@pytest.mark.engine_role("worker")
def test_a_worker_has_no_watchdog_and_no_http_port(host, spec, engine):
    """The units of a worker rank are the engine's alone, and it answers no HTTP a client could reach."""
    for unit in (WATCHDOG_TIMER, WATCHDOG_SERVICE):
        assert not host.file(f"/etc/systemd/system/{unit}").exists, unit
    assert host.get_fact(ListeningAddresses, port=engine.port or RECIPES[engine.recipe].port) == []


@pytest.mark.engine_role("head")
def test_engine_listens_only_where_data_says(host, spec, engine):
    port = engine.port or RECIPES[engine.recipe].port
    listening = host.get_fact(ListeningAddresses, port=port)
    assert listening, f"nothing listens on port {port}"
    for bound in listening:
        assert bound == engine.host or (ipaddress.ip_address(engine.host).is_unspecified and bound in ("*", "0.0.0.0"))


@pytest.mark.engine_role("head")
def test_engine_serves_the_pinned_model(host, spec, engine):
    model = host.inventory_data["model"]
    urls = engine_urls(engine)
    state = host.get_fact(EngineState, health_url=urls["health_url"], models_url=urls["models_url"],
                          served_name=model["name"])
    assert (state["unit"], state["ready"], state["detail"]) == ("active", True, "healthy")
    assert state["revision"].endswith(f"/{layout.REVISIONS_DIR}/{model['revision']}")


def test_engine_secrets_stay_private(host, spec, engine):
    secrets = host.file(ENGINE_SECRETS_FILE)
    assert (secrets.user, secrets.group, secrets.mode) == ("root", "root", 0o600)
    shown_nowhere(secret_values(host, ENGINE_SECRETS_FILE), {
        "the engine's and the watchdog's unit properties": host.check_output(
            f"systemctl show {ENGINE_UNIT} {WATCHDOG_SERVICE}"),
        "a process's arguments": host.check_output("ps -eo args")})
