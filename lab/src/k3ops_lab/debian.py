"""The Debian mirrors the controller's own apt uses: the lab fetches through the same ones."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

SUITE = "bookworm"
APT_SOURCES = (Path("/etc/apt/sources.list"), Path("/etc/apt/sources.list.d"))
ONE_LINE_SOURCE = re.compile(r"^deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+(\S+)")
DEFAULT_ARCHIVE = "http://deb.debian.org/debian"
DEFAULT_SECURITY = "http://deb.debian.org/debian-security"


@dataclass(frozen=True)
class Mirrors:
    archive: str
    security: str

    def sources(self) -> str:
        """A deb822 sources file for a lab host, pointing at the same mirrors."""
        return (
            f"Types: deb\nURIs: {self.archive}\nSuites: {SUITE} {SUITE}-updates\nComponents: main\n"
            "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n"
            f"Types: deb\nURIs: {self.security}\nSuites: {SUITE}-security\nComponents: main\n"
            "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
        )

    def release_files(self) -> list[str]:
        """The signed index of every suite a lab host uses."""
        return [f"{self.archive}/dists/{SUITE}/InRelease", f"{self.archive}/dists/{SUITE}-updates/InRelease",
                f"{self.security}/dists/{SUITE}-security/InRelease"]


def controller_mirrors() -> Mirrors:
    """Read the controller's apt sources; fall back to Debian's own redirector."""
    pairs = list(_source_pairs())
    archive = next((uri for uri, suite in pairs if suite in (SUITE, f"{SUITE}-updates")), DEFAULT_ARCHIVE)
    security = next((uri for uri, suite in pairs if suite == f"{SUITE}-security"), DEFAULT_SECURITY)
    return Mirrors(archive=archive.rstrip("/"), security=security.rstrip("/"))


def _source_pairs():
    """(uri, suite) for every Debian source the controller lists, one-line and deb822 alike."""
    files: list[Path] = []
    for location in APT_SOURCES:
        if location.is_dir():
            files.extend(sorted(location.glob("*.list")) + sorted(location.glob("*.sources")))
        elif location.exists():
            files.append(location)
    for path in files:
        text = path.read_text()
        if path.suffix == ".sources":
            for stanza in text.split("\n\n"):
                fields = dict(
                    line.split(":", 1) for line in stanza.splitlines() if ":" in line and not line.startswith("#")
                )
                for uri in fields.get("URIs", "").split():
                    for suite in fields.get("Suites", "").split():
                        yield uri, suite
        else:
            for line in text.splitlines():
                match = ONE_LINE_SOURCE.match(line.strip())
                if match:
                    yield match.group(1), match.group(2)
