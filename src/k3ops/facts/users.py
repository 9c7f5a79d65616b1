"""One user, asked about alone: pyinfra's Users fact runs about a dozen programs for every user on the host
(lastlog, the shadow file, id), which took 9 s on a TCG VM host, once for every server.user operation."""

from __future__ import annotations

import shlex

from pyinfra.api import FactBase
from typing_extensions import override


class SystemUser(FactBase[dict | None]):
    """
    Returns a user's home, shell, primary group and other groups, as the system's name service has them;
    ``None`` when there is no such user:

    .. code:: python

        {"home": "/var/lib/k3ops/home/k3ops", "shell": "/usr/sbin/nologin", "group": "k3ops",
         "groups": ["render", "video"]}
    """

    @override
    def command(self, user: str):
        user = shlex.quote(user)
        return f'if entry=$(getent passwd {user}); then echo "$entry"; id -gn {user}; id -Gn {user}; fi; true'

    @override
    def process(self, output):
        lines = [line.strip() for line in output if line.strip()]
        if len(lines) != 3 or lines[0].count(":") != 6:
            return None
        entry, group, groups = lines
        fields = entry.split(":")
        return {"home": fields[5], "shell": fields[6], "group": group,
                "groups": [name for name in groups.split() if name != group]}
