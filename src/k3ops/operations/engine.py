"""Engine operations: wait until the engine serves the model."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import QuoteString, StringCommand, operation

from k3ops.facts.engine import EngineState
from k3ops.onhost.layout import ENGINE_UNIT, WATCHDOG_COMMAND

JOURNAL_LINES = 40


@operation()
def ready(health_url: str, models_url: str | None, served_name: str, timeout: int):
    """
    Wait until the engine answers its health endpoint and ``/v1/models`` lists the served name.

    The port opens only once the weights are loaded, so "running" says nothing; this waits, with
    progress, and fails after ``timeout`` seconds with the engine's journal.

    + health_url: the engine's health endpoint
    + models_url: its /v1/models (None on a multi-node worker, which serves no HTTP)
    + served_name: the model name clients use
    + timeout: seconds to wait

    **Example:**

    .. code:: python

        engine.ready(health_url="http://127.0.0.1:8000/health", models_url="http://127.0.0.1:8000/v1/models",
                     served_name="kimi-k3", timeout=3600)
    """

    state = host.get_fact(EngineState, health_url=health_url, models_url=models_url, served_name=served_name)
    if state["ready"]:
        host.noop(f"the engine serves {served_name}")
        return
    wait = ["--wait", str(timeout), "--url", health_url, "--served-name", served_name]
    if models_url:
        wait += ["--models-url", models_url]
    yield StringCommand(WATCHDOG_COMMAND, *(QuoteString(word) for word in wait), "||", "{", "journalctl", "--unit",
                        ENGINE_UNIT, "--lines", str(JOURNAL_LINES), "--no-pager", "--output", "cat", ">&2;", "exit",
                        "1;", "}")
