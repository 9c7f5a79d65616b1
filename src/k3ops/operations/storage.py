"""Storage operations for the model cache: a RAID0 array, an XFS filesystem and its mount.

None of them destroys data it did not make: an existing array is assembled, an existing k3ops
filesystem is mounted as it is, and a device holding anything else stops the deploy unless the
inventory names it as one that may be wiped.
"""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import OperationError, QuoteString, StringCommand, operation
from pyinfra.operations import files

from k3ops.facts.memo import remembered
from k3ops.facts.storage import MDADM_CONF, BlockDeviceSignature, MdadmConfArrays, MdArrays, MountedFilesystem
from k3ops.owned_files import replace_command

RAID_MEMBER = "linux_raid_member"
# At run time, since the array may have been made a moment ago: its ARRAY line from a member's superblock,
# under our name, in place of any line of that name (mdadm.conf replaced by rename, k3ops.owned_files); then the
# initramfs, which assembles arrays at boot.
RECORD_ARRAY = (
    'line=$(mdadm --examine --brief "$2" | sed "s#^ARRAY [^ ]*#ARRAY $1#") && [ -n "$line" ] && '
    f'{{ grep -v -E "^ARRAY[[:space:]]+$1([[:space:]]|$)" {MDADM_CONF} || true; echo "$line"; }} | '
    f'{replace_command(MDADM_CONF, "644")} && update-initramfs -u')


def _foreign(device: str, signature: dict) -> str:
    what = signature.get("type", "unknown data")
    label = f" labelled {signature['label']!r}" if signature.get("label") else ""
    return f"{device} holds {what}{label}"


def _signatures(devices: list[str]) -> dict[str, dict]:
    signatures = {device: remembered(BlockDeviceSignature, device=device) for device in devices}
    missing = [device for device, signature in signatures.items() if signature is None]
    if missing:
        raise OperationError(f"no such block device: {', '.join(missing)} (check nvme_devices)")
    return signatures


@operation()
def raid0(array_name: str, devices: list[str], wipe: list[str] | None = None):
    """
    Make one RAID0 array of the devices, or assemble it if they already form it; never recreate it.

    + array_name: the array's name (``/dev/md/<name>``, also recorded in its superblocks)
    + devices: the member devices
    + wipe: devices whose current contents may be destroyed

    **Example:**

    .. code:: python

        storage.raid0(array_name="k3ops-models", devices=["/dev/nvme0n1", "/dev/nvme1n1"])
    """

    md = host.get_fact(MdArrays)
    if not md["md_driver"]:
        raise OperationError(
            f"this kernel has no md (software RAID) driver (no /proc/mdstat), so {len(devices)} devices cannot form "
            "a RAID0 array: load md_mod and raid0, or list a single device in nvme_devices")
    members = sorted(device.removeprefix("/dev/") for device in devices)
    for array, details in md["arrays"].items():
        if details["devices"] == members and details["state"] == "active":
            host.noop(f"/dev/md/{array_name} ({array}) is active with {', '.join(devices)}")
            return
    signatures = _signatures(devices)
    ours = [device for device, signature in signatures.items()
            if signature.get("type") == RAID_MEMBER and signature.get("label", "").split(":")[-1] == array_name]
    if len(ours) == len(devices):
        yield StringCommand("mdadm", "--assemble", f"/dev/md/{array_name}", *(QuoteString(device) for device in devices))
        return
    if ours:
        raise OperationError(f"only {', '.join(ours)} of {', '.join(devices)} belong to array {array_name}: assembling it "
                             "partly would fail and creating it anew would destroy it; check the device list")
    foreign = [device for device, signature in signatures.items() if signature and device not in (wipe or [])]
    if foreign:
        raise OperationError("refusing to destroy data: " + "; ".join(_foreign(d, signatures[d]) for d in foreign)
                             + ". List the devices in model_cache_wipe to allow it")
    for device, signature in signatures.items():
        if signature:
            yield StringCommand("wipefs", "--all", QuoteString(device))
    yield StringCommand("mdadm", "--create", f"/dev/md/{array_name}", "--run", "--level=0", f"--name={array_name}",
                        f"--raid-devices={len(devices)}", *(QuoteString(device) for device in devices))


@operation()
def raid0_recorded(array_name: str, devices: list[str]):
    """
    Record the array in mdadm.conf and the initramfs, so that every boot assembles it as ``/dev/md/<name>``.
    Without it the initramfs, where the host has no name yet, takes the array for another host's and
    assembles it as ``/dev/md127``: the deploy's ``/dev/md/<name>`` is gone after the first reboot (seen on
    the lab's VM hosts); fstab still mounts it by UUID, but the deploy can no longer find its volume.

    + array_name: the array's name (``/dev/md/<name>``)
    + devices: its member devices (the first one's superblock says which array it is)

    **Example:**

    .. code:: python

        storage.raid0_recorded(array_name="k3ops-models", devices=["/dev/nvme0n1", "/dev/nvme1n1"])
    """

    device = f"/dev/md/{array_name}"
    member = remembered(BlockDeviceSignature, device=devices[0]) or {}
    recorded = host.get_fact(MdadmConfArrays).get(device, {})
    if member.get("type") == RAID_MEMBER and _hex(recorded.get("uuid", "")) == _hex(member.get("uuid", "")):
        host.noop(f"{device} is in {MDADM_CONF} (UUID {recorded['uuid']})")
        return
    yield StringCommand("sh", "-c", QuoteString(RECORD_ARRAY), "record-array", QuoteString(device),
                        QuoteString(devices[0]))


def _hex(array_uuid: str) -> str:
    """An array UUID as mdadm (a:b:c:d) and blkid (8-4-4-4-12) write it, as one form."""
    return array_uuid.replace(":", "").replace("-", "").lower()


@operation()
def xfs_filesystem(device: str, label: str, wipe: bool = False):
    """
    Make an XFS filesystem on a device that holds nothing; keep one that carries our label.

    + device: the block device (or md array)
    + label: the filesystem label that marks it as ours (XFS allows 12 characters)
    + wipe: the device's current contents may be destroyed

    **Example:**

    .. code:: python

        storage.xfs_filesystem(device="/dev/nvme0n1", label="k3ops-models")
    """

    signature = _signatures([device])[device]
    if signature.get("type") == "xfs" and signature.get("label") == label:
        host.noop(f"{device} has the XFS filesystem {label} (UUID {signature.get('uuid')})")
        return
    if signature and not wipe:
        raise OperationError(f"refusing to destroy data: {_foreign(device, signature)}. "
                             "List the device in model_cache_wipe to allow it")
    if signature:
        yield StringCommand("wipefs", "--all", QuoteString(device))
    yield StringCommand("mkfs.xfs", "-f" if signature else "-q", "-L", QuoteString(label), QuoteString(device))


@operation()
def mounted(device: str, path: str, options: str = "defaults,noatime,nofail"):
    """
    Mount a device's filesystem at a path now and at every boot (fstab, by UUID).

    + device: the block device holding the filesystem
    + path: the mount point
    + options: fstab mount options (``nofail``: a dead disk must not stop the host from booting)

    **Example:**

    .. code:: python

        storage.mounted(device="/dev/nvme0n1", path="/srv/k3ops/models")
    """

    signature = _signatures([device])[device]
    if not signature.get("uuid"):
        raise OperationError(f"{device} has no filesystem to mount")
    uuid, fstype = signature["uuid"], signature["type"]
    yield from files.line._inner(
        path="/etc/fstab", line=rf"^\S+\s+{path}\s", replace=f"UUID={uuid} {path} {fstype} {options} 0 2",
    )
    mount = host.get_fact(MountedFilesystem, path=path)
    if mount is None:
        # The device itself, not fstab's UUID=: udev may not have made the by-uuid link of a filesystem
        # made a moment ago, and with nofail `mount PATH` then exits 0 having mounted nothing (seen).
        now = ",".join(option for option in options.split(",") if option != "nofail" and not option.startswith("x-"))
        yield StringCommand("mkdir", "-p", QuoteString(path))
        yield StringCommand("mount", "-t", fstype, "-o", now, QuoteString(device), QuoteString(path))
    elif mount["uuid"] != uuid and mount["source"] != device:
        raise OperationError(f"{path} already has {mount['source']} ({mount['fstype']}) mounted, not {device}")
    else:
        host.noop(f"{device} is mounted at {path} (UUID {uuid})")
