"""The lab as the deploys will use it: real SSH, systemd, apt and block devices, simulated hardware."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path


from k3ops import inventory
from k3ops_lab import hub, services, state, wheelhouse

from ..conftest import REPO_ROOT
from .conftest import k3ops, on_host, pyinfra, reboot

LAB_PROFILES = ("h200x8", "mi355x8")
CUDA_REPO = "http://{controller}:{port}/compute/cuda/repos/debian12/x86_64"
ADD_CUDA_REPO = (
    "curl -fsS {repo}/3bf863cc.pub | gpg --batch --yes --dearmor -o /usr/share/keyrings/cuda-archive-keyring.gpg"
    " && echo 'deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] {repo}/ /'"
    " > /etc/apt/sources.list.d/cuda.list && apt-get update -q"
)
DRIVER_PACKAGES = ("nvidia-open", "nvidia-driver", "nvidia-driver-cuda", "nvidia-persistenced", "nvidia-kernel-open-dkms")


def cuda_repo() -> str:
    return CUDA_REPO.format(controller=state.CONTROLLER_ADDRESS, port=state.VENDOR_REPO_PORT)


def install_driver(host: str, version: str) -> None:
    pins = " ".join(f"{package}={version}-1" for package in DRIVER_PACKAGES)
    on_host(host, f"DEBIAN_FRONTEND=noninteractive apt-get install -y -q --allow-downgrades {pins}")


def test_status_reports_every_host_running(lab):
    hosts = json.loads(k3ops("lab", "status", "--json").stdout)["hosts"]
    assert [(h["name"], h["profile"], h["state"]) for h in hosts] == [
        (name, profile, "running") for name, profile in lab.items()
    ]
    assert len({h["address"] for h in hosts}) == len(hosts)


def test_lab_ssh_runs_a_command_as_root_on_the_host_and_passes_its_status(lab):
    for name in lab:
        assert k3ops("lab", "ssh", name, "echo $(id -un)@$(hostname)").stdout.strip() == f"root@{name}"
    assert k3ops("lab", "ssh", "gpu-01", "exit 7", check=False).returncode == 7
    refused = k3ops("lab", "ssh", "gpu-09", "true", check=False)
    assert refused.returncode == 2 and "gpu-09" in refused.stderr


def test_pyinfra_runs_commands_on_every_host(lab):
    result = pyinfra("exec", "--", "hostname")
    assert result.returncode == 0, result.stderr
    for name in lab:
        assert f"[{name}] {name}" in result.stdout + result.stderr


def test_testinfra_hosts_come_from_the_same_inventory(lab):
    hosts = inventory.testinfra_hosts(REPO_ROOT / "inventory" / "lab" / "hosts.py")
    assert sorted(h.inventory_name for h in hosts) == sorted(lab)
    for host in hosts:
        assert host.check_output("hostname") == host.inventory_name
        assert host.service("ssh").is_running
        hardware = json.loads(host.file("/etc/k3ops-lab/hardware.json").content_string)
        assert hardware["profile"] == host.inventory_data["hardware_profile"]


def test_hosts_reach_each_other_but_have_no_route_out(lab):
    on_host("gpu-01", "ping -c 1 -W 2 gpu-02")
    assert on_host("gpu-01", "ip route show default").stdout.strip() == ""
    unreachable = on_host("gpu-01", "ip route get 1.1.1.1", check=False)
    assert unreachable.returncode != 0 and "unreachable" in unreachable.stderr


def test_apt_installs_real_debian_packages_through_the_proxy(lab):
    on_host("gpu-02", "apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q hello")
    assert on_host("gpu-02", "hello").stdout.strip() == "Hello, world!"


def test_vendor_repository_is_signed(lab):
    """apt refuses the repository without its key, and accepts it with the key the vendor URL serves."""
    unsigned = on_host("gpu-01", f"echo 'deb {cuda_repo()}/ /' > /etc/apt/sources.list.d/cuda.list && apt-get update -q",
                       check=False)
    assert "NO_PUBKEY" in unsigned.stdout + unsigned.stderr or "not signed" in unsigned.stdout + unsigned.stderr
    on_host("gpu-01", ADD_CUDA_REPO.format(repo=cuda_repo()))
    policy = on_host("gpu-01", "apt-cache policy nvidia-open").stdout
    assert "580.126.09-1" in policy and "580.105.08-1" in policy and "570.195.03-1" in policy


def test_hardware_shows_before_any_driver(lab):
    assert on_host("gpu-01", "lspci -D -d 10de:2335 | wc -l").stdout.strip() == "8"
    assert on_host("gpu-01", "lspci -D -d 10de:22a3 | wc -l").stdout.strip() == "4"
    assert on_host("gpu-02", "lspci -D -d 1002:75a3 | wc -l").stdout.strip() == "8"
    assert on_host("gpu-01", "dmidecode -s system-product-name").stdout.strip() == "SYS-821GE-TNHR"
    assert "Kernel driver in use: nvidia" not in on_host("gpu-01", "lspci -k -d 10de:2335").stdout
    link = on_host("gpu-01", "lspci -vv -d 10de:2335").stdout
    assert link.count("LnkSta:\tSpeed 32GT/s, Width x16") == 8
    assert "ACSCtl:" in on_host("gpu-01", "lspci -vv -d 1000:c030").stdout
    missing = on_host("gpu-01", "nvidia-smi", check=False)
    assert missing.returncode == 127 and "not found" in missing.stderr


def test_driver_install_shows_mismatch_until_reboot(lab):
    """Userspace changes at install; the kernel module only at the next boot, as on a real host."""
    on_host("gpu-01", f"test -e /etc/apt/sources.list.d/cuda.list || ({ADD_CUDA_REPO.format(repo=cuda_repo())})")
    install_driver("gpu-01", "580.105.08")
    no_module = on_host("gpu-01", "nvidia-smi", check=False)
    assert no_module.returncode == 9 and "couldn't communicate with the NVIDIA driver" in no_module.stdout

    reboot("gpu-01")
    assert on_host("gpu-01", "cat /sys/module/nvidia/version").stdout.strip() == "580.105.08"
    versions = on_host("gpu-01", "nvidia-smi --query-gpu=driver_version --format=csv,noheader").stdout.split()
    assert versions == ["580.105.08"] * 8
    assert "Kernel driver in use: nvidia" in on_host("gpu-01", "lspci -k -d 10de:2335").stdout

    install_driver("gpu-01", "580.126.09")
    mismatch = on_host("gpu-01", "nvidia-smi", check=False)
    assert mismatch.returncode == 18
    assert "Failed to initialize NVML: Driver/library version mismatch" in mismatch.stdout
    assert on_host("gpu-01", "cat /sys/module/nvidia/version").stdout.strip() == "580.105.08"

    reboot("gpu-01")
    assert on_host("gpu-01", "nvidia-smi -L | wc -l").stdout.strip() == "8"
    assert "Driver Version: 580.126.09" in on_host("gpu-01", "nvidia-smi").stdout


def test_driver_stack_services_and_tools_run_on_the_nvswitch_host(lab):
    """Fabric manager, persistenced and DCGM run as systemd services; the tools see all eight GPUs."""
    on_host("gpu-01", "DEBIAN_FRONTEND=noninteractive apt-get install -y -q nvidia-fabricmanager=580.126.09-1"
                      " datacenter-gpu-manager-4-cuda13 nccl-tests"
                      " && systemctl enable --now nvidia-persistenced nvidia-fabricmanager nvidia-dcgm")
    for service in ("nvidia-persistenced", "nvidia-fabricmanager", "nvidia-dcgm"):
        assert on_host("gpu-01", f"systemctl is-active {service}").stdout.strip() == "active"
    assert on_host("gpu-01", "nvidia-smi --query-gpu=persistence_mode --format=csv,noheader").stdout.split() == ["Enabled"] * 8
    assert on_host("gpu-01", "dcgmi discovery -l").stdout.count("NVIDIA H200") == 8
    assert "# Avg bus bandwidth" in on_host("gpu-01", "all_reduce_perf -b 8 -e 128M -f 2 -g 8").stdout


def test_container_toolkit_merges_into_the_runtime_config(lab):
    base = f"http://{state.CONTROLLER_ADDRESS}:{state.VENDOR_REPO_PORT}/libnvidia-container"
    on_host("gpu-01", (
        f"curl -fsS {base}/gpgkey | gpg --batch --yes --dearmor -o /usr/share/keyrings/nvidia-container-toolkit-keyring.gpg"
        f" && echo 'deb [signed-by=/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg] {base}/stable/deb/amd64 /'"
        " > /etc/apt/sources.list.d/nvidia-container-toolkit.list && apt-get update -q"
        " && DEBIAN_FRONTEND=noninteractive apt-get install -y -q nvidia-container-toolkit"
        " && mkdir -p /etc/docker && echo '{\"log-driver\": \"journald\"}' > /etc/docker/daemon.json"
        " && nvidia-ctk runtime configure --runtime=docker && nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml"
    ))
    daemon = json.loads(on_host("gpu-01", "cat /etc/docker/daemon.json").stdout)
    assert daemon["log-driver"] == "journald"
    assert daemon["runtimes"]["nvidia"]["path"] == "nvidia-container-runtime"
    devices = on_host("gpu-01", "nvidia-ctk cdi list").stdout
    assert all(f"nvidia.com/gpu={index}" in devices for index in range(8)) and "nvidia.com/gpu=all" in devices


def test_infiniband_tools_from_the_doca_repository_list_the_hcas(lab):
    base = f"http://{state.CONTROLLER_ADDRESS}:{state.VENDOR_REPO_PORT}/public/repo/doca/3.1.0/debian12/x86_64"
    on_host("gpu-01", (
        f"curl -fsS {base}/GPG-KEY-Mellanox.pub | gpg --batch --yes --dearmor -o /usr/share/keyrings/doca.gpg"
        f" && echo 'deb [signed-by=/usr/share/keyrings/doca.gpg] {base}/ /' > /etc/apt/sources.list.d/doca.list"
        " && apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q infiniband-diags ibverbs-utils"
    ))
    assert on_host("gpu-01", "ibstat -l").stdout.split() == [f"mlx5_{index}" for index in range(8)]
    assert on_host("gpu-01", "ibv_devinfo -d mlx5_0").stdout.count("PORT_ACTIVE") == 1


def test_amd_driver_brings_kfd_and_rocm_tools_after_reboot(lab):
    base = f"http://{state.CONTROLLER_ADDRESS}:{state.VENDOR_REPO_PORT}"
    on_host("gpu-02", (
        f"curl -fsS {base}/rocm/rocm.gpg.key | gpg --batch --yes --dearmor -o /etc/apt/keyrings/rocm.gpg"
        f" && echo 'deb [signed-by=/etc/apt/keyrings/rocm.gpg] {base}/amdgpu/7.0.2/ubuntu noble main' > /etc/apt/sources.list.d/amdgpu.list"
        f" && echo 'deb [signed-by=/etc/apt/keyrings/rocm.gpg] {base}/rocm/apt/7.0.2 noble main' > /etc/apt/sources.list.d/rocm.list"
        " && apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q amdgpu-dkms rocm"
    ))
    assert on_host("gpu-02", "test -e /dev/kfd", check=False).returncode != 0
    reboot("gpu-02")
    assert on_host("gpu-02", "test -c /dev/kfd", check=False).returncode == 0
    assert on_host("gpu-02", "cat /opt/rocm/.info/version").stdout.startswith("7.0.2")
    assert on_host("gpu-02", "rocm-smi --showproductname --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))'").stdout.strip() == "8"


def test_nvme_filesystem_in_fstab_is_mounted_after_a_pyinfra_reboot(lab):
    """pyinfra's server.reboot sees the host come back (its uptime restarts); the boot layer stands in
    for udev: by-uuid links, and fstab's block devices mounted at boot."""
    on_host("gpu-02", "mkfs.xfs -q -f /dev/nvme0n1 && mkdir -p /srv/models"
                      " && echo \"UUID=$(blkid -o value -s UUID /dev/nvme0n1) /srv/models xfs noatime 0 2\" >> /etc/fstab")
    rebooted = pyinfra("--limit", "gpu-02", "server.reboot", "delay=2")
    assert rebooted.returncode == 0, rebooted.stderr
    assert float(on_host("gpu-02", "cut -d' ' -f1 /proc/uptime").stdout) < 60
    uuid = on_host("gpu-02", "blkid -o value -s UUID /dev/nvme0n1").stdout.strip()
    assert on_host("gpu-02", f"readlink /dev/disk/by-uuid/{uuid}").stdout.strip() == "../../nvme0n1"
    assert on_host("gpu-02", "findmnt -n -o SOURCE,FSTYPE /srv/models").stdout.split() == ["/dev/nvme0n1", "xfs"]


def test_host_that_is_shut_down_stays_down(lab):
    on_host("gpu-02", "systemctl poweroff", check=False)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and _state_of("gpu-02") != "stopped":
        time.sleep(0.5)
    assert _state_of("gpu-02") == "stopped"
    time.sleep(3)
    assert _state_of("gpu-02") == "stopped"
    assert _state_of("gpu-01") == "running"


def test_down_leaves_nothing_behind(lab):
    k3ops("lab", "down")
    assert subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.count(state.NETNS_PREFIX) == 0
    assert f"{state.STATE_DIR}/" not in Path("/proc/mounts").read_text()
    loops = subprocess.run(["losetup", "--list", "--noheadings", "--output", "BACK-FILE"], capture_output=True, text=True)
    assert f"{state.STATE_DIR}/" not in loops.stdout
    # This lab's processes (another lab, K3OPS_LAB_INSTANCE, may run beside it).
    ours = f"--directory={state.STATE_DIR}/|k3ops_lab.supervisor|{services.APT_PROXY_SIGNATURE}"
    assert subprocess.run(["pgrep", "-f", "--", ours]).returncode == 1
    assert subprocess.run(["ip", "link", "show", state.BRIDGE], capture_output=True).returncode != 0
    assert k3ops("lab", "down").returncode == 0
    assert json.loads(k3ops("lab", "status", "--json").stdout) == {"hosts": []}


def test_lab_build_reuses_the_whole_caches_and_starts_nothing(lab):
    """What the running lab was made from is whole: `lab build` checks every entry, rebuilds none, and leaves
    the lab as it was."""
    before = k3ops("lab", "status", "--json").stdout
    built = k3ops("lab", "build")
    assert "building" not in built.stdout + built.stderr and "broken" not in built.stdout + built.stderr
    assert k3ops("lab", "status", "--json").stdout == before


def test_a_lab_build_rebuilds_the_caches_broken_on_purpose(lab, monkeypatch):
    """The hub venv's pip broken as on that fresh machine (issue 13), and a wheel gone from the wheelhouse: the
    next `lab build` (the same cache entries `lab up` starts from) says so, rebuilds both, and they work.

    Broken in a cache of this test's own (hard-linked copies of those two entries, the others shared): the test
    command's other lab streams install from the shared wheelhouse meanwhile."""
    k3ops("lab", "down")
    shared = state.CACHE_DIR
    private = Path(tempfile.mkdtemp(prefix="k3ops-lab-broken-on-purpose-", dir=shared.parent))
    try:
        _copy_the_hub_venv_and_wheelhouse(shared, private)
        monkeypatch.setattr(state, "CACHE_DIR", private)
        venv = hub.venv().resolve()
        next(venv.glob("lib/python3*/site-packages/pip/_vendor/urllib3/util/timeout.py")).unlink()
        wheels = wheelhouse.build(log=lambda message: None)  # the copy, still whole: reused
        dependency = next(wheel for wheel in sorted(wheels.glob("*.whl"))
                          if not wheel.name.startswith("huggingface_hub-"))
        dependency.unlink()
        built = k3ops("lab", "build", env={"K3OPS_LAB_CACHE": str(private)}).stdout
        assert f"the lab's hub venv ({', '.join(hub.VENV_REQUIREMENTS)}) at {hub.venv()} is broken" in built
        assert "No module named 'pip._vendor.urllib3.util.timeout'" in built
        assert (f"the lab's wheelhouse for the hosts ({', '.join(wheelhouse.WHEELHOUSE_REQUIREMENTS)}) at "
                f"{wheels} is broken") in built
        assert hub.venv().resolve() != venv and (wheels / dependency.name).is_file()
        subprocess.run([str(hub.venv_python()), "-m", "pip", "check"], check=True, capture_output=True)
        assert subprocess.run([str(hub.venv() / "bin" / "olah-cli"), "--help"], capture_output=True).returncode == 0
        wheelhouse.check(wheels)
    finally:
        shutil.rmtree(private)  # its links to the shared entries go, not what they point to


def _copy_the_hub_venv_and_wheelhouse(shared: Path, private: Path) -> None:
    """A cache at `private` whose hub venv and wheelhouse are hard-linked copies (a file unlinked there is gone
    there only) and whose other entries are the shared ones."""
    for entry in shared.iterdir():
        if entry.name not in ("hub", "wheelhouse"):
            (private / entry.name).symlink_to(entry)
    venv = (shared / "hub" / "venv").resolve()
    (private / "hub").mkdir()
    (private / "hub" / "mirrors").symlink_to(shared / "hub" / "mirrors")
    subprocess.run(["cp", "-al", str(venv), str(private / "hub" / venv.name)], check=True)
    (private / "hub" / "venv").symlink_to(venv.name)
    wheels = wheelhouse.build(log=lambda message: None)
    (private / "wheelhouse").mkdir()
    subprocess.run(["cp", "-al", str(wheels), str(private / "wheelhouse" / wheels.name)], check=True)


def _state_of(name: str) -> str:
    hosts = json.loads(k3ops("lab", "status", "--json").stdout)["hosts"]
    return next(h["state"] for h in hosts if h["name"] == name)
