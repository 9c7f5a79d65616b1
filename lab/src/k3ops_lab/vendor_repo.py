"""The lab's gpg-signed apt repositories of simulated vendor packages.

Named, versioned and laid out like NVIDIA's CUDA and container toolkit repositories, AMD's
amdgpu and ROCm repositories and NVIDIA's DOCA repository, so that a deploy uses its real
repository, keyring and pinning code with only the URL changed. Each package installs the thin
entry points of the simulated tools (the tools themselves are `labsim`, part of every lab host's
simulated hardware) and the markers a real package leaves: the NVML library named by its version,
/opt/rocm/.info/version. The driver packages are DKMS packages, as the real ones: they ship the source of
the lab's stand-in kernel modules (kmod/), which their maintainer scripts hand to dkms. A VM host's real dkms
builds them against its kernel; a container host, which shares the controller's kernel, gets the lab's
stand-in dkms instead, and its boot layer loads the build each package also stages for it.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from k3ops.hardware import DCGM_EXPORTER_PAIRS

from . import cache, state

NVIDIA_DRIVER_VERSIONS = ("570.195.03", "580.105.08", "580.126.09")
CONTAINER_TOOLKIT_VERSIONS = ("1.17.8-1", "1.18.0-1")
DCGM_VERSION = "1:4.4.1-1"
DCGM_EXPORTER_VERSION = DCGM_EXPORTER_PAIRS[DCGM_VERSION.split(":")[-1].split("-")[0]]  # what production pairs
# The packaged counters file's first fields (the exporter's own default is longer; k3ops replaces it with -f).
DCGM_EXPORTER_DEFAULT_COUNTERS = ("# DCGM FIELD, Prometheus metric type, help message\n"
                                  "DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\n"
                                  "DCGM_FI_DEV_POWER_USAGE, gauge, Power draw (in W).\n")
NCCL_VERSION = "2.28.7-1+cuda13.0"
NCCL_TESTS_VERSION = "2.17.6-1"
DOCA_VERSION = "3.1.0"
OFED_TOOLS_VERSION = "2501mlnx56-1.2501060"
# ROCm release -> (amdgpu kernel module version, build number). 7.1.0's two numbers are the lab's own (no capture
# of a 7.1 host names them): the release a rollout moves an MI355X host to, which 6.4 does not support.
ROCM_RELEASES = {"6.4.1": ("6.12.12", "83"), "7.0.2": ("6.14.14", "56"), "7.1.0": ("6.16.6", "52")}
# The RCCL each ROCm release ships (RCCL's changelog: 2.22.3 for ROCm 6.4, 2.26.6 for ROCm 7.0, 2.27.7 for 7.1).
RCCL_VERSIONS = {"6.4.1": "2.22.3", "7.0.2": "2.26.6", "7.1.0": "2.27.7"}
# The rccl-tests build of each release, which its report names: the 6.4 one prints "rccl-tests: Version
# <branch>:<commit>" (as the real MI355X capture), the 7.0 one is merged with nccl-tests 2.17 and prints
# "# rccl-tests version 2.17.9-<branch>:<commit>" (the simulator adds the commit).
RCCL_TESTS_BUILDS = {"6.4.1": "rocm-6.4.1", "7.0.2": "2.17.9-rocm-7.0.2", "7.1.0": "2.17.9-rocm-7.1.0"}
# What the tests' binaries link besides NCCL/RCCL: Debian's OpenMPI (they are built with MPI=1). The
# simulators themselves gather their ranks with mpi4py, so the packages also need python3-mpi4py.
MPI_DEPENDS = "libopenmpi3, python3-mpi4py"
AMD_SUITE = "noble"
AMD_METRICS_EXPORTER_RELEASE = "1.5.4"
AMD_METRICS_EXPORTER_REPO_PATH = f"device-metrics-exporter/apt/{AMD_METRICS_EXPORTER_RELEASE}"
AMDGPU_BUILD = "2212569.24.04"  # the amdgpu-dkms build: its package revision and its DKMS version's suffix

CUDA_REPO_PATH = "compute/cuda/repos/debian12/x86_64"
CONTAINER_TOOLKIT_REPO_PATH = "libnvidia-container/stable/deb/amd64"
DOCA_REPO_PATH = f"public/repo/doca/{DOCA_VERSION}/debian12/x86_64"
# The simulated kernel's packages; its image and the flavour's image metapackage are installed on every
# lab host from the start (hosts.py), as a distribution's installer leaves them; headers are the deploy's.
KERNEL_PACKAGES_PATH = "lab/kernel"
KERNEL_FLAVOUR = "k3lab"
OLDER_KERNEL = "6.1.0-27-k3lab"
# Where each vendor publishes its signing key, relative to the repository server's root.
SIGNING_KEY_PATHS = (
    f"{CUDA_REPO_PATH}/3bf863cc.pub",
    "libnvidia-container/gpgkey",
    "rocm/rocm.gpg.key",
    f"{DOCA_REPO_PATH}/GPG-KEY-Mellanox.pub",
)

SIM_LIBRARY = "/usr/lib/k3ops-lab-sim"
KMOD_SOURCE = Path(__file__).parent / "kmod"
# The stand-in dkms of container hosts (their kernel is the controller's: nothing can be built for it), pinned
# above Debian's there (container.py). The driver's build it stands for is the staged one (KERNEL_MODULE_STAGING).
STAND_IN_DKMS_VERSION = "3.0.10-8+k3lab"
STAND_IN_DKMS = """#!/bin/sh
# k3ops lab: a container host shares the controller's kernel, for which no module is built here; the lab's
# boot layer loads the build the driver package staged (labsim/boot.py).
exit 0
"""
VERSION_MARKERS = f"{SIM_LIBRARY}/versions"
KERNEL_MODULE_STAGING = f"{SIM_LIBRARY}/kmod"
ENTRY_POINT = """#!/usr/bin/python3
# Simulated by the k3ops lab: {tool} for this host's hardware profile.
import sys
sys.path.insert(0, "{library}")
from labsim.{module} import {function}
sys.exit({function}(sys.argv[1:]))
"""


@dataclass
class Package:
    name: str
    version: str
    description: str
    depends: str = ""
    conflicts: str = ""
    files: dict[str, str] = field(default_factory=dict)  # path -> content
    links: dict[str, str] = field(default_factory=dict)  # path -> target
    postinst: str = ""
    prerm: str = ""


def tool(path: str, module: str, function: str = "main") -> dict[str, str]:
    name = Path(path).name
    return {path: ENTRY_POINT.format(tool=name, library=SIM_LIBRARY, module=module, function=function)}


def service_unit(description: str, exec_start: str, wanted_by: str = "multi-user.target", extra: str = "",
                 unit_extra: str = "") -> str:
    return (
        f"[Unit]\nDescription={description}\n{unit_extra}\n[Service]\n{extra}ExecStart={exec_start}\n\n"
        f"[Install]\nWantedBy={wanted_by}\n"
    )


def version_marker(package: str, version: str) -> dict[str, str]:
    return {f"{VERSION_MARKERS}/{package}": version.split(":")[-1].rsplit("-", 1)[0] + "\n"}


def dkms_package(name: str, version: str, modules: tuple[str, ...], open_source: bool,
                 staged: dict[str, dict]) -> dict[str, str | dict[str, str]]:
    """A DKMS package's files and maintainer scripts, as dh_dkms makes them: the source under
    /usr/src/<name>-<version> (one stand-in per module, kmod/<module>.c), scripts that add, build and install
    it for the kernels with headers (dkms' common.postinst) and remove it on removal or upgrade; and the
    builds staged for a container host's boot layer (module -> its version and flavour)."""
    tree = f"/usr/src/{name}-{version}"
    conf = [f'PACKAGE_NAME="{name}"', f'PACKAGE_VERSION="{version}"', 'AUTOINSTALL="yes"']
    for index, module in enumerate(modules):
        conf += [f'BUILT_MODULE_NAME[{index}]="{module}"', f'DEST_MODULE_LOCATION[{index}]="/updates/dkms"']
    files = {
        f"{tree}/dkms.conf": "\n".join(conf) + "\n",
        f"{tree}/Kbuild": f"obj-m := {' '.join(f'{module}.o' for module in modules)}\n",
        f"{tree}/k3lab-build.h": (f'#define K3LAB_VERSION "{version.split("-")[0]}"\n'
                                  f'#define K3LAB_OPEN {int(open_source)}\n'),
        **{f"{tree}/{module}.c": (KMOD_SOURCE / f"{module}.c").read_text() for module in modules},
        **{f"{KERNEL_MODULE_STAGING}/{module}": json.dumps(build) + "\n" for module, build in staged.items()},
    }
    return {
        "files": files,
        "postinst": f'#!/bin/sh\nset -e\nif [ "$1" = configure ]; then\n'
                    f'    /usr/lib/dkms/common.postinst {name} {version} "" "" "$2"\nfi\n',
        "prerm": f'#!/bin/sh\nset -e\ncase "$1" in remove|upgrade|deconfigure)\n'
                 f'    if [ -n "$(dkms status -m {name} -v {version})" ]; then\n'
                 f'        dkms remove -m {name} -v {version} --all\n    fi\n    ;;\n'
                 f'esac\n',
    }


def nvidia_driver_packages(version: str) -> list[Package]:
    """One driver release as the CUDA repository splits it, open and proprietary modules alike."""
    branch = version.split(".")[0]
    full = f"{version}-1"
    exact = f"(= {full})"
    fabricmanager = "nvidia-fabricmanager" if int(branch) >= 580 else f"nvidia-fabricmanager-{branch}"
    imex = "nvidia-imex" if int(branch) >= 580 else f"nvidia-imex-{branch}"
    library = f"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.{version}"
    return [
        Package(
            "nvidia-driver-cuda", full, "NVIDIA driver CUDA integration components (nvidia-smi, NVML)",
            # The driver's command-line tools: nvidia-smi, and the bug report an RMA asks for.
            files={library: f"simulated NVML {version}\n", **tool("/usr/bin/nvidia-smi", "nvidia_smi"),
                   **tool("/usr/bin/nvidia-bug-report.sh", "bug_report")},
            links={"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1": Path(library).name},
        ),
        *(
            Package(
                name, full, f"NVIDIA driver {flavour} kernel module (DKMS)", depends="dkms", conflicts=other,
                # The driver's DKMS build makes nvidia.ko and nvidia-peermem.ko (GPUDirect RDMA) together, and
                # nvidia-uvm.ko (CUDA's unified memory), which only a container host's boot layer simulates.
                **dkms_package("nvidia", version, ("nvidia", "nvidia-peermem"), open_source=flavour == "open",
                               staged={module: {"version": version, "flavour": flavour}
                                       for module in ("nvidia", "nvidia_peermem", "nvidia_uvm")}),
            )
            for name, flavour, other in (
                ("nvidia-kernel-open-dkms", "open", "nvidia-kernel-dkms"),
                ("nvidia-kernel-dkms", "proprietary", "nvidia-kernel-open-dkms"),
            )
        ),
        Package(
            "nvidia-persistenced", full, "daemon to maintain persistent software state in the NVIDIA driver",
            files={
                **tool("/usr/bin/nvidia-persistenced", "daemons", "persistenced_main"),
                "/usr/lib/systemd/system/nvidia-persistenced.service": service_unit(
                    "NVIDIA Persistence Daemon", "/usr/bin/nvidia-persistenced --user root",
                    extra="Type=simple\n",
                ),
            },
        ),
        Package(
            "nvidia-driver", full, "NVIDIA metapackage",
            depends=f"nvidia-driver-cuda {exact}, nvidia-persistenced {exact}, "
            f"nvidia-kernel-open-dkms {exact} | nvidia-kernel-dkms {exact}",
        ),
        Package("nvidia-open", full, "NVIDIA open kernel module flavour metapackage",
                depends=f"nvidia-driver {exact}, nvidia-kernel-open-dkms {exact}"),
        Package(f"cuda-drivers-{branch}", full, f"CUDA driver metapackage for branch {branch}",
                depends=f"nvidia-driver {exact}"),
        Package("cuda-drivers", full, "CUDA driver metapackage", depends=f"cuda-drivers-{branch} {exact}"),
        Package(
            f"nvidia-driver-pinning-{branch}", full, f"Pins the NVIDIA driver packages to branch {branch}",
            files={f"/etc/apt/preferences.d/nvidia-driver-pinning-{branch}": (
                "Package: nvidia-driver* nvidia-kernel-* nvidia-open* nvidia-persistenced "
                f"cuda-drivers* {fabricmanager} libnvidia-*\nPin: version {branch}.*\nPin-Priority: 1000\n"
            )},
        ),
        Package(
            fabricmanager, full, "Fabric Manager for NVSwitch based systems",
            files={
                **tool("/usr/bin/nv-fabricmanager", "daemons", "fabricmanager_main"),
                **version_marker("nvidia-fabricmanager", full),
                "/usr/lib/systemd/system/nvidia-fabricmanager.service": service_unit(
                    "NVIDIA fabric manager service", "/usr/bin/nv-fabricmanager -c /usr/share/nvidia/nvswitch/fabricmanager.cfg",
                    extra="Type=simple\n",
                ),
                "/usr/share/nvidia/nvswitch/fabricmanager.cfg": "LOG_LEVEL=4\nLOG_FILE_NAME=/var/log/fabricmanager.log\n",
            },
        ),
        Package(
            "nvlsm", full, "NVIDIA NVLink Subnet Manager (NVLink 5 switch trays, started by fabric manager)",
            files={**tool("/opt/nvidia/nvlsm/sbin/nvlsm", "daemons", "nvlsm_main"), **version_marker("nvlsm", full)},
        ),
        Package(
            imex, full, "NVIDIA IMEX: memory export and import across the nodes of an NVLink domain",
            files={
                **tool("/usr/bin/nvidia-imex", "daemons", "imex_main"),
                **version_marker("nvidia-imex", full),
                "/usr/lib/systemd/system/nvidia-imex.service": service_unit(
                    "NVIDIA IMEX service", "/usr/bin/nvidia-imex -c /etc/nvidia-imex/config.cfg", extra="Type=simple\n"),
                "/etc/nvidia-imex/config.cfg": "IMEX_NODE_CONFIG_FILE=/etc/nvidia-imex/nodes_config.cfg\n",
                "/etc/nvidia-imex/nodes_config.cfg": "",
            },
        ),
    ]


def nvidia_tools_packages() -> list[Package]:
    """DCGM and NCCL tests, as the CUDA repository ships them."""
    return [
        Package(
            "datacenter-gpu-manager-4-core", DCGM_VERSION, "NVIDIA Data Center GPU Manager (core)",
            files={
                **tool("/usr/bin/dcgmi", "dcgmi"),
                **tool("/usr/bin/nv-hostengine", "daemons", "hostengine_main"),
                **version_marker("datacenter-gpu-manager-4-core", DCGM_VERSION),
                "/usr/lib/systemd/system/nvidia-dcgm.service": service_unit(
                    "NVIDIA DCGM service", "/usr/bin/nv-hostengine -n --service-account nvidia-dcgm",
                    extra="Type=simple\n",
                ),
            },
        ),
        Package("datacenter-gpu-manager-4-cuda13", DCGM_VERSION, "NVIDIA DCGM for CUDA 13",
                depends=f"datacenter-gpu-manager-4-core (= {DCGM_VERSION})"),
        Package(
            "datacenter-gpu-manager-exporter", DCGM_EXPORTER_VERSION, "NVIDIA DCGM Exporter",
            depends="datacenter-gpu-manager-4-core",
            files={
                **tool("/usr/bin/dcgm-exporter", "dcgm_exporter"),
                "/etc/dcgm-exporter/default-counters.csv": DCGM_EXPORTER_DEFAULT_COUNTERS,
                # NVIDIA/dcgm-exporter's packaged unit, as packaging/config-files/systemd ships it.
                "/lib/systemd/system/nvidia-dcgm-exporter.service": (
                    "[Unit]\nDescription=NVIDIA DCGM-exporter service\nWants=nvidia-dcgm.service\n"
                    "After=nvidia-dcgm.service\n\n[Service]\nUser=root\nPrivateTmp=false\n\n"
                    "StandardOutput=append:/var/dcgm-exporter.log\nStandardError=append:/var/dcgm-exporter.log\n\n"
                    "ExecStart=/usr/bin/dcgm-exporter -f /etc/dcgm-exporter/default-counters.csv\n\n"
                    "Restart=on-abort\n\n[Install]\nWantedBy=multi-user.target\n"),
            },
        ),
        Package("libnccl2", NCCL_VERSION, "NVIDIA Collective Communication Library (NCCL) runtime",
                files={"/usr/lib/x86_64-linux-gnu/libnccl.so.2.28.7": "simulated NCCL\n"},
                links={"/usr/lib/x86_64-linux-gnu/libnccl.so.2": "libnccl.so.2.28.7"}),
        Package("nccl-tests", NCCL_TESTS_VERSION, "NCCL performance tests (MPI build)",
                depends=f"libnccl2, {MPI_DEPENDS}",
                files={**tool("/usr/bin/all_reduce_perf", "nccl_tests", "nccl_all_reduce_main"),
                       **tool("/usr/bin/alltoall_perf", "nccl_tests", "nccl_alltoall_main")}),
    ]


def container_toolkit_packages(version: str) -> list[Package]:
    exact = f"(= {version})"
    return [
        Package("libnvidia-container1", version, "NVIDIA container runtime library",
                files={"/usr/lib/x86_64-linux-gnu/libnvidia-container.so.1": "simulated\n"}),
        Package("libnvidia-container-tools", version, "NVIDIA container runtime library (command-line tools)",
                depends=f"libnvidia-container1 {exact}", files=tool("/usr/bin/nvidia-container-cli", "container_runtime", "cli_main")),
        Package(
            "nvidia-container-toolkit-base", version, "NVIDIA Container Toolkit Base",
            files={
                **tool("/usr/bin/nvidia-ctk", "nvidia_ctk"),
                **tool("/usr/bin/nvidia-container-runtime", "container_runtime", "runtime_main"),
                **version_marker("nvidia-container-toolkit", version),
            },
        ),
        Package("nvidia-container-toolkit", version, "NVIDIA Container toolkit",
                depends=f"nvidia-container-toolkit-base {exact}, libnvidia-container-tools {exact}"),
    ]


def rocm_packages(release: str) -> tuple[list[Package], list[Package]]:
    """(amdgpu repository packages, rocm repository packages) for one ROCm release."""
    module_version, build = ROCM_RELEASES[release]
    number = "".join(f"{int(part):02d}" if i else part for i, part in enumerate(release.split(".")))
    rocm_version = f"{release}.{number}-{build}~24.04"
    prefix = f"/opt/rocm-{release}"
    amdgpu = [
        Package("amdgpu-dkms", f"1:{module_version}.{number}-{AMDGPU_BUILD}", "amdgpu driver in DKMS format",
                depends="dkms", **dkms_package("amdgpu", f"{module_version}-{AMDGPU_BUILD}", ("amdgpu",),
                                               open_source=True,
                                               staged={"amdgpu": {"version": module_version, "flavour": "dkms"}})),
    ]
    rocm = [
        Package("rocm-core", rocm_version, "ROCm runtime core",
                files={f"{prefix}/.info/version": f"{release}-{build}\n"}, links={"/opt/rocm": prefix}),
        Package("rocm-smi-lib", rocm_version, "AMD System Management libraries", depends="rocm-core",
                files={**tool(f"{prefix}/bin/rocm-smi", "rocm_smi"), **version_marker("rocm-smi-lib", rocm_version)},
                links={"/usr/bin/rocm-smi": f"{prefix}/bin/rocm-smi"}),
        Package("amd-smi-lib", rocm_version, "AMD System Management Interface library and tool",
                depends="rocm-core",
                files={**tool(f"{prefix}/bin/amd-smi", "amd_smi"), **version_marker("amd-smi-lib", rocm_version)},
                links={"/usr/bin/amd-smi": f"{prefix}/bin/amd-smi"}),
        Package("rocm", rocm_version, "Radeon Open Compute (ROCm) software stack meta package",
                depends=", ".join(f"{name} (= {rocm_version})" for name in ("rocm-core", "rocm-smi-lib", "amd-smi-lib"))),
        Package("rccl", rocm_version, "ROCm Communication Collectives Library", depends="rocm-core",
                files={f"{prefix}/lib/librccl.so.1.0.{number}": f"simulated RCCL {RCCL_VERSIONS[release]}\n",
                       **version_marker("rccl", RCCL_VERSIONS[release])},
                links={f"{prefix}/lib/librccl.so.1": f"librccl.so.1.0.{number}"}),
        Package("rccl-tests", rocm_version, "RCCL performance tests (MPI build)",
                depends=f"rccl (= {rocm_version}), {MPI_DEPENDS}",
                files={**tool(f"{prefix}/bin/all_reduce_perf", "nccl_tests", "rccl_all_reduce_main"),
                       **tool(f"{prefix}/bin/alltoall_perf", "nccl_tests", "rccl_alltoall_main"),
                       f"{VERSION_MARKERS}/rccl-tests": RCCL_TESTS_BUILDS[release] + "\n"}),
    ]
    return amdgpu, rocm


def ofed_tools_packages() -> list[Package]:
    return [
        Package("infiniband-diags", OFED_TOOLS_VERSION, "InfiniBand diagnostic programs",
                files=tool("/usr/sbin/ibstat", "infiniband", "ibstat_main")),
        Package("ibverbs-utils", OFED_TOOLS_VERSION, "Examples for the libibverbs library",
                files=tool("/usr/bin/ibv_devinfo", "infiniband", "ibv_devinfo_main")),
    ]


def kernel_packages(release: str) -> list[Package]:
    """The kernel the lab hosts boot (the controller's) as packages: its image, its headers, and a flavour's
    metapackages that follow it, as Debian's linux-image-amd64 and linux-headers-amd64 follow theirs. An
    older release beside it is what a host keeps after a kernel upgrade (image only, as apt leaves it). And
    the stand-in dkms, which builds nothing for that kernel."""
    def image(name: str) -> Package:
        return Package(f"linux-image-{name}", "1", f"Linux {name} for the k3ops lab",
                       files={f"/boot/vmlinuz-{name}": f"# simulated kernel image {name}\n"})

    def headers(name: str) -> Package:
        return Package(f"linux-headers-{name}", "1", f"Header files for Linux {name}",
                       files={f"/usr/src/linux-headers-{name}/Makefile": f"# simulated headers for {name}\n"},
                       links={f"/lib/modules/{name}/build": f"/usr/src/linux-headers-{name}"})

    return [image(release), headers(release), image(OLDER_KERNEL), headers(OLDER_KERNEL),
            Package("dkms", STAND_IN_DKMS_VERSION, "Dynamic Kernel Module System (stand-in: nothing is built for a "
                    "container host's kernel)", files={"/usr/sbin/dkms": STAND_IN_DKMS,
                                                       "/usr/lib/dkms/common.postinst": STAND_IN_DKMS}),
            Package(f"linux-image-{KERNEL_FLAVOUR}", "1", "Linux for the k3ops lab (metapackage)",
                    depends=f"linux-image-{release}"),
            Package(f"linux-headers-{KERNEL_FLAVOUR}", "1", "Header files for Linux (metapackage)",
                    depends=f"linux-headers-{release}")]


def amd_metrics_exporter_packages() -> list[Package]:
    """AMD's device metrics exporter as its repository ships it: amdgpu-exporter, with gpuagent."""
    return [Package(
        "amdgpu-exporter", AMD_METRICS_EXPORTER_RELEASE, "AMD GPU metrics exporter",
        files={
            **tool("/usr/local/bin/amd-metrics-exporter", "amd_metrics_exporter"),
            **tool("/usr/local/bin/gpuagent", "amd_metrics_exporter", "gpuagent_main"),
            "/etc/metrics/config.json": json.dumps({"ServerPort": 5000}, indent=2) + "\n",
            "/lib/systemd/system/gpuagent.service": service_unit("AMD GPU agent", "/usr/local/bin/gpuagent"),
            "/lib/systemd/system/amd-metrics-exporter.service": service_unit(
                "AMD GPU metrics exporter", "/usr/local/bin/amd-metrics-exporter",
                extra="Restart=on-failure\n", unit_extra="Wants=gpuagent.service\nAfter=gpuagent.service\n"),
        },
    )]


def repositories() -> dict[str, tuple[str | None, list[Package]]]:
    """Repository path -> (suite, or None for a flat repository; its packages)."""
    repos: dict[str, tuple[str | None, list[Package]]] = {
        CUDA_REPO_PATH: (None, [p for v in NVIDIA_DRIVER_VERSIONS for p in nvidia_driver_packages(v)]
                         + nvidia_tools_packages()),
        CONTAINER_TOOLKIT_REPO_PATH: (None, [p for v in CONTAINER_TOOLKIT_VERSIONS for p in container_toolkit_packages(v)]),
        DOCA_REPO_PATH: (None, ofed_tools_packages()),
        KERNEL_PACKAGES_PATH: (None, kernel_packages(os.uname().release)),
        AMD_METRICS_EXPORTER_REPO_PATH: (AMD_SUITE, amd_metrics_exporter_packages()),
    }
    for release in ROCM_RELEASES:
        amdgpu, rocm = rocm_packages(release)
        repos[f"amdgpu/{release}/ubuntu"] = (AMD_SUITE, amdgpu)
        repos[f"rocm/apt/{release}"] = (AMD_SUITE, rocm)
    return repos


def build(log=print) -> Path:
    """The signed repository tree, built when missing or broken; returns the directory to serve."""
    def signed_tree(root: Path) -> None:
        gnupg = _signing_home()
        try:
            _build_tree(root, gnupg)
        finally:
            # gpg starts an agent to sign; it must not outlive the build.
            subprocess.run(["gpgconf", "--homedir", str(gnupg), "--kill", "all"], capture_output=True)

    sources = b"".join(path.read_bytes() for path in sorted(KMOD_SOURCE.glob("*.c")))
    fingerprint = hashlib.sha256(Path(__file__).read_bytes() + sources + os.uname().release.encode()
                                 + DCGM_EXPORTER_VERSION.encode()).hexdigest()[:12]
    return cache.entry(state.CACHE_DIR / "vendor-repo" / fingerprint, "simulated vendor repositories", signed_tree,
                       check, log)


def check(root: Path) -> None:
    """As apt sees each repository: its InRelease verifies with the key the vendor URLs serve, and every
    package its index names is there."""
    with tempfile.TemporaryDirectory() as scratch:
        keyring = Path(scratch) / "keyring.gpg"
        subprocess.run(["gpg", "--homedir", scratch, "--batch", "--dearmor", "-o", str(keyring)],
                       input=(root / SIGNING_KEY_PATHS[0]).read_bytes(), check=True, capture_output=True)
        for repo_path, (suite, _) in repositories().items():
            repo = root / repo_path
            release_dir = repo if suite is None else repo / "dists" / suite
            index_dir = repo if suite is None else release_dir / "main" / "binary-amd64"
            subprocess.run(["gpgv", "--homedir", scratch, "--keyring", str(keyring), str(release_dir / "InRelease")],
                           check=True, capture_output=True, text=True)
            named = [line.removeprefix("Filename: ") for line in (index_dir / "Packages").read_text().splitlines()
                     if line.startswith("Filename: ")]
            missing = [name for name in named if not (repo / name).is_file()]
            if missing:
                raise RuntimeError(f"{repo}: its Packages index names files that are not there: {missing}")


def _build_tree(root: Path, gnupg: Path) -> None:
    """The key at each vendor's key URL, every repository's packages and signed indexes."""
    armored_key = subprocess.run(["gpg", "--homedir", str(gnupg), "--armor", "--export"], check=True,
                                 capture_output=True).stdout
    for key_path in SIGNING_KEY_PATHS:
        (root / key_path).parent.mkdir(parents=True, exist_ok=True)
        (root / key_path).write_bytes(armored_key)
    for repo_path, (suite, packages) in repositories().items():
        repo = root / repo_path
        pool = repo if suite is None else repo / "pool" / "main"
        pool.mkdir(parents=True, exist_ok=True)
        for package in packages:
            _build_deb(package, pool)
        _write_indexes(repo, suite, gnupg)


def _signing_home() -> Path:
    """The lab's repository signing key, made once and kept in the cache (in place: gpg-agent's sockets
    live in the home, and a temporary home's longer path can exceed a socket path's limit)."""
    home = state.CACHE_DIR / "gnupg"
    if not (home / "pubring.kbx").exists():
        home.mkdir(parents=True, exist_ok=True, mode=0o700)
        subprocess.run(
            ["gpg", "--homedir", str(home), "--batch", "--passphrase", "", "--quick-gen-key",
             "k3ops lab vendor repositories <lab@k3ops.invalid>", "ed25519", "sign", "never"],
            check=True, capture_output=True,
        )
    return home


def _build_deb(package: Package, pool: Path) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        tree = Path(scratch)
        for path, content in package.files.items():
            target = tree / path.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content)
            target.chmod(0o755 if content.startswith("#!") else 0o644)
        for path, link_target in package.links.items():
            link = tree / path.lstrip("/")
            link.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(link_target, link)
        (tree / "DEBIAN").mkdir()
        for script in ("postinst", "prerm"):
            if getattr(package, script):
                (tree / "DEBIAN" / script).write_text(getattr(package, script))
                (tree / "DEBIAN" / script).chmod(0o755)
        control = [f"Package: {package.name}", f"Version: {package.version}", "Architecture: amd64",
                   "Maintainer: k3ops lab <lab@k3ops.invalid>", f"Description: {package.description} (k3ops lab simulation)"]
        if package.depends:
            control.append(f"Depends: {package.depends}")
        if package.conflicts:
            control.append(f"Conflicts: {package.conflicts}")
        (tree / "DEBIAN" / "control").write_text("\n".join(control) + "\n")
        version = package.version.split(":")[-1]
        subprocess.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(tree),
                        str(pool / f"{package.name}_{version}_amd64.deb")], check=True, capture_output=True)


def _write_indexes(repo: Path, suite: str | None, gnupg: Path) -> None:
    """Packages and a signed Release/InRelease, flat (`deb URL /`) or by suite (`deb URL noble main`)."""
    if suite is None:
        index_dir, release_dir, release_options = repo, repo, []
        packages = subprocess.run(["apt-ftparchive", "packages", "."], cwd=repo, check=True,
                                  capture_output=True, text=True).stdout
    else:
        index_dir = repo / "dists" / suite / "main" / "binary-amd64"
        release_dir = repo / "dists" / suite
        index_dir.mkdir(parents=True)
        release_options = [f"-oAPT::FTPArchive::Release::{key}={value}" for key, value in
                           (("Suite", suite), ("Codename", suite), ("Components", "main"), ("Architectures", "amd64"))]
        packages = subprocess.run(["apt-ftparchive", "packages", "pool"], cwd=repo, check=True,
                                  capture_output=True, text=True).stdout
    (index_dir / "Packages").write_text(packages)
    subprocess.run(["gzip", "-kf", str(index_dir / "Packages")], check=True)
    release = subprocess.run(["apt-ftparchive", *release_options, "release", "."], cwd=release_dir, check=True,
                             capture_output=True, text=True).stdout
    (release_dir / "Release").write_text(release)
    sign = ["gpg", "--homedir", str(gnupg), "--batch", "--yes"]
    subprocess.run([*sign, "--clearsign", "-o", str(release_dir / "InRelease"), str(release_dir / "Release")],
                   check=True, capture_output=True)
    subprocess.run([*sign, "-abs", "-o", str(release_dir / "Release.gpg"), str(release_dir / "Release")],
                   check=True, capture_output=True)
