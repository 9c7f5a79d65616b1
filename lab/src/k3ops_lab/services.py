"""The controller's services for the lab: an apt proxy, the simulated vendor repositories, a Hub, a registry, and
Prometheus and Alertmanager while a module watches the lab (k3ops_lab.monitoring).

All listen only on the controller's address on the lab bridge.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from . import state

APT_CACHER_CONFIG = """CacheDir: {cache}
LogDir: {logs}
Port: {port}
BindAddress: {address}
ExThreshold: 4
SPfilePatternEx: {static_indexes}
"""
# Seen here: when several hosts ask at once for an index apt-cacher-ng must refresh (apt asks for a
# revalidation of every InRelease), it fails to move the old copy aside ("Failure to move file ...
# File exists") and apt-get update never returns. So InRelease files are static data to the proxy:
# `lab up` drops the cached ones and fetches them afresh, one at a time, before any host asks.
STATIC_INDEXES = r"/dists/[^/]+/InRelease$"
APT_PROXY_SIGNATURE = f"apt-cacher-ng -c {state.STATE_DIR}/apt-cacher-ng"
VENDOR_REPO_SIGNATURE = f"http.server --bind {state.CONTROLLER_ADDRESS}"
HUB_SIGNATURE = f"olah-cli -c {state.STATE_DIR}/hub/olah.toml"
REGISTRY_SIGNATURE = f"docker-registry serve {state.STATE_DIR}/"
PROMETHEUS_SIGNATURE = f"prometheus --config.file={state.STATE_DIR}/"
ALERTMANAGER_SIGNATURE = f"prometheus-alertmanager --config.file={state.STATE_DIR}/"


def _processes(signature: str) -> list[int]:
    """Pids whose command line carries `signature`: found afresh, so no pid file can go stale."""
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if signature.encode() in (proc / "cmdline").read_bytes().replace(b"\0", b" "):
                    pids.append(int(proc.name))
            except (FileNotFoundError, ProcessLookupError):
                pass
    return pids


def _start(signature: str, command: list[str], log_name: str) -> None:
    if _processes(signature):
        return
    logs = state.STATE_DIR / "run"
    logs.mkdir(parents=True, exist_ok=True)
    log = open(logs / f"{log_name}.log", "ab")
    subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)


def start_apt_proxy() -> None:
    """apt-cacher-ng, fetching from whatever mirror a host asks for (the controller's own)."""
    config_dir = state.STATE_DIR / "apt-cacher-ng"
    cache = state.APT_CACHE_DIR
    logs = config_dir / "log"
    for directory in (config_dir, cache, logs):
        directory.mkdir(parents=True, exist_ok=True)
    (config_dir / "acng.conf").write_text(APT_CACHER_CONFIG.format(
        cache=cache, logs=logs, port=state.APT_PROXY_PORT, address=state.CONTROLLER_ADDRESS,
        static_indexes=STATIC_INDEXES))
    _start(APT_PROXY_SIGNATURE, ["apt-cacher-ng", "-c", str(config_dir), "ForeGround=1"], "apt-cacher-ng")


def start_vendor_repo(directory: Path) -> None:
    _start(VENDOR_REPO_SIGNATURE, [sys.executable, "-m", "http.server", "--bind", state.CONTROLLER_ADDRESS,
                                   "--directory", str(directory), str(state.VENDOR_REPO_PORT)], "vendor-repo")


def start_hub(olah: Path, config: Path) -> None:
    """olah (hub.py writes its config); its log directory is olah's own, beside the service logs."""
    _start(HUB_SIGNATURE, [str(olah), "-c", str(config), "--log-path", str(state.STATE_DIR / "run" / "olah")], "hub")


def start_registry(config: Path) -> None:
    """Debian's docker-registry (registry.py writes its config, in the state directory)."""
    _start(REGISTRY_SIGNATURE, ["docker-registry", "serve", str(config)], "registry")


def start_monitoring(config: Path, alertmanager_config: Path, data: Path, port: int, alertmanager_port: int) -> bool:
    """Debian's Prometheus and Alertmanager on the controller's lab address; whether Prometheus was running already
    (its configuration is then to be reloaded)."""
    running = bool(_processes(PROMETHEUS_SIGNATURE))
    _start(PROMETHEUS_SIGNATURE, ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={data}/prometheus",
                                  f"--web.listen-address={state.CONTROLLER_ADDRESS}:{port}", "--web.enable-lifecycle"],
           "prometheus")
    _start(ALERTMANAGER_SIGNATURE, ["prometheus-alertmanager", f"--config.file={alertmanager_config}",
                                    f"--storage.path={data}/alertmanager", "--cluster.listen-address=",
                                    f"--web.listen-address={state.CONTROLLER_ADDRESS}:{alertmanager_port}"],
           "alertmanager")
    return running


def stop_monitoring() -> None:
    _stop((PROMETHEUS_SIGNATURE, ALERTMANAGER_SIGNATURE))


def wait_until_listening(ports: tuple[int, ...] = (state.APT_PROXY_PORT, state.VENDOR_REPO_PORT),
                         timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    for port in ports:
        while True:
            try:
                socket.create_connection((state.CONTROLLER_ADDRESS, port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"lab service on port {port} did not start; see {state.STATE_DIR / 'run'}") from None
                time.sleep(0.2)


def prime_apt_proxy(index_urls: list[str]) -> None:
    """Fetch the Debian indexes afresh through the proxy, one at a time, before any host asks for them."""
    for url in index_urls:
        cached = state.APT_CACHE_DIR / url.split("://", 1)[1]
        cached.unlink(missing_ok=True)
        cached.with_name(cached.name + ".head").unlink(missing_ok=True)
    proxy = urllib.request.ProxyHandler({"http": f"http://{state.CONTROLLER_ADDRESS}:{state.APT_PROXY_PORT}"})
    opener = urllib.request.build_opener(proxy)
    for url in index_urls:
        with opener.open(url, timeout=60) as response:
            response.read()


def stop_all() -> None:
    _stop((APT_PROXY_SIGNATURE, VENDOR_REPO_SIGNATURE, HUB_SIGNATURE, REGISTRY_SIGNATURE, PROMETHEUS_SIGNATURE,
           ALERTMANAGER_SIGNATURE))


def _stop(signatures: tuple[str, ...]) -> None:
    for signature in signatures:
        for pid in _processes(signature):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 5
        while _processes(signature) and time.monotonic() < deadline:
            time.sleep(0.1)
        for pid in _processes(signature):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def vendor_repo_url() -> str:
    return f"http://{state.CONTROLLER_ADDRESS}:{state.VENDOR_REPO_PORT}"
