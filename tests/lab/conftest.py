"""A lab per test module (its LAB_PROFILES, hosts gpu-01, gpu-02, ...; LAB_BACKENDS and LAB_NVME_DEVICES when
not the default), torn down when the module ends."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from k3ops_lab import lab as lab_module
from k3ops_lab import state

from ..conftest import REPO_ROOT, cli

COMMAND_TIMEOUT = 900  # a hung host fails the test instead of hanging CI
# A cold `lab up` builds the lab's caches first (beside `k3ops lab build` in scripts/test): on a busy 2-core
# machine the llama-server build alone took 13 minutes, and the VM lab's `lab up` ran past COMMAND_TIMEOUT.
# Each boot still has its own limit (the backends' BOOT_TIMEOUT_SECONDS).
LAB_UP_TIMEOUT = 2700
# A VM host's first deploy under TCG: deploys/k3.py on a b300x8 took 633 s on one 2-core machine of this kind and
# 1946 s on a slower one (the driver's DKMS build, two initramfs rebuilds, a reboot, pip: CPU-bound, emulated).
VM_DEPLOY_TIMEOUT = 3000
# The host checks of deploys/gpu_host.py: all but the model's and the engine's.
GPU_HOST_CHECKS = ("--ignore", "tests/hosts/test_model.py", "--ignore", "tests/hosts/test_serving.py")


# The verbs the tests ask dozens of times per module (the drills' doctor and faults, a rollout's state polled while
# a controller runs, the engines' answers awaited), run by the CLI's own entry point in this process: a new Python
# for each cost about a second of this 2-core machine, which the lab's hosts and VMs share. The rest (and every verb
# in tests/unit/test_cli.py) run as the real command line.
IN_PROCESS = (("doctor",), ("lab", "fault"), ("upgrade", "status"), ("serve", "chat"))


def k3ops(*args: str, check: bool = True, timeout: float = COMMAND_TIMEOUT,
          env: dict | None = None) -> subprocess.CompletedProcess:
    """Run the real `k3ops` command line (`env`: added to this process's environment, in a process of its own)."""
    if (args[:1] in IN_PROCESS or args[:2] in IN_PROCESS) and env is None:
        result = cli(*args)
    else:
        result = subprocess.run([sys.executable, "-m", "k3ops.cli", *args], capture_output=True, text=True,
                                cwd=REPO_ROOT, timeout=timeout, env={**os.environ, **(env or {})})
    if check and result.returncode != 0:
        raise AssertionError(f"k3ops {' '.join(args)} exited {result.returncode}:\n{result.stdout}{result.stderr}")
    return result


def pyinfra_command(*args: str, inventory: str = "inventory/lab/hosts.py") -> list[str]:
    """The real pyinfra command line on a lab inventory, run from the repository's root."""
    return [str(Path(sys.executable).parent / "pyinfra"), "-y", inventory, *args]


def pyinfra(*args: str, inventory: str = "inventory/lab/hosts.py", env: dict | None = None,
            timeout: float = COMMAND_TIMEOUT) -> subprocess.CompletedProcess:
    """Run `pyinfra_command` to its end (`env`: added to this process's environment)."""
    return subprocess.run(pyinfra_command(*args, inventory=inventory), cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def deploy_report(deploy: str, *args: str, inventory: str = "inventory/lab/hosts.py", env: dict | None = None,
                  timeout: float = COMMAND_TIMEOUT) -> dict:
    """Run a deploy file with pyinfra, which must succeed; returns its JSON report."""
    result = pyinfra("--json", *args, deploy, inventory=inventory, env=env, timeout=timeout)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads(result.stdout)


def changed_operations(report: dict) -> list[str]:
    """The operations a deploy's report says changed something on some host."""
    return [op["name"] for op in report["results"]["operations"] if op["success"]]


def lab_inventory(path: Path, per_host: dict[str, dict] | None = None, **changes) -> str:
    """An inventory file: the lab's, with `changes` to every host's data (dict values are merged into the lab's)
    and `per_host` values replacing some hosts' (None removes a key)."""
    path.write_text(
        "from k3ops_lab.inventory import groups\n"
        "from k3ops.inventory import validate_inventory\n\n"
        f"CHANGES = {changes!r}\n"
        f"PER_HOST = {per_host or {}!r}\n\n"
        "def changed(data, name):\n"
        "    merged = {**data, **{key: {**data[key], **value} if isinstance(value, dict) else value\n"
        "                         for key, value in CHANGES.items()}, **PER_HOST.get(name, {})}\n"
        "    return {key: value for key, value in merged.items() if value is not None}\n\n"
        "globals().update({profile: [(name, changed(data, name)) for name, data in hosts]\n"
        "                  for profile, hosts in groups().items()})\n"
        "validate_inventory(__file__)\n")
    return str(path)


def host_checks(inventory: str = "inventory/lab/hosts.py", *pytest_args: str, checks: str = "tests/hosts",
                env: dict | None = None) -> subprocess.CompletedProcess:
    """The host checks (`checks`: tests/hosts or one of its files) against a lab inventory, as `k3ops check` runs
    them (`env`: added to this process's environment, as the deploy's HF_TOKEN)."""
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", checks,
                           "--inventory", inventory, *pytest_args], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=COMMAND_TIMEOUT, env={**os.environ, **(env or {})})


def passed_checks(output: str) -> set[str]:
    """The host checks a pytest run passed, by test name, from its `-v` lines or its `-rA` summary."""
    lines = [line for line in output.splitlines() if "PASSED" in line.split() and "::" in line]
    return {line.split("::")[1].split("[")[0] for line in lines}


# on_host's SSH connections, one per host kept open between commands (OpenSSH's ControlMaster): a new connection
# costs a key exchange, about 2.5 s on a VM host under TCG. A master whose host goes away (a reboot) ends with its
# connection, or within 15 s of silence; the lab fixture ends the others before `lab down`.
SHARED_SSH = ("-o", "ControlMaster=auto", "-o", f"ControlPath={state.STATE_DIR}/ssh-%C", "-o", "ControlPersist=300",
              "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3")


def shared_ssh(host: str, *arguments: str) -> list[str]:
    """The command line of `k3ops lab ssh HOST ...` (tests/lab/test_lab.py runs that verb itself), over the host's
    shared connection."""
    command = state.ssh_command(state.load().host(host), list(arguments))
    return [command[0], *SHARED_SSH, *command[1:]]


def on_host(host: str, command: str, check: bool = True) -> subprocess.CompletedProcess:
    """`command` on a lab host as root."""
    result = subprocess.run(shared_ssh(host, command), capture_output=True, text=True, stdin=subprocess.DEVNULL,
                            timeout=COMMAND_TIMEOUT)
    if check and result.returncode != 0:
        raise AssertionError(f"on {host}: `{command}` exited {result.returncode}:\n{result.stdout}{result.stderr}")
    return result


def reboot(host: str) -> None:
    """Reboot a host from inside and wait for the new boot (its /run starts empty)."""
    lab_module.reboot(state.load().host(host))


def grub_boots(host: str) -> int:
    """How many times GRUB has booted a VM host's kernel, from its serial console."""
    console = lab_module.console_log(state.load().host(host)).read_text(errors="replace")
    return console.count("Booting `Debian GNU/Linux'")


@pytest.fixture(scope="module")
def lab(request):
    profiles = request.module.LAB_PROFILES
    if os.geteuid() != 0:
        pytest.fail("the lab tests need root (network namespaces, loop devices, systemd-nspawn)")
    if state.load() is not None:
        pytest.fail("a lab is already up; run `k3ops lab down` before the lab tests")
    arguments = ["lab", "up", "--hosts", str(len(profiles))]
    for profile in profiles:
        arguments += ["--profile", profile]
    for backend in getattr(request.module, "LAB_BACKENDS", ()):
        arguments += ["--backend", backend]
    if hasattr(request.module, "LAB_NVME_DEVICES"):
        arguments += ["--nvme-devices", str(request.module.LAB_NVME_DEVICES)]
    try:
        k3ops(*arguments, timeout=LAB_UP_TIMEOUT)
        yield {state.host_name(index): profile for index, profile in enumerate(profiles)}
    finally:
        current = state.load()
        for host in (current.hosts if current else []):
            ssh, *options = shared_ssh(host.name)
            subprocess.run([ssh, "-O", "exit", *options], capture_output=True, timeout=30)
        k3ops("lab", "down")
