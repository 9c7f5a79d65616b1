"""The peers' forced command: a cache path with quotes or spaces stays one argument of rrsync."""

import shlex

from pyinfra.api import QuoteString, StringCommand

from k3ops.deploys.checkpoint import RRSYNC, authorized_keys_option


def sshd_dequote(option: str) -> str:
    """What sshd makes of a quoted option value (OpenSSH's opt_dequote: only \\" is an escape)."""
    assert option.startswith('"') and option.endswith('"')
    return option[1:-1].replace('\\"', '"')


def test_a_hostile_cache_path_stays_one_argument_of_rrsync():
    path = '/srv/models" $(reboot) \'x\' \\y'
    option = authorized_keys_option(StringCommand(RRSYNC, "-ro", QuoteString(path)).get_raw_value())
    assert '"' not in option[1:-1].replace('\\"', "")  # no bare quote ends the option early
    assert shlex.split(sshd_dequote(option)) == [RRSYNC, "-ro", path]


def test_a_plain_path_reads_as_before():
    option = authorized_keys_option(StringCommand(RRSYNC, "-ro", QuoteString("/srv/k3ops/models")).get_raw_value())
    assert option == '"/usr/bin/rrsync -ro /srv/k3ops/models"'
