"""What a GPU host deploy needs to know about a host: one validated spec per inventory host.

Inventory and group_data stay flat pyinfra data (`hardware_profile = "b300x8"`); this model is the one
place that says which keys exist, their defaults for Kimi K3 (R580 open kernel modules, CUDA 13, ROCm 7),
and what is allowed. Unknown keys are refused, so a typo cannot silently fall back to a default.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..hardware import (BOARD_PROFILES, DCGM_EXPORTER_PAIRS, GPU_MODELS, BoardProfile, ROCM_MINIMUM_BY_ARCHITECTURE,
                        cuda_supported_by)
from ..onhost.layout import NCCL_USER, PEER_USER
from ..forms import PLAIN_HTTP_SETTING, http_url, https_unless_allowed

DRIVER_VERSION = re.compile(r"^(?P<branch>\d{3})\.\d{2,3}(?:\.\d{2})?$")
ROCM_RELEASE = re.compile(r"^\d+\.\d+\.\d+$")
CUDA_VERSION = re.compile(r"^\d+\.\d+$")
TOOLKIT_VERSION = re.compile(r"^\d+\.\d+\.\d+-\d+$")
DCGM_VERSION = re.compile(r"^(?:\d+:)?\d+\.\d+\.\d+-\d+$")
# A repository URL may name the host's ROCm release, filled in by the deploy.
ROCM_RELEASE_FIELD = "{rocm_release}"
APT_WORD = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]*$")
# Accounts the engines must never run as: root and the distribution's (and GPU stack's) system accounts.
SYSTEM_ACCOUNTS = frozenset({
    "root", "daemon", "bin", "sys", "sync", "games", "man", "lp", "mail", "news", "uucp", "proxy", "www-data",
    "backup", "list", "irc", "gnats", "nobody", "sshd", "messagebus", "polkitd", "avahi", "dnsmasq", "ntp",
    "chrony", "statd", "tss", "uuidd", "tcpdump", "syslog", "postfix", "nvidia-persistenced"})
SYSTEM_ACCOUNT_PREFIXES = ("systemd-", "_")  # systemd's own accounts; Debian's newer package accounts (_apt)
# Version fields: the form each must have, and how the error describes it.
FORMS = {
    "nvidia_driver_version": (DRIVER_VERSION, "an exact driver version like '580.126.09'"),
    "rocm_release": (ROCM_RELEASE, "a ROCm release like '7.0.2' (major.minor.patch)"),
    "required_cuda": (CUDA_VERSION, "a CUDA version like '13.0'"),
    "container_toolkit_version": (TOOLKIT_VERSION, "a package version like '1.18.0-1'"),
    "dcgm_version": (DCGM_VERSION, "a package version like '1:4.4.1-1'"),
    "dcgm_exporter_version": (TOOLKIT_VERSION, "a package version like '4.6.0-1'"),
}


class Repository(BaseModel):
    """An apt repository: `suite` None means a flat repository (`deb URL /`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str
    key_url: str
    suite: str | None = None
    component: str = "main"

    @field_validator("url", "key_url")
    @classmethod
    def _url(cls, value: str) -> str:
        """An http(s) URL, where `{rocm_release}` stands for the host's release."""
        try:
            http_url(value.replace(ROCM_RELEASE_FIELD, "0.0.0"))
        except ValueError:
            http_url(value)  # refused as well: the message names the URL as written
        return value

    @field_validator("suite", "component")
    @classmethod
    def _apt_word(cls, value: str | None) -> str | None:
        """One word of an apt source line: a space or newline would add components or lines."""
        if value is not None and not APT_WORD.fullmatch(value):
            raise ValueError(f"{value!r} is not an apt suite or component like 'noble' or 'main'")
        return value


def vendor_repositories() -> dict[str, Repository]:
    """The vendors' own repositories; `{rocm_release}` is filled in from the host's ROCm release."""
    return {
        "cuda": Repository(url="https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/",
                           key_url="https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/3bf863cc.pub"),
        "container_toolkit": Repository(url="https://nvidia.github.io/libnvidia-container/stable/deb/amd64/",
                                        key_url="https://nvidia.github.io/libnvidia-container/gpgkey"),
        "amdgpu": Repository(url="https://repo.radeon.com/amdgpu/{rocm_release}/ubuntu", suite="noble",
                             key_url="https://repo.radeon.com/rocm/rocm.gpg.key"),
        "rocm": Repository(url="https://repo.radeon.com/rocm/apt/{rocm_release}", suite="noble",
                           key_url="https://repo.radeon.com/rocm/rocm.gpg.key"),
        "docker": Repository(url="https://download.docker.com/linux/debian", suite="bookworm", component="stable",
                             key_url="https://download.docker.com/linux/debian/gpg"),
        # AMD's device metrics exporter (amdgpu-exporter): a repository per exporter release; 1.5.4 supports ROCm
        # 6.2.0 and later (ROCm/device-metrics-exporter docs/installation/deb-package.rst).
        "amd_metrics_exporter": Repository(url="https://repo.radeon.com/device-metrics-exporter/apt/1.5.4",
                                           suite="noble", key_url="https://repo.radeon.com/rocm/rocm.gpg.key"),
        # NVIDIA's DOCA host repository: the RDMA tools (ibstat, ibv_devinfo) for ConnectX NICs.
        "doca": Repository(url="https://linux.mellanox.com/public/repo/doca/3.1.0/debian12/x86_64/",
                           key_url="https://linux.mellanox.com/public/repo/doca/3.1.0/debian12/x86_64/GPG-KEY-Mellanox.pub"),
    }


class GpuHostSpec(BaseModel):
    """A host's hardware and the GPU software stack it should run."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    hardware_profile: str = Field(description="board profile (h200x8, b300x8, gb300x4, mi355x8, cpu, ...)")
    gpu_vendor: Literal["nvidia", "amd"] | None = Field(
        None, description="nvidia, amd, or none for a CPU host; unset: the hardware profile's")
    gpu_model: str | None = Field(
        None, description="as nvidia-smi / rocm-smi print it, e.g. 'NVIDIA H200'; unset: the hardware profile's")
    gpu_count: int | None = Field(None, ge=0, le=16, description="GPUs on the host; unset: the hardware profile's")
    nvidia_driver_version: str = Field("580.126.09", description="exact driver version, pinned and held")
    nvidia_kernel_modules: Literal["open", "proprietary"] = Field(
        "open", description="kernel module flavour; Blackwell needs open")
    signed_kernel_modules: bool = Field(
        False, description="DKMS signs the GPU driver's modules with an enrolled MOK (needed under Secure Boot)")
    fabric_manager: Literal["auto", "on", "off"] = Field("auto", description="auto: on where the host has NVSwitches")
    dcgm: bool = Field(True, description="install and run DCGM (nvidia-dcgm)")
    dcgm_version: str = Field("1:4.4.1-1", description="exact DCGM package version, pinned and held")
    dcgm_exporter_version: str | None = Field(
        None, description="exact package version of NVIDIA's DCGM exporter, pinned and held; unset: the release "
                          "NVIDIA pairs with dcgm_version")
    gpudirect_rdma: Literal["auto", "peermem", "dmabuf", "off"] = Field(
        "auto", description="GPUDirect RDMA for the NICs: auto loads nvidia-peermem where the host has RDMA NICs; "
                            "dmabuf uses the kernel's DMA-BUF instead (open modules, kernel 5.12+)")
    nvlink_domain: str | None = Field(
        None, pattern=r"^[a-z0-9][a-z0-9-]*$",
        description="GB200/GB300 trays: hosts sharing it form one NVLink domain (one nvidia-imex domain); "
                    "unset: the tray alone")
    container_toolkit_version: str = Field("1.18.0-1", description="exact NVIDIA Container Toolkit version")
    required_cuda: str = Field("13.0", description="CUDA version the engine image needs (K3's vLLM image: 13.0)")
    rocm_release: str = Field("7.0.2", description="exact ROCm release (major.minor.patch)")
    docker_source: Literal["distribution", "vendor"] = Field(
        "distribution", description="Docker from Debian (docker.io) or from Docker's repository (docker-ce)")
    reboot_policy: Literal["allowed", "never"] = Field(
        "allowed", description="allowed: reboot when a new kernel module or kernel argument needs it")
    reboot_timeout_seconds: int = Field(
        1800, ge=60, le=4 * 3600, description="how long a rebooting host may take to answer again (bare-metal "
                                              "HGX firmware and memory training take 10 minutes and more)")
    service_user: str = Field("k3ops", pattern=r"^[a-z_][a-z0-9_-]{0,31}$",
                              description="system user that runs the engines and reaches the GPUs")
    repositories: dict[Literal["cuda", "container_toolkit", "amdgpu", "rocm", "docker", "doca", "amd_metrics_exporter"],
                       Repository] = Field(
        default_factory=vendor_repositories,
        description="apt repositories by name ({url, key_url, suite}); data names only those it moves")

    @model_validator(mode="before")
    @classmethod
    def _gpus_from_profile(cls, data):
        """Data need not restate what its board implies: unset GPU fields are the hardware profile's."""
        name = data.get("hardware_profile") if isinstance(data, dict) else None
        if not isinstance(name, str) or name not in BOARD_PROFILES:
            return data  # the field's own validation names the problem
        profile = BOARD_PROFILES[name]
        implied = {"gpu_vendor": GPU_MODELS[profile.gpu_model].vendor if profile.gpu_model else None,
                   "gpu_model": profile.gpu_model, "gpu_count": profile.gpu_count}
        return data | {key: value for key, value in implied.items() if data.get(key) is None}

    @field_validator("repositories", mode="before")
    @classmethod
    def _over_vendor_defaults(cls, value: dict) -> dict:
        """Inventory data names only the repositories it moves; the rest stay the vendors' own."""
        return {**vendor_repositories(), **value} if isinstance(value, dict) else value

    @model_validator(mode="before")
    @classmethod
    def _signing_keys_over_https(cls, data):
        """apt checks packages against the signing key, so the key itself must come from who it claims to."""
        repositories = data.get("repositories") if isinstance(data, dict) else None
        for name, repository in (repositories or {}).items() if isinstance(repositories, dict) else ():
            key_url = repository.get("key_url") if isinstance(repository, dict) else None
            if isinstance(key_url, str):
                try:
                    https_unless_allowed(key_url, data.get(PLAIN_HTTP_SETTING) is True)
                except ValueError as error:
                    raise ValueError(f"repositories.{name}.key_url: {error}") from None
        return data

    @field_validator("hardware_profile")
    @classmethod
    def _known_profile(cls, value: str) -> str:
        if value not in BOARD_PROFILES:
            raise ValueError(f"unknown hardware profile {value!r}; known: {', '.join(BOARD_PROFILES)}")
        return value

    @field_validator("gpu_model")
    @classmethod
    def _known_model(cls, value: str | None) -> str | None:
        if value is not None and value not in GPU_MODELS:
            raise ValueError(f"unknown GPU model {value!r}; known: {', '.join(GPU_MODELS)}")
        return value

    @field_validator("service_user")
    @classmethod
    def _own_user(cls, value: str) -> str:
        """The engines run as this user and own the model cache: never an account other software relies on."""
        if value in (PEER_USER, NCCL_USER):
            raise ValueError(f"{value!r} is k3ops's own {'peer-copy' if value == PEER_USER else 'MPI'} user, which "
                             "may do only that; run the engines as a user of their own, e.g. 'k3ops'")
        if value in SYSTEM_ACCOUNTS or value.startswith(SYSTEM_ACCOUNT_PREFIXES):
            raise ValueError(f"{value!r} is a system account; run the engines as a user of their own, e.g. 'k3ops'")
        return value

    @field_validator(*FORMS)
    @classmethod
    def _in_form(cls, value: str | None, info) -> str | None:
        pattern, example = FORMS[info.field_name]
        if value is not None and not pattern.fullmatch(value):
            raise ValueError(f"{value!r} is not {example}")
        return value

    @model_validator(mode="after")
    def _consistent_with_profile(self) -> GpuHostSpec:
        profile = BOARD_PROFILES[self.hardware_profile]
        if self.gpu_count != profile.gpu_count:
            raise ValueError(f"gpu_count: {self.gpu_count} disagrees with hardware_profile {profile.name!r}, "
                             f"which has {profile.gpu_count} GPUs")
        if self.gpu_model is not None and self.gpu_model != profile.gpu_model:
            raise ValueError(f"gpu_model: {self.gpu_model!r} disagrees with hardware_profile {profile.name!r} "
                             f"({profile.gpu_model!r})")
        expected_vendor = GPU_MODELS[profile.gpu_model].vendor if profile.gpu_model else None
        if self.gpu_vendor != expected_vendor:
            raise ValueError(f"gpu_vendor: {self.gpu_vendor!r} disagrees with hardware_profile {profile.name!r} "
                             f"(expected {expected_vendor!r})")
        if self.fabric_manager == "on" and self.gpu_vendor != "nvidia":
            raise ValueError(f"fabric_manager: 'on' needs NVIDIA GPUs on NVSwitches; hardware_profile "
                             f"{profile.name!r} has {profile.gpu_model or 'no'} GPUs (use 'auto' or 'off')")
        if self.gpu_vendor == "nvidia":
            self._check_nvidia_driver()
        if self.gpu_vendor == "amd":
            self._check_rocm_release()
        return self

    def _check_nvidia_driver(self) -> None:
        branch = self.driver_branch
        supported = cuda_supported_by(branch)
        if supported is None or _version_tuple(supported) < _version_tuple(self.required_cuda):
            raise ValueError(
                f"nvidia_driver_version: {self.nvidia_driver_version} is branch {branch}, which supports CUDA "
                f"{supported or 'nothing known'}; the engine needs CUDA {self.required_cuda} "
                f"(use branch 580 or newer, e.g. 580.126.09)")
        if self.gpu_architecture == "Blackwell" and self.nvidia_kernel_modules != "open":
            raise ValueError("nvidia_kernel_modules: Blackwell GPUs need the open kernel modules; use 'open'")
        if self.gpudirect_rdma == "dmabuf" and self.nvidia_kernel_modules != "open":
            raise ValueError("gpudirect_rdma: 'dmabuf' needs the open kernel modules (nvidia_kernel_modules 'open'); "
                             "use 'peermem' with the proprietary ones")
        if self.nvlink_domain is not None and not BOARD_PROFILES[self.hardware_profile].nvlink_domain:
            raise ValueError(f"nvlink_domain: hardware_profile {self.hardware_profile!r} has no multi-node NVLink "
                             "(only GB200/GB300 trays do); remove it")

    def _check_rocm_release(self) -> None:
        minimum = ROCM_MINIMUM_BY_ARCHITECTURE.get(self.gpu_architecture)
        if minimum is not None and _version_tuple(self.rocm_release) < _version_tuple(minimum):
            raise ValueError(
                f"rocm_release: {self.rocm_release} does not support the {self.gpu_model} ({self.gpu_architecture}), "
                f"which needs ROCm {minimum} or newer (e.g. {GpuHostSpec.model_fields['rocm_release'].default})")

    @property
    def dcgm_release(self) -> str:
        """The DCGM release of dcgm_version: 1:4.4.1-1 is 4.4.1."""
        return self.dcgm_version.split(":")[-1].split("-")[0]

    @property
    def dcgm_exporter_package_version(self) -> str | None:
        """The DCGM exporter's package version: the data's, or the release paired with DCGM's (None: unknown)."""
        return self.dcgm_exporter_version or DCGM_EXPORTER_PAIRS.get(self.dcgm_release)

    @property
    def driver_branch(self) -> int:
        return int(DRIVER_VERSION.match(self.nvidia_driver_version)["branch"])

    @property
    def gpu_architecture(self) -> str | None:
        """Hopper, Blackwell, CDNA4, ..."""
        return GPU_MODELS[self.gpu_model].architecture if self.gpu_model else None

    @property
    def board(self) -> BoardProfile:
        return BOARD_PROFILES[self.hardware_profile]

    @property
    def nvswitch_expected(self) -> bool:
        return self.board.nvswitch

    def fabric_manager_wanted(self, switches_on_pci: bool) -> bool:
        """Data decides when it says on or off; auto: NVSwitches on PCI (Hopper) or on the board (NVLink 5
        switch trays do not show on PCI)."""
        if self.fabric_manager != "auto":
            return self.fabric_manager == "on"
        return switches_on_pci or self.nvswitch_expected

    def gpudirect_mode(self, rdma_nics: list[str]) -> str:
        """"peermem", "dmabuf" or "off": auto means nvidia-peermem where the host has RDMA NICs."""
        if self.gpudirect_rdma == "auto":
            return "peermem" if rdma_nics else "off"
        return self.gpudirect_rdma

    def repository(self, name: str) -> Repository:
        """A repository with the host's ROCm release filled into its URLs."""
        repository = self.repositories[name]
        return repository.model_copy(update={"url": repository.url.replace("{rocm_release}", self.rocm_release)})


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))
