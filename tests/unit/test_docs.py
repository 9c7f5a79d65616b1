"""The docs: the site builds with `mkdocs build --strict` (a broken link between pages fails it), its settings page
holds every setting and the runbooks each have a page; and every `k3ops` command, flag and repository path that
README.md and docs/ show exists."""

from __future__ import annotations

import argparse
import html
import re
import subprocess
import sys

import pytest

from k3ops.cli import parser
from k3ops.doctor.runbooks import runbooks
from k3ops.settings import SPECS, settings_table
from k3ops.settings.engine import EngineSpec
from k3ops.settings.model import ModelSpec

from ..conftest import REPO_ROOT

PAGES = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
# Top-level parts of the repository: a path the docs name under one of them must exist.
TOP = ("src/", "deploys/", "inventory/", "tests/", "templates/", "runbooks/", "scripts/", "benchmarks/", "docs/",
       ".ci/")
# `k3ops check` passes its arguments to pytest: the host checks' own options, and pytest's the docs use.
CHECK_OPTIONS = {"--limit", "--data", "-q", "-x", "-k"}


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    site = tmp_path_factory.mktemp("site")
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", "mkdocs.yml", "-d", str(site)],
                            cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    return site


def test_the_settings_page_has_every_setting_and_every_key_of_model_and_engine(site):
    """Each row of settings_table(), as the page shows it: name, default and meaning."""
    page = (site / "settings" / "index.html").read_text()
    assert "<!--" not in page.split('role="main"')[1], "a settings table marker was left unreplaced"
    shown = {}
    for row in re.findall(r"<tr>(.*?)</tr>", page, re.DOTALL):
        cells = [html.unescape(re.sub(r"<[^>]+>", "", cell)).strip() for cell in re.findall(r"<td>(.*?)</td>", row, re.DOTALL)]
        if cells:
            shown.setdefault(cells[0], []).append(cells)
    for spec in (*SPECS, ModelSpec, EngineSpec):
        for line in settings_table((spec,)).splitlines()[2:]:
            expected = [cell.strip().replace("`", "") for cell in line.strip("|").split(" | ")]
            assert expected in shown.get(expected[0], []), f"{spec.__name__}: {expected}"


def test_each_runbook_has_a_page_and_the_index_links_it(site):
    index = (site / "runbooks" / "index.html").read_text()
    for book in runbooks().values():
        page = (site / "runbooks" / book.id / "index.html").read_text()
        assert f">{book.title}</h1>" in page.replace("&#39;", "'"), book.id
        assert f'href="{book.id}/">{book.id}</a>' in index, book.id


def shown_commands(text: str) -> list[tuple[str, bool]]:
    """Each `k3ops ...` the text shows: a code block's line (whole: True) or an inline span (only its flags)."""
    lines = [(line.strip().removeprefix("$ ").split("  #")[0].strip(), True)
             for line in text.splitlines() if line.startswith("    ") and line.strip().removeprefix("$ ").startswith("k3ops ")]
    spans = [(span, False) for span in re.findall(r"`(k3ops [^`]*)`", text)]
    return lines + spans


def subcommand(words: list[str]) -> tuple[argparse.ArgumentParser, list[str]]:
    """The deepest parser the words name (`k3ops upgrade driver ...`), and the words after it."""
    current, rest = parser(), words[1:]
    while rest:
        choices = next((action.choices for action in current._actions
                        if isinstance(action, argparse._SubParsersAction)), {})
        if rest[0] not in choices:
            break
        current, rest = choices[rest[0]], rest[1:]
    return current, rest


def whole(line: str) -> list[str]:
    """A code line as a command: optional parts taken (`[--json]`), the first of alternatives (`1|25%`)."""
    line = re.sub(r"\[([^\]]*)\]", r"\1", line)
    return [word.split("|")[0] for word in line.split()]


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_k3ops_command_the_docs_show_exists_with_its_flags(page):
    commands = shown_commands(page.read_text())
    for command, is_line in commands:
        words = whole(command)
        found, rest = subcommand(words)
        flags = {word.split("=")[0] for word in rest if word.startswith("-")}
        known = set(found._option_string_actions) | (CHECK_OPTIONS if found.prog == "k3ops check" else set())
        assert flags <= known, f"{page.name}: `{command}`: {sorted(flags - known)} not in `{found.prog} --help`"
        if is_line:
            try:
                parser().parse_args(words[1:])
            except SystemExit:
                pytest.fail(f"{page.name}: `{command}` does not parse as `k3ops` arguments")


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_repository_path_the_docs_name_exists(page):
    named = {path for path in re.findall(r"`([^`\s]+)`", page.read_text()) + re.findall(r"\]\(([^)#\s]+)\)", page.read_text())
             if path.startswith(TOP) and not re.search(r"[<>*{}$]", path)}
    base = REPO_ROOT if page.name == "README.md" else REPO_ROOT / "docs"
    missing = [path for path in sorted(named)
               if not (REPO_ROOT / path).exists() and not (base / path).exists()]
    assert not missing, f"{page.name} names paths the repository does not have: {missing}"
