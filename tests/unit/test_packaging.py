"""An installed k3ops (a wheel in a fresh virtualenv, run outside the checkout) is complete, and carries no lab:
the lab is a distribution of its own (lab/, k3ops-lab), whose install adds `k3ops lab`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest

from ..conftest import REPO_ROOT
from .test_prod_inventory import filled_in

LAB = REPO_ROOT / "lab"
INSTALL_TIMEOUT = 900
# What of the repository each build configuration names (production's package-dir reaches outside src/).
BUILT_FROM = {"k3ops": (REPO_ROOT, ("pyproject.toml", "src", "templates", "runbooks", "tests/hosts")),
              "k3ops_lab": (LAB, ("pyproject.toml", "README.md", "src"))}


@pytest.mark.parametrize("project", [REPO_ROOT, LAB], ids=["k3ops", "k3ops-lab"])
def test_every_package_under_src_is_in_the_wheel(project):
    listed = set(tomllib.loads((project / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    source = project / "src"
    found = {".".join(init.parent.relative_to(source).parts) for init in source.rglob("__init__.py")}
    assert found <= listed, f"packages missing from {project / 'pyproject.toml'}: {sorted(found - listed)}"


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> dict[str, Path]:
    """The k3ops and k3ops-lab wheels, each built from a copy of what its build configuration names, so the
    checkout gets no build/ of its own."""
    work = tmp_path_factory.mktemp("wheels")
    for name, (root, parts) in BUILT_FROM.items():
        for part in parts:
            copy = shutil.copytree if (root / part).is_dir() else shutil.copy
            (work / name / part).parent.mkdir(parents=True, exist_ok=True)
            copy(root / part, work / name / part)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(work / "wheels"),
                    *(str(work / name) for name in BUILT_FROM)], check=True, timeout=INSTALL_TIMEOUT)
    return {name: next((work / "wheels").glob(f"{name}-*.whl")) for name in BUILT_FROM}


@pytest.fixture(scope="module")
def installed(wheels, tmp_path_factory) -> Path:
    """A virtualenv outside the checkout with the k3ops wheel and its declared dependencies only."""
    work = tmp_path_factory.mktemp("installed")
    environment = work / "venv"
    venv.create(environment, with_pip=True)
    subprocess.run([str(environment / "bin" / "pip"), "install", "-q", str(wheels["k3ops"])], check=True,
                   timeout=INSTALL_TIMEOUT)
    filled_in(work)  # the example inventory with its placeholders replaced, its API key under work/home
    return environment


def run_installed(environment: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """A command of the installed package, from a directory that is not the checkout (HOME beside it)."""
    return subprocess.run([str(environment / "bin" / args[0]), *args[1:]], cwd=environment.parent,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "HOME": str(environment.parent / "home"), **(env or {})})


def test_the_wheel_carries_no_lab(wheels):
    """No lab package or module, simulator, stand-in module source or image builder: production ships none."""
    with zipfile.ZipFile(wheels["k3ops"]) as wheel:
        names = wheel.namelist()
    assert "k3ops/cli/validate.py" in names and "k3ops/templates/systemd/k3ops-engine.service.j2" in names
    lab = [name for name in names if name.startswith(("k3ops_lab", "k3ops/lab/")) or name == "k3ops/cli/lab.py"
           or "/sim/" in name or "/kmod/" in name or name.endswith((".c", "image.py"))]
    assert lab == []


def test_the_lab_wheel_carries_all_the_lab(wheels):
    """Its modules, simulators (copied onto every lab host) and stand-in kernel module sources."""
    source = LAB / "src"
    files = {path.relative_to(source).as_posix() for path in source.rglob("*")
             if path.is_file() and "__pycache__" not in path.parts and not path.parent.name.endswith(".egg-info")}
    assert {"k3ops_lab/kmod/nvidia.c", "k3ops_lab/sim/boot.py", "k3ops_lab/cli.py"} <= files
    with zipfile.ZipFile(wheels["k3ops_lab"]) as wheel:
        assert files <= set(wheel.namelist())


def test_the_installed_command_has_no_lab_verb(installed):
    result = run_installed(installed, "k3ops", "lab", "--help")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "{validate,check,nccl,doctor,model,serve,upgrade,monitoring} ..." in result.stderr
    assert "invalid choice: 'lab'" in result.stderr


def test_installing_the_lab_beside_it_adds_k3ops_lab(installed, wheels, tmp_path):
    """The lab's wheel (outside the virtualenv, on PYTHONPATH: the k3ops there stays lab-free for the other
    tests) registers the verb, and imports against the installed k3ops, not the checkout."""
    subprocess.run([str(installed / "bin" / "pip"), "install", "-q", "--no-deps", "--target", str(tmp_path / "lab"),
                    str(wheels["k3ops_lab"])], check=True, timeout=INSTALL_TIMEOUT)
    # Anywhere but the real lab's directories, though nothing here starts a lab.
    env = {"PYTHONPATH": str(tmp_path / "lab"), "K3OPS_LAB_CACHE": str(tmp_path / "cache"),
           "K3OPS_LAB_STATE": str(tmp_path / "state")}
    verbs = run_installed(installed, "k3ops", "lab", "--help", env=env)
    assert verbs.returncode == 0, verbs.stderr
    assert "{up,build,status,ssh,link,boot-delay,fault,down}" in verbs.stdout
    where = run_installed(installed, "python", "-c", "import k3ops, k3ops_lab.lab, k3ops_lab.faults\n"
                                                     "print(k3ops.__file__, k3ops_lab.__file__)", env=env)
    assert where.returncode == 0, where.stderr
    production, lab = map(Path, where.stdout.split())
    assert production.is_relative_to(installed) and lab.is_relative_to(tmp_path / "lab")


def test_validate_runs_from_the_installed_package(installed):
    result = run_installed(installed, "k3ops", "validate", "inventory/prod.py")
    assert result.returncode == 0, result.stderr
    assert "every host's data is valid" in result.stdout


def test_the_doctor_runs_from_the_installed_package(installed):
    """On a host that refuses the connection at once: read, tried, reported unreachable (critical, exit 2)."""
    (installed.parent / "refusing.py").write_text(
        'cpu = [("cpu-01", {"hardware_profile": "cpu", "ssh_hostname": "127.0.0.1", "ssh_port": 1})]\n')
    result = run_installed(installed, "k3ops", "doctor", "refusing.py")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "cpu-01  UNREACHABLE" in result.stdout and "Traceback" not in result.stderr


def test_check_collects_the_host_checks_for_every_host(installed):
    """`k3ops check` without the repository: the host checks ship inside the package (no hosts contacted)."""
    result = run_installed(installed, "k3ops", "check", "inventory/prod.py", "--collect-only", "-q")
    assert result.returncode == 0, result.stdout + result.stderr
    collected = result.stdout
    assert "test_nvidia.py::test_driver_packages_are_held[b300-01]" in collected
    assert "test_rocm.py::test_booted_with_the_kernel_arguments_amd_asks_for[mi355x-01]" in collected
    assert "test_serving.py::test_engine_serves_the_pinned_model[cpu-01]" in collected
    assert "[b300-02]" in collected and str(REPO_ROOT) not in collected


def test_deploys_find_their_templates_in_the_installed_package(installed):
    render = ("from pyinfra.api.util import get_template\n"
              "from k3ops.deploys import TEMPLATES\n"
              "from k3ops.engines.recipes import RECIPES\n"
              "from k3ops.engines.units import unit_variables\n"
              "from k3ops.settings.engine import EngineSpec\n"
              "engine = EngineSpec(recipe='vllm-b300x8', image_digest='sha256:' + 'b' * 64)\n"
              "values = unit_variables(found=RECIPES['vllm-b300x8'], engine=engine, served_name='kimi-k3',\n"
              "                        model_dir='/srv/k3ops/models/kimi-k3', cache_path='/srv/k3ops/models',\n"
              "                        service_user='k3ops', gpu_vendor='nvidia', docker_source='distribution',\n"
              "                        shutdown_seconds=600)\n"
              "print(TEMPLATES)\n"
              "print(get_template(str(TEMPLATES / 'systemd' / 'k3ops-engine.service.j2')).render(values))\n")
    result = run_installed(installed, "python", "-c", render)
    assert result.returncode == 0, result.stderr
    where, unit = result.stdout.split("\n", 1)
    assert Path(where).is_relative_to(installed) and not Path(where).is_relative_to(REPO_ROOT)
    assert "User=k3ops" in unit and "EnvironmentFile=-/etc/k3ops/secrets/engine.env" in unit


def test_the_doctor_finds_its_runbooks_in_the_installed_package(installed):
    listing = ("from k3ops.doctor.runbooks import runbooks\n"
               "print(next(iter(runbooks().values())).path.parent, len(runbooks()))\n")
    result = run_installed(installed, "python", "-c", listing)
    assert result.returncode == 0, result.stderr
    where, count = result.stdout.split()
    assert Path(where).is_relative_to(installed) and int(count) >= 18
