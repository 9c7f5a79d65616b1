#!/usr/bin/python3
"""`vllm serve` and `sglang serve` of the lab's stand-in engine images (standin_image.py): vLLM's and SGLang's
OpenAI servers, without their GPUs. The program's name says which it is (the images install this file as both).

The engines need GPUs the lab does not have, so this takes the command line a recipe renders and does what the
engine does with it, short of CUDA: it refuses a flag the engine does not know, checks the GPUs the container
runtime gave the container against the world size (tensor x pipeline x data parallel), loads the model
directory's GGUF into the image's llama-server on loopback, and only then opens --host:--port (the engines'
ports, too, open once the weights are loaded). There it answers as the engine does: /health, /v1/models with the
served names, /v1/* only with vLLM's API key (--api-key, else VLLM_API_KEY), and /metrics under the engine's
metric names. On SIGTERM each stops as it does: vLLM refuses new requests and waits up to --shutdown-timeout for
those in flight; SGLang (its TokenizerManager.sigterm_watchdog) looks every 5 s and exits once none is left,
however long that takes. Standard library only: it runs on the image's own python3.
"""

from __future__ import annotations

import argparse
import http.client
import http.server
import json
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

LLAMA_SERVER = "/usr/local/lib/k3ops-lab/llama-server"
LOAD_TIMEOUT_SECONDS = 300
# Each engine's metric names, from what llama-server reports of the same quantity.
METRICS = {"vllm": {"llamacpp:requests_processing": "vllm:num_requests_running",
                    "llamacpp:requests_deferred": "vllm:num_requests_waiting",
                    "llamacpp:kv_cache_usage_ratio": "vllm:kv_cache_usage_perc"},
           "sglang": {"llamacpp:requests_processing": "sglang:num_running_reqs",
                      "llamacpp:requests_deferred": "sglang:num_queue_reqs",
                      "llamacpp:kv_cache_usage_ratio": "sglang:token_usage"}}
SGLANG_DRAIN_POLL_SECONDS = 5  # how often SGLang's sigterm_watchdog counts the requests left


def parser() -> argparse.ArgumentParser:
    """The flags of `vllm serve` the recipes and their overrides use; any other is refused, as vLLM refuses it."""
    serve = argparse.ArgumentParser(prog="vllm serve", allow_abbrev=False)
    serve.add_argument("model_tag", nargs="?")
    serve.add_argument("--model")
    serve.add_argument("--served-model-name", nargs="+")
    serve.add_argument("--host", default="0.0.0.0")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--api-key")
    serve.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    serve.add_argument("--pipeline-parallel-size", "-pp", type=int, default=1)
    serve.add_argument("--data-parallel-size", "-dp", type=int, default=1)
    serve.add_argument("--nnodes", type=int, default=1)
    serve.add_argument("--node-rank", type=int, default=0)
    serve.add_argument("--master-addr")
    serve.add_argument("--master-port", type=int)
    serve.add_argument("--headless", action="store_true")
    serve.add_argument("--max-model-len", type=int)
    serve.add_argument("--shutdown-timeout", type=int, default=0)
    serve.add_argument("--gpu-memory-utilization", type=float)
    for flag in ("--kv-cache-dtype", "--attention-backend", "--attention-config", "--prefix-match-unit", "--dtype",
                 "--tool-call-parser", "--reasoning-parser", "--quantization", "--max-num-seqs", "--max-num-batched-tokens",
                 "--swap-space", "--distributed-executor-backend", "--generation-config", "--chat-template"):
        serve.add_argument(flag)
    for flag in ("--enable-prefix-caching", "--no-enable-prefix-caching", "--enable-auto-tool-choice",
                 "--trust-remote-code", "--enforce-eager", "--disable-log-requests", "--enable-expert-parallel"):
        serve.add_argument(flag, action="store_true")
    return serve


def sglang_parser() -> argparse.ArgumentParser:
    """The flags of `sglang serve` the SGLang recipes and their overrides use; any other is refused. Parsed into
    vLLM's names (the server below reads those)."""
    serve = argparse.ArgumentParser(prog="sglang serve", allow_abbrev=False)
    serve.add_argument("--model-path", dest="model", required=True)
    serve.add_argument("--served-model-name", type=lambda name: [name])
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=30000)
    serve.add_argument("--api-key")
    serve.add_argument("--tp-size", "--tp", dest="tensor_parallel_size", type=int, default=1)
    serve.add_argument("--pp-size", dest="pipeline_parallel_size", type=int, default=1)
    serve.add_argument("--dp-size", "--dp", dest="data_parallel_size", type=int, default=1)
    serve.add_argument("--nnodes", type=int, default=1)
    serve.add_argument("--node-rank", type=int, default=0)
    serve.add_argument("--dist-init-addr")
    serve.add_argument("--context-length", dest="max_model_len", type=int)
    serve.add_argument("--mem-fraction-static", type=float)
    for flag in ("--dcp-size", "--mamba-full-memory-ratio", "--reasoning-parser", "--tool-call-parser",
                 "--chunked-prefill-size", "--max-running-requests", "--kv-cache-dtype", "--attention-backend",
                 "--quantization", "--chat-template"):
        serve.add_argument(flag)
    for flag in ("--trust-remote-code", "--enable-metrics", "--enable-dp-attention", "--disable-radix-cache"):
        serve.add_argument(flag, action="store_true")
    return serve


def log(message: str) -> None:
    print(f"INFO {time.strftime('%m-%d %H:%M:%S')} [api_server.py] {message}", flush=True)


def gpus() -> list[str]:
    """The GPUs the container runtime gave this container: NVIDIA's device nodes, or AMD's render nodes
    beside /dev/kfd."""
    nvidia = [path for path in Path("/dev").glob("nvidia*") if re.fullmatch(r"nvidia\d+", path.name)
              and stat.S_ISCHR(path.stat().st_mode)]
    amd = sorted(Path("/dev/dri").glob("renderD*")) if Path("/dev/kfd").exists() else []
    return sorted(str(path) for path in nvidia) or [str(path) for path in amd]


def world_size_error(args, found: list[str]) -> str | None:
    """vLLM's own refusal when this node has fewer GPUs (`found`) than its share of the world size."""
    needed = args.tensor_parallel_size * args.pipeline_parallel_size * args.data_parallel_size // max(args.nnodes, 1)
    if not found:
        return "RuntimeError: No CUDA GPUs are available"
    if len(found) < needed:
        return (f"ValueError: The number of required GPUs exceeds the total number of available GPUs in the "
                f"placement group (needed {needed}, found {len(found)}: {' '.join(found)}).")
    return None


def gguf_file(model: str) -> Path:
    """The GGUF to load: the path itself, or the first one (the first shard) in the model directory."""
    path = Path(model)
    if path.is_file():
        return path
    found = sorted(path.glob("*.gguf")) + sorted(path.glob("*/*.gguf"))
    if not found:
        raise SystemExit(f"ValueError: No supported config format found in {model} (the lab's vLLM stand-in "
                         "serves a GGUF)")
    return found[0]


def free_loopback_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_backend(args, model: str, key: str | None) -> tuple[subprocess.Popen, int]:
    """llama-server on loopback with the same key (from the environment, never an argument)."""
    port = free_loopback_port()
    command = [LLAMA_SERVER, "--model", str(gguf_file(model)), "--host", "127.0.0.1", "--port", str(port),
               "--alias", args.served_model_name[0], "--ctx-size", str(args.max_model_len or 0), "--jinja",
               "--metrics"]
    environment = {key_name: value for key_name, value in os.environ.items() if key_name != "VLLM_API_KEY"}
    if key:
        environment["LLAMA_API_KEY"] = key
    return subprocess.Popen(command, env=environment, stdin=subprocess.DEVNULL), port


def wait_until_loaded(backend: subprocess.Popen, port: int) -> None:
    deadline = time.monotonic() + LOAD_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if backend.poll() is not None:
            raise SystemExit(f"RuntimeError: Engine core initialization failed (exit {backend.returncode})")
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            connection.request("GET", "/health")
            if connection.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"RuntimeError: the model did not load in {LOAD_TIMEOUT_SECONDS} s")


class Generations:
    """The generations in flight, and whether the server still takes new ones: vLLM's shutdown (its
    --shutdown-timeout, vllm-project/vllm#36666) refuses new requests at once and lets those in flight finish,
    for up to that many seconds; with 0, the default, it aborts them."""

    def __init__(self):
        self.running, self.open, self.changed = 0, True, threading.Condition()

    def start(self) -> bool:
        with self.changed:
            if self.open:
                self.running += 1
            return self.open

    def end(self) -> None:
        with self.changed:
            self.running -= 1
            self.changed.notify_all()

    def drain(self, seconds: float) -> int:
        """Refuse new generations, wait up to `seconds` for those in flight; the number still running."""
        with self.changed:
            self.open = False
            self.changed.wait_for(lambda: self.running == 0, timeout=seconds)
            return self.running

    def drain_as_sglang(self, poll: float = SGLANG_DRAIN_POLL_SECONDS) -> None:
        """SGLang's drain: still taking requests, count those left every `poll` seconds until none is."""
        while True:
            with self.changed:
                left = self.running
            log(f"Gracefully exiting... Remaining number of requests {left}.")
            if left == 0:
                return
            time.sleep(poll)


def handler(engine: str, args, model: str, key: str | None, backend_port: int, loaded_at: int,
            generations: Generations):
    names = args.served_model_name

    class EngineApi(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "uvicorn"
        sys_version = ""

        def log_message(self, format, *values):
            log(f"{self.client_address[0]} - \"{self.requestline}\" {values[1] if len(values) > 1 else ''}")

        def reply(self, status: int, body: bytes, content_type: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def reply_json(self, status: int, document) -> None:
            self.reply(status, json.dumps(document).encode())

        def authorized(self) -> bool:
            if key is None or not self.path.startswith("/v1"):
                return True
            return self.headers.get("Authorization", "") == f"Bearer {key}"

        def do_GET(self):
            self.route("GET")

        def do_POST(self):
            self.route("POST")

        def route(self, method: str) -> None:
            path = self.path.split("?", 1)[0]
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if not self.authorized():
                self.reply_json(401, {"error": "Unauthorized"})
            elif (method, path) == ("GET", "/health"):
                self.reply(200, b"")
            elif (method, path) == ("GET", "/version"):
                self.reply_json(200, {"version": "k3ops-lab-standin"})
            elif (method, path) == ("GET", "/metrics"):
                self.reply(200, self.metrics(), "text/plain; version=0.0.4; charset=utf-8")
            elif (method, path) == ("GET", "/v1/models"):
                self.reply_json(200, {"object": "list", "data": [
                    {"id": name, "object": "model", "created": loaded_at, "owned_by": engine, "root": model,
                     "parent": None, "max_model_len": args.max_model_len} for name in names]})
            elif method == "POST" and path in ("/v1/chat/completions", "/v1/completions"):
                self.generate(path, body)
            else:
                self.reply_json(404, {"detail": "Not Found"})

        def generate(self, path: str, body: bytes) -> None:
            if not generations.start():
                self.reply_json(503, {"object": "error", "message": "the server is shutting down",
                                      "type": "ServiceUnavailableError", "code": 503})
                return
            try:
                self.answer(path, body)
            finally:
                generations.end()

        def answer(self, path: str, body: bytes) -> None:
            try:
                asked = json.loads(body or b"{}").get("model")
            except (ValueError, AttributeError):
                self.reply_json(400, {"object": "error", "message": "the request body is not a JSON object",
                                      "type": "BadRequestError", "code": 400})
                return
            if asked not in (None, *names):
                self.reply_json(404, {"object": "error", "message": f"The model `{asked}` does not exist.",
                                      "type": "NotFoundError", "param": None, "code": 404})
                return
            self.forward("POST", path, body)

        def forward(self, method: str, path: str, body: bytes) -> None:
            """The backend's answer, relayed as it comes (a stream, too), on a connection closed after it."""
            upstream = http.client.HTTPConnection("127.0.0.1", backend_port, timeout=600)
            headers = {"Content-Type": self.headers.get("Content-Type", "application/json")}
            if self.headers.get("Authorization"):
                headers["Authorization"] = self.headers["Authorization"]
            upstream.request(method, path, body=body, headers=headers)
            answer = upstream.getresponse()
            self.send_response(answer.status)
            for name, value in answer.getheaders():
                if name.lower() not in ("content-length", "transfer-encoding", "connection", "server", "date"):
                    self.send_header(name, value)
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            try:
                while chunk := answer.read1(65536):
                    self.wfile.write(chunk)
                    self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client left mid-answer (a stream it stopped reading)

        def metrics(self) -> bytes:
            upstream = http.client.HTTPConnection("127.0.0.1", backend_port, timeout=10)
            upstream.request("GET", "/metrics", headers={"Authorization": f"Bearer {key}"} if key else {})
            lines = []
            for line in upstream.getresponse().read().decode().splitlines():
                sample = line.split()
                if sample and sample[0] in METRICS[engine]:
                    lines.append(f'{METRICS[engine][sample[0]]}{{model_name="{names[0]}"}} {sample[1]}')
            return ("\n".join(lines) + "\n").encode()

    return EngineApi


def main(engine: str, argv: list[str]) -> int:
    """`engine` (vllm, sglang) serve, with `argv` after the program's name."""
    if argv[:1] != ["serve"]:
        print(f"usage: {engine} serve [options] (the lab's stand-in has only `serve`)", file=sys.stderr)
        return 2
    if engine == "sglang":
        args = sglang_parser().parse_args(argv[1:])
        args.headless, args.shutdown_timeout = args.node_rank > 0, None
    else:
        args = parser().parse_args(argv[1:])
        args.model = args.model or args.model_tag
        if not args.model:
            parser().error("a model is needed: `vllm serve MODEL` or --model MODEL")
    model = args.model
    args.served_model_name = args.served_model_name or [model]
    error = world_size_error(args, gpus())
    if error:
        print(error, file=sys.stderr, flush=True)
        return 1
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())  # PID 1 in its container: no default handler
    signal.signal(signal.SIGINT, lambda *_: stopping.set())
    if args.headless:
        log(f"headless node {args.node_rank} of {args.nnodes}: its GPUs ({len(gpus())}) join the head")
        stopping.wait()
        return 0
    key = args.api_key or (os.environ.get("VLLM_API_KEY") if engine == "vllm" else None) or None
    backend, backend_port = start_backend(args, model, key)
    try:
        wait_until_loaded(backend, backend_port)
        generations = Generations()
        api = http.server.ThreadingHTTPServer((args.host, args.port), handler(engine, args, model, key, backend_port,
                                                                               int(time.time()), generations))
        threading.Thread(target=api.serve_forever, daemon=True).start()
        log(f"Starting {engine} API server on http://{args.host}:{args.port} (model {model}, GPUs: "
            f"{' '.join(gpus())})")
        while not stopping.is_set() and backend.poll() is None:
            stopping.wait(1)
        if stopping.is_set() and engine == "sglang":
            log("SIGTERM received. Draining requests and shutting down...")
            generations.drain_as_sglang()
        elif stopping.is_set():
            log(f"Shutting down: waiting up to {args.shutdown_timeout} s for the requests in flight")
            aborted = generations.drain(args.shutdown_timeout)
            log(f"Shutdown: {aborted} requests in flight aborted" if aborted else "Shutdown: no request in flight")
        api.shutdown()
        return 0 if stopping.is_set() else 1
    finally:
        backend.terminate()
        backend.wait(30)


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[0]).name, sys.argv[1:]))
