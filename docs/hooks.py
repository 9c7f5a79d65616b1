"""MkDocs hooks (mkdocs.yml `hooks:`): the pages made from the code, so the site cannot disagree with it.

- settings.md: the tables of settings (the host's, and the keys of `model` and `engine`) come from k3ops.settings
  (settings_table) at build time, each in place of its marker line (SETTINGS_TABLES).
- runbooks/: the runbook files at the top of the repository (shipped in the package, read by `k3ops doctor`) join
  the site as they are, with their index runbooks/README.md; each file's `---` header, parsed as the doctor parses
  it, shows as a table under the title.
"""

from __future__ import annotations

import re
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File

from k3ops.doctor.runbooks import parse
from k3ops.settings import SPECS, settings_table
from k3ops.settings.engine import EngineSpec
from k3ops.settings.model import ModelSpec

SETTINGS_PAGE = "settings.md"
SETTINGS_TABLES = {f"<!-- {name}: docs/hooks.py puts k3ops.settings.settings_table() here -->": specs
                   for name, specs in (("host settings", SPECS), ("model keys", (ModelSpec,)),
                                       ("engine keys", (EngineSpec,)))}
RUNBOOKS = "runbooks"
LIST_ITEM = re.compile(r"^(?:[-*] |\d+\. )")
# A runbook step's fence says where it runs (runbooks/README.md); these show it above the block instead.
STEP_LABELS = {"sh controller": "On the controller, in the checkout", "text out-of-band": "Out of band, by hand"}


def _runbooks_dir(config) -> Path:
    return Path(config.config_file_path).parent / RUNBOOKS


def on_files(files, config):
    for path in sorted(_runbooks_dir(config).glob("*.md")):
        files.append(File.generated(config, f"{RUNBOOKS}/{path.name}", abs_src_path=str(path)))
    return files


def on_page_read_source(page, config):
    """A runbook's source with its header as a table under the title (MkDocs would read the header as YAML, which
    its titles are not)."""
    uri = page.file.src_uri
    if not uri.startswith(f"{RUNBOOKS}/") or uri == f"{RUNBOOKS}/README.md":
        return None
    book = parse(Path(page.file.abs_src_path))
    text = re.sub(r"\A---\n.*?\n---\n+", "", Path(page.file.abs_src_path).read_text(), count=1, flags=re.DOTALL)
    title, _, body = text.partition("\n")
    body = _lists_after_blank_lines(body)
    for info, label in STEP_LABELS.items():  # Python-Markdown reads no fence whose info string has a space
        body = re.sub(rf"^```{info}$", f"\n*{label}:*\n\n```{info.split()[0]}", body, flags=re.MULTILINE)
    facts = ("| severity | detecting check | automatable | drill |\n|---|---|---|---|\n"
             f"| {book.severity} | {', '.join(book.checks)} | {'yes' if book.automatable else 'no'} | {book.drill} |\n\n"
             "All runbooks: [the index](README.md).\n")
    return f"{title}\n\n{facts}{body}"


def _lists_after_blank_lines(text: str) -> str:
    """A blank line before each list that follows a paragraph: GitHub starts a list there, Python-Markdown does not
    (it would run the items into the paragraph). Fenced blocks are left as they are."""
    lines, fenced = [], False
    for line in text.split("\n"):
        if line.startswith("```"):
            fenced = not fenced
        elif (not fenced and LIST_ITEM.match(line) and lines and lines[-1].strip()
              and not LIST_ITEM.match(lines[-1]) and not lines[-1].startswith(" ")):
            lines.append("")
        lines.append(line)
    return "\n".join(lines)


def on_page_markdown(markdown, page, config, files):
    if page.file.src_uri != SETTINGS_PAGE:
        return markdown
    for marker, specs in SETTINGS_TABLES.items():
        if marker not in markdown:
            raise PluginError(f"{SETTINGS_PAGE} lacks the line {marker!r} that a settings table replaces")
        markdown = markdown.replace(marker, settings_table(specs))
    return markdown
