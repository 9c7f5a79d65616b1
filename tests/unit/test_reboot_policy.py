"""A deploy never reboots the machine that runs pyinfra."""

from types import SimpleNamespace

import pytest

from k3ops.deploys.reboot import is_controller


def target(name, **data):
    return SimpleNamespace(name=name, data=data)


@pytest.mark.parametrize("host, controller", [
    (target("@local"), True),
    (target("localhost"), True),
    (target("gpu-01", ssh_hostname="127.0.0.1"), True),
    (target("gpu-01", ssh_hostname="::1"), True),
    (target("gpu-01", ssh_hostname="10.213.7.11"), False),
    (target("gpu-01.example"), False),
])
def test_the_controller_is_recognised(host, controller):
    assert is_controller(host) is controller
