"""A rolling change of the served model's revision (`k3ops upgrade model`): four hosts serving the tiny model's
revision 1 with llama-server behind the lab's load balancer, while a poller asks every host it lists once a second.

In order: a canary whose staged copy of revision 2 was damaged after its verification cannot load it, goes back to
revision 1 and serves, and the rollout halts with the other hosts untouched (revision 2 staged on every host);
once the bad copy is gone, `resume` moves every host to revision 2, never more than one out, every answer one
revision's or the other's; a rollback to revision 1, still in every host's cache, downloads nothing, and an engine
argument changed with it moves in the same rollout.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time

import pytest

from k3ops.onhost.layout import ENGINE_UNIT
from k3ops_lab import hub
from k3ops_lab.inventory import LLAMA_SERVER_ARGS

from ..conftest import REPO_ROOT
from .balanced_fleet import Poller, balancer_data, chat_urls, reply, serve_behind_the_balancer
from .conftest import COMMAND_TIMEOUT, k3ops, lab_inventory, on_host

LAB_PROFILES = ("cpu", "cpu", "cpu", "cpu")
HOSTS = ("gpu-01", "gpu-02", "gpu-03", "gpu-04")
FIRST, SECOND = hub.TINY_MODEL_REVISIONS
REPLIES = {revision: hub.TINY_MODEL_REPLIES[revision] for revision in (FIRST, SECOND)}
CACHE = "/srv/k3ops/models/tiny-k3"
READY_TIMEOUT = 30  # the tiny model loads in a second: an engine that cannot load it fails fast
THREADS = {"--threads": 1}  # an engine argument that changes with the rollback's revision


@pytest.fixture(scope="module")
def fleet(lab, tmp_path_factory):
    """The fleet serving revision 1, every host behind the balancer; rollouts recorded in a temporary state
    directory."""
    work = tmp_path_factory.mktemp("upgrade-model")
    balancer = work / "balancer"
    inventory = lab_inventory(work / "fleet.py", **balancer_data(balancer),
                              engine={"ready_timeout_seconds": READY_TIMEOUT})
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_STATE_HOME", str(work / "state"))
        serve_behind_the_balancer(inventory, balancer, HOSTS)
        yield {"inventory": inventory, "balancer": balancer}


def record(fleet) -> dict:
    return json.loads(k3ops("upgrade", "status", fleet["inventory"], "--json").stdout)


def active(host: str) -> str:
    return on_host(host, f"readlink {CACHE}/current").stdout.strip().removeprefix("revisions/")


def answers(fleet) -> dict[str, str | None]:
    return {host: reply(url) for host, url in chat_urls(fleet["inventory"]).items()}


def rolled(fleet, *args: str, budget: int = 1, meanwhile=None) -> tuple[int, Poller]:
    """A model rollout (`args`: its verb and flags) while clients poll the balancer once a second; `meanwhile()`
    is called every half second while it runs, until it returns True."""
    with Poller(fleet["inventory"], fleet["balancer"], HOSTS, interval=1.0) as poller:
        controller = subprocess.Popen([sys.executable, "-m", "k3ops.cli", "upgrade", *args], cwd=REPO_ROOT,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + COMMAND_TIMEOUT
        while meanwhile is not None and controller.poll() is None and not meanwhile():
            assert time.monotonic() < deadline
            time.sleep(0.5)
        output, _ = controller.communicate(timeout=COMMAND_TIMEOUT)
    assert poller.polls > 5 and not poller.dropped, (poller.polls, poller.dropped, output)
    assert poller.most_out <= budget and set(poller.replies) <= set(REPLIES.values()), \
        (poller.most_out, poller.replies, output)
    return controller.returncode, poller


def test_a_canary_that_cannot_load_the_new_revision_serves_the_old_one_and_halts_the_rollout(fleet):
    """Once every host holds revision 2 staged and verified (the canary draining), gpu-01's copy has its GGUF
    header damaged (what a disk does after a verification): its engine cannot load it, the canary goes back to
    revision 1 (no data asks for it: a model rollback costs no reboot, no download) and serves, and the rollout
    halts before any other host."""
    planned = k3ops("upgrade", "model", fleet["inventory"], "--to", SECOND, "--dry-run").stdout
    assert "1. canary, then a soak: gpu-01 (gpu-01)" in planned and "4. batch: gpu-04 (gpu-04)" in planned, planned
    gguf = f"{CACHE}/revisions/{SECOND}/tiny-k3.gguf"

    def damaged_once_draining() -> bool:
        shown = k3ops("upgrade", "status", fleet["inventory"], "--json", check=False)  # none before it starts
        if shown.returncode != 0 or json.loads(shown.stdout)["groups"][0]["state"] != "draining":
            return False
        on_host("gpu-01", f"printf XXXX | dd of={gguf} bs=1 count=4 conv=notrunc status=none")
        return True

    status, _ = rolled(fleet, "model", fleet["inventory"], "--to", SECOND, meanwhile=damaged_once_draining)
    found = record(fleet)
    assert status == 1 and found["status"] == "halted" and "canary group failed: gpu-01" in found["why"], found
    canary = found["groups"][0]
    assert (canary["state"], canary["rolled_back_from"], canary["to"]) == ("done", SECOND, FIRST), canary
    assert "did not become ready" in " ".join(detail for _, _, detail in canary["history"]), canary["history"]
    assert [group["state"] for group in found["groups"][1:]] == ["pending"] * 3
    assert answers(fleet) == dict.fromkeys(HOSTS, REPLIES[FIRST])
    assert {path.name for path in fleet["balancer"].iterdir()} == set(HOSTS)
    for host in HOSTS:  # staged everywhere before the canary drained: the others wait with both on disk
        assert active(host) == FIRST
        on_host(host, f"test -s {CACHE}/manifests/{SECOND}.json")
    shown = k3ops("model", "status", fleet["inventory"]).stdout
    assert all(re.search(rf"^{host}\s.*\s{SECOND[:12]}$", shown, re.MULTILINE) for host in HOSTS[1:]), shown


def test_resume_moves_every_host_to_the_new_revision_one_at_a_time(fleet):
    """The bad copy removed (what a person does after the halt), `resume` stages gpu-01 again and moves the four
    hosts in turn: every answer the poller got was revision 1's or 2's, never more than one host out."""
    on_host("gpu-01", f"rm -rf {CACHE}/revisions/{SECOND} {CACHE}/manifests/{SECOND}.json")
    status, poller = rolled(fleet, "resume", fleet["inventory"])
    found = record(fleet)
    assert status == 0 and found["status"] == "done", found
    assert poller.replies[REPLIES[FIRST]] and poller.replies[REPLIES[SECOND]], poller.replies
    assert answers(fleet) == dict.fromkeys(HOSTS, REPLIES[SECOND])
    for host in HOSTS:
        assert active(host) == SECOND
        state = json.loads(on_host(host, f"cat {CACHE}/state.json").stdout)
        assert state["history"][0] == FIRST and state.get("staged") is None, state
        assert on_host(host, f"systemctl is-active {ENGINE_UNIT}").stdout.strip() == "active"


def test_a_rollback_to_the_revision_still_in_the_cache_downloads_nothing(fleet, tmp_path):
    """Revision 1 is the one rollback_depth keeps: the same command moves back to it, two hosts at a time, and the
    Hub serves not one file. The engine's arguments changed in the same data move with it, in the same rollout:
    each engine restarts once, onto both."""
    changed = lab_inventory(tmp_path / "fleet.py", **balancer_data(fleet["balancer"]),
                            engine={"ready_timeout_seconds": READY_TIMEOUT, "args": {**LLAMA_SERVER_ARGS, **THREADS}})
    before = hub.downloads()
    status, _ = rolled({**fleet, "inventory": changed}, "model", changed, "--to", FIRST, "--max-unavailable", "2",
                       budget=2)
    assert status == 0 and json.loads(k3ops("upgrade", "status", changed, "--json").stdout)["status"] == "done"
    assert hub.downloads() == before
    assert answers(fleet) == dict.fromkeys(HOSTS, REPLIES[FIRST])
    for host in HOSTS:
        assert active(host) == FIRST
        assert " ".join(f"{flag} {value}" for flag, value in THREADS.items()) in \
            on_host(host, "ps -o args= -C llama-server").stdout
