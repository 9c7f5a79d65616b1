"""An installed k3ops (a wheel in a fresh virtualenv, run outside the checkout) is complete."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
import venv
from pathlib import Path

import pytest

from ..conftest import REPO_ROOT
from .test_prod_inventory import filled_in

PYPROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
INSTALL_TIMEOUT = 900


def test_every_package_under_src_is_in_the_wheel():
    listed = set(PYPROJECT["tool"]["setuptools"]["packages"])
    source = REPO_ROOT / "src"
    found = {".".join(init.parent.relative_to(source).parts) for init in source.rglob("__init__.py")}
    assert found <= listed, f"packages missing from pyproject.toml: {sorted(found - listed)}"


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A virtualenv outside the checkout with the k3ops wheel and its declared dependencies only."""
    work = tmp_path_factory.mktemp("installed")
    source, wheels = work / "source", work / "wheels"
    # Built from a copy of what the build configuration names, so the checkout gets no build/ of its own.
    for part in ("pyproject.toml", "src", "templates", "runbooks", "tests/hosts"):
        copy = shutil.copytree if (REPO_ROOT / part).is_dir() else shutil.copy
        (source / part).parent.mkdir(parents=True, exist_ok=True)
        copy(REPO_ROOT / part, source / part)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(source)],
                   check=True, timeout=INSTALL_TIMEOUT)
    environment = work / "venv"
    venv.create(environment, with_pip=True)
    (wheel,) = wheels.glob("k3ops-*.whl")
    subprocess.run([str(environment / "bin" / "pip"), "install", "-q", str(wheel)], check=True,
                   timeout=INSTALL_TIMEOUT)
    filled_in(work)  # the example inventory with its placeholders replaced, its API key under work/home
    return environment


def run_installed(environment: Path, *args: str) -> subprocess.CompletedProcess:
    """A command of the installed package, from a directory that is not the checkout (HOME beside it)."""
    return subprocess.run([str(environment / "bin" / args[0]), *args[1:]], cwd=environment.parent,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "HOME": str(environment.parent / "home")})


def test_validate_runs_from_the_installed_package(installed):
    result = run_installed(installed, "k3ops", "validate", "inventory/prod.py")
    assert result.returncode == 0, result.stderr
    assert "every host's data is valid" in result.stdout


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
              "                        service_user='k3ops', gpu_vendor='nvidia', docker_source='distribution')\n"
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
