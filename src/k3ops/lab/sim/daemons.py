"""The driver stack's daemons, simulated: persistenced, fabric manager and the DCGM host engine.

Each checks what its real counterpart checks at start (a loaded kernel module at the same version
as its own userspace, NVSwitches for fabric manager), prints the real messages, and then stays up
until systemd stops it, so that `systemctl is-active` tells the truth about the host.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import time

from .host import PERSISTENCED_SOCKET, SimHost

FM_NOTHING_TO_DO = (
    "request to query NVSwitch device information from NVSwitch driver failed with error:"
    "WARNING Nothing to do [NV_WARN_NOTHING_TO_DO]"
)
FM_CONFIGURED = (
    "Successfully configured all the available NVSwitches to route GPU NVLink traffic. NVLink Peer-to-Peer "
    "support will be enabled once the GPUs are successfully registered with the NVLink fabric."
)
FM_VERSION_MISMATCH = (
    "fabric manager NVIDIA GPU driver interface version {fm} don't match with driver version {driver}. "
    "Please update with matching NVIDIA driver package."
)
FM_LOG = "var/log/fabricmanager.log"
HOSTENGINE_ADDRESS = ("127.0.0.1", 5555)


def _driver_ready(host: SimHost, daemon: str) -> bool:
    """The driver's kernel module is loaded and matches the installed userspace."""
    loaded, installed = host.nvidia_module_version(), host.nvidia_userspace_version()
    if loaded is None:
        print(f"{daemon}: failed to open the NVIDIA driver: no kernel module is loaded", file=sys.stderr)
        return False
    if installed is not None and loaded != installed:
        print(f"{daemon}: Failed to initialize NVML: Driver/library version mismatch", file=sys.stderr)
        return False
    return True


def _serve_until_stopped(cleanup=lambda: None) -> int:
    def stop(_signum, _frame):
        cleanup()
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while True:
        time.sleep(3600)


def persistenced_main(argv: list[str], host: SimHost | None = None) -> int:
    host = host or SimHost()
    if not _driver_ready(host, "nvidia-persistenced"):
        print("nvidia-persistenced failed to initialize. Check syslog for more details.", file=sys.stderr)
        return 1
    path = host.path(PERSISTENCED_SOCKET)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen()
    print("Started (pid %d)" % os.getpid(), flush=True)
    return _serve_until_stopped(lambda: path.unlink(missing_ok=True))


def fabricmanager_main(argv: list[str], host: SimHost | None = None) -> int:
    host = host or SimHost()
    hardware = host.hardware()
    model = hardware.get("gpu_model") or {}
    print("Detected NVL5 system" if model.get("architecture") == "Blackwell" else "Detected Pre-NVL5 system", flush=True)
    if hardware.get("fabric") != "nvswitch":
        print(FM_NOTHING_TO_DO, file=sys.stderr)
        return 1
    if not _driver_ready(host, "nv-fabricmanager"):
        return 1
    own_version = host.package_version("nvidia-fabricmanager")
    if own_version != host.nvidia_module_version():
        print(FM_VERSION_MISMATCH.format(fm=own_version, driver=host.nvidia_module_version()), file=sys.stderr)
        return 1
    with open(host.path(FM_LOG), "a") as log:
        stamp = time.strftime("[%b %d %Y %H:%M:%S]")
        log.write(f"{stamp} [INFO] [tid {os.getpid()}] Fabric Manager version {own_version} is running\n")
        log.write(f"{stamp} [INFO] [tid {os.getpid()}] {FM_CONFIGURED}\n")
    print("Connected to 1 node.", flush=True)
    print(FM_CONFIGURED, flush=True)
    return _serve_until_stopped()


def hostengine_main(argv: list[str], host: SimHost | None = None) -> int:
    """nv-hostengine: listens where dcgmi connects (127.0.0.1:5555) while the driver is usable."""
    host = host or SimHost()
    if not _driver_ready(host, "nv-hostengine"):
        print("Host engine failed to start: DCGM initialization error", file=sys.stderr)
        return 1
    listener = socket.create_server(HOSTENGINE_ADDRESS)
    threading.Thread(target=_accept_and_close, args=(listener,), daemon=True).start()
    version = host.package_version("datacenter-gpu-manager-4-core")
    print(f"Started host engine version {version} using port number: {HOSTENGINE_ADDRESS[1]}", flush=True)
    return _serve_until_stopped(listener.close)


def _accept_and_close(listener: socket.socket) -> None:
    while True:
        connection, _ = listener.accept()
        connection.close()
