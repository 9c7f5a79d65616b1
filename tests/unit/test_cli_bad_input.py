"""Every verb answers an inventory or --limit it cannot use with one line on stderr and its documented exit
status (the doctor's 3, everyone else's 2), never a traceback and never a healthy empty fleet."""

from __future__ import annotations

import subprocess

import pytest

from ..conftest import cli

# Every verb that takes an inventory, with what it needs besides.
VERBS = [("validate",), ("check",), ("doctor", "--json"), ("nccl", "check"), ("nccl", "status"), ("model", "status"),
         ("model", "verify"), ("model", "rollback"), ("serve", "status"), ("serve", "chat"),
         ("upgrade", "driver", "--to", "580.126.09")]
LIMITED = [("check",), ("doctor",), ("nccl", "check"), ("upgrade", "driver", "--to", "580.126.09")]
# Hosts at TEST-NET-3 addresses: refused before any is reached, or the test would hang on one.
HOSTS = 'hgx = [("gpu-01", {"hardware_profile": "h200x8", "ssh_hostname": "203.0.113.1"})]\n'


def k3ops(verb: tuple, inventory, *more: str) -> subprocess.CompletedProcess:
    """The real command line, the inventory where each verb takes it (after the verb's words, before its flags)."""
    words = [word for word in verb if not word.startswith("-")]
    words = words[:2] if verb[0] in ("nccl", "model", "serve", "upgrade") else words[:1]
    return cli(*words, str(inventory), *verb[len(words):], *more)


def bad_input_status(verb: tuple) -> int:
    return 3 if verb[0] == "doctor" else 2


def assert_one_line(result, *said: str) -> None:
    assert "Traceback" not in result.stderr, result.stderr
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert all(words in result.stderr for words in said), result.stderr
    assert result.stdout == "", result.stdout  # no table, no {"exit_status": 0, "hosts": []}


@pytest.mark.parametrize("verb", VERBS, ids=" ".join)
def test_a_missing_inventory_is_bad_input_for_every_verb(tmp_path, verb):
    result = k3ops(verb, tmp_path / "prod.pyy")
    assert result.returncode == bad_input_status(verb)
    assert_one_line(result, "prod.pyy: no such inventory file")


@pytest.mark.parametrize("verb", VERBS, ids=" ".join)
def test_an_inventory_naming_no_host_is_bad_input_not_an_empty_fleet(tmp_path, verb):
    inventory = tmp_path / "fleet.py"
    inventory.write_text("hgx = []\nsettings = {'a': 1}\n")
    result = k3ops(verb, inventory)
    assert result.returncode == bad_input_status(verb)
    assert_one_line(result, "fleet.py: names no host")


@pytest.mark.parametrize("verb", [("validate",), ("doctor",), ("model", "status")], ids=" ".join)
@pytest.mark.parametrize("files, said", [
    ({"fleet.py": "hgx = [(\n"}, "fleet.py: cannot be loaded: line 1: SyntaxError: '(' was never closed"),
    ({"fleet.py": "import os\nhgx = [os.environ['K3OPS_NO_SUCH_VARIABLE']]\n"},
     "fleet.py: cannot be loaded: line 2: KeyError: 'K3OPS_NO_SUCH_VARIABLE'"),
    ({"fleet.py": HOSTS, "group_data/all.py": "ratio = 1 / 0\n"},
     "/group_data/all.py: line 1: ZeroDivisionError: division by zero"),
    ({"fleet.py": "from k3ops.inventory import validate_inventory\nvalidate_inventory(__file__)\n"},
     "fleet.py: names no host"),  # an inventory that validates itself, and names none
    ({"fleet.py/README": "a directory, not an inventory file\n"}, "fleet.py: not a file"),
], ids=["syntax error", "raises", "group data raises", "validates itself, no host", "a directory"])
def test_an_inventory_that_cannot_be_loaded_is_one_line(tmp_path, verb, files, said):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    result = k3ops(verb, tmp_path / "fleet.py")
    assert result.returncode == bad_input_status(verb)
    assert_one_line(result, said)


@pytest.mark.parametrize("verb", LIMITED, ids=" ".join)
@pytest.mark.parametrize("limit, said", [
    ("", "--limit: '' names no host"),
    (",", "--limit: ','"),  # no name: `check`'s own --limit takes one name or glob, the others a list
    ("gpu-9*", "--limit: 'gpu-9*' matches no host of"),
], ids=["empty", "a comma", "matches nothing"])
def test_a_limit_that_selects_no_host_is_refused_not_the_whole_fleet(tmp_path, verb, limit, said):
    inventory = tmp_path / "fleet.py"
    inventory.write_text(HOSTS)
    result = k3ops(verb, inventory, "--limit", limit)
    assert result.returncode == bad_input_status(verb)
    assert_one_line(result, said)


def test_the_checks_data_overrides_are_asked_first_too(tmp_path):
    inventory = tmp_path / "fleet.py"
    inventory.write_text(HOSTS)
    result = k3ops(("check",), inventory, "--data", "nvidia_driver_version")
    assert result.returncode == 2
    assert_one_line(result, "--data 'nvidia_driver_version': give KEY=VALUE")
