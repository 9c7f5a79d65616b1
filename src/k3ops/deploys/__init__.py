"""Packaged pyinfra deploys: each reads the host's validated spec and composes operations."""

from pathlib import Path

from pyinfra.api.util import get_template

from .. import templates

# Every file a deploy writes onto a host: templates/ in the repository, k3ops.templates when installed.
TEMPLATES = Path(templates.__path__[0])


def rendered(template: str, **values) -> str:
    """A file under TEMPLATES rendered as pyinfra's files.template renders it (Jinja2, strict, its last newline
    kept); a file that is no template comes back as it is."""
    return get_template(str(TEMPLATES / template)).render(values)
