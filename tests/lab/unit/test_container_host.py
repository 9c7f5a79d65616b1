"""The container backend's supervisor runs as a process of its own (`python -m k3ops_lab.supervisor`), which
finds the lab and the k3ops it imports through the PYTHONPATH it is started with: two distributions, in two
source trees when installed from a checkout."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import k3ops
from k3ops_lab import container


def test_the_supervisor_imports_from_its_pythonpath_alone():
    """Without site-packages (-S), so that only the path the supervisor is given can find them."""
    where = subprocess.run([sys.executable, "-S", "-c", "import k3ops, k3ops_lab.supervisor\n"
                                                        "print(k3ops.__file__, k3ops_lab.supervisor.__file__)"],
                           env={**os.environ, "PYTHONPATH": container.supervisor_path()}, capture_output=True,
                           text=True)
    assert where.returncode == 0, where.stderr
    assert where.stdout.split() == [k3ops.__file__, str(Path(container.__file__).with_name("supervisor.py"))]
