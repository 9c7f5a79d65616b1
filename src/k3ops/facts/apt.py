"""Facts about apt's view of packages: holds and versions."""

from __future__ import annotations

import re

from pyinfra.api import FactBase, QuoteString
from pyinfra.api.command import make_formatted_string_command
from typing_extensions import override

APT_POLICY_VERSION_REGEX = r"^\s+(?P<field>Installed|Candidate): (?P<version>\S+)$"
APT_NO_VERSION = "(none)"
APT_CONFIG_LIST_ITEM_REGEX = r'^(?P<name>[\w:-]+):: "(?P<value>.*)";$'


class AptHeldPackages(FactBase[list[str]]):
    """
    Returns the packages held at their installed version, sorted:

    .. code:: python

        ["nvidia-driver", "nvidia-kernel-open-dkms"]
    """

    command = "apt-mark showhold"

    @override
    def requires_command(self) -> str:
        return "apt-mark"

    default = list

    @override
    def process(self, output):
        return sorted(line.strip() for line in output if line.strip())


class AptPolicyVersion(FactBase[dict[str, str | None]]):
    """
    Returns a package's installed version and the version apt would install (``None`` for none):

    .. code:: python

        {"installed": "580.105.08-1", "candidate": "580.126.09-1"}
    """

    @override
    def command(self, package: str):
        return make_formatted_string_command("apt-cache policy {0}", QuoteString(package))

    @override
    def requires_command(self, package: str) -> str:
        return "apt-cache"

    @staticmethod
    def default():
        return {"installed": None, "candidate": None}

    @override
    def process(self, output):
        versions = self.default()
        for line in output:
            policy = re.match(APT_POLICY_VERSION_REGEX, line)
            if policy and policy["version"] != APT_NO_VERSION:
                versions[policy["field"].lower()] = policy["version"]
        return versions


class AptConfigList(FactBase[list[str]]):
    """
    Returns the items of one of apt's list settings, as every apt.conf.d file together sets it:

    .. code:: python

        ["nvidia-", "libnvidia-", "cuda-"]  # Unattended-Upgrade::Package-Blacklist
    """

    @override
    def command(self, setting: str):
        return make_formatted_string_command("apt-config dump {0}", QuoteString(setting))

    @override
    def requires_command(self, setting: str) -> str:
        return "apt-config"

    default = list

    @override
    def process(self, output):
        return [item["value"] for line in output if (item := re.match(APT_CONFIG_LIST_ITEM_REGEX, line.strip()))]


class AptArchives(FactBase[list[str]]):
    """
    Returns the packages in apt's download cache as ``name=version``, sorted (what ``apt-get install`` can
    install without the network; dpkg's file names write an epoch's ``:`` as ``%3a``):

    .. code:: python

        ["nvidia-driver=580.126.09-1", "nvidia-open=580.126.09-1"]
    """

    command = "ls /var/cache/apt/archives/ 2>/dev/null || true"

    default = list

    @override
    def process(self, output):
        staged = []
        for line in output:
            name, _, rest = line.strip().partition("_")
            version, _, architecture = rest.rpartition("_")
            if name and version and architecture.endswith(".deb"):
                staged.append(f"{name}={version.replace('%3a', ':')}")
        return sorted(staged)
