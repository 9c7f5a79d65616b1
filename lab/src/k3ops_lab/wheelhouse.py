"""Python wheels for lab hosts, served beside the vendor repositories.

Lab hosts have no route to PyPI, so what they pip-install comes from here:
`pip install <pip_options()> huggingface_hub==2.4.0`. The wheels are downloaded
on the controller for the hosts' platform (Debian 12: CPython 3.11, x86_64, glibc 2.36), whatever
Python the controller runs, and published under the vendor repository server's root as `python/`.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

from k3ops.deploys.checkpoint import HUGGINGFACE_HUB

from . import cache, state
from .services import vendor_repo_url

WHEELHOUSE_REQUIREMENTS = (HUGGINGFACE_HUB,)  # what the checkpoint deploy installs on hosts
# Every manylinux tag glibc 2.36 runs, as pip would list them for the host itself (a --platform
# given to pip download is taken literally); pure wheels match any platform.
PLATFORMS = (*(f"manylinux_2_{minor}_x86_64" for minor in range(36, 4, -1)),
             "manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64")
TARGET = ("--python-version", "3.11", "--implementation", "cp", "--abi", "cp311", "--abi", "abi3", "--abi", "none",
          *(option for platform in PLATFORMS for option in ("--platform", platform)))
SERVED_AS = "python"


def url() -> str:
    return f"{vendor_repo_url()}/{SERVED_AS}/"


def pip_options() -> list[str]:
    """What `pip install` on a lab host needs: only the wheelhouse, over plain HTTP (pip asks to trust it)."""
    return ["--no-index", "--find-links", url(),
            "--trusted-host", f"{state.CONTROLLER_ADDRESS}:{state.VENDOR_REPO_PORT}"]


def build(log=print) -> Path:
    """The wheels of the pinned requirements and all their dependencies, downloaded when missing or incomplete."""
    fingerprint = hashlib.sha256(" ".join((*WHEELHOUSE_REQUIREMENTS, *TARGET)).encode()).hexdigest()[:12]
    wheels = state.CACHE_DIR / "wheelhouse" / fingerprint
    return cache.entry(wheels, f"wheelhouse for the hosts ({', '.join(WHEELHOUSE_REQUIREMENTS)})", _pip_download,
                       check, log)


def check(wheels: Path) -> None:
    """Every requirement resolves, with its dependencies, from these wheels alone, as on a lab host."""
    _pip_download(wheels, "--isolated", "--no-index", "--find-links", str(wheels))


def _pip_download(directory: Path, *options: str) -> None:
    """For the hosts' platform; a wheel already in `directory` is kept, not fetched again."""
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", *options,
                    "--only-binary=:all:", *TARGET, "-d", str(directory), *WHEELHOUSE_REQUIREMENTS],
                   check=True, capture_output=True, text=True)


def publish(wheels: Path, repository: Path) -> None:
    """Serve the wheels from the vendor repository server: a link at its root, so neither cache copies."""
    link = repository / SERVED_AS
    if link.is_symlink() and link.readlink() == wheels:
        return
    link.unlink(missing_ok=True)
    link.symlink_to(wheels)
