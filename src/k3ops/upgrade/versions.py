"""Whether a driver release exists before a rollout drains anything for it: the repository's own index,
read from the controller (an unknown version is refused before any host is touched)."""

from __future__ import annotations

import gzip
import urllib.request

from ..settings.host import Repository

INDEX_TIMEOUT_SECONDS = 30


def index_urls(repository: Repository) -> list[str]:
    """Where apt reads the repository's package list: flat (`deb URL /`) or by suite and component."""
    base = repository.url.rstrip("/")
    if repository.suite is not None:
        base = f"{base}/dists/{repository.suite}/{repository.component}/binary-amd64"
    return [f"{base}/Packages.gz", f"{base}/Packages"]


def published_versions(repository: Repository, package: str) -> set[str]:
    """Every version of `package` the repository lists; ValueError when its index cannot be read."""
    problems = []
    for url in index_urls(repository):
        try:
            with urllib.request.urlopen(url, timeout=INDEX_TIMEOUT_SECONDS) as response:
                content = response.read()
        except (OSError, ValueError) as error:  # URLError and HTTPError are OSErrors
            problems.append(f"{url}: {error}")
            continue
        text = (gzip.decompress(content) if url.endswith(".gz") else content).decode(errors="replace")
        return versions_in_index(text, package)
    raise ValueError(f"cannot read the package index of {repository.url} from this controller: {'; '.join(problems)}")


def versions_in_index(text: str, package: str) -> set[str]:
    """The versions of `package` among the stanzas of a Packages index."""
    found = set()
    for stanza in text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in stanza.splitlines() if ": " in line and not line.startswith(" "))
        if fields.get("Package") == package and "Version" in fields:
            found.add(fields["Version"])
    return found
