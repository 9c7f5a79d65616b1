"""deploys/k3.py end to end on a 2-host lab: GPU host, model, and llama-server serving the pinned tiny
model; a rerun changes nothing; the watchdog heals a killed or hung engine."""

from __future__ import annotations

import json
import time

from k3ops.lab import hub
from k3ops.lab.inventory import groups
from k3ops.onhost.layout import ENGINE_SECRETS_FILE, ENGINE_UNIT, WATCHDOG_SERVICE

from .conftest import host_checks, k3ops, lab_inventory, on_host, pyinfra

LAB_PROFILES = ("cpu", "cpu")
HOSTS = ("gpu-01", "gpu-02")
# What the pinned revision (the lab inventory's, the first) answers, whatever it is asked.
PINNED_REPLY = hub.TINY_MODEL_REPLIES[hub.TINY_MODEL_REVISIONS[0]]
TEST_TOKEN = "hf_labTokenNeverLogged0123456789"


def deploy() -> dict:
    result = pyinfra("--json", "deploys/k3.py", env={"HF_TOKEN": TEST_TOKEN})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads(result.stdout)


def changed_operations(report: dict) -> list[str]:
    return [op["name"] for op in report["results"]["operations"] if op["success"]]


def engine_data(host: str) -> dict:
    return next(data["engine"] for hosts in groups().values() for name, data in hosts if name == host)


def chat(host: str) -> dict:
    """A chat completion from the host's engine, asked on the host itself with its API key (the key goes
    through a header file, so it is on no command line)."""
    body = json.dumps({"model": "tiny-k3", "max_tokens": 16, "messages": [{"role": "user", "content": "Hello"}]})
    answer = on_host(host, f". {ENGINE_SECRETS_FILE}; printf 'Authorization: Bearer %s\\n' \"$LLAMA_API_KEY\" > /run/k3ops-h; "
                           f"curl -sS --fail -H @/run/k3ops-h -H 'Content-Type: application/json' -d '{body}' "
                           f"http://{engine_data(host)['host']}:8080/v1/chat/completions; rm -f /run/k3ops-h").stdout
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
