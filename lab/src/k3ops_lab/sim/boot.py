"""The lab host's boot layer: what firmware, the kernel and udev would do on real hardware.

Run by systemd early at every boot of a lab host (`k3ops-lab-hardware.service`). On a VM host, which has a
kernel, bootloader and udev of its own, it only clears the faults a reboot clears and lays out the
hardware's sysfs (own_kernel). On a container host, which shares the controller's kernel, it
- clears the faults a reboot clears on real hardware (a GPU fallen off the bus is back, NVLink and XGMI
  links retrain, the GPU reset of a boot activates pending row remaps) and writes hardware.json back,
- lays out the sysfs that real `lspci`, `dmidecode` and `mokutil` read (tmpfs mounts made by nspawn),
- "loads" the kernel modules that driver packages staged, so /sys/module/<name>/version changes only
  at a reboot (or a modprobe of a module not loaded), as on a real host, and creates their device nodes;
  with Secure Boot on the kernel refuses them, as it refuses a DKMS build no enrolled key signed,
- stands in for the bootloader: the kernel command line is the one /etc/default/grub asks for
  (read at boot, as update-grub + reboot would give), bind-mounted over /proc/cmdline,
- simulates the kernel tunables deploys set, backed by files over /proc/sys,
- stands in for udev: /dev/disk/by-uuid links for the NVMe devices, and mounting fstab's block
  devices, which systemd skips inside a container.
`udev` mode keeps the by-uuid links fresh while the host runs (`k3ops-lab-udev.service`).
"""

from __future__ import annotations

import json
import os
import stat
import struct
import subprocess
import sys
import time
import uuid
from pathlib import Path

from .host import KERNEL_MODULE_STAGING, SimHost
from .nvidia_devices import activate_pending_remaps
from .sysfs import write_sysfs

# Each module: the GPU vendor it drives, its device nodes (name, major, minor), and the kernel's
# taint letters for its flavour (a proprietary NVIDIA module taints with P).
KERNEL_MODULES = {
    "nvidia": {"vendor": "nvidia", "taint": {"open": "OE", "proprietary": "POE"}},
    "amdgpu": {"vendor": "amd", "taint": {"dkms": "OE"}},
}
# Modules of the driver's DKMS build that no device loads: loaded at boot only when modules-load.d names
# them (systemd-modules-load, which skips a container), or by modprobe; each needs its base module.
ON_DEMAND_MODULES = {"nvidia_peermem": "nvidia", "nvidia_uvm": "nvidia"}
MODULES_LOAD_FILES = ("usr/lib/modules-load.d/*.conf", "etc/modules-load.d/*.conf")
KMOD_MODPROBE = "/usr/sbin/modprobe"
NVIDIA_MAJOR = 195
NVIDIA_CONTROL_MINOR = 255
NVIDIA_UVM_MAJOR = 510
# The IMEX channels' character device, which the NVIDIA driver registers with a dynamic major (the kernel
# hands those out downwards from 511) and for which it makes no node: the administrator makes
# /dev/nvidia-caps-imex-channels/channelN from /proc/devices (NVIDIA's IMEX guide, "IMEX Channels").
NVIDIA_CAPS_IMEX_MAJOR = 509
NVIDIA_CHARACTER_DEVICES = ((NVIDIA_MAJOR, "nvidia"), (NVIDIA_CAPS_IMEX_MAJOR, "nvidia-caps-imex-channels"),
                            (NVIDIA_UVM_MAJOR, "nvidia-uvm"))
KFD_MAJOR = 511
DRI_MAJOR = 226
RENDER_MINOR_BASE = 128
# Drivers in the distribution kernel, bound from the first boot (PCIe ports are bound by the sysfs layer).
INBOX_DRIVERS = {"nics": "mlx5_core", "nvme": "nvme"}
EFI_GLOBAL_VARIABLE = "8be4df61-93ca-11d2-aa0d-00e098032b8c"
EFI_VARIABLE_ATTRIBUTES = 0x6  # boot service and runtime access, as firmware sets SecureBoot
# The kernel's legacy sysfs EFI variable interface (efivars.ko): struct efi_variable, packed, 64-bit.
# efivarfs cannot be mounted without EFI firmware, so libefivar (mokutil) reads this interface instead.
EFI_VARIABLE_LAYOUT = "<1024s16sQ1024sQI"
BLOCK_SOURCES = ("UUID=", "LABEL=", "/dev/")
UDEV_POLL_SECONDS = 0.5
CONTAINER_MARKER = "run/systemd/container"
# What the boot layer lays over a kernel of its own (a container host's nspawn mounts these, and /sys/module).
OWN_KERNEL_SIMULATED_SYSFS = ("sys/bus/pci", "sys/firmware")
# Kernel tunables deploys set, with the kernel's defaults. /proc/sys is read-only in a container and
# belongs to the controller's kernel, so each is a file bind-mounted over its /proc/sys entry.
SIMULATED_SYSCTLS = {"kernel.numa_balancing": "1"}
SYSCTL_BACKING = "run/k3ops-lab/sysctl"
SYSCTL_FILES = ("usr/lib/sysctl.d/*.conf", "etc/sysctl.d/*.conf")
GRUB_DEFAULTS = "etc/default/grub"
SIMULATED_CMDLINE = "run/k3ops-lab/cmdline"
# /proc/devices is the controller kernel's: the lab's, with its drivers' devices, is bind-mounted over it.
SIMULATED_PROC_DEVICES = "run/k3ops-lab/devices"
KERNEL_IMAGE_ARGUMENTS = "BOOT_IMAGE=/boot/vmlinuz-{release} root=/dev/vda1 ro"
# Faults a reboot clears: in each GPU's entry, and under hardware["faults"]. A GPU that fell off the bus
# (Xid 79) is usually back after a reboot (a recurrence is the hardware's); NVLink and XGMI links train
# again at boot. Row remaps, the InfoROM's, and a remap failure stay.
TRANSIENT_GPU_FAULTS = ("fallen_off_bus",)
TRANSIENT_FAULTS = ("nvlink_down_links", "xgmi_down_links")
# Secure Boot: the kernel's module signature check (kernel/module/signing.c, module_sig_check) logs
# "Loading of %s is rejected" with reason "unsigned module" and fails the load with EKEYREJECTED, whose
# strerror kmod's modprobe ("modprobe: ERROR: could not insert '%s': %s") and systemd's module loader
# ("Failed to insert module '%s': %m", src/shared/module-util.c) print: "Key was rejected by service"
# (e.g. tuxedocomputers/tuxedo-keyboard issue 186, google/gasket-driver issue 11, lolo101/px1800kbd issue 10).
KERNEL_UNSIGNED_REJECTED = "Loading of unsigned module is rejected"
KEY_REJECTED = "Key was rejected by service"
# nvidia.ko's init fails without an NVIDIA GPU ("NVRM: No NVIDIA devices probed."): ENODEV.
NO_SUCH_DEVICE = "No such device"
UNKNOWN_SYMBOL = "Unknown symbol in module, or unknown parameter (see dmesg)"


def clear_transient_faults(host: SimHost) -> bool:
    """What a reboot clears on real hardware, written back to hardware.json (atomically) before anything
    reads the hardware for this boot; returns whether anything was cleared."""
    hardware = host.hardware()
    changed = False
    for gpu in hardware.get("gpus", []):
        for fault in TRANSIENT_GPU_FAULTS:
            changed |= gpu.pop(fault, None) is not None
    faults = hardware.setdefault("faults", {})
    for fault in TRANSIENT_FAULTS:
        changed |= faults.pop(fault, None) is not None
    # A boot resets every GPU, which activates a pending row remap as `nvidia-smi -r` does.
    changed |= activate_pending_remaps(hardware)
    if changed:
        host.write_hardware(hardware)
    return changed


def signature_refusal(host: SimHost) -> str | None:
    """Why the kernel refuses a staged module, None when it loads it. The lab's DKMS packages stage
    unsigned builds (vendor_repo.py writes only a version and a flavour) and no MOK is simulated, so with
    Secure Boot on every staged module is an unsigned one the kernel rejects."""
    return KEY_REJECTED if host.hardware().get("secure_boot") else None


def load_gpu_module(host: SimHost, module: str) -> str | None:
    """Load a staged GPU driver module (nvidia, amdgpu) as the kernel would: its version, taint and
    initstate under /sys/module. Returns why the kernel refuses it (an errno's text), None once it is live."""
    refusal = signature_refusal(host)
    if refusal:
        return refusal
    spec = KERNEL_MODULES[module]
    if spec["vendor"] == "nvidia" and (host.hardware().get("gpu_model") or {}).get("vendor") != "nvidia":
        return NO_SUCH_DEVICE
    build = json.loads(host.path(f"{KERNEL_MODULE_STAGING}/{module}").read_text())
    module_dir = host.path(f"sys/module/{module}")
    module_dir.mkdir(parents=True, exist_ok=True)
    (module_dir / "version").write_text(build["version"] + "\n")
    (module_dir / "taint").write_text(spec["taint"].get(build["flavour"], "OE") + "\n")
    (module_dir / "initstate").write_text("live\n")
    return None


def load_kernel_modules(host: SimHost) -> dict[str, str]:
    """Load each staged module whose hardware is present, as udev does when it finds the device;
    returns {module: version}. A refused module is reported as the kernel and udev log it."""
    vendor = (host.hardware().get("gpu_model") or {}).get("vendor")
    loaded = {}
    for module, spec in KERNEL_MODULES.items():
        if spec["vendor"] != vendor or not host.path(f"{KERNEL_MODULE_STAGING}/{module}").exists():
            continue
        refusal = load_gpu_module(host, module)
        if refusal:
            _report_refusal("systemd-udevd", module, refusal)
            continue
        loaded[module] = host.path(f"sys/module/{module}/version").read_text().strip()
    return loaded


def loaded_modules(host: SimHost) -> dict[str, str]:
    """The GPU driver modules live now: {module: version}."""
    return {module: host.path(f"sys/module/{module}/version").read_text().strip() for module in KERNEL_MODULES
            if host.path(f"sys/module/{module}/initstate").exists()}


def _report_refusal(loader: str, module: str, reason: str) -> None:
    """The kernel's and the loader's lines for a refused module, on the boot service's stderr (its journal)."""
    if reason == KEY_REJECTED:
        print(f"k3ops-lab: kernel: {KERNEL_UNSIGNED_REJECTED}", file=sys.stderr)
    print(f"k3ops-lab: {loader}: Failed to insert module '{module}': {reason}", file=sys.stderr)


def insertion_refusal(host: SimHost, module: str) -> str | None:
    """Why the kernel refuses a staged on-demand module: its signature first, then the symbols of its base module."""
    refusal = signature_refusal(host)
    if refusal:
        return refusal
    if not host.path(f"sys/module/{ON_DEMAND_MODULES[module]}/initstate").exists():
        return UNKNOWN_SYMBOL
    return None


def load_on_demand_module(host: SimHost, module: str) -> str | None:
    """Load a staged on-demand module; returns why it cannot be loaded, or None once it is."""
    staged = host.path(f"{KERNEL_MODULE_STAGING}/{module}")
    if not staged.exists():
        return f"Module {module} not found"
    refusal = insertion_refusal(host, module)
    if refusal:
        return f"could not insert '{module}': {refusal}"
    module_dir = host.path(f"sys/module/{module}")
    module_dir.mkdir(parents=True, exist_ok=True)
    (module_dir / "version").write_text(json.loads(staged.read_text())["version"] + "\n")
    (module_dir / "initstate").write_text("live\n")
    return None


def modules_to_load_at_boot(host: SimHost) -> list[str]:
    """The module names modules-load.d lists, dashes as underscores, as the kernel names them."""
    names = []
    for path in sorted(path for pattern in MODULES_LOAD_FILES for path in host.root.glob(pattern)):
        names += [line.split("#")[0].strip().replace("-", "_") for line in path.read_text().splitlines()]
    return [name for name in names if name and not name.startswith(";")]


def kernel_drivers(hardware: dict, loaded: dict[str, str]) -> dict[str, str]:
    """PCI bus id -> the driver bound to it: inbox drivers always, GPU drivers once loaded."""
    drivers = {device["pci_bus_id"]: driver for key, driver in INBOX_DRIVERS.items()
               for device in hardware.get(key, [])}
    gpu_driver = {"nvidia": "nvidia", "amd": "amdgpu"}.get((hardware.get("gpu_model") or {}).get("vendor"))
    if gpu_driver in loaded:
        drivers.update({gpu["pci_bus_id"]: gpu_driver for gpu in hardware["gpus"] if not gpu.get("fallen_off_bus")})
    if "nvidia" in loaded:
        drivers.update({switch["pci_bus_id"]: "nvidia-nvswitch" for switch in hardware.get("nvswitches", [])})
    return drivers


def nvidia_device_nodes(gpus: list[dict]) -> list[tuple[str, int, int]]:
    """(path under /, major, minor) of the nodes the NVIDIA driver's GPUs `gpus` are reached through."""
    return [(f"dev/nvidia{gpu['minor_number']}", NVIDIA_MAJOR, gpu["minor_number"]) for gpu in gpus] + \
        [("dev/nvidiactl", NVIDIA_MAJOR, NVIDIA_CONTROL_MINOR), ("dev/nvidia-uvm", NVIDIA_UVM_MAJOR, 0)]


def proc_devices(kernel_devices: str, registered: list[tuple[int, str]]) -> str:
    """/proc/devices with the character devices `registered` (major, name) added, in the kernel's major order."""
    character, _, block = kernel_devices.partition("\nBlock devices:")
    header, *lines = character.strip("\n").splitlines()
    entries = sorted([(int(line.split()[0]), line.split(None, 1)[1]) for line in lines] + registered)
    return "\n".join([header, *(f"{major:3d} {name}" for major, name in entries)]) + "\n\nBlock devices:" + block


def simulate_proc_devices(host: SimHost, loaded: dict[str, str]) -> None:
    """The kernel's /proc/devices with the character devices the loaded GPU driver registers; refreshed in
    place (the bind mount stays) whenever modules load."""
    path = host.path(SIMULATED_PROC_DEVICES)
    fresh = not path.exists()
    path.parent.mkdir(parents=True, exist_ok=True)
    registered = list(NVIDIA_CHARACTER_DEVICES) if "nvidia" in loaded else []
    with open("/proc/devices") as kernel_devices:
        path.write_text(proc_devices(kernel_devices.read(), registered))
    if fresh:
        subprocess.run(["mount", "--bind", "-o", "ro", str(path), str(host.path("proc/devices"))], check=True)


def create_device_nodes(host: SimHost, loaded: dict[str, str]) -> None:
    gpus = host.visible_gpus()
    nodes: list[tuple[str, int, int]] = []
    if "nvidia" in loaded:
        nodes += nvidia_device_nodes(gpus)
    if "amdgpu" in loaded:
        nodes.append(("dev/kfd", KFD_MAJOR, 0))
        nodes += [(f"dev/dri/renderD{RENDER_MINOR_BASE + i}", DRI_MAJOR, RENDER_MINOR_BASE + i) for i in range(len(gpus))]
    for name, major, minor in nodes:
        path = host.path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists():
            os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
            os.chmod(path, 0o666)  # the driver's DeviceFileMode, whatever the umask


def write_secure_boot_state(host: SimHost, enabled: bool) -> None:
    """The firmware's SecureBoot and SetupMode variables, which `mokutil --sb-state` reads."""
    variables = host.path("sys/firmware/efi/vars")
    variables.mkdir(parents=True, exist_ok=True)
    for control in ("new_var", "del_var"):
        (variables / control).touch()
    for name, value in (("SecureBoot", int(enabled)), ("SetupMode", 0)):
        write_efi_variable(variables, name, bytes([value]))


def write_efi_variable(variables: Path, name: str, value: bytes) -> None:
    """One global EFI variable as the kernel's sysfs interface shows it (raw_var and data)."""
    variable = variables / f"{name}-{EFI_GLOBAL_VARIABLE}"
    variable.mkdir(exist_ok=True)
    (variable / "raw_var").write_bytes(struct.pack(
        EFI_VARIABLE_LAYOUT, name.encode("utf-16-le"), uuid.UUID(EFI_GLOBAL_VARIABLE).bytes_le,
        len(value), value, 0, EFI_VARIABLE_ATTRIBUTES))
    (variable / "data").write_bytes(value)


def kernel_command_line(host: SimHost) -> str:
    """What the bootloader would pass: the image and root, then GRUB_CMDLINE_LINUX and _DEFAULT."""
    words = [KERNEL_IMAGE_ARGUMENTS.format(release=os.uname().release)]
    grub = host.path(GRUB_DEFAULTS)
    if grub.exists():
        sourced = subprocess.run(["sh", "-c", '. "$0"; echo "$GRUB_CMDLINE_LINUX $GRUB_CMDLINE_LINUX_DEFAULT"', str(grub)],
                                 capture_output=True, text=True)
        words.append(sourced.stdout.strip())
    return " ".join(word for word in words if word)


def boot_with_command_line(host: SimHost) -> None:
    path = host.path(SIMULATED_CMDLINE)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(kernel_command_line(host) + "\n")
    subprocess.run(["mount", "--bind", "-o", "ro", str(path), str(host.path("proc/cmdline"))], check=True)


def configured_sysctls(host: SimHost) -> dict[str, str]:
    """The values sysctl.d asks for at boot, in systemd-sysctl's order (later files win)."""
    files = sorted((path for pattern in SYSCTL_FILES for path in host.root.glob(pattern)), key=lambda p: p.name)
    files.append(host.path("etc/sysctl.conf"))
    values = {}
    for path in files:
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            key, separator, value = line.partition("=")
            if separator and not line.lstrip().startswith(("#", ";")):
                values[key.strip()] = value.strip()
    return values


def simulate_sysctls(host: SimHost) -> None:
    """Back each simulated tunable with a file, set as systemd-sysctl would at boot (it skips a container)."""
    configured = configured_sysctls(host)
    for key, default in SIMULATED_SYSCTLS.items():
        target = host.path("proc/sys/" + key.replace(".", "/"))
        if not target.exists():
            continue
        backing = host.path(f"{SYSCTL_BACKING}/{key}")
        backing.parent.mkdir(parents=True, exist_ok=True)
        backing.write_text(configured.get(key, default) + "\n")
        subprocess.run(["mount", "--bind", str(backing), str(target)], check=True)


def refresh_disk_links(host: SimHost) -> None:
    """/dev/disk/by-uuid/<uuid> for every NVMe device that holds a filesystem, as udev makes them."""
    by_uuid = host.path("dev/disk/by-uuid")
    by_uuid.mkdir(parents=True, exist_ok=True)
    wanted = {}
    for disk in host.hardware().get("nvme", []):
        device = host.path(f"dev/{disk['name']}")
        if not device.exists():
            continue
        probe = subprocess.run(["blkid", "-o", "value", "-s", "UUID", str(device)], capture_output=True, text=True)
        if probe.stdout.strip():
            wanted[probe.stdout.strip()] = f"../../{disk['name']}"
    for link in by_uuid.iterdir():
        if link.name not in wanted or os.readlink(link) != wanted[link.name]:
            link.unlink()
    for filesystem_uuid, target in wanted.items():
        if not (by_uuid / filesystem_uuid).is_symlink():
            (by_uuid / filesystem_uuid).symlink_to(target)


def mount_fstab_block_devices(host: SimHost) -> None:
    """Mount fstab's block-device entries now that their links exist; systemd skipped them."""
    fstab = host.path("etc/fstab")
    if not fstab.exists():
        return
    for line in fstab.read_text().splitlines():
        fields = line.split()
        if len(fields) < 4 or line.lstrip().startswith("#") or not fields[0].startswith(BLOCK_SOURCES):
            continue
        source, target, options = fields[0], fields[1], fields[3].split(",")
        if "noauto" in options or fields[2] == "swap" or target == "/":
            continue
        if subprocess.run(["mountpoint", "-q", target]).returncode == 0:
            continue
        Path(target).mkdir(parents=True, exist_ok=True)
        result = subprocess.run(["mount", target], capture_output=True, text=True)
        if result.returncode != 0:
            print(f"k3ops-lab: could not mount {source} on {target}: {result.stderr.strip()}", file=sys.stderr)


def load_on_demand_modules_at_boot(host: SimHost) -> None:
    """systemd-modules-load: the on-demand modules modules-load.d names, with its messages."""
    for module in modules_to_load_at_boot(host):
        if module not in ON_DEMAND_MODULES:
            continue
        if not host.path(f"{KERNEL_MODULE_STAGING}/{module}").exists():
            # src/shared/module-util.c, module_load_and_warn(): a name kmod cannot look up.
            print(f"k3ops-lab: systemd-modules-load: Failed to find module '{module}'", file=sys.stderr)
            continue
        refusal = insertion_refusal(host, module)
        if refusal:
            _report_refusal("systemd-modules-load", module, refusal)
            continue
        load_on_demand_module(host, module)


def bind_gpu_drivers(host: SimHost, hardware: dict, loaded: dict[str, str]) -> None:
    """What the kernel shows once driver modules are live: the PCI functions bound to them, their device nodes."""
    write_sysfs(hardware, host.path("sys"), kernel_drivers(hardware, loaded))
    create_device_nodes(host, loaded)
    if not own_kernel(host):
        simulate_proc_devices(host, loaded)


def own_kernel(host: SimHost) -> bool:
    """Whether the host runs a kernel of its own (a VM host): systemd-nspawn tells its containers
    that they are one in /run/systemd/container."""
    return not host.path(CONTAINER_MARKER).exists()


def mount_simulated_sysfs(host: SimHost) -> None:
    for mount in OWN_KERNEL_SIMULATED_SYSFS:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0755", "k3ops-lab-hardware", str(host.path(mount))],
                       check=True)


def load_gpu_driver(hardware: dict) -> None:
    """What udev does on the GPUs' modalias, which the real kernel never sees (the GPUs are the lab's): ask
    kmod for their driver, the module the driver package's dkms built. Quiet when none is installed yet, as
    udev; a module the kernel refuses is logged as udev logs it."""
    vendor = (hardware.get("gpu_model") or {}).get("vendor")
    for module, spec in KERNEL_MODULES.items():
        if spec["vendor"] == vendor:
            loaded = subprocess.run([KMOD_MODPROBE, "--quiet", module], capture_output=True, text=True)
            if loaded.returncode != 0 and loaded.stderr.strip():  # --quiet: a module not there says nothing
                print(f"k3ops-lab: systemd-udevd: {loaded.stderr.strip()}", file=sys.stderr)


def boot_own_kernel(host: SimHost, hardware: dict) -> None:
    """On a host with its own kernel, the kernel, GRUB, sysctl, modules-load, kmod and udev are real: only the
    hardware is laid out, over the kernel's own /sys/bus/pci and /sys/firmware (this runs after udev's
    coldplug has read them), with the drivers the real kernel has loaded bound to it, and their device nodes
    made as the driver's userspace makes them (nvidia-modprobe, and udev's DRM rules)."""
    load_gpu_driver(hardware)
    mount_simulated_sysfs(host)
    bind_gpu_drivers(host, hardware, loaded_modules(host))
    write_secure_boot_state(host, bool(hardware.get("secure_boot")))


def boot(host: SimHost) -> None:
    clear_transient_faults(host)
    hardware = host.hardware()
    if own_kernel(host):
        boot_own_kernel(host, hardware)
        return
    boot_with_command_line(host)
    simulate_sysctls(host)
    loaded = load_kernel_modules(host)
    bind_gpu_drivers(host, hardware, loaded)
    write_secure_boot_state(host, bool(hardware.get("secure_boot")))
    load_on_demand_modules_at_boot(host)
    refresh_disk_links(host)
    mount_fstab_block_devices(host)


def modprobe_main(argv: list[str], host: SimHost | None = None) -> int:
    """`modprobe NAME` for the staged GPU modules (nvidia, amdgpu and the on-demand ones), as kmod prints
    its errors; kmod's own for options (-r ...) and for every module no driver package staged."""
    host = host or SimHost()
    names = [word for word in argv if not word.startswith("-")]
    module = names[0].replace("-", "_") if names else None
    ours = module in ON_DEMAND_MODULES or (module in KERNEL_MODULES
                                            and host.path(f"{KERNEL_MODULE_STAGING}/{module}").exists())
    if not ours or any(word.startswith("-") for word in argv):
        os.execv(KMOD_MODPROBE, [KMOD_MODPROBE, *argv])
    if host.path(f"sys/module/{module}/initstate").exists():
        return 0  # loaded already: nothing to do, as kmod
    if module in KERNEL_MODULES:
        refusal = load_gpu_module(host, module)
        if refusal:
            print(f"modprobe: ERROR: could not insert '{module}': {refusal}", file=sys.stderr)
            return 1
        bind_gpu_drivers(host, host.hardware(), loaded_modules(host))
        return 0
    problem = load_on_demand_module(host, module)
    if problem:
        print(f"modprobe: ERROR: {problem}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str], host: SimHost | None = None) -> int:
    host = host or SimHost()
    if argv[:1] == ["udev"]:
        while True:
            refresh_disk_links(host)
            time.sleep(UDEV_POLL_SECONDS)
    boot(host)
    return 0
