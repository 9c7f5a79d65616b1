"""A host lost in the middle of deploys/k3.py: it fails within about a minute, the other host finishes and
serves, the summary names the lost host, and a rerun once it is back converges."""

from __future__ import annotations

import subprocess
import threading
import time

from k3ops.lab import hub
from k3ops.spec.connection import ConnectionSpec

from ..conftest import REPO_ROOT
from .conftest import COMMAND_TIMEOUT, k3ops, on_host, pyinfra, pyinfra_command

LAB_PROFILES = ("h200x8", "h200x8")
LOST, SURVIVOR = "gpu-02", "gpu-01"
PINNED_REPLY = hub.TINY_MODEL_REPLIES[hub.TINY_MODEL_REVISIONS[0]]
DEFAULT_LOST_AFTER = ConnectionSpec().ssh_lost_after_seconds
# From the cut to pyinfra giving the host up: the data's limit, plus a keepalive interval and slack for
# a loaded CI machine. Without the limits the wait is TCP's own, about 15 minutes.
GIVE_UP_BOUND = 3 * DEFAULT_LOST_AFTER


class TimedOutput:
    """A running command's output lines, each with the time it arrived."""

    def __init__(self, process: subprocess.Popen):
        self.lines: list[tuple[float, str]] = []
        self.thread = threading.Thread(target=self._read, args=(process,), daemon=True)
        self.thread.start()

    def _read(self, process) -> None:
        for line in process.stdout:
            self.lines.append((time.monotonic(), line))

    def first(self, *words: str) -> float | None:
        """When the first line holding every word arrived."""
        return next((at for at, line in self.lines if all(word in line for word in words)), None)

    def text(self) -> str:
        return "".join(line for _, line in self.lines)


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout:.0f} s"
        time.sleep(0.5)


def installing(host: str) -> bool:
    """The host is in the middle of an apt install the deploy started."""
    return on_host(host, "pgrep -f 'apt-get.* install' >/dev/null", check=False).returncode == 0


def test_a_host_cut_mid_deploy_fails_alone_and_a_rerun_converges(lab):
    process = subprocess.Popen(pyinfra_command("deploys/k3.py"), cwd=REPO_ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    output = TimedOutput(process)
    try:
        wait_for(lambda: installing(LOST), 300, f"an apt install on {LOST}")
        k3ops("lab", "link", LOST, "down")
        cut = time.monotonic()
        process.wait(timeout=COMMAND_TIMEOUT)
    finally:
        process.kill()
        k3ops("lab", "link", LOST, "up")
    output.thread.join(timeout=10)
    text = output.text()

    assert process.returncode != 0, text[-3000:]
    given_up = output.first(LOST, "Error")
    assert given_up is not None, f"no error names {LOST}:\n{text[-3000:]}"
    assert given_up - cut < GIVE_UP_BOUND, f"{LOST} was given up {given_up - cut:.0f} s after its link was cut"
    answers = k3ops("serve", "chat", "inventory/lab/hosts.py", check=False).stdout.splitlines()
    assert f"{SURVIVOR}: {PINNED_REPLY}" in answers, text[-3000:]

    wait_for(lambda: on_host(LOST, "true", check=False).returncode == 0, 60, f"{LOST} answering again")
    rerun = pyinfra("deploys/k3.py")
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    answers = k3ops("serve", "chat", "inventory/lab/hosts.py").stdout.splitlines()
    assert sorted(answers) == [f"{SURVIVOR}: {PINNED_REPLY}", f"{LOST}: {PINNED_REPLY}"]
