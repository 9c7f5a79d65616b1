"""The peers' authorized_keys line: a cache path with quotes or spaces stays one argument of rrsync, and
the line stays one key (ssh-keygen reads it)."""

import shlex
import subprocess

import pytest

from k3ops.deploys.checkpoint import RRSYNC, peer_key_line

from ..conftest import fleet_public_key


def sshd_options(line: str) -> tuple[str, str]:
    """The options and the key of an authorized_keys line, split as sshd does (OpenSSH's auth2-pubkeyfile:
    options end at the first space outside double quotes; only \\" is an escape inside them)."""
    quoted, index = False, 0
    while index < len(line) and (quoted or line[index] != " "):
        if line[index] == "\\" and line[index + 1:index + 2] == '"':
            index += 1
        elif line[index] == '"':
            quoted = not quoted
        index += 1
    return line[:index], line[index + 1:]


def forced_command(options: str) -> str:
    value = options.split("command=", 1)[1]
    assert value.startswith('"') and value.endswith('"')
    return value[1:-1].replace('\\"', '"')


def keys_in(tmp_path, text: str) -> list[str]:
    """The keys ssh-keygen finds in an authorized_keys file (one fingerprint line each)."""
    path = tmp_path / "authorized_keys"
    path.write_text(text)
    return subprocess.run(["ssh-keygen", "-l", "-f", str(path)], capture_output=True, text=True).stdout.splitlines()


def test_a_hostile_cache_path_stays_one_argument_of_rrsync(tmp_path):
    path = '/srv/models" $(reboot) \'x\' \\y ssh-ed25519 AAAA'
    public = fleet_public_key(tmp_path)
    options, key = sshd_options(peer_key_line(path, public))
    assert key == public
    assert options.startswith("restrict,command=")
    assert shlex.split(forced_command(options)) == [RRSYNC, "-ro", path]
    assert len(keys_in(tmp_path, peer_key_line(path, public) + "\n")) == 1


@pytest.mark.parametrize("path", ["/srv/models\nssh-ed25519 AAAA", "/srv/models\r", "/srv/\x00x"])
def test_a_line_break_in_the_cache_path_is_refused_not_written(tmp_path, path):
    with pytest.raises(ValueError, match="line break or control character"):
        peer_key_line(path, fleet_public_key(tmp_path))


def test_a_plain_path_reads_as_before(tmp_path):
    public = fleet_public_key(tmp_path)
    assert peer_key_line("/srv/k3ops/models", public) == f'restrict,command="{RRSYNC} -ro /srv/k3ops/models" {public}'
