"""Where pyinfra stages what it uploads or downloads: a directory only the SSH user may enter.

By default pyinfra stages through a predictable name in /tmp (pyinfra-<sha1 of the destination>): a
download as root (`curl -o /tmp/pyinfra-...`, then `mv`), and under sudo every upload (SFTP as the SSH user,
then `cp` as root), readable by others while there and plantable by another user first. k3ops's deploys
stage in STAGING_DIRECTORY instead, relative to the SSH user's home, where SFTP and commands start.
"""

from __future__ import annotations

import functools

from pyinfra import config, host

from ..operations import owned_files

STAGING_DIRECTORY = ".cache/k3ops-staging"


def staged_privately(deploy_function):
    """A top-level deploy whose operations stage their files in the SSH user's private directory.

    Set before the deploy starts: pyinfra takes a deploy's arguments, the temporary directory among them, as
    it enters it, from the configuration it loads each host's deploy with (a copy of the run's, which is the
    one pyinfra reads where no operation's arguments reach)."""
    @functools.wraps(deploy_function)
    def run(*args, **kwargs):
        config.TEMP_DIR = host.state.config.TEMP_DIR = STAGING_DIRECTORY
        owned_files.staging_directory(name=f"Staging directory ~/{STAGING_DIRECTORY} (the SSH user's alone)",
                                      path=STAGING_DIRECTORY)
        return deploy_function(*args, **kwargs)
    return run
