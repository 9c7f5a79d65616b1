"""The NVLink fabric between a host's GPUs and, on GB200/GB300, across trays.

NVSwitch boards need fabric manager at the driver's exact version; NVLink 5 switch trays (Blackwell
HGX) also need NVIDIA's NVLink subnet manager, which fabric manager starts; GPUs in a multi-node
NVLink domain share memory across trays only through nvidia-imex, configured with the domain's nodes, and
an IMEX channel that the jobs open.
"""

from __future__ import annotations

from collections.abc import Callable

from pyinfra import host
from pyinfra.api.exceptions import DeployError
from pyinfra.operations import systemd

from ..escape import imex_nodes_file
from ..facts.memo import remembered
from ..facts.nvidia import (IMEX_CHANNEL, IMEX_CHANNEL_DEVICE, IMEX_CHANNEL_DIRECTORY, FabricManager, ImexChannel,
                            NvSwitches)
from ..onhost.layout import ENGINE_UNIT
from ..operations import owned_files, packages, units
from ..settings import host_settings
from ..settings.host import GpuHostSpec
from ..vendor_units import FABRIC_MANAGER, IMEX
from . import fleet, rendered

NVLINK_SUBNET_MANAGER_PACKAGE = "nvlsm"
IMEX_NODES_FILE = "/etc/nvidia-imex/nodes_config.cfg"
IMEX_CHANNEL_COMMAND = "/usr/local/sbin/k3ops-imex-channel"
IMEX_CHANNEL_UNIT = "k3ops-imex-channel.service"


def fabric_manager_package(spec: GpuHostSpec) -> str:
    """R580 renamed nvidia-fabricmanager-<branch> to plain nvidia-fabricmanager."""
    return "nvidia-fabricmanager" if spec.driver_branch >= 580 else f"nvidia-fabricmanager-{spec.driver_branch}"


def imex_package(spec: GpuHostSpec) -> str:
    """Named like fabric manager: nvidia-imex from R580, nvidia-imex-<branch> before."""
    return "nvidia-imex" if spec.driver_branch >= 580 else f"nvidia-imex-{spec.driver_branch}"


def wants_fabric_manager(spec: GpuHostSpec) -> bool:
    """GpuHostSpec.fabric_manager_wanted for this host; a Hopper baseboard whose NVSwitches do not show stops the
    deploy."""
    switches_on_pci = bool(remembered(NvSwitches))
    if spec.fabric_manager == "auto" and spec.nvswitch_expected and not switches_on_pci \
            and spec.gpu_architecture == "Hopper":
        raise DeployError(f"{host.name}: hardware_profile {spec.hardware_profile!r} has NVSwitches but lspci shows "
                          "none; check the baseboard (or set fabric_manager) before deploying")
    return spec.fabric_manager_wanted(switches_on_pci)


def fabric_packages(spec: GpuHostSpec, fabric_manager: bool) -> list[str]:
    """The NVLink fabric's packages, which move with the driver release: pinned, installed and held with it."""
    names = []
    if fabric_manager:
        names.append(fabric_manager_package(spec))
        if spec.board.nvlink_subnet_manager:
            names.append(NVLINK_SUBNET_MANAGER_PACKAGE)
    if spec.board.nvlink_domain:
        names.append(imex_package(spec))
    return names


def imex_nodes(spec: GpuHostSpec) -> list[str]:
    """The addresses of this host's NVLink domain, in inventory order (the tray alone when data names none)."""
    if spec.nvlink_domain is None:
        return [host_settings(host).model.address_for_peers(host.name)]
    members = fleet.members(lambda other: other.data.get("nvlink_domain") == spec.nvlink_domain)
    return [host_settings(member).model.address_for_peers(member.name) for member in members]


def nvlink_fabric(spec: GpuHostSpec, version: str, fabric_manager: bool, driver_loaded: Callable[[], bool]) -> None:
    """Fabric manager (with NVLSM on NVLink 5) or none, and IMEX on NVLink domain trays, at `version`."""
    fabric = fabric_packages(spec, fabric_manager)
    moved = packages.held_at(name=f"Install the NVLink fabric's packages at the driver's version ({', '.join(fabric)})",
                             packages=fabric, version=version, no_recommends=False) if fabric else None
    if fabric_manager:
        units.service(name="Enable fabric manager", unit=FABRIC_MANAGER, running=True, enabled=True,
                      _if=driver_loaded)
        # A running fabric manager keeps its old binary until restarted: restart it onto the new one.
        units.service(name="Restart fabric manager on its new version", unit=FABRIC_MANAGER,
                      restarted=True, _if=lambda: moved.did_change() and driver_loaded())
    elif remembered(FabricManager)["installed_version"] is not None:
        units.service(name="Fabric manager off, as data says", unit=FABRIC_MANAGER, running=False,
                      enabled=False)
    if spec.board.nvlink_domain:
        imex_channel(driver_loaded)
        nodes = owned_files.config_file(name="IMEX: the nodes of this NVLink domain", path=IMEX_NODES_FILE,
                                        content=imex_nodes_file(imex_nodes(spec)))
        units.service(name="Enable IMEX", unit=IMEX, running=True, enabled=True, _if=driver_loaded)
        units.service(name="Restart IMEX on its new version or nodes", unit=IMEX, restarted=True,
                      _if=lambda: (moved.did_change() or nodes.did_change()) and driver_loaded())


def imex_channel(driver_loaded: Callable[[], bool]) -> None:
    """IMEX channel 0, which the driver never makes and a reboot removes (NVIDIA's IMEX guide): made by a unit
    of k3ops' own at every boot, before IMEX and the engine, and again now when missing or another device's."""
    command = owned_files.config_file(
        name=f"Command {IMEX_CHANNEL_COMMAND}", path=IMEX_CHANNEL_COMMAND, mode="755",
        content=rendered("k3ops/k3ops-imex-channel.j2", device=IMEX_CHANNEL_DEVICE, directory=IMEX_CHANNEL_DIRECTORY,
                         channel=IMEX_CHANNEL))
    unit = owned_files.config_file(
        name=f"Unit {IMEX_CHANNEL_UNIT}", path=f"/etc/systemd/system/{IMEX_CHANNEL_UNIT}",
        content=rendered(f"systemd/{IMEX_CHANNEL_UNIT}.j2", imex=IMEX, engine=ENGINE_UNIT, command=IMEX_CHANNEL_COMMAND))
    systemd.daemon_reload(name="Reload systemd for the IMEX channel's unit", _if=unit.did_change)
    units.service(name="IMEX channel 0, now and at every boot", unit=IMEX_CHANNEL_UNIT, running=True, enabled=True,
                  _if=driver_loaded)
    ready = remembered(ImexChannel)["ready"]
    units.service(name="IMEX channel 0 made again", unit=IMEX_CHANNEL_UNIT, restarted=True,
                  _if=lambda: (command.did_change() or not ready) and driver_loaded())
