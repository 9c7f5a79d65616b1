"""k3ops.operations.trees and its fact, run by the real shell and tar on this machine: a tree lands whole, by
rename, through no link, and the fact reads it as the controller digests it."""

from __future__ import annotations

import hashlib
import shlex
import subprocess
from pathlib import Path

from k3ops.facts.trees import TreeDigests
from k3ops.operations.trees import REPLACE_TREE, archive, tree_files


def sh(command: str) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=30)


def digests(path: Path):
    """The fact as pyinfra reads it: its command run by a shell, its output's lines processed."""
    result = sh(TreeDigests().command(path=str(path)))
    assert result.returncode == 0, result.stderr
    return TreeDigests().process(result.stdout.splitlines())


def install(src: Path, dest: Path) -> None:
    """The operation's last command, given the archive it uploads."""
    dest.parent.mkdir(exist_ok=True)
    staged = dest.parent / "staged.tar"
    staged.write_bytes(archive(tree_files(src)))
    result = sh(shlex.join(["sh", "-c", REPLACE_TREE, "sh", str(dest), str(staged)]))
    assert result.returncode == 0, result.stderr


def package(root: Path) -> Path:
    (root / "checkpoint" / "__pycache__").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "checkpoint" / "store.py").write_text("STORE = 1\n")
    (root / "checkpoint" / "__pycache__" / "store.cpython-311.pyc").write_bytes(b"\0cache")
    return root


def wanted(src: Path) -> dict:
    return {name: hashlib.sha256(data).hexdigest() for name, data in tree_files(src).items()}


def test_a_tree_lands_whole_and_reads_as_the_controller_digests_it(tmp_path):
    src, dest = package(tmp_path / "src"), tmp_path / "lib" / "pkg"
    assert digests(dest) is None
    install(src, dest)
    assert digests(dest) == wanted(src) and set(wanted(src)) == {"__init__.py", "checkpoint/store.py"}
    assert (dest / "checkpoint" / "store.py").stat().st_mode & 0o777 == 0o644
    (dest / "checkpoint" / "__pycache__").mkdir()  # the host's own Python caches are no difference
    (dest / "checkpoint" / "__pycache__" / "store.cpython-311.pyc").write_bytes(b"other")
    assert digests(dest) == wanted(src)


def test_a_changed_extra_or_linked_file_is_a_difference_and_a_reinstall_removes_it(tmp_path):
    src, dest = package(tmp_path / "src"), tmp_path / "lib" / "pkg"
    install(src, dest)
    (dest / "checkpoint" / "store.py").write_text("STORE = 2\n")
    assert digests(dest) != wanted(src)
    install(src, dest)
    (dest / "extra.py").write_text("")
    assert digests(dest) != wanted(src)
    install(src, dest)
    (dest / "linked.py").symlink_to(src / "__init__.py")
    assert digests(dest)["linked.py"] is None
    install(src, dest)
    assert digests(dest) == wanted(src) and not list(tmp_path.glob("lib/*.k3ops-*"))


def test_a_link_planted_at_the_tree_is_replaced_never_followed(tmp_path):
    src, elsewhere = package(tmp_path / "src"), tmp_path / "elsewhere"
    elsewhere.mkdir()
    dest = tmp_path / "lib" / "pkg"
    dest.parent.mkdir()
    dest.symlink_to(elsewhere)
    assert digests(dest) is None
    install(src, dest)
    assert not dest.is_symlink() and digests(dest) == wanted(src) and list(elsewhere.iterdir()) == []
