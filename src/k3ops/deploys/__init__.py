"""Packaged pyinfra deploys: each reads the host's validated spec and composes operations."""

from pathlib import Path

# templates/ at the top of the checkout holds every file a deploy writes onto a host.
TEMPLATES = Path(__file__).resolve().parents[3] / "templates"
