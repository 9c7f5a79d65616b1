"""Packages at an exact version and held there: one install past any earlier hold (down if need be), then the
hold; the install is what the caller's reboot or restart waits on."""

import pytest

from k3ops.operations import packages


@pytest.fixture
def issued(monkeypatch) -> list[tuple[str, dict]]:
    calls = []

    def operation(kind):
        return lambda **arguments: calls.append((kind, arguments)) or f"the {kind} operation"

    monkeypatch.setattr(packages, "installed", operation("install"))
    monkeypatch.setattr(packages, "held", operation("hold"))
    return calls


def test_installs_at_the_version_past_holds_then_holds(issued):
    assert packages.held_at(name="Install DCGM", packages=["dcgm-cuda13", "dcgm-core"], version="1:4.4.1-1") \
        == "the install operation"
    assert issued == [
        ("install", {"name": "Install DCGM", "packages": ["dcgm-cuda13=1:4.4.1-1", "dcgm-core=1:4.4.1-1"],
                     "no_recommends": True, "allow_downgrades": True,
                     "extra_install_args": "--allow-change-held-packages"}),
        ("hold", {"name": "Hold dcgm-cuda13, dcgm-core", "packages": ["dcgm-cuda13", "dcgm-core"]})]


def test_holds_what_must_not_move_apart_and_may_take_recommends(issued):
    packages.held_at(name="nccl-tests", packages=["nccl-tests"], version="2.17.6-1", hold=["nccl-tests", "libnccl2"],
                     no_recommends=False)
    (_, install), (_, hold) = issued
    assert install["packages"] == ["nccl-tests=2.17.6-1"] and install["no_recommends"] is False
    assert hold["packages"] == ["nccl-tests", "libnccl2"]
