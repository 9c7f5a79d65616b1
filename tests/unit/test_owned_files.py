"""k3ops.owned_files and its fact, run by the real shell on this machine (as root, as CI runs): a file is
replaced by its owner through no link, and the fact reads what is there without following one."""

from __future__ import annotations

import hashlib
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from k3ops.facts.owned_files import CONFIG_ROOT, ConfigFiles, OwnedDirectory, OwnedFile, PrivateDirectory
from k3ops.owned_files import replace_command, replace_with

UNPRIVILEGED = "nobody"


def sh(command: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run(["sh", "-c", command], input=stdin, capture_output=True, text=True, timeout=30)


def fact(fact_class, **arguments):
    """The fact as pyinfra reads it: its command run by a shell, its output's lines processed."""
    result = sh(fact_class().command(**arguments).get_raw_value())
    assert result.returncode == 0, result.stderr
    return fact_class().process(result.stdout.splitlines())


@pytest.fixture
def owned_by_nobody():
    """A directory the unprivileged user owns, as the users k3ops makes own their homes, in a directory
    it may enter (pytest's own tmp_path is root's alone)."""
    with tempfile.TemporaryDirectory() as parent:
        os.chmod(parent, 0o755)
        home = Path(parent) / "home"
        home.mkdir()
        user = pwd.getpwnam(UNPRIVILEGED)
        os.chown(home, user.pw_uid, user.pw_gid)
        yield home


def test_root_replaces_a_planted_link_instead_of_writing_through_it(tmp_path):
    target = tmp_path / "elsewhere"
    target.write_text("not to be touched\n")
    path = tmp_path / "state" / "marker.json"
    path.parent.mkdir()
    path.symlink_to(target)
    result = sh(replace_command(str(path), "644"), "new\n")
    assert result.returncode == 0, result.stderr
    assert target.read_text() == "not to be touched\n"
    assert not path.is_symlink() and path.read_text() == "new\n"
    assert oct(path.stat().st_mode & 0o777) == "0o644"


def test_a_link_to_a_directory_is_replaced_not_written_into(tmp_path):
    directory = tmp_path / "directory"
    directory.mkdir()
    path = tmp_path / "known_hosts"
    path.symlink_to(directory)
    assert sh(replace_with(str(path), "line\n", "644")).returncode == 0
    assert list(directory.iterdir()) == [] and path.read_text() == "line\n"


def test_a_users_file_is_written_as_that_user_and_a_planted_link_is_removed_not_followed(tmp_path, owned_by_nobody):
    root_file = tmp_path / "root-only"
    root_file.write_text("root's\n")
    os.chmod(root_file, 0o644)
    path = owned_by_nobody / ".ssh" / "authorized_keys"
    path.parent.mkdir()
    os.chown(path.parent, pwd.getpwnam(UNPRIVILEGED).pw_uid, pwd.getpwnam(UNPRIVILEGED).pw_gid)
    (path.parent / "authorized_keys.k3ops-new").symlink_to(root_file)  # where the new file is first written
    result = sh(replace_command(str(path), "600", owner=UNPRIVILEGED), "ssh-ed25519 AAAA key\n")
    assert result.returncode == 0, result.stderr
    assert root_file.read_text() == "root's\n"
    assert not path.is_symlink() and path.read_text() == "ssh-ed25519 AAAA key\n"
    assert pwd.getpwuid(path.stat().st_uid).pw_name == UNPRIVILEGED


def test_a_users_new_directory_and_file_are_private_and_theirs(owned_by_nobody):
    path = owned_by_nobody / ".ssh" / "id_ed25519"
    assert sh(replace_command(str(path), "600", owner=UNPRIVILEGED), "private\n").returncode == 0
    for made, mode in ((path.parent, 0o700), (path, 0o600)):
        assert (pwd.getpwuid(made.stat().st_uid).pw_name, made.stat().st_mode & 0o777) == (UNPRIVILEGED, mode)
    assert path.read_text() == "private\n"


def test_the_fact_reads_a_regular_file_and_never_a_links_target(tmp_path):
    path = tmp_path / "key"
    path.write_text("secret\n")
    os.chmod(path, 0o600)
    assert fact(OwnedFile, path=str(path)) == {"owner": "root", "group": "root", "mode": "600",
                                               "sha256": hashlib.sha256(b"secret\n").hexdigest()}
    link = tmp_path / "link"
    link.symlink_to(path)
    assert fact(OwnedFile, path=str(link)) is None
    assert fact(OwnedFile, path=str(tmp_path / "absent")) is None
    assert fact(OwnedFile, path=str(tmp_path)) is None


def test_the_directory_fact_sees_a_directory_but_not_a_link_to_one(tmp_path):
    directory = tmp_path / "cache"
    directory.mkdir(mode=0o750)
    os.chmod(directory, 0o750)
    assert fact(OwnedDirectory, path=str(directory)) == {"owner": "root", "group": "root", "mode": "750"}
    (tmp_path / "link").symlink_to(directory)
    assert fact(OwnedDirectory, path=str(tmp_path / "link")) is None
    assert fact(OwnedDirectory, path=str(tmp_path / "absent")) is None


def test_a_users_directory_linked_to_roots_gains_the_user_nothing(tmp_path, owned_by_nobody):
    roots = Path(tempfile.mkdtemp())
    try:
        os.chmod(roots, 0o755)
        (owned_by_nobody / ".ssh").symlink_to(roots)  # the user's .ssh, swapped for a link to root's directory
        result = sh(replace_command(str(owned_by_nobody / ".ssh" / "authorized_keys"), "600", owner=UNPRIVILEGED),
                    "ssh-ed25519 AAAA key\n")
        assert result.returncode != 0 and "Permission denied" in result.stderr
        assert list(roots.iterdir()) == []
    finally:
        shutil.rmtree(roots)


def test_a_staging_directory_is_private_only_when_the_user_owns_it_alone(tmp_path, owned_by_nobody):
    staging = tmp_path / "staging"
    staging.mkdir(mode=0o700)
    os.chmod(staging, 0o700)
    assert fact(PrivateDirectory, path=str(staging)) is True
    os.chmod(staging, 0o755)
    assert fact(PrivateDirectory, path=str(staging)) is False
    (tmp_path / "link").symlink_to(staging)
    os.chmod(staging, 0o700)
    assert fact(PrivateDirectory, path=str(tmp_path / "link")) is False
    os.chmod(owned_by_nobody, 0o700)
    assert fact(PrivateDirectory, path=str(owned_by_nobody)) is False  # another user's


def test_config_files_lists_each_k3ops_file_under_the_root_and_never_a_link(tmp_path):
    """ConfigFiles reads the same owner, mode and digest as OwnedFile, for every file whose path names k3ops; a
    link planted at a path, and files whose path does not name k3ops, are not in it (the op then writes)."""
    (tmp_path / "k3ops" / "secrets").mkdir(parents=True)
    (tmp_path / "apt").mkdir()
    settings, listed = tmp_path / "k3ops" / "secrets" / "engine.env", tmp_path / "apt" / "k3ops cuda.list"
    settings.write_text("K3OPS_API_KEY=x\n")
    settings.chmod(0o600)
    listed.write_text("deb [signed-by=/k] http://mirror /\n")
    (tmp_path / "apt" / "k3ops-link.list").symlink_to(settings)
    (tmp_path / "apt" / "debian.list").write_text("deb http://deb.debian.org/debian bookworm main\n")
    command = ConfigFiles.command.replace(f"find {CONFIG_ROOT} ", f"find {tmp_path} ", 1)
    result = sh(command)
    found = ConfigFiles().process(result.stdout.splitlines())
    assert found == {str(path): fact(OwnedFile, path=str(path)) for path in (settings, listed)}
    assert found[str(settings)]["mode"] == "600"
