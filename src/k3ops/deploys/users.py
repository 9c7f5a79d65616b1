"""The system users k3ops makes (the service user, the peer-copy user, the MPI user).

Their homes are under root's state directory (layout.USERS_HOME), which stays root's: a user owns its home
and nothing above it, so no user can plant a link where root writes its own state (the maintenance marker,
the fabric check's result, the watchdog's state).
"""

from __future__ import annotations

from ..onhost import layout
from ..operations import owned_files, users


def state_directory() -> None:
    """Root's state directory and the users' homes' parent: root's, whoever had them before (until this
    release the default service user's home was the state directory itself)."""
    for path in (layout.STATE_DIR, layout.USERS_HOME):
        owned_files.directory(name=f"Directory {path} (root's)", path=path, owner="root", mode="755")
    owned_files.no_links(name=f"No link in {layout.STATE_DIR}", path=layout.STATE_DIR)


def system_user(name: str, why: str, shell: str = "/usr/sbin/nologin", groups: list[str] | None = None) -> None:
    """A system user with a group of its name and its home at layout.home(name); `why` names it in the log."""
    state_directory()
    users.system_user(name=f"{why} {name}", user=name, home=layout.home(name), shell=shell, groups=groups)
