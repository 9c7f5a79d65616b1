"""A lab fleet serving behind the lab's load balancer (tests/lab/load_balancer.py), and the clients that poll it
while a rollout moves it: what the driver rollout's and the model rollout's lab tests share."""

from __future__ import annotations

import json
import subprocess
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path

from k3ops.engines.units import engine_urls
from k3ops.inventory import load
from k3ops.settings import host_settings
from k3ops_lab import state

from .conftest import pyinfra

BALANCER = str(Path(__file__).with_name("load_balancer.py"))


def balancer_data(balancer: Path) -> dict:
    """The data that makes a rollout drive the lab's balancer kept in `balancer` (a directory), with short waits."""
    command = ["python3", BALANCER, str(balancer)]
    return {"upgrade_lb_deregister_command": [*command, "deregister", "{host}", "{address}"],
            "upgrade_lb_register_command": [*command, "register", "{host}", "{address}"],
            "upgrade_lb_status_command": [*command, "status", "{host}", "{address}"],
            "upgrade_lb_settle_seconds": 1, "upgrade_drain_timeout_seconds": 30, "upgrade_soak_seconds": 2}


def serve_behind_the_balancer(inventory: str, balancer: Path, hosts) -> None:
    """The whole stack deployed, and every host registered with the balancer."""
    deployed = pyinfra("deploys/k3.py", inventory=inventory)
    assert deployed.returncode == 0, deployed.stdout[-3000:] + deployed.stderr[-3000:]
    for host in hosts:
        subprocess.run(["python3", BALANCER, str(balancer), "register", host, "-"], check=True)


def chat_urls(inventory: str) -> dict[str, str]:
    return {host.name: engine_urls(host_settings(host).engine.engine)["chat_url"]
            for host in load(inventory)}


def reply(url: str) -> str | None:
    """One chat completion's answer, as a client of the balancer would ask it (None: no answer)."""
    body = json.dumps({"model": "tiny-k3", "max_tokens": 16, "messages": [{"role": "user", "content": "Hi"}]})
    request = urllib.request.Request(url, data=body.encode(), headers={
        "Content-Type": "application/json", "Authorization": f"Bearer {state.api_key().read_text().strip()}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())["choices"][0]["message"]["content"] or None
    except (OSError, ValueError, KeyError):
        return None


def answers(url: str) -> bool:
    return reply(url) is not None


class Poller(threading.Thread):
    """Clients of the balancer: every `interval` seconds, how many of `hosts` it lists out, and a chat completion
    from each host it lists (a host still listed after its request failed is a request the rollout dropped); the
    answers are counted by their words."""

    def __init__(self, inventory: str, balancer: Path, hosts, interval: float = 0.5):
        super().__init__(daemon=True)
        self.balancer, self.hosts, self.urls, self.interval = balancer, tuple(hosts), chat_urls(inventory), interval
        self.stopping, self.most_out, self.polls, self.dropped = threading.Event(), 0, 0, []
        self.least_serving = 1.0  # the lowest share of the hosts that were listed and answered, at one poll
        self.replies: Counter[str] = Counter()

    def listed(self) -> set[str]:
        return {path.name for path in self.balancer.iterdir()} & set(self.hosts)

    def run(self) -> None:
        while not self.stopping.wait(self.interval):
            listed = self.listed()
            self.most_out = max(self.most_out, len(set(self.hosts) - listed))
            serving = 0
            for host in sorted(listed):
                answer = reply(self.urls[host])
                if answer is not None:
                    serving += 1
                    self.replies[answer] += 1
                elif host in self.listed():
                    self.dropped.append((time.strftime("%H:%M:%S"), host))
            self.least_serving = min(self.least_serving, serving / len(self.hosts))
            self.polls += 1

    def __enter__(self) -> Poller:
        self.start()
        return self

    def __exit__(self, *_) -> None:
        self.stopping.set()
        self.join()
