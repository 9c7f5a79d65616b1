"""The files that make a lab host this host, whatever runs it: its name, keys, peers, apt's way out
(the controller's proxy only), the CA it trusts for the lab's registry, its hardware document, the
simulators that read it, and the boot unit that lays the hardware out. A container host gets them written into its root before it boots; a VM
host gets them on its seed disk (vm.py).
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from . import registry, state
from .debian import Mirrors

SIM_SOURCE = Path(__file__).parent / "sim"
SIM_ON_HOST = "usr/lib/k3ops-lab-sim/labsim"
HARDWARE_ON_HOST = "etc/k3ops-lab/hardware.json"
HARDWARE_UNIT_NAME = "k3ops-lab-hardware.service"
# After the seed service on a VM host (which brings this host's files); a container host has none.
HARDWARE_UNIT = """[Unit]
Description=k3ops lab: simulated firmware, kernel modules and udev for this host's hardware profile
DefaultDependencies=no
After=systemd-remount-fs.service k3ops-lab-seed.service systemd-udev-trigger.service
Before=local-fs.target sysinit.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/bin/python3 -c "import sys; sys.path.insert(0, '/usr/lib/k3ops-lab-sim'); from labsim.boot import main; sys.exit(main([]))"

[Install]
WantedBy=sysinit.target
"""


@dataclass(frozen=True)
class HostFile:
    content: bytes
    mode: int = 0o644


def host_files(host: state.LabHost, lab: state.Lab, hardware: dict, mirrors: Mirrors) -> dict[str, HostFile]:
    """Path on the host (relative to its root) -> file, for everything but its SSH host keys."""
    hosts_lines = ["127.0.0.1\tlocalhost", f"127.0.1.1\t{host.name}", f"{state.CONTROLLER_ADDRESS}\tk3lab-controller"]
    hosts_lines += [f"{other.address}\t{other.name}" for other in lab.hosts if other.name != host.name]
    text = {
        "etc/hostname": host.name + "\n",
        "etc/hosts": "\n".join(hosts_lines) + "\n",
        "etc/resolv.conf": "# k3ops lab: no DNS and no route out; apt goes through the controller's proxy\n",
        "etc/apt/sources.list.d/debian.sources": mirrors.sources(),
        "etc/apt/apt.conf.d/00k3ops-lab-proxy": (
            f'Acquire::http::Proxy "http://{state.CONTROLLER_ADDRESS}:{state.APT_PROXY_PORT}";\n'
            f'Acquire::http::Proxy::{state.CONTROLLER_ADDRESS} "DIRECT";\n'
            'Acquire::Retries "3";\n'),
        HARDWARE_ON_HOST: json.dumps(hardware, indent=2) + "\n",
    }
    files = {path: HostFile(content.encode()) for path, content in text.items()}
    files[registry.host_ca_path()] = HostFile(registry.ca_certificate().read_bytes())
    files["root/.ssh/authorized_keys"] = HostFile(Path(f"{state.ssh_key()}.pub").read_bytes(), 0o600)
    for source in sorted(SIM_SOURCE.rglob("*")):
        if source.is_file() and "__pycache__" not in source.parts:
            files[f"{SIM_ON_HOST}/{source.relative_to(SIM_SOURCE)}"] = HostFile(source.read_bytes())
    return files


def new_ssh_host_keys() -> dict[str, HostFile]:
    """A host's own SSH host keys, made on the controller (an image never carries shared ones)."""
    with tempfile.TemporaryDirectory() as scratch:
        (Path(scratch) / "etc/ssh").mkdir(parents=True)
        subprocess.run(["ssh-keygen", "-A", "-f", scratch], check=True, capture_output=True)
        return {f"etc/ssh/{key.name}": HostFile(key.read_bytes(), 0o600 if not key.name.endswith(".pub") else 0o644)
                for key in sorted((Path(scratch) / "etc/ssh").glob("ssh_host_*"))}
