"""System users, made and kept by asking the host about that user alone (k3ops.facts.users.SystemUser)."""

from __future__ import annotations

import shlex

from pyinfra import host
from pyinfra.api import operation
from pyinfra.facts.server import Groups
from pyinfra.operations import files

from k3ops.facts.users import SystemUser


@operation()
def system_user(user: str, home: str, shell: str, groups: list[str] | None = None):
    """
    A system user with a group of its name, its home (made, and its own) and its shell; ``groups``, when
    given, are exactly its other groups.

    + user: the user's name
    + home: its home directory
    + shell: its login shell
    + groups: its other groups (``None`` leaves them as they are)

    **Example:**

    .. code:: python

        users.system_user(user="k3ops-nccl", home="/var/lib/k3ops/home/k3ops-nccl", shell="/bin/sh")
    """

    found = host.get_fact(SystemUser, user=user)
    if found is None:
        # A group of the user's name left behind (by a removed user) becomes its group, as pyinfra's does.
        group = ["--gid", user] if user in host.get_fact(Groups) else ["--user-group"]
        other = ["--groups", ",".join(groups)] if groups else []
        yield shlex.join(["useradd", "--system", "--create-home", "--home-dir", home, "--shell", shell,
                          *group, *other, user])
    else:
        changes = [*(["--home", home] if found["home"] != home else []),
                   *(["--shell", shell] if found["shell"] != shell else [])]
        if groups is not None and set(found["groups"]) != set(groups):
            changes += ["--groups", ",".join(groups)]
        if changes:
            yield shlex.join(["usermod", *changes, user])
    yield from files.directory._inner(path=home, user=user, group=user, _no_fail_on_link=True)
