"""The NVMe model cache: the host's NVMe devices as one XFS volume (RAID0 when there are several),
mounted by UUID and owned by the service user. Existing data is never reformatted."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.operations import files

from ..operations import packages, storage
from ..settings import host_settings
from .users import system_user

VOLUME_LABEL = "k3ops-models"  # XFS labels hold 12 characters; the label is how a rerun knows the volume is ours


@deploy("Model cache volume")
def model_cache() -> None:
    settings = host_settings(host)
    spec, model = settings.gpu, settings.model
    devices = model.nvme_devices
    system_user(spec.service_user, "Service user (runs the engines and the fetcher)")
    if devices:
        packages.installed(name="Install the filesystem and RAID tools",
                           packages=["xfsprogs", "mdadm"] if len(devices) > 1 else ["xfsprogs"])
        if len(devices) > 1:
            storage.raid0(name=f"Assemble or create the RAID0 array of {', '.join(devices)}",
                          array_name=VOLUME_LABEL, devices=devices, wipe=model.model_cache_wipe)
            storage.raid0_recorded(name=f"Assemble /dev/md/{VOLUME_LABEL} at every boot (mdadm.conf, initramfs)",
                                   array_name=VOLUME_LABEL, devices=devices)
            volume, wipe = f"/dev/md/{VOLUME_LABEL}", False
        else:
            volume, wipe = devices[0], devices[0] in model.model_cache_wipe
        storage.xfs_filesystem(name=f"XFS filesystem {VOLUME_LABEL} on {volume}", device=volume, label=VOLUME_LABEL,
                               wipe=wipe)
        storage.mounted(name=f"Mount {volume} at {model.model_cache_path}", device=volume, path=model.model_cache_path)
    files.directory(name=f"Model cache {model.model_cache_path} owned by {spec.service_user}",
                    path=model.model_cache_path, user=spec.service_user, group=spec.service_user, mode="755")
