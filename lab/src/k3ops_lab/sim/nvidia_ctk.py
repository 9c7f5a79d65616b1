"""nvidia-ctk of the lab's NVIDIA Container Toolkit (1.17.8 and 1.18.0, as the lab repository ships).

`runtime configure` really edits the container engine's config, the way the release installed on the
host does (pkg/config/engine at those tags): docker's daemon.json is rewritten by encoding/json;
containerd's config.toml is rewritten in place by 1.17, while 1.18 writes the NVIDIA runtime into the
drop-in /etc/containerd/config.d/99-nvidia.toml and points the top-level config's `imports` at it.
`cdi generate` writes a CDI spec for the driver's GPUs and `cdi list` reads the specs back.
"""

from __future__ import annotations

import copy
import json
import re
import sys
import tomllib

from . import nvidia_devices as devices
from .go_formats import go_json, go_toml, k8s_yaml, logrus
from .host import SimHost
from .nvidia_devices import DriverState

PACKAGE = "nvidia-container-toolkit"
CLI_NAME = "NVIDIA Container Toolkit CLI"
# The commits the releases were built from (git rev-parse v1.17.8 / v1.18.0 of the toolkit repository).
RELEASE_COMMITS = {
    "1.17.8": "f202b80a9b9d0db00d9b1d73c0128c8962c55f4d",
    "1.18.0": "f8daa5e26de9fd7eb79259040b6dd5a52060048c",
}
DROP_IN_SINCE = (1, 18)
EXIT_FAILURE = 1

RUNTIME_NAME = "nvidia"
DOCKER_RUNTIME_PATH = "nvidia-container-runtime"
CONTAINERD_RUNTIME_PATH = "/usr/bin/nvidia-container-runtime"
DEFAULT_CONFIGS = {"docker": "/etc/docker/daemon.json", "containerd": "/etc/containerd/config.toml"}
CONTAINERD_DROP_IN = "/etc/containerd/config.d/99-nvidia.toml"
CONTAINERD_DEFAULT_CONFIG_VERSION = 2
CRI_PLUGIN_BY_CONFIG_VERSION = {2: "io.containerd.grpc.v1.cri", 3: "io.containerd.cri.v1.runtime"}
LOW_LEVEL_RUNTIMES = ("runc", "crun")
DEFAULT_RUNTIME_OPTIONS = {
    "runtime_type": "io.containerd.runc.v2",
    "runtime_root": "",
    "runtime_engine": "",
    "privileged_without_host_devices": False,
}

CDI_VERSION = "0.5.0"
CDI_KIND = "nvidia.com/gpu"
CDI_SPEC_DIRS = ("etc/cdi", "var/run/cdi")
CDI_HOOK = "/usr/bin/nvidia-cdi-hook"
CDI_CONTROL_NODES = ("/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidiactl")
CDI_MOUNT_OPTIONS = ["ro", "nosuid", "nodev", "rbind", "rprivate"]
CDI_DRIVER_FILES = ("/usr/bin/nvidia-smi", "/usr/bin/nvidia-persistenced",
                    "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.{version}")
# NVML's errors as nvmlErrorString() spells them.
NVML_ERRORS = {
    DriverState.NO_KERNEL_MODULE: "Driver Not Loaded",
    DriverState.VERSION_MISMATCH: "RM has detected an NVML/RM version mismatch.",
}
CDI_YAML_KIND = re.compile(r"^kind: (\S+)$", re.MULTILINE)
CDI_YAML_DEVICE_NAME = re.compile(r'^  name: "?([^"\n]+)"?$', re.MULTILINE)


class CtkError(Exception):
    """An error nvidia-ctk reports through logrus before exiting 1."""


def main(argv: list[str], host: SimHost | None = None) -> int:
    host = host or SimHost()
    version = host.package_version(PACKAGE)
    if argv in (["--version"], ["-v"]):
        print(f"{CLI_NAME} version {version}")
        if version in RELEASE_COMMITS:
            print(f"commit: {RELEASE_COMMITS[version]}")
        return 0
    options, positional = _parse(argv)
    command = tuple(positional)
    try:
        if command == ("runtime", "configure"):
            _configure_runtime(host, version, options)
        elif command == ("cdi", "generate"):
            _generate_cdi_spec(host, options)
        elif command == ("cdi", "list"):
            _list_cdi_devices(host)
        else:
            raise CtkError(f"command {' '.join(positional)!r} is not simulated by the k3ops lab")
    except CtkError as error:
        log("error", str(error))
        return EXIT_FAILURE
    return 0


def log(level: str, message: str) -> None:
    print(logrus(level, message, sys.stderr.isatty(), devices.now()), file=sys.stderr)


def _parse(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    """urfave/cli flags: `--name=value`, `--name value`, and boolean switches."""
    switches = {"set-as-default", "nvidia-set-as-default", "dry-run"}
    options: dict[str, str] = {}
    positional = []
    arguments = list(argv)
    while arguments:
        argument = arguments.pop(0)
        if not argument.startswith("-"):
            positional.append(argument)
            continue
        name, has_value, value = argument.lstrip("-").partition("=")
        if name not in switches and not has_value and arguments:
            value = arguments.pop(0)
        options[name] = value
    return options, positional


def _configure_runtime(host: SimHost, version: str, options: dict[str, str]) -> None:
    runtime = options.get("runtime", "docker")
    if runtime not in DEFAULT_CONFIGS:
        raise CtkError(f"unrecognized runtime '{runtime}'")
    config = options.get("config") or DEFAULT_CONFIGS[runtime]
    set_as_default = "set-as-default" in options or "nvidia-set-as-default" in options
    if runtime == "docker":
        written = _configure_docker(host, config, set_as_default)
    else:
        written = _configure_containerd(host, version, config, set_as_default)
    log("info", f"Wrote updated config to {written}")
    log("info", f"It is recommended that {runtime} daemon be restarted.")


def _configure_docker(host: SimHost, config: str, set_as_default: bool) -> str:
    path = host.path(config.lstrip("/"))
    if path.exists():
        log("info", f"Loading config from {config}")
        text = path.read_text()
        if not text:
            raise CtkError("unable to load config for runtime docker: EOF")
        daemon = json.loads(text)
    else:
        log("info", "Config file does not exist; using empty config")
        daemon = {}
    daemon.setdefault("runtimes", {})[RUNTIME_NAME] = {"args": [], "path": DOCKER_RUNTIME_PATH}
    if set_as_default:
        daemon["default-runtime"] = RUNTIME_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(go_json(daemon))
    return config


def _configure_containerd(host: SimHost, version: str, config: str, set_as_default: bool) -> str:
    path = host.path(config.lstrip("/"))
    source = tomllib.loads(path.read_text()) if path.exists() else {}
    config_version = _containerd_config_version(source)
    log("info", f"Using config version {config_version}")
    plugin = CRI_PLUGIN_BY_CONFIG_VERSION[config_version]
    log("info", f'Using CRI runtime plugin name "{plugin}"')
    if _release(version) < DROP_IN_SINCE:
        _add_containerd_runtime_in_place(source, config_version, plugin, set_as_default)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(go_toml(source))
        return config
    drop_in = {"plugins": {plugin: copy.deepcopy(source["plugins"][plugin])}} if _has(source, plugin) else {}
    _add_containerd_runtime_to_drop_in(source, drop_in, config_version, plugin, set_as_default)
    drop_in_path = host.path(CONTAINERD_DROP_IN.lstrip("/"))
    drop_in_path.parent.mkdir(parents=True, exist_ok=True)
    drop_in_path.write_text(go_toml(drop_in))
    # The real ensureImports reads `imports` as []string, which go-toml never returns: it always
    # replaces the list with the one pattern.
    if not source:
        source["version"] = config_version
    source["imports"] = [CONTAINERD_DROP_IN.rsplit("/", 1)[0] + "/*.toml"]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(go_toml(source))
    return CONTAINERD_DROP_IN


def _release(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def _containerd_config_version(config: dict) -> int:
    """An empty config gets version 2; a config without `version` is containerd's version 1."""
    if not config:
        return CONTAINERD_DEFAULT_CONFIG_VERSION
    version = config.get("version", 1)
    if version not in CRI_PLUGIN_BY_CONFIG_VERSION:
        raise CtkError(f"containerd config version {version} is not simulated by the k3ops lab")
    return version


def _has(config: dict, plugin: str, *keys: str) -> bool:
    node = config.get("plugins", {}).get(plugin)
    for key in keys:
        if not isinstance(node, dict):
            return False
        node = node.get(key)
    return isinstance(node, dict)


def _runtimes(config: dict, plugin: str) -> dict:
    containerd = config.setdefault("plugins", {}).setdefault(plugin, {}).setdefault("containerd", {})
    return containerd.setdefault("runtimes", {})


def _low_level_runtimes(config: dict, plugin: str) -> list[str]:
    default = config.get("plugins", {}).get(plugin, {}).get("containerd", {}).get("default_runtime_name", "")
    preferred = [default] if default and not default.startswith(RUNTIME_NAME) else []
    return preferred + list(LOW_LEVEL_RUNTIMES)


def _add_containerd_runtime_in_place(config: dict, config_version: int, plugin: str, set_as_default: bool) -> None:
    """1.17's Config.AddRuntime: copy the low-level runtime's table, or default fields one by one."""
    config["version"] = config_version
    candidates = _low_level_runtimes(config, plugin)
    found = next((name for name in candidates if _has(config, plugin, "containerd", "runtimes", name)), None)
    runtimes = _runtimes(config, plugin)
    if found is not None:
        runtimes[RUNTIME_NAME] = copy.deepcopy(runtimes[found])
    elif RUNTIME_NAME not in runtimes:
        log("warning", f"could not infer options from runtimes [{' '.join(candidates)}]; using defaults")
        runtimes[RUNTIME_NAME] = dict(DEFAULT_RUNTIME_OPTIONS)
    runtimes[RUNTIME_NAME].setdefault("options", {})["BinaryName"] = CONTAINERD_RUNTIME_PATH
    if set_as_default:
        config["plugins"][plugin]["containerd"]["default_runtime_name"] = RUNTIME_NAME


def _add_containerd_runtime_to_drop_in(source: dict, drop_in: dict, config_version: int, plugin: str,
                                       set_as_default: bool) -> None:
    """1.18's engine.Config.AddRuntime: options read from the source config, written to the drop-in."""
    candidates = _low_level_runtimes(source, plugin)
    found = next((name for name in candidates if _has(source, plugin, "containerd", "runtimes", name)), None)
    if found is None:
        log("warning", f"Could not infer options from runtimes [{' '.join(candidates)}]")
        options = dict(DEFAULT_RUNTIME_OPTIONS)
    else:
        options = copy.deepcopy(source["plugins"][plugin]["containerd"]["runtimes"][found])
    drop_in["version"] = config_version
    runtimes = _runtimes(drop_in, plugin)
    runtimes[RUNTIME_NAME] = options
    options.setdefault("options", {})["BinaryName"] = CONTAINERD_RUNTIME_PATH
    containerd = drop_in["plugins"][plugin]["containerd"]
    if set_as_default:
        containerd["default_runtime_name"] = RUNTIME_NAME
    elif containerd.get("default_runtime_name") == RUNTIME_NAME:
        del containerd["default_runtime_name"]


def _generate_cdi_spec(host: SimHost, options: dict[str, str]) -> None:
    state = devices.driver_state(host)
    if state is not DriverState.READY:
        raise CtkError("failed to generate CDI spec: failed to create device CDI specs: "
                       f"failed to initialize NVML: {NVML_ERRORS[state]}")
    log("info", "Auto-detected mode as 'nvml'")
    gpus = devices.nvidia_gpus(host)
    driver = host.nvidia_module_version()
    device_nodes = [f"/dev/nvidia{gpu.minor_number}" for gpu in gpus]
    for node in [*device_nodes, *CDI_CONTROL_NODES]:
        log("info", f"Selecting {node} as {node}")
    library_dir = "/usr/lib/x86_64-linux-gnu"
    spec = {
        "cdiVersion": CDI_VERSION,
        "kind": CDI_KIND,
        "devices": [
            *({"name": name, "containerEdits": {"deviceNodes": [{"path": node}]}}
              for gpu, node in zip(gpus, device_nodes) for name in (str(gpu.index), gpu.uuid)),
            {"name": "all", "containerEdits": {"deviceNodes": [{"path": node} for node in device_nodes]}},
        ],
        "containerEdits": {
            "env": ["NVIDIA_VISIBLE_DEVICES=void"],
            "deviceNodes": [{"path": node} for node in CDI_CONTROL_NODES],
            "hooks": [
                {"hookName": "createContainer", "path": CDI_HOOK,
                 "args": ["nvidia-cdi-hook", "enable-cuda-compat", f"--host-driver-version={driver}"]},
                {"hookName": "createContainer", "path": CDI_HOOK,
                 "args": ["nvidia-cdi-hook", "update-ldcache", "--folder", library_dir]},
            ],
            "mounts": [{"hostPath": file, "containerPath": file, "options": CDI_MOUNT_OPTIONS}
                       for file in (template.format(version=driver) for template in CDI_DRIVER_FILES)],
        },
    }
    output = options.get("output")
    # The spec's keys are in the order of the CDI Go structs, which is json.Marshal's order.
    text = json.dumps(spec, separators=(",", ":")) if (output or "").endswith(".json") else "---\n" + k8s_yaml(spec)
    if output:
        path = host.path(output.lstrip("/"))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    else:
        sys.stdout.write(text)
    log("info", f"Generated CDI spec with version {CDI_VERSION}")


def _list_cdi_devices(host: SimHost) -> None:
    """Every device of every spec in the CDI spec directories, as "vendor/class=name", sorted."""
    names = []
    for directory in CDI_SPEC_DIRS:
        folder = host.path(directory)
        for spec_file in sorted(folder.glob("*.json")) + sorted(folder.glob("*.yaml")):
            text = spec_file.read_text()
            if spec_file.suffix == ".json":
                spec = json.loads(text)
                kind, devices_in_spec = spec["kind"], [device["name"] for device in spec["devices"]]
            else:
                kind = CDI_YAML_KIND.search(text).group(1)
                devices_in_spec = CDI_YAML_DEVICE_NAME.findall(text)
            names += [f"{kind}={name}" for name in devices_in_spec]
    log("info", f"Found {len(names)} CDI devices")
    for name in sorted(names):
        print(name)
