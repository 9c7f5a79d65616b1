"""SSH keys the fleet's hosts use between themselves (peer copies, MPI launches), made on the controller."""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path

from pyinfra.api import DeployError

from ..settings.controller import ControllerFileError, fleet_public_key

KEY_LOCK = threading.Lock()


def ensure_fleet_key(path: str, comment: str) -> tuple[Path, str]:
    """The fleet key at `path` (made the first time: ed25519, no passphrase) and its public line, once it
    is checked to be the key k3ops made, the controller user's alone.

    pyinfra prepares hosts concurrently (greenlets: its CLI patches threading), so the first hosts of a
    fresh fleet race to make the key; the lock lets one make it and the others read it.
    """
    private_key = Path(path).expanduser()
    with KEY_LOCK:
        if not os.path.lexists(private_key):
            private_key.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(private_key)],
                           check=True, stdin=subprocess.DEVNULL)
    try:
        return private_key, fleet_public_key(path, comment)
    except ControllerFileError as error:
        raise DeployError(f"fleet key: {error}") from None
