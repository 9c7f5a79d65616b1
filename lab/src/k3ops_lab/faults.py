"""Faults the lab injects into a host for the runbooks' drills, each at the lowest layer it simulates.

A fault changes what the machine itself is: the hardware document (a GPU off the bus, a pulled cable),
the simulated driver's state (the kernel module a reboot would replace), a daemon killed, a disk
filled, a byte of a checkpoint flipped, a port taken from the engine. Nothing the doctor reads above
that layer is edited: the doctor must find each fault the way it finds it on a real host.

Each host keeps the faults injected into it in INJECTED (a lab file no k3ops code reads), so that
`k3ops lab fault HOST --clear` undoes them: the stand-in for the hands-on repair of a runbook's
out-of-band step. Clearing a fault a remedy already repaired changes nothing.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import time
from dataclasses import dataclass

from k3ops.engines.recipes import RECIPES
from k3ops.onhost.layout import ENGINE_UNIT, WATCHDOG_SERVICE, WATCHDOG_TIMER
from k3ops.vendor_units import FABRIC_MANAGER, PERSISTENCED

from . import lab, state
from .profiles import get_profile
from .sim.host import HARDWARE_DOCUMENT, KERNEL_MODULE_STAGING

INJECTED = "/var/lib/k3ops-lab/faults.json"
HARDWARE = f"/{HARDWARE_DOCUMENT}"
LAB_MODEL_CACHE = "/srv/k3ops/models"
LAB_MODEL = "tiny-k3"
LAB_ENGINE_RECIPE = "llama.cpp-gguf"
PORT_THIEF_UNIT = "k3ops-lab-port-thief.service"
FILL_FILE = f"{LAB_MODEL_CACHE}/.k3ops-lab-fill"
FILL_LEAVES_BYTES = 64 * 1024**2  # below the lab's model_cache_headroom_gib
# The releases a package upgrade left behind: the kernel still runs the previous driver.
PREVIOUS_NVIDIA_MODULE = "580.95.05"
PREVIOUS_AMDGPU_MODULE = "6.12.12"
FAULTY_GPU = 3
DRIVER_LOG_KNOB = "/proc/driver/nvidia/k3ops-lab-log"
SETTLE_SECONDS = 60
# The byte in the middle of the active revision's largest file (a weights file), flipped; flipped back only
# while the file still differs from its manifest (a remedy may have repaired it already).
FLIP_TARGET = f"""
import hashlib, json, pathlib
model = pathlib.Path({LAB_MODEL_CACHE!r}) / {LAB_MODEL!r}
current = (model / "current").resolve()
target = max((path for path in current.rglob("*") if path.is_file()), key=lambda path: path.stat().st_size)
data = bytearray(target.read_bytes())
"""
FLIP_BYTE = FLIP_TARGET + """
data[len(data) // 2] ^= 0xFF
target.write_bytes(data)
"""
FLIP_BYTE_BACK = FLIP_TARGET + """
files = json.loads((model / "manifests" / (current.name + ".json")).read_text())["files"]
wanted = {entry["path"]: entry["sha256"] for entry in files}[str(target.relative_to(current))]
if hashlib.sha256(data).hexdigest() != wanted:
    data[len(data) // 2] ^= 0xFF
    target.write_bytes(data)
"""


def edit_hardware(change: str) -> str:
    """A command that changes the hardware document (`h`, in Python) in one rename, as firmware would."""
    return shlex.join(["python3", "-c", f"import json, os; p = {HARDWARE!r}; h = json.load(open(p)); {change}; "
                                        "json.dump(h, open(p + '.new', 'w'), indent=1); os.replace(p + '.new', p)"])


def driver_logs_xid(gpu: int, xid: int, message: str) -> str:
    """A command that has the driver log an Xid for the GPU, as the real one does when it sees the fault: through
    the knob of the lab's stand-in nvidia module (kmod/nvidia.c), which only a VM host's kernel loads."""
    line = (f"b = json.load(open({HARDWARE!r}))['gpus'][{gpu}]['pci_bus_id'].rsplit('.', 1)[0]; "
            f"open({DRIVER_LOG_KNOB!r}, 'w').write('Xid (PCI:' + b + {f'): {xid}, {message}'!r})")
    return shlex.join(["python3", "-c", "import json; " + line])


def load_staged_module(module: str) -> str:
    """The kernel running the module the installed package staged again (what a reboot would load); nothing
    when it runs that one already (a remedy's reboot loaded it: a reload now would be a second load)."""
    staged = f"/{KERNEL_MODULE_STAGING}/{module}"
    loaded = f"/sys/module/{module}/version"
    return shlex.join(["python3", "-c", f"import json; v = json.load(open({staged!r}))['version']; "
                                        f"open({loaded!r}).read().strip() == v or open({loaded!r}, 'w').write(v + '\\n')"])


GPU_OFF_THE_BUS = edit_hardware(f"h['gpus'][{FAULTY_GPU}]['fallen_off_bus'] = True")
GPU_BACK_ON_THE_BUS = edit_hardware(f"h['gpus'][{FAULTY_GPU}].pop('fallen_off_bus', None)")


def kill_daemon(unit: str) -> str:
    return f"systemctl kill --signal=SIGKILL {unit}"


@dataclass(frozen=True)
class LabFault:
    """One fault: what it simulates, the runbook that deals with it, and how to put it in and take it out.
    Commands run on the host as root; {address} and {port} are the host's engine address and port."""

    name: str
    description: str
    runbook: str
    inject: tuple[str, ...]
    clear: tuple[str, ...]
    vendor: str | None = None  # the GPU vendor the fault needs (None: any host)
    nvswitch: bool = False  # needs an NVSwitch board (fabric manager)
    reboot: bool = False  # takes effect at the next boot: the host reboots after the injection
    settled: str | None = None  # a command that succeeds once the fault shows
    # Edits the modules a container host's boot layer simulates; a VM host's kernel has modules of its own.
    container_kernel: bool = False
    # Has the driver write to the kernel's log: only a VM host has a kernel (and a log) of its own.
    kernel_log: bool = False


FAULTS = {fault.name: fault for fault in (
    LabFault("driver-mismatch", "the kernel still runs the previous driver's module (userspace upgraded, no reboot)",
             "nvml-driver-mismatch", (f"echo {PREVIOUS_NVIDIA_MODULE} > /sys/module/nvidia/version",),
             (load_staged_module("nvidia"),), vendor="nvidia", container_kernel=True),
    LabFault("nvidia-module-unloaded", "the nvidia kernel module is not loaded", "nvidia-driver-not-loaded",
             ("rm -rf /sys/module/nvidia_peermem /sys/module/nvidia_uvm /sys/module/nvidia",), ("modprobe nvidia",), vendor="nvidia",
             container_kernel=True),
    LabFault("secure-boot-on", "Secure Boot turned on in the firmware: the unsigned module is refused at boot",
             "secure-boot-blocks-driver", (edit_hardware("h['secure_boot'] = True"),),
             (edit_hardware("h['secure_boot'] = False"),), vendor="nvidia", reboot=True),
    LabFault("gpu-lost", f"GPU {FAULTY_GPU} is gone from the bus, with no word in the kernel log (it comes back at "
             "the next boot)", "gpu-count-below-spec", (GPU_OFF_THE_BUS,), (GPU_BACK_ON_THE_BUS,), vendor="nvidia"),
    LabFault("gpu-lost-xid", f"GPU {FAULTY_GPU} fell off the bus and the driver logged its Xid 79 (it comes back at "
             "the next boot)", "gpu-fallen-off-bus",
             (GPU_OFF_THE_BUS, driver_logs_xid(FAULTY_GPU, 79, "GPU has fallen off the bus")), (GPU_BACK_ON_THE_BUS,),
             vendor="nvidia", kernel_log=True),
    # The line's shape is a fleet's (runbooks/gsp-timeout.md, leptonai/gpud#500); no process is known here.
    LabFault("gsp-timeout", f"GPU {FAULTY_GPU}'s GSP stopped answering the driver, which logged Xid 119 (a reboot "
             "resets it)", "gsp-timeout",
             (driver_logs_xid(FAULTY_GPU, 119, "pid='<unknown>', name=<unknown>, Timeout after 6s of waiting for RPC "
                                               f"response from GPU{FAULTY_GPU} GSP! Expected function 76 "
                                               "(GSP_RM_CONTROL) (0x20801702 0x4)."),),
             (), vendor="nvidia", kernel_log=True),
    LabFault("row-remap-pending", f"GPU {FAULTY_GPU} has a row remap pending (a GPU reset activates it)",
             "gpu-memory-errors",
             (edit_hardware(f"h.setdefault('faults', {{}})['remapped_rows_pending'] = [{FAULTY_GPU}]"),),
             (edit_hardware("h.setdefault('faults', {}).pop('remapped_rows_pending', None)"),), vendor="nvidia"),
    LabFault("nvlink-down", f"NVLinks 0 and 1 of GPU {FAULTY_GPU} are down (they retrain at the next boot)",
             "nvlink-errors",
             (edit_hardware(f"h.setdefault('faults', {{}})['nvlink_down_links'] = {{'{FAULTY_GPU}': [0, 1]}}"),),
             (edit_hardware("h.setdefault('faults', {}).pop('nvlink_down_links', None)"),), vendor="nvidia",
             nvswitch=True),
    LabFault("power-brake", f"the chassis asserts GPU {FAULTY_GPU}'s power brake (a power supply lost): the board "
             "slows its clocks", "gpu-power-brake",
             (edit_hardware(f"h.setdefault('faults', {{}})['power_brake'] = [{FAULTY_GPU}]"),),
             (edit_hardware("h.setdefault('faults', {}).pop('power_brake', None)"),), vendor="nvidia"),
    LabFault("fabric-manager-crash", "nvidia-fabricmanager killed (SIGKILL)", "fabric-manager-down",
             (kill_daemon(f"{FABRIC_MANAGER}.service"),), (f"systemctl restart {FABRIC_MANAGER}.service",),
             vendor="nvidia", nvswitch=True, settled=f"systemctl is-failed --quiet {FABRIC_MANAGER}.service"),
    LabFault("persistenced-crash", "nvidia-persistenced killed (SIGKILL)", "persistenced-down",
             (kill_daemon(f"{PERSISTENCED}.service"),), (f"systemctl restart {PERSISTENCED}.service",),
             vendor="nvidia", settled=f"systemctl is-failed --quiet {PERSISTENCED}.service"),
    LabFault("ib-port-down", "mlx5_2's cable pulled: its port is Down, polling for a peer", "infiniband-port-degraded",
             (edit_hardware("h['nics'][2]['port_state'] = 'Down'"),),
             (edit_hardware("h['nics'][2]['port_state'] = 'Active'"),), vendor="nvidia"),
    LabFault("amdgpu-unloaded", "the amdgpu kernel module is not loaded", "amdgpu-not-loaded",
             ("rm -rf /sys/module/amdgpu",), ("modprobe amdgpu",), vendor="amd", container_kernel=True),
    LabFault("rocm-mismatch", "the kernel still runs another ROCm release's amdgpu (package upgraded, no reboot)",
             "rocm-driver-mismatch", (f"echo {PREVIOUS_AMDGPU_MODULE} > /sys/module/amdgpu/version",),
             (load_staged_module("amdgpu"),), vendor="amd", container_kernel=True),
    LabFault("xgmi-down", "the XGMI link between GPUs 2 and 3 is down (it retrains at the next boot)", "xgmi-errors",
             (edit_hardware("h.setdefault('faults', {})['xgmi_down_links'] = {'2': [3]}"),),
             (edit_hardware("h.setdefault('faults', {}).pop('xgmi_down_links', None)"),), vendor="amd"),
    LabFault("nic-slow", "the host's NICs move half their bandwidth; their ports look healthy", "nccl-check-failed",
             (edit_hardware("h.setdefault('faults', {})['nic_throughput_share'] = 0.5"),),
             (edit_hardware("h.setdefault('faults', {}).pop('nic_throughput_share', None)"),), vendor="nvidia"),
    LabFault("nccl-bootstrap-blocked", "NCCL's bootstrap connections to the host get no answer", "nccl-init-hang",
             (edit_hardware("h.setdefault('faults', {})['bootstrap_unreachable'] = True"),),
             (edit_hardware("h.setdefault('faults', {}).pop('bootstrap_unreachable', None)"),), vendor="nvidia"),
    LabFault("engine-port-taken", "another process holds the engine's port: the engine exits at start, in a loop",
             "engine-not-running",
             (f"systemctl stop {ENGINE_UNIT}",
              f"systemd-run --quiet --unit={PORT_THIEF_UNIT} python3 -m http.server {{port}} --bind {{address}}",
              "for i in $(seq 50); do ss -ltn 'sport = :{port}' | grep -q LISTEN && break; sleep 0.1; done",
              f"systemctl start {ENGINE_UNIT}"),
             (f"systemctl stop {PORT_THIEF_UNIT}",),
             settled=f"systemctl show -p SubState --value {ENGINE_UNIT} | grep -qx auto-restart"),
    # As the world freezes a process (a debugger, a kernel stall, llama-server after a CUDA OOM): systemd's own kill,
    # after one watchdog check saw the engine ready, with the watchdog's timer stopped so it does not heal it first.
    LabFault("engine-frozen", "the engine's processes stopped (SIGSTOP) after it was ready: the port stays open and "
             "nothing answers", "engine-generation-stuck",
             (f"systemctl start {WATCHDOG_SERVICE}", f"systemctl stop {WATCHDOG_TIMER}",
              f"systemctl kill --signal=SIGSTOP {ENGINE_UNIT}"),
             (f"systemctl kill --signal=SIGCONT {ENGINE_UNIT}", f"systemctl start {WATCHDOG_TIMER}")),
    LabFault("cache-disk-full", "a file that is not k3ops' fills the model cache volume", "model-cache-disk-full",
             (f"fallocate -l $(( $(df --output=avail -B1 {LAB_MODEL_CACHE} | tail -n 1) - {FILL_LEAVES_BYTES} )) "
              f"{FILL_FILE}",), (f"rm -f {FILL_FILE}",)),
    LabFault("checkpoint-byte-flip", "one byte flipped in the largest file of the active checkpoint revision",
             "checkpoint-corrupt", (shlex.join(["python3", "-c", FLIP_BYTE]),),
             (shlex.join(["python3", "-c", FLIP_BYTE_BACK]),)),
)}


class FaultError(ValueError):
    pass


def applies(fault: LabFault, host: state.LabHost) -> str | None:
    """Why the fault cannot be injected into this host, by its profile and backend (None: it can)."""
    profile = get_profile(host.profile)
    if fault.container_kernel and host.backend == "vm":
        return (f"{fault.name} edits the modules a container host's boot layer simulates; this VM host's kernel "
                "has its own (unload or upgrade them for real: rmmod, or a driver install without a reboot)")
    if fault.kernel_log and host.backend != "vm":
        return (f"{fault.name} has the driver write to the kernel's log; a container host's kernel (and log) is the "
                "controller's: inject it into a VM host (`k3ops lab up --backend vm`)")
    vendor = profile.gpu.model.vendor if profile.gpu else None
    if fault.vendor and vendor != fault.vendor:
        return f"{fault.name} needs a host with {fault.vendor} GPUs; this one is {host.profile}"
    if fault.nvswitch and not profile.board.nvswitch:
        return f"{fault.name} needs an NVSwitch board; {host.profile} has none"
    if fault.name == "ib-port-down" and len(profile.nics) < 3:
        return f"{fault.name} needs a host with RDMA NICs; {host.profile} has {len(profile.nics)}"
    return None


def run_on(host: state.LabHost, command: str) -> subprocess.CompletedProcess:
    return lab.ssh(host, [command], capture=True)


def injected(host: state.LabHost) -> list[str]:
    result = run_on(host, f"cat {INJECTED} 2>/dev/null || true")
    return json.loads(result.stdout or "[]")


def inject(host: state.LabHost, name: str) -> None:
    fault = FAULTS.get(name)
    if fault is None:
        raise FaultError(f"no lab fault {name!r}: `k3ops lab fault --list` shows them")
    why_not = applies(fault, host)
    if why_not:
        raise FaultError(f"{host.name}: {why_not}")
    record = [*dict.fromkeys([*injected(host), name])]  # first: a fault half put in can still be cleared
    _checked(host, f"mkdir -p $(dirname {INJECTED}) && echo {shlex.quote(json.dumps(record))} > {INJECTED}",
             "recording the fault")
    for command in fault.inject:
        _checked(host, filled(command, host), f"injecting {name}")
    if fault.reboot:
        lab.reboot(host)
    if fault.settled:
        deadline = time.monotonic() + SETTLE_SECONDS
        while run_on(host, fault.settled).returncode != 0:
            if time.monotonic() > deadline:
                raise FaultError(f"{host.name}: {name} injected but did not show within {SETTLE_SECONDS} s")
            time.sleep(0.5)


def clear(host: state.LabHost) -> list[str]:
    """Undo every fault injected into the host, newest first; returns their names."""
    names = injected(host)
    for name in reversed(names):
        for command in FAULTS[name].clear:
            _checked(host, filled(command, host), f"clearing {name}")
    _checked(host, f"rm -f {INJECTED}", "forgetting the faults")
    return names


def filled(command: str, host: state.LabHost) -> str:
    """The command with the host's engine address and port in place of {address} and {port}."""
    return command.replace("{address}", host.address).replace("{port}", str(RECIPES[LAB_ENGINE_RECIPE].port))


def _checked(host: state.LabHost, command: str, doing: str) -> None:
    result = run_on(host, command)
    if result.returncode != 0:
        raise FaultError(f"{host.name}: {doing}: `{command}` exited {result.returncode}: "
                         f"{(result.stderr or result.stdout).strip()}")
