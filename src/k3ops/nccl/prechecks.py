"""What a host must show before NCCL runs on it: each pre-check asks facts and names what is wrong.

A host that fails one is left out of the tests across hosts (as Azure's health checks do: single-host
gates first), so a cluster's failure names the host and the cause rather than a slow number.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyinfra.facts.server import KernelVersion
from pyinfra.facts.systemd import SystemdStatus

from ..facts.amd import AmdgpuModule, RocmGpus
from ..facts.boot import KernelCommandLine
from ..facts.fabric import AcsEnabledBridges, InfinibandActiveMtu, InfinibandPorts, XgmiLinks
from ..facts.gpu_health import NvidiaGpuReport
from ..facts.kernel import KernelModuleLoaded
from ..facts.network import RdmaNics
from ..facts.nvidia import FabricManager, NvidiaGpus, NvSwitches
from ..hardware import AMD_KERNEL_ARGUMENTS, kernel_supports_dmabuf
from ..onhost.layout import ENGINE_UNIT
from ..settings.fabric import FabricCheckSpec
from ..settings.host import GpuHostSpec
from ..vendor_units import FABRIC_MANAGER

# Kernel arguments that put an IOMMU in translating mode; iommu=pt keeps it out of the GPUs' and NICs' way.
IOMMU_TRANSLATING = ("intel_iommu=on", "amd_iommu=on", "iommu=force", "iommu.passthrough=0")
IOMMU_PASSTHROUGH = "iommu=pt"
FABRIC_READY = ("Completed", "Success")
# A driver with no registration to report for the GPU: no Fabric block (before R530), or "N/A".
FABRIC_NOT_REPORTED = (None, "N/A")


@dataclass(frozen=True)
class Precheck:
    """One pre-check's outcome on one host: `problems` empty means it passed."""

    name: str
    problems: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        return not self.problems


def prechecks(host, spec: GpuHostSpec, fabric: FabricCheckSpec) -> list[Precheck]:
    """Every pre-check that applies to the host's vendor and board; `host` answers facts (RemoteHost)."""
    checks = [not_serving(host), gpus_visible(host, spec)]
    if spec.board.rdma_ports:
        checks += rdma_ports(host, spec, fabric.nccl_environment.get("NCCL_IB_HCA"))
    if spec.gpu_vendor == "nvidia":
        checks += [gpudirect(host, spec), nvlink_fabric(host, spec)]
    else:
        checks += [amdgpu(host), xgmi(host, spec)]
    return checks + [acs_off(host), iommu_passthrough(host, spec)]


def not_serving(host) -> Precheck:
    """The tests take every GPU's memory and the fabric's bandwidth: never beside a running engine."""
    if host.get_fact(SystemdStatus, services=[ENGINE_UNIT]).get(ENGINE_UNIT):
        return Precheck("idle", (f"{ENGINE_UNIT} is running: the tests would take its GPUs' memory and its "
                                 "fabric; drain the host and stop the engine first",))
    return Precheck("idle")


def gpus_visible(host, spec: GpuHostSpec) -> Precheck:
    found = len(host.get_fact(NvidiaGpus) if spec.gpu_vendor == "nvidia" else host.get_fact(RocmGpus))
    if found == spec.gpu_count:
        return Precheck("gpus")
    return Precheck("gpus", (f"{found} GPUs visible, the spec names {spec.gpu_count} (a GPU off the bus or a "
                             "driver not loaded)",))


def rdma_ports(host, spec: GpuHostSpec, ib_hca: str | None) -> list[Precheck]:
    """As many ports Active and LinkUp at the board's rate as it has, among those NCCL will use (NCCL_IB_HCA,
    when the fleet sets it: a front-end NIC is not the compute fabric); one MTU on all of them. A board whose NICs
    link faster than its profile says (ConnectX-8 at 800 Gb/s on a B300) holds every port to its fastest one's
    rate: a port at half of it would pass the profile's."""
    ports = [port for port in host.get_fact(InfinibandPorts) if hca_selected(ib_hca, port["device"], port["port"])]
    board = spec.board
    rate = max([board.rdma_rate_gbps, *(port["rate_gbps"] for port in ports if port["state"] == "Active")])
    problems = [problem for port in ports if (problem := port_problem(port, rate))]
    healthy = len(ports) - len(problems)
    if healthy >= board.rdma_ports:
        problems = []
    else:
        problems.append(f"{healthy} healthy RDMA ports, hardware_profile {board.name!r} has {board.rdma_ports}")
    mtus = {device: mtu for device, mtu in host.get_fact(InfinibandActiveMtu).items()
            if any(port["device"] == device for port in ports)}
    mtu_problems = ()
    if len(set(mtus.values())) > 1:
        mtu_problems = ("active MTUs differ: " + ", ".join(f"{device} {mtu}" for device, mtu in sorted(mtus.items())),)
    return [Precheck("rdma_ports", tuple(problems)), Precheck("mtu", mtu_problems)]


def hca_selected(ib_hca: str | None, device: str, port: int) -> bool:
    """Whether NCCL_IB_HCA lets NCCL use the port: a comma list of device[:port] prefixes, exact with a
    leading `=`, excluded with a leading `^` (NCCL's environment documentation); unset: every port."""
    if not ib_hca:
        return True
    exclude, text = ib_hca.startswith("^"), ib_hca.lstrip("^")
    exact, text = text.startswith("="), text.lstrip("=")
    matched = False
    for entry in filter(None, text.split(",")):
        name, _, wanted_port = entry.partition(":")
        if (device == name if exact else device.startswith(name)) and (not wanted_port or int(wanted_port) == port):
            matched = True
    return matched != exclude


def port_problem(port: dict, rate_gbps: int) -> str | None:
    where = f"{port['device']} port {port['port']}"
    if (port["state"], port["physical_state"]) != ("Active", "LinkUp"):
        return f"{where}: {port['state']}/{port['physical_state']}"
    if port["rate_gbps"] < rate_gbps:
        return f"{where}: {port['rate_gbps']:g} Gb/s, the board's ports link at {rate_gbps:g}"
    return None


def gpudirect(host, spec: GpuHostSpec) -> Precheck:
    mode = spec.gpudirect_mode(host.get_fact(RdmaNics))
    if mode == "peermem" and not host.get_fact(KernelModuleLoaded, module="nvidia-peermem"):
        return Precheck("gpudirect_rdma", ("nvidia-peermem is not loaded: NCCL's inter-host traffic would bounce "
                                           "through host memory (`modprobe nvidia-peermem`, or rerun the deploy)",))
    if mode == "dmabuf":
        if not kernel_supports_dmabuf(host.get_fact(KernelVersion)):
            return Precheck("gpudirect_rdma", ("gpudirect_rdma is dmabuf but the kernel is older than 5.12",))
    if mode == "off" and spec.board.rdma_ports:
        return Precheck("gpudirect_rdma", ("gpudirect_rdma is off on a host with RDMA NICs",))
    return Precheck("gpudirect_rdma")


def nvlink_fabric(host, spec: GpuHostSpec) -> Precheck:
    """Fabric manager running where it is wanted, and every GPU's fabric registration Completed/Success, which NCCL
    needs before it can use NVLink at all: on Blackwell (and GB300 trays) always, on an NVSwitch board of another
    generation (HGX Hopper registers too) wherever the driver reports a registration (not N/A)."""
    problems = []
    wanted = spec.fabric_manager_wanted(bool(host.get_fact(NvSwitches)))
    if wanted and not host.get_fact(FabricManager)["active"]:
        problems.append(f"{FABRIC_MANAGER} is not running")
    if spec.gpu_architecture == "Blackwell" or wanted:
        problems += [f"GPU {gpu['bus_id']}: fabric {gpu['fabric_state']}/{gpu['fabric_status']}"
                     for gpu in host.get_fact(NvidiaGpuReport)
                     if (gpu["fabric_state"], gpu["fabric_status"]) != FABRIC_READY
                     and (spec.gpu_architecture == "Blackwell" or gpu["fabric_state"] not in FABRIC_NOT_REPORTED)]
    return Precheck("nvlink_fabric", tuple(problems))


def amdgpu(host) -> Precheck:
    if host.get_fact(AmdgpuModule) is None:
        return Precheck("amdgpu", ("amdgpu is not loaded",))
    return Precheck("amdgpu")


def xgmi(host, spec: GpuHostSpec) -> Precheck:
    links = host.get_fact(XgmiLinks)
    problems = [f"GPU {a} reaches GPU {b} over {kind}, not XGMI" for a, b, kind in links["not_xgmi"]]
    if len(links["gpus"]) != spec.gpu_count:
        problems.append(f"amd-smi's topology shows {len(links['gpus'])} GPUs, the spec names {spec.gpu_count}")
    return Precheck("xgmi", tuple(problems))


def acs_off(host) -> Precheck:
    bridges = host.get_fact(AcsEnabledBridges)
    if not bridges:
        return Precheck("acs")
    return Precheck("acs", (f"ACS source validation on at {', '.join(bridges)}: peer traffic between GPUs and NICs "
                            "detours through the root complex (disable ACS in the BIOS)",))


def iommu_passthrough(host, spec: GpuHostSpec) -> Precheck:
    arguments = set(host.get_fact(KernelCommandLine))
    if IOMMU_PASSTHROUGH in arguments:
        return Precheck("iommu")
    if spec.gpu_vendor == "amd":
        return Precheck("iommu", (f"booted without {IOMMU_PASSTHROUGH} (AMD needs {' '.join(AMD_KERNEL_ARGUMENTS)})",))
    translating = sorted(arguments & set(IOMMU_TRANSLATING))
    if translating:
        return Precheck("iommu", (f"{' '.join(translating)} without {IOMMU_PASSTHROUGH}: the IOMMU translates GPU and "
                                  "NIC peer traffic",))
    return Precheck("iommu")
