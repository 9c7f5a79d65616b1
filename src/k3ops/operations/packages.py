"""Package operations pyinfra's apt lacks: holds, exact versions held, a refresh that cannot hang a deploy, and
staging."""

from __future__ import annotations

import shlex
from fnmatch import fnmatchcase

from pyinfra import host
from pyinfra.api import QuoteString, StringCommand, operation
from pyinfra.api.operation import OperationMeta
from pyinfra.facts.apt import noninteractive_apt
from pyinfra.facts.deb import DebPackages
from pyinfra.operations import apt
from pyinfra.operations.util.packaging import ensure_packages

from k3ops.facts.apt import AptArchives, AptHeldPackages
from k3ops.facts.memo import remembered

UPDATE_ATTEMPTS = 3
UPDATE_ATTEMPT_SECONDS = 300


def bounded_update(*options: str) -> str:
    """`apt-get update`, each attempt bounded in time and retried: a mirror or proxy that stops answering (seen in
    the lab: apt-get update waiting for good) fails the attempt, not every later operation on the host."""
    attempt = shlex.join(["timeout", "--kill-after=10", str(UPDATE_ATTEMPT_SECONDS), "apt-get", *options, "update"])
    return " || ".join([attempt] * UPDATE_ATTEMPTS)


@operation()
def held(packages: list[str], present: bool = True):
    """
    Hold packages so that upgrades leave them alone (``apt-mark hold``), or release them.

    + packages: names of the packages
    + present: whether the packages should be held

    **Example:**

    .. code:: python

        packages.held(
            name="Keep the NVIDIA driver at the pinned release",
            packages=["nvidia-driver", "nvidia-kernel-open-dkms"],
        )
    """

    currently_held = set(remembered(AptHeldPackages))
    to_change = [package for package in packages if (package in currently_held) != present]
    if not to_change:
        host.noop(f"{', '.join(packages)} already {'held' if present else 'not held'}")
        return

    yield StringCommand("apt-mark", "hold" if present else "unhold", *(QuoteString(package) for package in to_change))


@operation()
def installed(packages: list[str], no_recommends: bool = True, allow_downgrades: bool = False,
              extra_install_args: str | None = None):
    """
    Install packages (``name`` or ``name=version``) that are missing or at another version, as ``apt.packages``
    does, reading what is installed through `remembered`: one listing per host serves every install a deploy
    makes until one of them changes something.

    + packages: the packages, each ``name`` or ``name=version``
    + no_recommends: install without their Recommends
    + allow_downgrades: a version older than the installed one may be installed
    + extra_install_args: more arguments to ``apt-get install``

    **Example:**

    .. code:: python

        packages.installed(name="Install time sync", packages=["systemd-timesyncd"])
    """

    arguments = ["install", *(["--no-install-recommends"] if no_recommends else []),
                 *(["--allow-downgrades"] if allow_downgrades else []),
                 *([extra_install_args] if extra_install_args else [])]
    yield from ensure_packages(host, packages, remembered(DebPackages), present=True,
                               install_command=noninteractive_apt(" ".join(arguments)),
                               uninstall_command=noninteractive_apt("remove"), version_join="=")


def held_at(name: str, packages: list[str], version: str, hold: list[str] | None = None, no_recommends: bool = True):
    """
    Install packages at one exact version, down or past an earlier hold if need be, then hold them there.

    Two operations, and the install's is returned: whether the packages moved is what decides a reboot or a
    restart after, and holding packages already at their version moves nothing.

    + name: the install's name
    + packages: names of the packages
    + version: the exact package version of each
    + hold: what to hold, if more than ``packages`` (a library that must not move apart from them)
    + no_recommends: install without their Recommends

    **Example:**

    .. code:: python

        driver = packages.held_at(
            name="Install NVIDIA driver 580.126.09",
            packages=["nvidia-driver", "nvidia-kernel-open-dkms"],
            version="580.126.09-1",
        )
    """

    install = installed(name=name, packages=[f"{package}={version}" for package in packages],
                        no_recommends=no_recommends, allow_downgrades=True,
                        extra_install_args="--allow-change-held-packages")
    held(name=f"Hold {', '.join(hold or packages)}", packages=hold or packages)
    return install


@operation()
def update(cache_time: int | None = None, sources: list[OperationMeta] | None = None):
    """
    Refresh the apt lists like ``apt.update``, with each attempt bounded in time and retried.

    A mirror or proxy that stops answering (seen in the lab: apt-get update waiting for good) must
    fail the attempt, not hang every later operation on the host.

    + cache_time: skip the refresh when the lists are younger than this many seconds
    + sources: operations that add apt sources or pins, before this: refresh whatever the lists' age if any of
      them changed something (asked once it has run; before, in a plan, whether it would)

    **Example:**

    .. code:: python

        packages.update(name="Refresh apt lists older than an hour", cache_time=3600)
    """

    bounded = bounded_update()
    if any(source.did_change() if source.is_complete() else source.will_change for source in sources or ()):
        yield bounded
        if cache_time:
            yield f"touch {apt.APT_UPDATE_FILENAME}"  # the age cache_time reads, as apt.update keeps it
        return
    for command in apt.update._inner(cache_time=cache_time):
        yield bounded if command == "apt-get update" else command


@operation()
def downloaded(packages: list[str]):
    """
    Download packages at exact versions into apt's cache without installing them, so that a later install
    needs no mirror: a rollout stages a whole batch before it drains any host of it.

    + packages: ``name=version`` of each package

    **Example:**

    .. code:: python

        packages.downloaded(
            name="Stage NVIDIA driver 580.126.09",
            packages=["nvidia-driver=580.126.09-1", "nvidia-kernel-open-dkms=580.126.09-1"],
        )
    """

    ready = set(host.get_fact(AptArchives))
    installed = remembered(DebPackages)
    missing = [wanted for wanted in packages if wanted not in ready
               and wanted.partition("=")[2] not in installed.get(wanted.partition("=")[0], [])]
    if not missing:
        host.noop(f"{', '.join(packages)} already staged or installed")
        return
    yield from update._inner()  # the lists may predate the release
    yield StringCommand("DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "--download-only", "-y",
                        "--no-install-recommends", "--allow-downgrades", "--allow-change-held-packages",
                        *(QuoteString(wanted) for wanted in missing))


@operation()
def downloaded_from(packages: dict[str, str], directory: str):
    """
    Download packages at the versions a private apt configuration pins, without installing them and without
    touching the host's own sources, pins or package cache: a rollout stages another ROCm release, whose
    repositories the host does not use until its deploy moves it there.

    + packages: each package's name and the version pattern (a glob, as apt's pins write it) that counts as
      staged or installed
    + directory: holds the private ``sources.list`` and ``preferences``, and apt's lists for them

    **Example:**

    .. code:: python

        packages.downloaded_from(
            name="Stage ROCm 7.1.0",
            packages={"amdgpu-dkms": "1:*.70100-*", "rocm": "7.1.0.*"},
            directory="/var/lib/k3ops/staged-apt",
        )
    """

    ready = host.get_fact(AptArchives)
    installed = remembered(DebPackages)
    missing = [name for name, pattern in packages.items()
               if not any(fnmatchcase(staged, f"{name}={pattern}") for staged in ready)
               and not any(fnmatchcase(version, pattern) for version in installed.get(name, []))]
    if not missing:
        host.noop(f"{', '.join(packages)} already staged or installed")
        return
    options = [f"Dir::Etc::SourceList={directory}/sources.list", f"Dir::Etc::SourceParts={directory}/parts",
               f"Dir::Etc::Preferences={directory}/preferences", f"Dir::Etc::PreferencesParts={directory}/parts",
               f"Dir::State::Lists={directory}/lists",
               "Dir::Cache::pkgcache=", "Dir::Cache::srcpkgcache="]  # the host's own cache is built from its lists
    flags = [word for option in options for word in ("-o", option)]
    yield StringCommand("mkdir", "-p", QuoteString(f"{directory}/parts"), QuoteString(f"{directory}/lists/partial"))
    yield bounded_update(*flags)
    yield StringCommand("DEBIAN_FRONTEND=noninteractive", "apt-get", *(QuoteString(flag) for flag in flags), "install",
                        "--download-only", "-y", "--no-install-recommends", "--allow-downgrades",
                        "--allow-change-held-packages", *(QuoteString(name) for name in missing))
