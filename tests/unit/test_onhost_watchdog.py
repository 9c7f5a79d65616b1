"""The engine watchdog's checks against a real HTTP server, and its restart decisions."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from k3ops.onhost import watchdog
from k3ops.onhost.watchdog import decide, engine_state, healthy, main


class Engine(BaseHTTPRequestHandler):
    """An OpenAI-compatible server's /health and /v1/models, as the test sets them."""

    health_status = 200
    models = ["tiny-k3"]
    seen_authorization = []
    generation_stuck = threading.Event()  # set: a completion never comes, while /health still answers

    def do_GET(self):  # noqa: N802 (http.server's name)
        if self.path == "/health":
            body, status = b'{"status": "ok"}', Engine.health_status
        else:
            Engine.seen_authorization.append(self.headers.get("Authorization"))
            body, status = json.dumps({"object": "list", "data": [{"id": m} for m in Engine.models]}).encode(), 200
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):  # noqa: N802
        asked = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if Engine.generation_stuck.is_set():
            Engine.release.wait(30)
            return
        body = json.dumps({"model": asked["model"], "choices": [
            {"message": {"role": "assistant", "content": f"you said {asked['messages'][0]['content']}"}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def engine():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Engine)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    Engine.health_status, Engine.models, Engine.seen_authorization = 200, ["tiny-k3"], []
    Engine.generation_stuck.clear()
    Engine.release = threading.Event()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    Engine.release.set()
    server.shutdown()
    server.server_close()


def test_healthy_needs_health_and_the_served_model(engine, monkeypatch):
    monkeypatch.setenv("LLAMA_API_KEY", "sk-test")
    assert healthy(f"{engine}/health", f"{engine}/v1/models", "tiny-k3") == (True, "healthy")
    assert Engine.seen_authorization == ["Bearer sk-test"]
    Engine.models = ["other"]
    ok, why = healthy(f"{engine}/health", f"{engine}/v1/models", "tiny-k3")
    assert not ok and "not 'tiny-k3'" in why
    Engine.health_status = 503
    ok, why = healthy(f"{engine}/health", None, None)
    assert not ok and "503" in why


def test_a_closed_port_is_unhealthy():
    ok, why = healthy("http://127.0.0.1:9/health", None, None)
    assert not ok and "127.0.0.1:9" in why


def test_loading_is_left_alone_until_the_start_timeout():
    state, restart = decide({}, "inv-1", running_seconds=100, ok=False, failures=3, start_timeout=600)
    assert restart is None and not state["healthy_once"]
    state, restart = decide(state, "inv-1", running_seconds=601, ok=False, failures=3, start_timeout=600)
    assert restart == "not healthy 601 s after start (limit 600 s)"


def test_repeated_failures_after_health_restart_it():
    state, _ = decide({}, "inv-1", 10, ok=True, failures=3, start_timeout=600)
    for expected in (None, None, "3 failed health checks in a row"):
        state, restart = decide(state, "inv-1", 20, ok=False, failures=3, start_timeout=600)
        assert restart == expected
    state, restart = decide(state, "inv-1", 30, ok=False, failures=3, start_timeout=600)
    assert restart is None and state["failures"] == 1


def test_a_success_resets_the_count_and_a_new_invocation_starts_over():
    state, _ = decide({}, "inv-1", 10, ok=True, failures=2, start_timeout=600)
    state, _ = decide(state, "inv-1", 20, ok=False, failures=2, start_timeout=600)
    state, _ = decide(state, "inv-1", 30, ok=True, failures=2, start_timeout=600)
    assert state["failures"] == 0
    state, restart = decide(state, "inv-2", 5, ok=False, failures=2, start_timeout=600)
    assert restart is None and state == {"invocation": "inv-2", "healthy_once": False, "failures": 0}


def test_chat_prints_the_answer_with_the_key_from_the_secrets_file(engine, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("LLAMA_API_KEY", "")  # main() sets it from the file; monkeypatch restores it after
    secrets = tmp_path / "engine.env"
    secrets.write_text("LLAMA_API_KEY=sk-from-file\n")
    assert main(["--url", f"{engine}/health", "--secrets", str(secrets), "--served-name", "tiny-k3",
                 "--chat", f"{engine}/v1/chat/completions", "--message", "hi"]) == 0
    assert capsys.readouterr().out == "you said hi\n"


def test_the_check_probes_generation_only_on_a_ready_engine(engine, tmp_path):
    chat = f"{engine}/v1/chat/completions"
    state = engine_state(f"{engine}/health", f"{engine}/v1/models", "tiny-k3", "no-such.service", tmp_path / "state.json", chat, 2)
    assert state["ready"] and state["generation"]["answered"] is True
    Engine.generation_stuck.set()
    state = engine_state(f"{engine}/health", f"{engine}/v1/models", "tiny-k3", "no-such.service", tmp_path / "state.json", chat, 1)
    assert state["ready"] and state["generation"]["answered"] is False and "timed out" in state["generation"]["detail"]
    Engine.health_status = 503
    state = engine_state(f"{engine}/health", f"{engine}/v1/models", "tiny-k3", "no-such.service", tmp_path / "state.json", chat, 1)
    assert not state["ready"] and state["generation"] is None


def test_the_check_says_whether_the_watchdog_saw_this_run_of_the_unit_ready(engine, tmp_path, monkeypatch):
    """A run the watchdog saw healthy and that no longer answers is stuck; a later start (a new invocation) or a
    record the watchdog never wrote is not known to have been ready."""
    invocation = {"ActiveState": "active", "InvocationID": "inv-2"}
    monkeypatch.setattr(watchdog, "_unit", lambda unit, *properties: invocation)  # systemd's answer for the unit
    record = tmp_path / "state.json"
    Engine.health_status = 503

    def check() -> dict:
        return engine_state(f"{engine}/health", None, "tiny-k3", "k3ops-engine.service", record)

    assert check()["ready_since_start"] is False  # no record
    record.write_text(json.dumps(decide({}, "inv-2", 30, ok=True, failures=2, start_timeout=600)[0]))
    state = check()
    assert state["ready_since_start"] is True and state["unit"] == "active" and not state["ready"]
    invocation["InvocationID"] = "inv-3"  # restarted since: loading again
    assert check()["ready_since_start"] is False
    record.write_text(json.dumps(decide({}, "inv-3", 30, ok=False, failures=2, start_timeout=600)[0]))
    assert check()["ready_since_start"] is False
