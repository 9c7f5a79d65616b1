"""The engine's health watchdog, run by a systemd timer on the host (standard library only).

An engine can be up and useless: vLLM's API kept answering after its engine core died, llama-server
hangs after a CUDA OOM, a multi-node start hangs in NCCL init. Each run checks the health endpoint and
that /v1/models lists the served model; after `--failures` failed checks in a row, or when a fresh
start never became healthy within `--start-timeout`, it kills the engine and restarts its unit: an engine
that does not answer cannot drain, and a graceful stop would wait out its whole drain limit. State lives in a
small JSON file keyed by the unit's invocation, so every restart begins a new count.
"""

from __future__ import annotations

import argparse
import json
import os
import stat
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from .checkpoint.manifest import write_atomically
from .layout import API_KEY_VARIABLES, ENGINE_REVISION_FILE, ENGINE_SECRETS_FILE, ENGINE_UNIT, WATCHDOG_STATE_FILE

CHECK_TIMEOUT_SECONDS = 10
# Words of the watchdog's log that the doctor reads: a restart, and a start that never became healthy.
RESTARTING = "restarting"
START_TIMED_OUT = "after start"


def healthy(url: str, models_url: str | None, served_name: str | None) -> tuple[bool, str]:
    """Whether the engine answers its health endpoint and lists the served model, and if not, why."""
    try:
        with urllib.request.urlopen(url, timeout=CHECK_TIMEOUT_SECONDS) as response:
            if response.status != 200:
                return False, f"{url} answered {response.status}"
        if models_url:
            served = [model.get("id") for model in json.loads(get(models_url)).get("data", [])]
            if served_name not in served:
                return False, f"{models_url} lists {served}, not {served_name!r}"
    except (OSError, ValueError) as error:
        return False, f"{url}: {error}"
    return True, "healthy"


def decide(state: dict, invocation: str, running_seconds: float, ok: bool, failures: int,
           start_timeout: float) -> tuple[dict, str | None]:
    """The next state, and the reason to restart the engine (None: leave it)."""
    if state.get("invocation") != invocation:
        state = {"invocation": invocation, "healthy_once": False, "failures": 0}
    if ok:
        return {**state, "healthy_once": True, "failures": 0}, None
    if not state["healthy_once"]:
        if running_seconds < start_timeout:
            return state, None  # still loading: the port opens only after the weights are in
        return state, f"not healthy {running_seconds:.0f} s {START_TIMED_OUT} (limit {start_timeout:.0f} s)"
    state = {**state, "failures": state["failures"] + 1}
    if state["failures"] >= failures:
        return {**state, "failures": 0}, f"{state['failures']} failed health checks in a row"
    return state, None


def _unit(unit: str, *properties: str) -> dict[str, str]:
    shown = subprocess.run(["systemctl", "show", unit, *(f"--property={name}" for name in properties)],
                           capture_output=True, text=True, check=True).stdout
    return dict(line.split("=", 1) for line in shown.splitlines() if "=" in line)


def read_secrets(path: Path | None) -> None:
    """Put the engine's API key (KEY=VALUE lines) into this process's environment, as systemd would."""
    if path is None or not path.exists():
        return
    for line in path.read_text().splitlines():
        key, _, value = line.partition("=")
        if key.strip() in API_KEY_VARIABLES.values() and value:
            os.environ[key.strip()] = value.strip()


def get(url: str, body: dict | None = None, timeout: float = CHECK_TIMEOUT_SECONDS) -> str:
    """A page of the engine's API (POSTing `body` as JSON), with the API key when there is one."""
    request = urllib.request.Request(url, data=None if body is None else json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    key = next((os.environ[name] for name in API_KEY_VARIABLES.values() if os.environ.get(name)), None)
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return response.read().decode()


def probe(url: str, served_name: str | None, timeout: float) -> dict:
    """Whether the engine generates at all: one token within `timeout` s. /health answers from the API
    server even while the engine behind it is stuck, so only a generation can tell."""
    body = {"model": served_name, "max_tokens": 1, "messages": [{"role": "user", "content": "ping"}]}
    started = time.monotonic()
    try:
        get(url, body, timeout=timeout)
    except (OSError, ValueError) as error:
        return {"answered": False, "seconds": round(time.monotonic() - started, 1), "detail": f"{url}: {error}"}
    return {"answered": True, "seconds": round(time.monotonic() - started, 1), "detail": "generated one token"}


def wait(args) -> int:
    """Wait until the engine is ready (the deploy's readiness step), printing progress."""
    started = time.monotonic()
    while True:
        ok, why = healthy(args.url, args.models_url, args.served_name)
        waited = time.monotonic() - started
        if ok:
            print(f"ready after {waited:.0f} s", flush=True)
            return 0
        if waited > args.wait:
            print(f"not ready after {waited:.0f} s: {why}", file=sys.stderr, flush=True)
            return 1
        print(f"waiting ({waited:.0f} s): {why}", flush=True)
        time.sleep(min(5.0, max(args.wait - waited, 0.1)))


def engine_written(path: str) -> str:
    """A small file the engine's user writes, read by root: never through a link, never a FIFO that blocks."""
    descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(descriptor) as file:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise OSError(f"{path} is not a regular file")
        return file.read(4096)


def read_state(path: Path) -> dict:
    """The watchdog's record: the unit's invocation it counts for, whether that run was ever healthy, and the
    failed checks in a row."""
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return {}


def engine_state(url: str, models_url: str | None, served_name: str | None, unit: str, state_path: Path,
                 probe_url: str | None = None, probe_seconds: float | None = None) -> dict:
    """What `--check` prints (as JSON): the unit's state, the revision its last start loaded, readiness, whether
    the watchdog saw this run of the unit ready before (`ready_since_start`: an engine that was ready and no
    longer answers is stuck, not starting), and with `probe_url` whether a ready engine generates
    (`generation`, None when it is not ready)."""
    try:
        revision = engine_written(ENGINE_REVISION_FILE).strip() or None
    except OSError:
        revision = None
    try:
        shown = _unit(unit, "ActiveState", "InvocationID")
    except (OSError, subprocess.CalledProcessError):  # no systemd to ask
        shown = {}
    record = read_state(state_path)
    ready, detail = healthy(url, models_url, served_name)
    state = {"unit": shown.get("ActiveState", "unknown"), "revision": revision, "ready": ready, "detail": detail,
             "ready_since_start": bool(shown.get("InvocationID") and record.get("invocation") == shown["InvocationID"]
                                       and record.get("healthy_once"))}
    if probe_url and probe_seconds:
        state["generation"] = probe(probe_url, served_name, probe_seconds) if ready else None
    return state


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="k3ops-engine-watchdog")
    parser.add_argument("--url", required=True, help="the engine's health endpoint")
    parser.add_argument("--models-url")
    parser.add_argument("--served-name")
    parser.add_argument("--secrets", type=Path, default=Path(ENGINE_SECRETS_FILE),
                        help="read the API key from this file (when not run by systemd)")
    parser.add_argument("--unit", default=ENGINE_UNIT)
    parser.add_argument("--check", action="store_true", help="print the engine's state as JSON, and exit")
    parser.add_argument("--wait", type=float, help="wait up to this many seconds for the engine to be ready")
    parser.add_argument("--metrics", help="print this metrics page, and exit")
    parser.add_argument("--chat", metavar="URL", help="print the served model's answer to --message from this "
                                                       "chat completions URL, and exit")
    parser.add_argument("--message", default="Hello!")
    parser.add_argument("--probe", type=float, metavar="SECONDS",
                        help="with --check and --chat: also say whether one token came within SECONDS")
    # A watchdog run's limits come from the host's engine spec, through the unit: no defaults here.
    parser.add_argument("--failures", type=int)
    parser.add_argument("--start-timeout", type=float)
    parser.add_argument("--state", type=Path, default=Path(WATCHDOG_STATE_FILE))
    parser.add_argument("--container", help="the engine's container (a container engine), killed with it")
    args = parser.parse_args(argv)
    if args.probe and not (args.check and args.chat):
        parser.error("--probe goes with --check and --chat")
    read_secrets(args.secrets)
    if args.metrics:
        try:
            print(get(args.metrics))
        except OSError as error:
            print(f"# unavailable: {error}")
        return 0
    if args.check:
        print(json.dumps(engine_state(args.url, args.models_url, args.served_name, args.unit, args.state, args.chat,
                                      args.probe)))
        return 0
    if args.chat:
        body = {"model": args.served_name, "max_tokens": 16, "messages": [{"role": "user", "content": args.message}]}
        print(json.loads(get(args.chat, body, timeout=120))["choices"][0]["message"]["content"])
        return 0
    if args.wait is not None:
        return wait(args)
    if args.failures is None or args.start_timeout is None:
        parser.error("a watchdog run needs --failures and --start-timeout")
    return watch(args)


def kill(unit: str, container: str | None) -> None:
    """Kill a hung engine before its restart: every process of the unit, and its container (which `docker run`
    in the unit only watches). Either may be gone already; the restart follows regardless."""
    if container:
        subprocess.run(["docker", "kill", container], capture_output=True)
    subprocess.run(["systemctl", "kill", "--signal=SIGKILL", unit], capture_output=True)


def watch(args) -> int:
    """One watchdog run: check, record, and restart the unit when the rules say so."""
    unit = _unit(args.unit, "ActiveState", "InvocationID", "ExecMainStartTimestampMonotonic")
    if unit.get("ActiveState") != "active":
        return 0  # stopped on purpose, or systemd is restarting it already
    running = time.monotonic() - int(unit.get("ExecMainStartTimestampMonotonic") or 0) / 1e6
    ok, why = healthy(args.url, args.models_url, args.served_name)
    state, restart = decide(read_state(args.state), unit.get("InvocationID", ""), running, ok, args.failures, args.start_timeout)
    args.state.parent.mkdir(mode=0o755, parents=True, exist_ok=True)  # root's, under layout.STATE_DIR
    write_atomically(args.state, json.dumps(state) + "\n")
    if not ok:
        print(f"{args.unit}: unhealthy: {why}", flush=True)
    if restart:
        print(f"{args.unit}: {RESTARTING}: {restart}", flush=True)
        kill(args.unit, args.container)
        subprocess.run(["systemctl", "restart", "--no-block", args.unit], check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
