"""k3ops.facts.users.SystemUser run by the real shell on this machine, read against Python's own reading of the
name service (pwd, grp)."""

from __future__ import annotations

import grp
import os
import pwd
import subprocess

from k3ops.facts.users import SystemUser


def system_user(name: str):
    """The fact as pyinfra reads it: its command run by a shell, its output's lines processed."""
    result = subprocess.run(["sh", "-c", SystemUser().command(user=name)], capture_output=True, text=True,
                            timeout=30)
    assert result.returncode == 0, result.stderr
    return SystemUser().process(result.stdout.splitlines())


def test_a_user_is_read_as_the_name_service_has_it():
    for entry in (pwd.getpwuid(0), pwd.getpwuid(os.getuid()), pwd.getpwnam("nobody")):
        primary = grp.getgrgid(entry.pw_gid).gr_name
        others = {group.gr_name for group in grp.getgrall() if entry.pw_name in group.gr_mem} - {primary}
        found = system_user(entry.pw_name)
        assert found is not None and set(found.pop("groups")) == others
        assert found == {"home": entry.pw_dir, "shell": entry.pw_shell, "group": primary}


def test_no_such_user_is_none_and_a_hostile_name_runs_nothing(tmp_path):
    assert system_user("k3ops-no-such-user") is None
    planted = tmp_path / "planted"
    assert system_user(f"root; touch {planted}") is None
    assert system_user(f"$(touch {planted})") is None
    assert not planted.exists()
