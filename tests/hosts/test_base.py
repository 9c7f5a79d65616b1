"""The base every GPU host gets (k3ops.deploys.base)."""

import re

from k3ops.deploys.base import GPU_STACK_PACKAGES


def blacklisted_patterns(host) -> list[str]:
    dump = host.check_output("apt-config dump Unattended-Upgrade::Package-Blacklist")
    return re.findall(r'^Unattended-Upgrade::Package-Blacklist:: "(.+)";$', dump, re.MULTILINE)


def test_unattended_upgrades_cannot_move_the_gpu_stack(host, spec):
    patterns = blacklisted_patterns(host)
    for package in ("nvidia-driver", "libnvidia-ml1", "nvidia-fabricmanager", "cuda-drivers-580", "libnccl2",
                    "datacenter-gpu-manager-4-core", "amdgpu-dkms", "rocm-core"):
        assert any(re.match(pattern, package) for pattern in patterns), f"{package} not blacklisted"
    assert set(GPU_STACK_PACKAGES) <= set(patterns)


def test_time_sync_is_enabled(host, spec):
    assert host.package("systemd-timesyncd").is_installed
    assert host.service("systemd-timesyncd").is_enabled
