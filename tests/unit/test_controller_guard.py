"""The controller is known by every name and address it answers to, whether the inventory names it or its
ssh_hostname does: a deploy never reboots it, and a rollout refuses it before touching any host."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from types import SimpleNamespace

import pytest

from k3ops.deploys import reboot
from k3ops.deploys.reboot import is_controller

ELSEWHERE = "203.0.113.7"  # TEST-NET-3: never this machine's


def target(name, **data):
    return SimpleNamespace(name=name, data=data)


@pytest.fixture
def identity(monkeypatch):
    """This machine as ctl-01.example.com at 10.1.2.3 and fd00::3, whatever the test runs on; the resolver
    knows one alias of it, and no other name (nothing is looked up in DNS)."""
    for cached in (reboot.answers_here, reboot.own_names, reboot.own_addresses):
        cached.cache_clear()
    getaddrinfo = socket.getaddrinfo

    def resolve(name, port, flags=0):
        if name in ("ctl-01", "ctl-01.example.com", "www.example.com") and not flags & socket.AI_NUMERICHOST:
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.1.2.3", 0))]
        return getaddrinfo(name, port, flags=flags | socket.AI_NUMERICHOST)

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    monkeypatch.setattr(socket, "gethostname", lambda: "ctl-01")
    monkeypatch.setattr(socket, "getfqdn", lambda name="": "ctl-01.example.com")
    monkeypatch.setattr(reboot, "Path", lambda path: SimpleNamespace(read_text=lambda: {
        "/proc/net/fib_trie": "Main:\n  +-- 10.1.2.0/24 2 0 2\n     |-- 10.1.2.3\n        /32 host LOCAL\n"
                              "     |-- 10.1.2.255\n        /32 link BROADCAST\n",
        "/proc/net/if_inet6": "fd000000000000000000000000000003 02 40 00 80     eth0\n"}[path]))
    yield
    for cached in (reboot.answers_here, reboot.own_names, reboot.own_addresses):
        cached.cache_clear()


@pytest.mark.parametrize("name", [
    "0.0.0.0", "::", "::ffff:127.0.0.1", "127.0.0.1", "127.45.6.7", "127.1", "::1", "[::1]", "::1%lo", "localhost",
    "localhost.", "LOCALHOST", "LocalHost.", "k3ops.localhost", "ctl-01", "CTL-01.", "ctl-01.example.com",
    "Ctl-01.Example.Com.", "10.1.2.3", "::ffff:10.1.2.3", "fd00::3", "FD00:0::3", "0x0a010203",
])
def test_every_name_and_address_of_the_controller_is_recognised(identity, name):
    assert is_controller(target(name))
    assert is_controller(target("gpu-01", ssh_hostname=name))
    assert is_controller(target(name, ssh_hostname=ELSEWHERE))


def test_the_address_pyinfra_connects_to_is_looked_up_and_only_it(identity):
    assert is_controller(target("www.example.com"))
    assert is_controller(target("gpu-01", ssh_hostname="www.example.com"))
    assert not is_controller(target("www.example.com", ssh_hostname=ELSEWHERE))  # a label: it connects elsewhere


@pytest.mark.parametrize("name", ["10.1.2.4", "10.1.2.255", "fd00::4", "::ffff:10.1.2.4", "ctl-02",
                                  "ctl-01.example.org", "gpu-01", "@fake/gpu-01", ELSEWHERE])
def test_other_machines_are_not_the_controller(identity, name):
    assert not is_controller(target("gpu-01", ssh_hostname=name))


def test_pyinfras_local_connector_is_the_controller(identity):
    assert is_controller(target("@local"))


def test_this_machines_own_names_and_addresses_are_recognised():
    """Unpatched: what this machine really answers to, read as a rollout reads it."""
    hostname = socket.gethostname()
    assert is_controller(target("gpu-01", ssh_hostname=hostname))
    assert is_controller(target(hostname, ssh_hostname=ELSEWHERE))
    assert is_controller(target("gpu-01", ssh_hostname=socket.getfqdn()))
    for found in socket.getaddrinfo(hostname, None):
        assert is_controller(target("gpu-01", ssh_hostname=found[4][0]))
    assert not is_controller(target("gpu-01", ssh_hostname=ELSEWHERE))


def test_a_rollout_refuses_the_controller_by_any_of_its_names(tmp_path):
    """The real command line; the CUDA index is at the discard port, refused here, and said among the refusals."""
    hostname = socket.gethostname()
    repository = "http://127.0.0.1:9/"
    defaults = {"hardware_profile": "h200x8", "nvidia_driver_version": "580.105.08", "allow_plain_http": True,
                "repositories": {"cuda": {"url": repository, "key_url": repository + "key.gpg"}}}
    hosts = [("gpu-01", "0.0.0.0"), ("gpu-02", "LOCALHOST"), ("gpu-03", hostname), (hostname, "203.0.113.4"),
             ("gpu-05", "203.0.113.5")]
    inventory = tmp_path / "fleet.py"
    inventory.write_text(f"hgx = {[(name, {**defaults, 'ssh_hostname': address}) for name, address in hosts]!r}\n")
    result = subprocess.run([sys.executable, "-m", "k3ops.cli", "upgrade", "driver", str(inventory), "--to",
                             "580.126.09", "--dry-run"], capture_output=True, text=True, timeout=60,
                            env={**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")})
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    refused = {line.strip().split(":")[0] for line in result.stderr.splitlines()
               if "is the machine running k3ops; a rollout never reboots its own controller" in line}
    assert refused == {"gpu-01", "gpu-02", "gpu-03", hostname}, result.stderr
