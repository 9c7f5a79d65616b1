"""Facts about the engine a host serves: is it ready, and which revision did it load."""

from __future__ import annotations

import shlex

from pyinfra.api import FactBase
from typing_extensions import override

from k3ops.engines.units import REVISION_FILE, SECRETS_FILE, WATCHDOG


class EngineState(FactBase[dict]):
    """
    Returns whether the engine answers its health endpoint and lists the served model, and the
    revision directory it loaded at its last start (``None`` before the first):

    .. code:: python

        {"ready": True, "detail": "healthy", "revision": "/srv/k3ops/models/kimi-k3/revisions/0123..."}
    """

    default = dict

    @override
    def command(self, health_url: str, models_url: str | None, served_name: str):
        check = [WATCHDOG, "--check", "--url", health_url, "--served-name", served_name, "--secrets", SECRETS_FILE]
        if models_url:
            check += ["--models-url", models_url]
        return (f"cat {REVISION_FILE} 2>/dev/null | sed 's/^/revision: /'; "
                f"if [ -x {WATCHDOG} ]; then {shlex.join(check)}; else echo 'ready: False not installed'; fi")

    @override
    def process(self, output):
        state = {"ready": False, "detail": "", "revision": None}
        for line in output:
            key, _, value = line.partition(": ")
            if key == "revision":
                state["revision"] = value.strip()
            elif key == "ready":
                ready, _, detail = value.partition(" ")
                state["ready"], state["detail"] = ready == "True", detail.strip()
        return state
