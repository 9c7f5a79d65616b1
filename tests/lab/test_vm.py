"""A VM lab host (`k3ops lab up --backend vm`): Debian's cloud kernel booted by GRUB from the VM's disk, two
emulated NVMe devices, real udev and md, a kernel of its own for the GPU driver, and Docker that runs containers.

deploys/k3.py serves the model on it with its hardware's vLLM recipe. The GPU host part installs the lab's
driver packages, whose DKMS source the real dkms builds against the VM's kernel headers; the kernel loads the
stand-in module at boot, and the checks that read the kernel (lsmod, /proc/driver/nvidia, its log) answer
honestly. The runbooks whose faults show in the kernel's log (the driver's Xids) are drilled here, as
tests/lab/test_incidents.py drills the others. The model part takes the RAID0 path for real: the array is made
once, assembled again by udev after a real reboot, mounted from fstab by UUID, never made again. The engine unit
pulls the lab registry's stand-in vLLM image by digest over TLS and runs it with the GPUs the nvidia runtime gives
it. `lab down` leaves nothing. scripts/test runs this module, then tests/lab/test_vm_rocm.py, in a lab of their
own (K3OPS_LAB_INSTANCE) beside the other tests, at a low priority: TCG keeps a core busy, and the others use
about one.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from k3ops.doctor.runbooks import runbooks
from k3ops.onhost.layout import ENGINE_CONTAINER
from k3ops_lab import faults, hub, network, registry, state
from k3ops_lab.faults import FAULTS
from k3ops_lab.inventory import LAB_CONTEXT, groups

from .conftest import (VM_DEPLOY_TIMEOUT, changed_operations, deploy_report, grub_boots, host_checks, k3ops,
                       lab_inventory, on_host, passed_checks)
from .drills import assert_clean, doctor, run_steps

LAB_PROFILES = ("b300x8",)
LAB_BACKENDS = ("vm",)
LAB_NVME_DEVICES = 2
HOST = "gpu-01"
INVENTORY = "inventory/lab/hosts.py"
GPUS = 8
PEERMEM_CHECK = ("-k", "gpudirect")
CACHE = "/srv/k3ops/models"
ARRAY = "/dev/md/k3ops-models"
MARKER = f"{CACHE}/.k3ops-lab-before-reboots"
PINNED_REPLY = hub.TINY_MODEL_REPLIES[hub.TINY_MODEL_REVISIONS[0]]
SGLANG_IN_FLIGHT = 3  # generations in flight when the SGLang engine is stopped
# The runbooks whose faults only a host with a kernel of its own shows: the driver's Xids in its kernel log.
VM_DRILLED = sorted(book.id for book in runbooks().values() if book.drilled_on_vm)


def test_the_host_runs_its_own_kernel_booted_by_grub(lab):
    status = json.loads(k3ops("lab", "status", "--json").stdout)["hosts"]
    assert [(host["name"], host["backend"], host["state"]) for host in status] == [(HOST, "vm", "running")]
    release = on_host(HOST, "uname -r").stdout.strip()
    assert release != os.uname().release and release.endswith("-cloud-amd64")
    assert on_host(HOST, "systemd-detect-virt --vm").stdout.strip() == "qemu"
    command_line = on_host(HOST, "cat /proc/cmdline").stdout.split()
    assert command_line[0] == f"BOOT_IMAGE=/boot/vmlinuz-{release}" and "console=ttyS0,115200" in command_line
    # The kernel's log is the VM's own, from this boot of this kernel.
    assert f"Linux version {release}" in on_host(HOST, "journalctl -k -b -o cat").stdout
    assert on_host(HOST, "cat /proc/sys/kernel/random/boot_id").stdout != Path("/proc/sys/kernel/random/boot_id").read_text()
    disks = [line.split() for line in on_host(HOST, "lsblk -d -n -o NAME,TRAN").stdout.splitlines()]
    assert sorted(disk[0] for disk in disks if disk[1:] == ["nvme"]) == ["nvme0n1", "nvme1n1"]
    assert on_host(HOST, "test -e /sys/module/nvidia", check=False).returncode == 1  # no driver before the deploy


@pytest.fixture(scope="module")
def deployed(lab) -> dict:
    """deploys/k3.py's report, and the driver release it installed."""
    report = deploy_report("deploys/k3.py", timeout=VM_DEPLOY_TIMEOUT)
    package = on_host(HOST, "dpkg-query -W -f '${Version}' nvidia-kernel-open-dkms").stdout
    return {"report": report, "driver": package.rsplit("-", 1)[0]}


def driver_version() -> str:
    return on_host(HOST, "cat /sys/module/nvidia/version").stdout.strip()


def test_dkms_builds_the_driver_for_this_kernel_and_the_kernel_loads_it_at_boot(deployed):
    driver, release = deployed["driver"], on_host(HOST, "uname -r").stdout.strip()
    assert "Reboot to load NVIDIA kernel module" in " ".join(changed_operations(deployed["report"]))
    assert on_host(HOST, "dkms status nvidia").stdout.strip() == f"nvidia/{driver}, {release}, x86_64: installed"
    assert driver_version() == driver
    assert on_host(HOST, "cat /sys/module/nvidia/taint").stdout.strip() == "OE"  # out of tree, unsigned; open: no P
    assert f"Open Kernel Module for x86_64  {driver}" in on_host(HOST, "head -n 1 /proc/driver/nvidia/version").stdout
    assert f"NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  {driver}" in \
        on_host(HOST, "journalctl -k -b -o cat").stdout
    assert "195 nvidia" in on_host(HOST, "cat /proc/devices").stdout.splitlines()
    nodes = on_host(HOST, "stat -c '%n %F %t %T %a' /dev/nvidia[0-9]* /dev/nvidiactl").stdout.splitlines()
    assert nodes == [f"/dev/nvidia{index} character special file c3 {index:x} 666" for index in range(GPUS)] + \
        ["/dev/nvidiactl character special file c3 ff 666"]
    assert f"Driver Version: {driver}" in on_host(HOST, "nvidia-smi").stdout


def test_the_peermem_check_fails_once_the_module_is_unloaded(deployed):
    """The GPUDirect check reads the kernel: nvidia_peermem loaded by the deploy passes, unloaded fails."""
    assert "nvidia_peermem" in on_host(HOST, "lsmod").stdout
    assert host_checks(INVENTORY, *PEERMEM_CHECK, checks="tests/hosts/test_nvidia.py").returncode == 0
    on_host(HOST, "rmmod nvidia_peermem")
    try:
        unloaded = host_checks(INVENTORY, *PEERMEM_CHECK, checks="tests/hosts/test_nvidia.py")
        assert unloaded.returncode == 1 and "1 failed" in unloaded.stdout, unloaded.stdout[-3000:]
    finally:
        on_host(HOST, "modprobe nvidia-peermem")
    assert host_checks(INVENTORY, *PEERMEM_CHECK, checks="tests/hosts/test_nvidia.py").returncode == 0


@pytest.fixture(scope="module")
def before_the_reboots(deployed) -> dict:
    """The host as it was before the drills' reboots (each drill's Remedy reboots it through GRUB): what
    test_after_the_drills_reboots_the_driver_and_the_array_come_back finds again after them. The doctor finds
    the deployed host clean."""
    assert_clean(INVENTORY)
    on_host(HOST, f"echo kept > {MARKER}")
    return {"array": array()["MD_UUID"], "boot_id": on_host(HOST, "cat /proc/sys/kernel/random/boot_id").stdout,
            "grub_boots": grub_boots(HOST), "started": time.monotonic()}


@pytest.mark.parametrize("runbook", VM_DRILLED)
def test_drill(before_the_reboots, runbook):
    """A runbook whose fault shows in the kernel's log, drilled as tests/lab/test_incidents.py drills the others:
    the stand-in driver logs the fault's Xid into this kernel's log, the doctor names exactly that runbook from
    it, and the runbook's own Remedy (its bug report taken before the reboot) and Verify bring the host back."""
    fault = FAULTS[runbooks()[runbook].lab_fault]
    hardware = json.loads(on_host(HOST, f"cat {faults.HARDWARE}").stdout)
    pci = hardware["gpus"][faults.FAULTY_GPU]["pci_bus_id"].rsplit(".", 1)[0]
    # The host is clean here: before_the_reboots found it so, and every drill ends clean.
    k3ops("lab", "fault", HOST, fault.name)
    try:
        status, hosts = doctor(INVENTORY)
        # The Xid names the cause; a GPU missing from nvidia-smi is its evidence, not a second incident.
        assert [finding["runbook"] for finding in hosts[HOST]["findings"]] == [runbook], hosts[HOST]
        finding = hosts[HOST]["findings"][0]
        xid = int(re.match(r"Xid (\d+): ", finding["summary"])[1])
        assert status == {"warning": 1, "critical": 2}[finding["severity"]] and finding["variables"]["GPU_PCI"] == pci
        assert any(f"Xid {xid} on PCI {pci}: " in item for item in finding["evidence"]), finding
        if fault.name == "gpu-lost-xid":
            assert any(item.startswith(f"{GPUS - 1} GPUs visible") for item in finding["evidence"]), finding
        variables = {**finding["variables"], "HOST": HOST, "INVENTORY": INVENTORY}
        run_steps(HOST, "Remedy", runbook, variables)
        # The bug report an RMA case asks for was taken before the reboot: it holds the lost boot's Xid line.
        on_host(HOST, f"zgrep -qF 'NVRM: Xid (PCI:{pci}): {xid},' /var/tmp/nvidia-bug-report-*.log.gz")
        run_steps(HOST, "Verify", runbook, variables)
        assert_clean(INVENTORY)  # the runbook's own steps repaired the host: no clearing by the lab before this
    finally:
        k3ops("lab", "fault", HOST, "--clear")


def array() -> dict[str, str]:
    """The model cache array as mdadm reports it (MD_LEVEL, MD_UUID, ...)."""
    return dict(line.split("=", 1) for line in on_host(HOST, f"mdadm --detail --export {ARRAY}").stdout.splitlines())


def test_the_model_cache_is_one_raid0_array_of_both_devices_mounted_by_uuid(deployed):
    detail = array()
    assert (detail["MD_LEVEL"], detail["MD_DEVICES"]) == ("raid0", "2")
    assert sorted(on_host(HOST, f"ls /sys/block/$(basename $(readlink -f {ARRAY}))/slaves").stdout.split()) \
        == ["nvme0n1", "nvme1n1"]
    volume_uuid = on_host(HOST, f"blkid -o value -s UUID {ARRAY}").stdout.strip()
    assert [line.split()[:3] for line in on_host(HOST, "cat /etc/fstab").stdout.splitlines()
            if CACHE in line.split()] == [[f"UUID={volume_uuid}", CACHE, "xfs"]]


def engine() -> dict:
    return next(data["engine"] for hosts in groups().values() for _, data in hosts)


def chat(key: str | None) -> tuple[int, dict]:
    """A chat completion asked of the host's engine from the controller, as a client would: status, answer."""
    body = json.dumps({"model": "tiny-k3", "max_tokens": 16, "messages": [{"role": "user", "content": "Hello"}]})
    request = urllib.request.Request(f"http://{engine()['host']}:8000/v1/chat/completions", data=body.encode(),
                                     headers={"Content-Type": "application/json",
                                              **({"Authorization": f"Bearer {key}"} if key else {})})
    try:
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request, timeout=120) as answer:
            return answer.status, json.load(answer)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)


def test_the_engine_runs_the_registry_image_by_digest_with_the_gpus_the_runtime_gives(deployed):
    """The vLLM recipe's unit pulled the stand-in image by digest over TLS and runs it with --runtime nvidia."""
    served = registry.served()
    assert engine()["recipe"] == "vllm-b300x8" and engine()["image_digest"] == served["image_digest"]
    repository = served["image"].rsplit(":", 1)[0]
    assert on_host(HOST, f"docker image inspect --format '{{{{index .RepoDigests 0}}}}' "
                         f"{repository}@{served['image_digest']}").stdout.strip() == f"{repository}@{served['image_digest']}"
    running = json.loads(on_host(HOST, f"docker inspect {ENGINE_CONTAINER}").stdout)[0]
    assert running["State"]["Running"] and running["HostConfig"]["Runtime"] == "nvidia"
    devices = on_host(HOST, f"docker exec {ENGINE_CONTAINER} python3 -c "
                            "\"import os; print(' '.join(sorted(os.listdir('/dev'))))\"").stdout.split()
    assert sorted(name for name in devices if name.startswith("nvidia")) == \
        sorted([f"nvidia{index}" for index in range(GPUS)] + ["nvidia-uvm", "nvidiactl"])
    # Without the runtime the same image sees no GPU, and the recipe's tensor parallelism cannot start.
    alone = on_host(HOST, f"docker run --rm --network none {repository}@{served['image_digest']} --model /nonexistent "
                          "--tensor-parallel-size 8", check=False)
    assert alone.returncode == 1 and "No CUDA GPUs are available" in alone.stdout + alone.stderr


def test_the_engine_answers_with_the_key_and_refuses_without(deployed):
    status, answer = chat(state.api_key().read_text().strip())
    assert status == 200 and answer["model"] == "tiny-k3", answer
    assert answer["choices"][0]["message"]["content"] == PINNED_REPLY
    assert chat(None) == (401, {"error": "Unauthorized"})
    assert chat("not-the-key")[0] == 401


def test_after_the_drills_reboots_the_driver_and_the_array_come_back(deployed, before_the_reboots):
    """Real reboots, one per drill (firmware, GRUB, the kernel): the kernel loads the driver and modules-load.d
    its peermem, udev assembles the array, systemd mounts it from fstab by UUID with its data; the old boot's
    Xid is gone. The drills' own reboots are these: a reboot of its own would cost this module minutes of TCG."""
    before = before_the_reboots
    assert VM_DRILLED and on_host(HOST, "cat /proc/sys/kernel/random/boot_id").stdout != before["boot_id"]
    # A new kernel, booted since the reboots began (not a restarted container, whose uptime is the controller's).
    assert float(on_host(HOST, "cut -d' ' -f1 /proc/uptime").stdout) < time.monotonic() - before["started"]
    assert grub_boots(HOST) == before["grub_boots"] + len(VM_DRILLED)
    assert driver_version() == deployed["driver"]
    assert "nvidia_peermem" in on_host(HOST, "lsmod").stdout
    assert "NVRM: Xid" not in on_host(HOST, "journalctl -k -b -o cat").stdout
    assert array()["MD_UUID"] == before["array"]
    source = on_host(HOST, f"findmnt -n -o SOURCE,FSTYPE {CACHE}").stdout.split()
    assert source[1] == "xfs" and on_host(HOST, f"readlink -f {source[0]}").stdout == \
        on_host(HOST, f"readlink -f {ARRAY}").stdout
    assert on_host(HOST, f"cat {MARKER}").stdout.strip() == "kept"


def test_after_the_reboot_k3_changes_nothing_and_k3ops_check_passes(deployed):
    """The engine is back from the reboot (the deploy waits for it and finds it serving), and every host check
    passes: the GPU host's, the RAID0 cache's, the model's and the engine's."""
    assert changed_operations(deploy_report("deploys/k3.py")) == []
    checks = k3ops("check", INVENTORY, "-v", check=False)
    assert checks.returncode == 0 and " failed" not in checks.stdout, checks.stdout[-4000:]
    passed = passed_checks(checks.stdout)
    assert {"test_a_raid0_cache_is_assembled_under_its_name_at_every_boot", "test_gpudirect_rdma_reaches_the_nics",
            "test_engine_serves_the_pinned_model", "test_engine_secrets_stay_private"} <= passed, checks.stdout[-4000:]
    assert chat(state.api_key().read_text().strip())[0] == 200


def test_sglangs_recipe_runs_its_image_and_a_stop_lets_the_requests_in_flight_finish(deployed, tmp_path):
    """The host moved to SGLang's recipe (on loopback: SGLang takes a key only on its command line): its unit runs
    `sglang serve` in the SGLang stand-in pulled by digest, and `systemctl stop` (docker stop: SIGTERM to the
    engine) lets generations in flight end whole, as SGLang's own drain does, before the unit stops cleanly."""
    served = registry.served("sglang")
    inventory = lab_inventory(tmp_path / "sglang.py", engine={
        "recipe": "sglang-b300x8", **served, "host": "127.0.0.1", "api_key_file": None,
        "args": {"--context-length": LAB_CONTEXT, "--mamba-full-memory-ratio": "0.9"}})
    deploy_report("deploys/serving.py", inventory=inventory, timeout=VM_DEPLOY_TIMEOUT)
    running = json.loads(on_host(HOST, f"docker inspect {ENGINE_CONTAINER}").stdout)[0]
    assert running["Config"]["Image"] == f"{served['image']}@{served['image_digest']}"
    assert [running["Path"], *running["Args"][:1]] == ["sglang", "serve"], running["Args"]
    # Long answers (ignore_eos), streamed, that fit the context together (llama-server's slots share it).
    body = json.dumps({"model": "tiny-k3", "max_tokens": LAB_CONTEXT * 3 // 16, "ignore_eos": True, "stream": True,
                       "messages": [{"role": "user", "content": "Hello"}]})
    for index in range(SGLANG_IN_FLIGHT):
        on_host(HOST, f"curl -sS -N --noproxy '*' -H 'Content-Type: application/json' -d '{body}' "
                      f"http://127.0.0.1:30000/v1/chat/completions < /dev/null > /tmp/answer-{index} 2>&1 &")
    deadline = time.monotonic() + 120
    while "data: " not in on_host(HOST, "cat /tmp/answer-*").stdout and time.monotonic() < deadline:
        time.sleep(0.5)  # the first answer is streaming: the requests are in the engine
    since = on_host(HOST, "date '+%Y-%m-%d %H:%M:%S'").stdout.strip()
    on_host(HOST, "systemctl stop k3ops-engine.service")  # returns once the unit has stopped
    log = on_host(HOST, f"journalctl -u k3ops-engine.service --since '{since}' -o cat").stdout
    left = [int(found) for found in re.findall(r"Gracefully exiting\.\.\. Remaining number of requests (\d+)", log)]
    assert left and left[0] >= 1 and left[-1] == 0, log[-3000:]  # in flight at SIGTERM, none left at the end
    for index in range(SGLANG_IN_FLIGHT):
        answer = on_host(HOST, f"cat /tmp/answer-{index}").stdout
        assert answer.rstrip().endswith("data: [DONE]") and '"finish_reason":"length"' in answer, answer[-500:]
    unit = set(on_host(HOST, "systemctl show -p ActiveState -p Result k3ops-engine.service").stdout.split())
    assert unit == {"ActiveState=inactive", "Result=success"}, unit


def test_down_stops_the_vm_and_removes_its_tap(lab):
    k3ops("lab", "down")
    qemu = subprocess.run(["pgrep", "-f", f"qemu-system-x86_64.*{state.STATE_DIR}/"], capture_output=True)
    assert qemu.returncode == 1
    assert network.lab_taps() == []
    assert not state.STATE_DIR.exists()
