"""The base every GPU host gets (k3ops.deploys.base)."""

import re

from k3ops.deploys.base import GPU_STACK_PACKAGES
from k3ops.facts.apt import AptConfigList
from k3ops.facts.kernel import InstalledKernels


def test_unattended_upgrades_cannot_move_the_gpu_stack(host, spec):
    patterns = host.get_fact(AptConfigList, setting="Unattended-Upgrade::Package-Blacklist")
    for package in ("nvidia-driver", "libnvidia-ml1", "nvidia-fabricmanager", "cuda-drivers-580", "libnccl2",
                    "datacenter-gpu-manager-4-core", "amdgpu-dkms", "rocm-core"):
        assert any(re.match(pattern, package) for pattern in patterns), f"{package} not blacklisted"
    assert set(GPU_STACK_PACKAGES) <= set(patterns)


def test_time_sync_runs_and_starts_at_boot(host, spec):
    assert host.package("systemd-timesyncd").is_installed
    assert host.service("systemd-timesyncd").is_enabled
    assert host.service("systemd-timesyncd").is_running


def test_every_installed_kernel_has_its_headers_for_dkms(host, spec):
    """The running kernel, every other installed one, and each flavour's metapackage (the next kernel's)."""
    kernels = host.get_fact(InstalledKernels)
    for name in {host.check_output("uname -r"), *kernels["releases"], *kernels["flavours"]}:
        assert host.package(f"linux-headers-{name}").is_installed, f"linux-headers-{name}"


def test_numa_balancing_is_off_now_and_after_reboot(host, spec):
    assert host.sysctl("kernel.numa_balancing") == 0
    persisted = host.check_output("grep -h '^kernel.numa_balancing' /etc/sysctl.d/*.conf /etc/sysctl.conf || true")
    assert persisted.splitlines()[-1].replace(" ", "") == "kernel.numa_balancing=0"
