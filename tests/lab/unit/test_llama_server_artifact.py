"""The lab's llama-server artifact: exactly bin/llama-server, reproducibly packed, and a server that answers.

The first run builds it from source (minutes, see k3ops_lab.llama_server); later runs reuse the cache.
"""

import contextlib
import hashlib
import json
import socket
import subprocess
import tarfile
import time
import urllib.request
from pathlib import Path

import pytest

from k3ops_lab import hub, llama_server

START_TIMEOUT_SECONDS = 120


@pytest.fixture(scope="module")
def artifact() -> Path:
    return llama_server.build()


@pytest.fixture(scope="module")
def binary(artifact, tmp_path_factory) -> Path:
    """The archive unpacked as a host unpacks it."""
    unpacked = tmp_path_factory.mktemp("llama-server")
    subprocess.run(["tar", "-xzf", str(artifact / llama_server.ARCHIVE), "-C", str(unpacked)], check=True)
    return unpacked / "bin" / "llama-server"


def test_the_binary_needs_no_cpu_feature_past_the_x86_64_baseline(binary):
    """A VM lab host's TCG CPU is qemu64: an AVX instruction there (VEX-encoded, on ymm or xmm registers) would
    kill the engine with SIGILL in the middle of a test."""
    listing = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(binary)], check=True, capture_output=True,
                             text=True).stdout
    vex = [line for line in listing.splitlines() if "\t" in line and line.split("\t")[-1].startswith("v")
           and ("%ymm" in line or "%xmm" in line)]
    assert vex == [], vex[:5]


def test_the_archive_holds_exactly_the_binary(artifact):
    with tarfile.open(artifact / llama_server.ARCHIVE) as archive:
        members = archive.getmembers()
    assert [member.name for member in members] == ["bin/llama-server"]
    server = members[0]
    assert server.isfile() and server.mode == 0o755
    assert (server.uid, server.gid, server.uname, server.gname, server.mtime) == (0, 0, "root", "root", 0)


def test_the_sha256_file_matches_the_archive(artifact):
    digest = hashlib.sha256((artifact / llama_server.ARCHIVE).read_bytes()).hexdigest()
    assert (artifact / f"{llama_server.ARCHIVE}.sha256").read_text() == f"{digest}  {llama_server.ARCHIVE}\n"
    assert llama_server.sha256() == digest
    assert llama_server.url() == (f"http://10.213.7.1:8081/artifacts/llama.cpp/{llama_server.VERSION}/"
                                  f"llama-server-{llama_server.VERSION}-linux-x86_64.tar.gz")


def test_packing_the_same_binary_twice_gives_the_same_bytes(artifact, binary, tmp_path):
    llama_server.pack(binary, tmp_path / "first.tar.gz")
    binary.touch()  # a newer mtime must not show in the archive
    llama_server.pack(binary, tmp_path / "second.tar.gz")
    first = (tmp_path / "first.tar.gz").read_bytes()
    assert first == (tmp_path / "second.tar.gz").read_bytes()
    assert first == (artifact / llama_server.ARCHIVE).read_bytes()


def test_the_binary_needs_only_what_a_debian_host_has(binary):
    assert llama_server.needed_libraries(binary) <= llama_server.RUNTIME_LIBRARIES


def test_the_binary_prints_its_build_number(binary):
    result = subprocess.run([str(binary), "--version"], check=False, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert f"(build {llama_server.BUILD_NUMBER}, commit b{llama_server.BUILD_NUMBER})" in result.stdout + result.stderr


def test_publish_links_the_artifact_under_the_served_root(artifact, tmp_path):
    llama_server.publish(artifact, tmp_path)
    llama_server.publish(artifact, tmp_path)  # idempotent
    served = tmp_path / "artifacts" / "llama.cpp" / llama_server.VERSION / llama_server.ARCHIVE
    assert served.read_bytes() == (artifact / llama_server.ARCHIVE).read_bytes()


def tiny_gguf(revision: str) -> Path:
    """The lab hub's tiny GGUF at one revision: the LFS object its pointer in that commit names."""
    repository = hub.build()
    pointer = subprocess.run(["git", "-C", str(repository), "show", f"{revision}:tiny-k3.gguf"], check=True,
                             capture_output=True, text=True).stdout
    oid = next(line.split(":", 1)[1] for line in pointer.splitlines() if line.startswith("oid sha256:"))
    return repository / ".git" / "lfs" / "objects" / oid[:2] / oid[2:4] / oid


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def serving(binary: Path, model: Path, log: Path):
    """llama-server on the model, on a free loopback port, until the block ends; yields its base URL."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with open(log, "wb") as output:
        server = subprocess.Popen([str(binary), "--model", str(model), "--host", "127.0.0.1", "--port", str(port),
                                   "--ctx-size", "2048"], stdin=subprocess.DEVNULL, stdout=output, stderr=output)
    try:
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while True:
            assert server.poll() is None, f"llama-server exited with {server.returncode}:\n{log.read_text()}"
            assert time.monotonic() < deadline, f"not healthy in {START_TIMEOUT_SECONDS}s:\n{log.read_text()}"
            try:
                with urllib.request.urlopen(f"{base}/health", timeout=5) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass  # not listening yet, or 503 while the model loads
            time.sleep(0.5)
        yield base
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def chat(base: str, message: str, **sampling) -> dict:
    request = urllib.request.Request(
        f"{base}/v1/chat/completions", method="POST", headers={"Content-Type": "application/json"},
        data=json.dumps({"messages": [{"role": "user", "content": message}], "max_tokens": 16, **sampling}).encode())
    with urllib.request.urlopen(request, timeout=60) as response:
        assert response.status == 200
        return json.load(response)


@pytest.mark.parametrize("revision", hub.TINY_MODEL_REVISIONS)
def test_each_revision_answers_its_own_words_whatever_the_prompt_and_sampler(binary, tmp_path, revision):
    """Greedy, the engines' default sampling (temperature 1.0, top-p 0.95), llama-server's own defaults,
    and a hot sampler with seeds: llama.cpp's sampler never leaves the reply."""
    model = tiny_gguf(revision)
    assert model.read_bytes()[:4] == b"GGUF"
    samplers = [{"temperature": 0}, {"temperature": 1.0, "top_p": 0.95}, {},
                *({"temperature": 1.5, "seed": seed} for seed in range(5))]
    with serving(binary, model, tmp_path / "llama-server.log") as base:
        for sampling in samplers:
            for message in ("Hello", "What is 2+2?", "k3lab", ""):
                reply = chat(base, message, **sampling)["choices"][0]
                assert (reply["message"]["content"], reply["finish_reason"]) == \
                    (hub.TINY_MODEL_REPLIES[revision], "stop"), (sampling, message)
