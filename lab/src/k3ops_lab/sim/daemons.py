"""The driver stack's daemons, simulated: persistenced, fabric manager (with NVLSM on NVLink 5 boards),
IMEX and the DCGM host engine.

Each checks what its real counterpart checks at start (a loaded kernel module at the same version
as its own userspace, NVSwitches for fabric manager, the subnet manager for NVLink 5 switch trays, a
nodes file for IMEX), prints the real messages where they are known, and then stays up until systemd
stops it, so that `systemctl is-active` tells the truth about the host.
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
# The wording is the lab's: what fabric manager prints when NVLSM is missing is not on record.
FM_NO_SUBNET_MANAGER = ("NVLink 5 switch trays need the NVLink subnet manager (nvlsm) at fabric manager's "
                        "version; found: {found}")
FM_LOG = "var/log/fabricmanager.log"
IMEX_CONFIG = "etc/nvidia-imex/config.cfg"
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
    if model.get("architecture") == "Blackwell" and host.package_version("nvlsm") != own_version:
        print(FM_NO_SUBNET_MANAGER.format(found=host.package_version("nvlsm") or "not installed"), file=sys.stderr)
        return 1
    with open(host.path(FM_LOG), "a") as log:
        stamp = time.strftime("[%b %d %Y %H:%M:%S]")
        log.write(f"{stamp} [INFO] [tid {os.getpid()}] Fabric Manager version {own_version} is running\n")
        log.write(f"{stamp} [INFO] [tid {os.getpid()}] {FM_CONFIGURED}\n")
    print("Connected to 1 node.", flush=True)
    print(FM_CONFIGURED, flush=True)
    return _serve_until_stopped()


def nvlsm_main(argv: list[str], host: SimHost | None = None) -> int:
    """nvlsm, which fabric manager starts on NVLink 5 boards: stays up while fabric manager runs."""
    return _serve_until_stopped()


def imex_main(argv: list[str], host: SimHost | None = None) -> int:
    """nvidia-imex: needs the driver, GPUs in an NVLink domain, and its nodes file naming this node's domain."""
    host = host or SimHost()
    if not _driver_ready(host, "nvidia-imex"):
        return 1
    if host.hardware().get("fabric") != "nvlink-domain":
        print("nvidia-imex: no GPU in this node is part of a multi-node NVLink domain", file=sys.stderr)
        return 1
    settings = dict(line.split("=", 1) for line in host.path(IMEX_CONFIG).read_text().splitlines() if "=" in line)
    nodes_file = host.path(settings.get("IMEX_NODE_CONFIG_FILE", "/etc/nvidia-imex/nodes_config.cfg").lstrip("/"))
    nodes = [line.strip() for line in nodes_file.read_text().splitlines() if line.strip()] if nodes_file.exists() else []
    if not nodes:
        print(f"nvidia-imex: {nodes_file.relative_to(host.root)} names no node", file=sys.stderr)
        return 1
    print(f"IMEX daemon version {host.package_version('nvidia-imex')} started with {len(nodes)} nodes", flush=True)
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
