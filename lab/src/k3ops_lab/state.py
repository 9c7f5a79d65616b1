"""Where the lab keeps its files, and the record of which hosts it runs.

The cache (base image, built vendor repository, apt cache) outlives a lab; the state directory
belongs to one running lab and is removed by `k3ops lab down`.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

# Which lab, of the ones that may run at once on one controller (K3OPS_LAB_INSTANCE, 0 to 9; 0 by default):
# each has its own state, subnet, bridge, namespaces, links, cgroup and apt cache; the cache's builds are shared.
_INSTANCE = os.environ.get("K3OPS_LAB_INSTANCE", "0")
if _INSTANCE not in tuple("0123456789"):
    raise SystemExit(f"K3OPS_LAB_INSTANCE must be a number from 0 to 9, not {_INSTANCE!r}")
INSTANCE = int(_INSTANCE)
SUFFIX = str(INSTANCE) if INSTANCE else ""  # instance 0 keeps the names of a lab alone on its controller
CACHE_DIR = Path(os.environ.get("K3OPS_LAB_CACHE", "/var/cache/k3ops-lab"))
STATE_DIR = Path(os.environ.get("K3OPS_LAB_STATE", f"/var/lib/k3ops-lab{SUFFIX}"))

# The lab's own private subnet: only the lab's namespaces use it, and nothing routes beyond it.
SUBNET_PREFIX = os.environ.get("K3OPS_LAB_SUBNET", f"10.213.{7 + INSTANCE}")
CONTROLLER_ADDRESS = f"{SUBNET_PREFIX}.1"
PREFIX_LENGTH = 24
# Container hosts also have an IPv6 address, in a unique local prefix of the lab's own, for data that names
# peers by IPv6 (as fleets on IPv6 networks do); the controller has none there, and nothing routes it.
SUBNET6_PREFIX = f"fd6b:3a7b:0:{7 + INSTANCE}::"
PREFIX6_LENGTH = 64
FIRST_HOST_OCTET = 11
BRIDGE = f"k3lab{INSTANCE}"
NETNS_PREFIX = f"k3lab{SUFFIX}-"
VETH_PREFIX = f"k3v{SUFFIX}-"  # a container host's link on the bridge
TAP_PREFIX = f"k3t{SUFFIX}-"  # a VM host's
CGROUP = f"k3ops-lab{SUFFIX}"
APT_CACHE_DIR = CACHE_DIR / f"apt-cacher-ng{SUFFIX}"  # one apt-cacher-ng per cache directory
APT_PROXY_PORT = 3142
VENDOR_REPO_PORT = 8081
HUB_PORT = 8090
REGISTRY_PORT = 5000


@dataclass
class LabHost:
    name: str
    profile: str
    address: str
    backend: str = "container"  # or "vm": what runs the host (container.py, vm.py)
    nvme_devices: int | None = None  # NVMe devices, when not the profile's
    nvme_loops: list[str] = field(default_factory=list)

    def hardware(self, nvme_size_gib: int | None = None) -> dict:
        """The host's hardware document (profiles.py), with its own number of NVMe devices."""
        from .profiles import get_profile

        return get_profile(self.profile).hardware(self.name, nvme_size_gib, self.nvme_devices)

    @property
    def netns(self) -> str:
        return NETNS_PREFIX + self.name

    @property
    def address6(self) -> str:
        """The host's IPv6 address (container hosts only): its IPv4 address's last number in the lab's prefix."""
        return f"{SUBNET6_PREFIX}{self.address.rsplit('.', 1)[1]}"

    @property
    def directory(self) -> Path:
        return STATE_DIR / "hosts" / self.name


@dataclass
class Lab:
    hosts: list[LabHost]

    def host(self, name: str) -> LabHost:
        for host in self.hosts:
            if host.name == name:
                return host
        raise KeyError(f"no lab host named {name!r}; hosts: {', '.join(h.name for h in self.hosts) or 'none'}")


def host_name(index: int) -> str:
    return f"gpu-{index + 1:02d}"


def host_address(index: int) -> str:
    return f"{SUBNET_PREFIX}.{FIRST_HOST_OCTET + index}"


def state_file() -> Path:
    return STATE_DIR / "lab.json"


def ssh_key() -> Path:
    """The lab's generated SSH key (kept in the cache so it survives `lab down`)."""
    return CACHE_DIR / "ssh" / "id_ed25519"


def ssh_command(host: LabHost, command: list[str]) -> list[str]:
    """ssh as root to a lab host with the lab's key. Here, beside the key, so that `k3ops lab ssh` imports no more
    than this module."""
    return ["ssh", "-i", str(ssh_key()), "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
            "-o", "LogLevel=ERROR", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5",
            f"root@{host.address}", *command]


def api_key() -> Path:
    """The API key the lab's engines require (in the cache, beside the SSH key)."""
    return CACHE_DIR / "ssh" / "engine-api-key"


def load() -> Lab | None:
    try:
        data = json.loads(state_file().read_text())
    except FileNotFoundError:
        return None
    return Lab(hosts=[LabHost(**host) for host in data["hosts"]])


def save(lab: Lab) -> None:
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    temporary = state_file().with_suffix(".tmp")
    temporary.write_text(json.dumps({"hosts": [asdict(h) for h in lab.hosts]}, indent=2) + "\n")
    temporary.replace(state_file())
