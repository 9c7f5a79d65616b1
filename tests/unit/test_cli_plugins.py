"""Verbs that other distributions add (the `k3ops.commands` entry points) load beside k3ops' own, and one that
fails to load is named and left out: k3ops' own verbs keep working. A command loads only the verb it names."""

from __future__ import annotations

import os
import subprocess
import sys

from ..conftest import REPO_ROOT

PLUGIN = """import argparse

def register(verbs):
    verbs.add_parser("hello", help="a plugin's verb").set_defaults(handler=lambda args: print("hello") or 0)
"""


def distribution(root, name: str, entry: str) -> None:
    """An installed distribution (its dist-info) that registers one `k3ops.commands` entry point."""
    info = root / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[k3ops.commands]\n{entry}\n")


def k3ops(root, *args: str) -> subprocess.CompletedProcess:
    path = os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-m", "k3ops.cli", *args], capture_output=True, text=True, cwd=REPO_ROOT,
                          env={**os.environ, "PYTHONPATH": path}, timeout=120)


def test_a_plugin_adds_its_verb(tmp_path):
    (tmp_path / "hello_plugin.py").write_text(PLUGIN)
    distribution(tmp_path, "hello_plugin", "hello = hello_plugin:register")
    result = k3ops(tmp_path, "hello")
    assert result.returncode == 0 and result.stdout == "hello\n", result.stderr
    assert "hello" in k3ops(tmp_path, "--help").stdout


def test_a_verb_imports_what_it_runs_and_no_more(tmp_path):
    """The plugin's verb runs without k3ops' own verbs, or pyinfra, imported."""
    (tmp_path / "hello_plugin.py").write_text(PLUGIN.replace(
        'print("hello")', 'print(sorted(name for name in __import__("sys").modules if name.startswith(("pyinfra", '
        '"k3ops.cli."))))'))
    distribution(tmp_path, "hello_plugin", "hello = hello_plugin:register")
    result = k3ops(tmp_path, "hello")
    assert result.returncode == 0 and result.stdout == "[]\n", result.stdout + result.stderr


def test_a_plugin_that_fails_to_load_leaves_k3ops_own_verbs_working(tmp_path):
    (tmp_path / "broken_plugin.py").write_text("raise ImportError('a missing dependency')\n")
    distribution(tmp_path, "broken_plugin", "broken = broken_plugin:register")
    inventory = tmp_path / "fleet.py"
    inventory.write_text("hosts = [('gpu-01', {'hardware_profile': 'cpu'})]\n")
    assert k3ops(tmp_path, "validate", str(inventory)).returncode == 0
    listed = k3ops(tmp_path, "--help")  # every verb's parser, so the plugin's too
    assert listed.returncode == 0 and "validate" in listed.stdout and "broken" not in listed.stdout
    assert "the 'broken' verb of broken_plugin:register is left out: it failed to load: ImportError: " \
           "a missing dependency" in listed.stderr
    assert k3ops(tmp_path, "broken").returncode == 2  # an unknown verb, as without the plugin
