"""deploys/k3.py end to end on a 2-host lab: GPU host, model, and llama-server serving the pinned tiny
model, its first run losing a host in the middle; a rerun changes nothing; the watchdog heals a killed or
hung engine."""

from __future__ import annotations

import json
import subprocess
import threading
import time

from k3ops.onhost.layout import ENGINE_SECRETS_FILE, ENGINE_UNIT, WATCHDOG_SERVICE
from k3ops_lab import hub
from k3ops_lab.inventory import groups

from ..conftest import REPO_ROOT
from .conftest import (COMMAND_TIMEOUT, changed_operations, deploy_report, host_checks, k3ops, lab_inventory, on_host,
                       pyinfra, pyinfra_command)

LAB_PROFILES = ("cpu", "cpu")
HOSTS = ("gpu-01", "gpu-02")
# What the pinned revision (the lab inventory's, the first) answers, whatever it is asked.
PINNED_REPLY = hub.TINY_MODEL_REPLIES[hub.TINY_MODEL_REVISIONS[0]]
TEST_TOKEN = "hf_labTokenNeverLogged0123456789"
LOST, SURVIVOR = "gpu-02", "gpu-01"
# The lost host's connection limits (data, as an SRE would shorten them); from the cut to pyinfra giving the
# host up: the limit, plus a keepalive interval and slack for a loaded CI machine. Without the limits the wait
# is TCP's own, about 15 minutes.
LOST_AFTER, KEEPALIVE = 20, 5
GIVE_UP_BOUND = 3 * LOST_AFTER


def deploy() -> dict:
    return deploy_report("deploys/k3.py", env={"HF_TOKEN": TEST_TOKEN})


def engine_data(host: str) -> dict:
    return next(data["engine"] for hosts in groups().values() for name, data in hosts if name == host)


def chat(host: str) -> dict:
    """A chat completion from the host's engine, asked on the host itself with its API key (the key goes
    through a header file, so it is on no command line)."""
    body = json.dumps({"model": "tiny-k3", "max_tokens": 16, "messages": [{"role": "user", "content": "Hello"}]})
    answer = on_host(host, f". {ENGINE_SECRETS_FILE}; printf 'Authorization: Bearer %s\\n' \"$LLAMA_API_KEY\" > /run/k3ops-h; "
                           f"curl -sS --fail -H @/run/k3ops-h -H 'Content-Type: application/json' -d '{body}' "
                           f"http://{engine_data(host)['host']}:8080/v1/chat/completions; status=$?; "
                           "rm -f /run/k3ops-h; exit $status").stdout  # curl's status: a failed request fails on_host
    return json.loads(answer)


def reply(host: str) -> str | None:
    """The engine's answer, or None while it does not answer."""
    try:
        return chat(host)["choices"][0]["message"]["content"]
    except AssertionError:  # curl failed: the engine is not (yet) serving
        return None


def main_pid(host: str) -> int:
    return int(on_host(host, f"systemctl show --property MainPID --value {ENGINE_UNIT}").stdout)


def wait_until(predicate, timeout: float, what: str) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if predicate():
            return time.monotonic() - start
        time.sleep(1)
    raise AssertionError(f"{what} did not happen within {timeout:.0f} s")


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


def installing(host: str) -> bool:
    """The host is in the middle of an apt install the deploy started. ([a]pt-get: the pattern must not match the
    shell that runs pgrep, whose own command line holds it.)"""
    return on_host(host, "pgrep -f '[a]pt-get.* install' >/dev/null", check=False).returncode == 0


def test_a_host_cut_mid_deploy_fails_alone_and_a_rerun_converges(lab, tmp_path):
    """The first deploy loses gpu-02 in the middle of an apt install: it fails within its data's limit, gpu-01
    finishes and serves, and a rerun once gpu-02 is back converges."""
    inventory = lab_inventory(tmp_path / "fleet.py", ssh_lost_after_seconds=LOST_AFTER,
                              ssh_keepalive_seconds=KEEPALIVE)
    process = subprocess.Popen(pyinfra_command("deploys/k3.py", inventory=inventory), cwd=REPO_ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output = TimedOutput(process)
    try:
        deadline = time.monotonic() + 300
        while not installing(LOST):  # polled closely: a CPU host's installs take seconds
            assert time.monotonic() < deadline and process.poll() is None, f"no apt install seen on {LOST}"
            time.sleep(0.1)
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
    answers = k3ops("serve", "chat", inventory, check=False).stdout.splitlines()
    assert f"{SURVIVOR}: {PINNED_REPLY}" in answers, text[-3000:]

    wait_until(lambda: on_host(LOST, "true", check=False).returncode == 0, 60, f"{LOST} answering again")
    rerun = pyinfra("deploys/k3.py", inventory=inventory)
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    answers = k3ops("serve", "chat", inventory).stdout.splitlines()
    assert sorted(answers) == [f"{SURVIVOR}: {PINNED_REPLY}", f"{LOST}: {PINNED_REPLY}"]


def test_k3_converges_and_every_host_answers_a_chat(lab):
    assert changed_operations(deploy())
    for host in HOSTS:
        answer = chat(host)
        assert answer["model"] == "tiny-k3" and answer["choices"][0]["message"] == {"role": "assistant",
                                                                                    "content": PINNED_REPLY}


def test_the_api_refuses_requests_without_the_key(lab):
    address = engine_data("gpu-01")["host"]
    status = on_host("gpu-01", "curl -s -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' "
                               "-d '{\"model\": \"tiny-k3\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}' "
                               f"http://{address}:8080/v1/chat/completions", check=False).stdout
    assert status == "401"


def test_host_checks_pass(lab):
    checks = host_checks(env={"HF_TOKEN": TEST_TOKEN})
    assert checks.returncode == 0, checks.stdout[-4000:]
    assert " failed" not in checks.stdout


def test_second_run_changes_nothing(lab):
    assert changed_operations(deploy()) == []


def test_serve_status_shows_each_engine(lab):
    rows = json.loads(k3ops("serve", "status", "inventory/lab/hosts.py", "--json").stdout)
    assert [(row["host"], row["unit"], row["ready"], row["detail"]) for row in rows] == \
        [(h, "active", True, "healthy") for h in HOSTS]
    assert all(row["requests_running"] is not None for row in rows)


def test_status_and_checks_refuse_hosts_whose_key_is_unknown(lab, tmp_path):
    """Host keys are checked unless the inventory opts out, as the lab's own inventory does."""
    strict = lab_inventory(tmp_path / "strict.py", ssh_strict_host_key_checking="yes",
                           ssh_known_hosts_file=str(tmp_path / "known_hosts"))
    (tmp_path / "known_hosts").write_text("")
    status = k3ops("serve", "status", strict, check=False)
    assert status.returncode == 1
    for host in HOSTS:
        assert f"{host}: cannot connect: Server" in status.stderr and "not found in known_hosts" in status.stderr
    checks = host_checks(strict, "-k", "test_engine_serves_the_pinned_model", env={"HF_TOKEN": TEST_TOKEN})
    assert checks.returncode != 0 and "not found in known_hosts" in checks.stdout


def test_serve_chat_prints_each_engines_answer(lab):
    answers = k3ops("serve", "chat", "inventory/lab/hosts.py", "--message", "Which revision are you?")
    assert answers.stdout.splitlines() == [f"{host}: {PINNED_REPLY}" for host in HOSTS]


def test_a_killed_engine_comes_back(lab):
    before = main_pid("gpu-01")
    on_host("gpu-01", f"kill -9 {before}")
    wait_until(lambda: main_pid("gpu-01") not in (0, before) and reply("gpu-01") == PINNED_REPLY, 60, "a restart")


def test_a_hung_engine_is_restarted_by_the_watchdog(lab):
    """SIGSTOP: the process lives and its port stays open, but nothing answers (llama-server after a CUDA OOM)."""
    before = main_pid("gpu-02")
    on_host("gpu-02", f"kill -STOP {before}")
    engine = engine_data("gpu-02")
    window = engine["health_interval_seconds"] * (engine["health_failures"] + 1) + 30
    healed = wait_until(lambda: main_pid("gpu-02") not in (0, before), window, "the watchdog's restart")
    assert "restarting: 2 failed health checks in a row" in on_host(
        "gpu-02", f"journalctl --unit {WATCHDOG_SERVICE} --no-pager --output cat").stdout
    wait_until(lambda: reply("gpu-02") == PINNED_REPLY, 60, "serving again")
    assert healed < window
