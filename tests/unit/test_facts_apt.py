"""AptPolicyVersion on the real apt of the machine running the tests, where it has one."""

import shutil
import subprocess

import pytest

from k3ops.facts.apt import AptPolicyVersion

needs_apt = pytest.mark.skipif(shutil.which("apt-cache") is None, reason="not a Debian-family machine")


def shell(command):
    return subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=True).stdout


@needs_apt
def test_installed_version_is_the_one_dpkg_has():
    output = shell(AptPolicyVersion().command("dpkg").get_raw_value())
    versions = AptPolicyVersion().process(output.splitlines())
    assert versions["installed"] == shell("dpkg-query --show --showformat='${Version}' dpkg")
    assert versions["candidate"] is not None


@needs_apt
def test_a_package_no_source_knows_has_no_versions():
    output = shell(AptPolicyVersion().command("k3ops-no-such-package").get_raw_value())
    assert AptPolicyVersion().process(output.splitlines()) == AptPolicyVersion.default()
