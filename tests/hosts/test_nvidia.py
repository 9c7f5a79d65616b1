"""NVIDIA hosts run exactly the driver their spec names, held in place, with every GPU usable, their
NVLink fabric up, GPUDirect RDMA for their NICs, and DCGM and the container toolkit pinned and held."""

import pytest

from k3ops.deploys.gpudirect import PEERMEM_MODULE
from k3ops.deploys.nvidia import container_toolkit_packages, dcgm_packages, driver_packages, package_version
from k3ops.deploys.nvlink import (IMEX_CHANNEL_UNIT, IMEX_NODES_FILE, NVLINK_SUBNET_MANAGER_PACKAGE, fabric_manager_package,
                                 imex_package)
from k3ops.facts.apt import AptHeldPackages, AptPolicyVersion
from k3ops.facts.docker import DockerRuntimes
from k3ops.facts.kernel import KernelModuleLoaded
from k3ops.facts.network import RdmaNics
from k3ops.facts.nvidia import (IMEX_CHANNEL, CdiDevices, FabricManager, ImexChannel, NvidiaDriverState, NvidiaGpus,
                                NvidiaKernelModule, NvidiaUserspaceVersion, NvSwitches)
from k3ops.hardware import kernel_supports_dmabuf
from k3ops.settings import settings_of
from k3ops.vendor_units import DCGM, FABRIC_MANAGER, IMEX, PERSISTENCED

pytestmark = pytest.mark.applies_to("nvidia")


def test_driver_packages_are_installed_at_the_exact_version(host, spec):
    for package in driver_packages(spec):
        assert host.get_fact(AptPolicyVersion, package=package)["installed"] == package_version(spec), package


def test_driver_packages_are_held(host, spec):
    assert set(driver_packages(spec)) <= set(host.get_fact(AptHeldPackages))


def test_apt_would_not_move_the_driver(host, spec):
    """The pin makes the installed release apt's candidate, whatever newer the repository offers."""
    for package in driver_packages(spec):
        assert host.get_fact(AptPolicyVersion, package=package)["candidate"] == package_version(spec), package


def test_loaded_module_is_the_installed_driver(host, spec):
    assert host.get_fact(NvidiaKernelModule) == {"version": spec.nvidia_driver_version,
                                                 "flavour": spec.nvidia_kernel_modules}
    assert host.get_fact(NvidiaUserspaceVersion) == spec.nvidia_driver_version
    assert host.get_fact(NvidiaDriverState) == "ready"


def test_nvidia_smi_lists_the_gpus_the_inventory_names(host, spec):
    gpus = host.get_fact(NvidiaGpus)
    assert [(gpu["name"], gpu["driver_version"]) for gpu in gpus] == \
        [(spec.gpu_model, spec.nvidia_driver_version)] * spec.gpu_count


def test_persistence_daemon_keeps_the_gpus_initialised(host, spec):
    assert host.service(PERSISTENCED).is_running
    assert host.service(PERSISTENCED).is_enabled


def test_fabric_manager_runs_at_the_driver_version_where_wanted(host, spec):
    """Wanted as the deploy decides (data's on or off, or auto: NVSwitches on the board); not running elsewhere."""
    fabric_manager = host.get_fact(FabricManager)
    if spec.fabric_manager_wanted(bool(host.get_fact(NvSwitches))):
        assert fabric_manager == {"installed_version": spec.nvidia_driver_version, "active": True}
        assert fabric_manager_package(spec) in host.get_fact(AptHeldPackages)
    else:
        assert not fabric_manager["active"]
        assert not host.service(FABRIC_MANAGER).is_enabled


def test_nvlink_5_switch_trays_have_the_subnet_manager_at_the_driver_version(host, spec):
    installed = host.get_fact(AptPolicyVersion, package=NVLINK_SUBNET_MANAGER_PACKAGE)["installed"]
    if spec.board.nvlink_subnet_manager and spec.fabric_manager_wanted(bool(host.get_fact(NvSwitches))):
        assert installed == package_version(spec)
        assert NVLINK_SUBNET_MANAGER_PACKAGE in host.get_fact(AptHeldPackages)
    else:
        assert installed is None


def test_nvlink_domain_trays_run_imex_with_their_domain(host, spec):
    """GB200/GB300 trays: IMEX at the driver's version, running, its nodes file naming this tray; none elsewhere."""
    installed = host.get_fact(AptPolicyVersion, package=imex_package(spec))["installed"]
    if not spec.board.nvlink_domain:
        assert installed is None
        return
    assert installed == package_version(spec)
    assert host.service(IMEX).is_running and host.service(IMEX).is_enabled
    nodes = host.file(IMEX_NODES_FILE).content_string.split()
    assert settings_of(host.inventory_data).model.address_for_peers(host.inventory_name) in nodes


def test_nvlink_domain_trays_have_imex_channel_0(host, spec):
    """The node multi-node NVLink jobs open: channel 0 of the device the loaded driver registered, open to the
    engine's user, and its unit enabled so that every boot makes it again."""
    if not spec.board.nvlink_domain:
        return
    channel = host.get_fact(ImexChannel)
    assert channel["ready"], channel
    assert host.file(IMEX_CHANNEL).mode == 0o666
    assert host.service(IMEX_CHANNEL_UNIT).is_enabled


def test_gpudirect_rdma_reaches_the_nics(host, spec):
    """nvidia-peermem loaded now and named for every boot, or DMA-BUF's conditions met, on hosts with RDMA NICs."""
    mode = spec.gpudirect_mode(host.get_fact(RdmaNics))
    if mode == "peermem":
        assert host.get_fact(KernelModuleLoaded, module=PEERMEM_MODULE)
        assert PEERMEM_MODULE in host.check_output("cat /etc/modules-load.d/*.conf").split()
    elif mode == "dmabuf":
        assert kernel_supports_dmabuf(host.check_output("uname -r"))
        assert host.get_fact(NvidiaKernelModule)["flavour"] == "open"


def test_container_toolkit_is_held(host, spec):
    assert set(container_toolkit_packages()) <= set(host.get_fact(AptHeldPackages))


def test_docker_has_the_nvidia_runtime(host, spec):
    """Asked of the running daemon, so a config written but never loaded does not pass."""
    assert host.get_fact(DockerRuntimes)["nvidia"]["path"] == "nvidia-container-runtime"


def test_cdi_spec_lists_every_gpu(host, spec):
    devices = set(host.get_fact(CdiDevices))
    for gpu in host.get_fact(NvidiaGpus):
        assert {f"nvidia.com/gpu={gpu['index']}", f"nvidia.com/gpu={gpu['uuid']}"} <= devices
    assert "nvidia.com/gpu=all" in devices


def test_dcgm_runs_at_the_pinned_version_held(host, spec):
    if not spec.dcgm:
        return
    assert host.service(DCGM).is_running
    for package in dcgm_packages(spec):
        assert host.get_fact(AptPolicyVersion, package=package)["installed"] == spec.dcgm_version, package
    assert set(dcgm_packages(spec)) <= set(host.get_fact(AptHeldPackages))
