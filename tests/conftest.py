"""Shared test helpers: where the real captured tool outputs live."""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
REAL_FIXTURES = REPO_ROOT.parent / "shared" / "fixtures" / "real"


def real_output(relative: str) -> str:
    """A captured output from ../shared/fixtures/real/, without its two provenance header lines."""
    text = (REAL_FIXTURES / relative).read_text()
    return text.split("\n", 2)[2]
