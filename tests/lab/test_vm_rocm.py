"""An AMD VM lab host (`k3ops lab up --profile mi355x8 --backend vm`): deploys/gpu_host.py with ROCm.

The ROCm deploy writes the kernel arguments AMD asks for into /etc/default/grub, and its reboot goes through the
real GRUB into a kernel booted with them; the real dkms builds the lab's amdgpu stand-in against the VM's kernel
headers, and the kernel loads it at boot. The host checks of the GPU host deploy then pass, reading that kernel.
(The engine's container runs on the NVIDIA VM host of tests/lab/test_vm.py; the AMD recipe's --device flags are
the unit tests'.) scripts/test runs this module after tests/lab/test_vm.py, in the same lab instance.
"""

from __future__ import annotations

import re

import pytest

from k3ops.hardware import AMD_KERNEL_ARGUMENTS

from .conftest import (GPU_HOST_CHECKS, VM_DEPLOY_TIMEOUT, changed_operations, deploy_report, grub_boots, host_checks,
                       on_host, passed_checks)

LAB_PROFILES = ("mi355x8",)
LAB_BACKENDS = ("vm",)
HOST = "gpu-01"
GPUS = 8


@pytest.fixture(scope="module")
def deployed(lab) -> dict:
    """deploys/gpu_host.py's report, and how many times GRUB had booted the host before it."""
    boots = grub_boots(HOST)
    return {"report": deploy_report("deploys/gpu_host.py", timeout=VM_DEPLOY_TIMEOUT), "boots": boots}


def test_the_deploy_reboots_through_grub_into_the_kernel_arguments_amd_asks_for(deployed):
    changed = changed_operations(deployed["report"])
    assert any(name.split(" | ")[-1].startswith("Reboot to ") for name in changed), changed
    assert grub_boots(HOST) == deployed["boots"] + 1  # the deploy's own reboot, through firmware and GRUB
    words = on_host(HOST, "cat /proc/cmdline").stdout.split()
    assert words[0].startswith("BOOT_IMAGE=/boot/vmlinuz-") and set(AMD_KERNEL_ARGUMENTS) <= set(words), words
    # GRUB has them from update-grub, which read the deploy's /etc/default/grub.
    entry = on_host(HOST, r"grep -m 1 -E '^\s+linux\s' /boot/grub/grub.cfg").stdout.split()
    assert set(AMD_KERNEL_ARGUMENTS) <= set(entry), entry


def test_dkms_builds_amdgpu_for_this_kernel_and_the_kernel_loads_it_at_boot(deployed):
    release = on_host(HOST, "uname -r").stdout.strip()
    package = on_host(HOST, "dpkg-query -W -f '${Version}' amdgpu-dkms").stdout  # 1:6.14.14.70002-2212569.24.04
    module, build = re.fullmatch(r"1:(\d+\.\d+\.\d+)\.\d+-(.+)", package).groups()
    assert on_host(HOST, "dkms status amdgpu").stdout.strip() == f"amdgpu/{module}-{build}, {release}, x86_64: installed"
    assert on_host(HOST, "cat /sys/module/amdgpu/version").stdout.strip() == module
    assert "[drm] amdgpu kernel modesetting enabled." in on_host(HOST, "journalctl -k -b -o cat").stdout
    assert re.search(r"^amdgpu\s", on_host(HOST, "lsmod").stdout, re.MULTILINE)
    nodes = on_host(HOST, "stat -c '%n %F' /dev/kfd /dev/dri/renderD*").stdout.splitlines()
    assert nodes == ["/dev/kfd character special file"] + \
        [f"/dev/dri/renderD{128 + index} character special file" for index in range(GPUS)]


def test_a_second_run_changes_nothing_and_the_host_checks_pass(deployed):
    assert changed_operations(deploy_report("deploys/gpu_host.py")) == []
    checks = host_checks("inventory/lab/hosts.py", *GPU_HOST_CHECKS, "-rA")  # -rA: a PASSED line for each
    assert checks.returncode == 0 and " failed" not in checks.stdout, checks.stdout[-4000:]
    passed = passed_checks(checks.stdout)
    assert {"test_booted_with_the_kernel_arguments_amd_asks_for", "test_amdgpu_driver_is_held_and_loaded",
            "test_service_user_can_reach_the_gpus"} <= passed, checks.stdout[-4000:]
