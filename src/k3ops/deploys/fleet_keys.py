"""SSH keys the fleet's hosts use between themselves (peer copies, MPI launches), made on the controller."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

KEY_LOCK = threading.Lock()


def ensure_fleet_key(path: Path, comment: str) -> None:
    """Make the key on the controller the first time (an ed25519 key, no passphrase).

    pyinfra prepares hosts concurrently (greenlets: its CLI patches threading), so the first hosts of a
    fresh fleet race to make the key; the lock lets one make it and the others read it.
    """
    with KEY_LOCK:
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)], check=True)
