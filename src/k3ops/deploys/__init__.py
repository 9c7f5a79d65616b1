"""Packaged pyinfra deploys: each reads the host's validated spec and composes operations."""

from pathlib import Path

from .. import templates

# Every file a deploy writes onto a host: templates/ in the repository, k3ops.templates when installed.
TEMPLATES = Path(templates.__path__[0])
