"""The inventory's data after a rollout: where its release's setting (`nvidia_driver_version`, `rocm_release`, the
model's revision) is set, the exact edit that makes it say what the fleet now runs, and (`--write-data`) that edit
made, so that the next plain deploy agrees with the fleet instead of being refused on every serving host.

Only a group_data file's top-level assignment of one of the versions the hosts ran (for a model, a line holding
the revision they ran) is rewritten; a value set per host in the inventory, or anything computed, is named for a
person to change.
"""

from __future__ import annotations

import os
import re
from pathlib import Path


def assignment_of(setting: str) -> re.Pattern:
    """A group_data file's top-level `setting = "value"` line."""
    return re.compile(rf"^{setting}\s*=\s*(?P<quote>[\"'])(?P<value>[^\"'\n]*)(?P=quote)\s*(?:#.*)?$")


def data_files(inventory: str) -> list[Path]:
    """The inventory and the group_data files pyinfra reads with it (beside it, and in the working directory)."""
    path = Path(inventory).resolve()
    folders = sorted({path.parent / "group_data", Path.cwd().resolve() / "group_data"})
    return [path, *(data for folder in folders if folder.is_dir() for data in sorted(folder.glob("*.py")))]


def lines_setting(inventory: str, setting: str) -> list[tuple[Path, int, str]]:
    """Every line that names the setting: (file, line number, the line)."""
    return [(path, number, line) for path in data_files(inventory)
            for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1) if setting in line]


def change(inventory: str, setting: str, to: str, ran: set[str], write: bool) -> list[str]:
    """What to change (or, with `write`, what was changed) for the inventory's data to say `setting = to`; `ran`:
    the versions the upgraded hosts ran before."""
    found = lines_setting(inventory, setting)
    if not found:
        groups = Path(inventory).resolve().parent / "group_data" / "all.py"
        return [f"no file sets {setting} (every host takes k3ops' default): add `{setting} = \"{to}\"` to {groups}"]
    said, pattern = [], assignment_of(setting)
    for path, number, line in found:
        assignment = pattern.match(line)
        if assignment is None or path.parent.name != "group_data":
            said.append(f"{path}:{number}: `{line.strip()}`: set it to \"{to}\" by hand")
        elif assignment["value"] == to:
            said.append(f"{path}:{number}: already says {to}")
        elif assignment["value"] not in ran:
            said.append(f"{path}:{number}: says {assignment['value']}, which no upgraded host ran: left as it is")
        else:
            said.append(rewritten(path, number, assignment["value"], to, write))
    return said


def revision_change(inventory: str, to: str, ran: set[str], write: bool) -> list[str]:
    """As `change`, for a model's revision: a commit sha is found as itself wherever the data writes it (a key of
    the model's dict), so each group_data line holding one the hosts ran is changed to `to`."""
    found = [(path, number, line) for path in data_files(inventory)
             for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
             if any(revision in line for revision in ran)]
    if not found:
        return [f"no file of the inventory's data names the revision the hosts ran ({', '.join(sorted(ran))}): "
                f"set the model's revision to {to} where it is set"]
    return [f"{path}:{number}: `{line.strip()}`: set it to \"{to}\" by hand" if path.parent.name != "group_data"
            else rewritten(path, number, next(revision for revision in ran if revision in line), to, write)
            for path, number, line in found]


def rewritten(path: Path, number: int, old: str, to: str, write: bool) -> str:
    """Line `number` of a group_data file with `old` changed to `to` (only with `write`), in words."""
    if not write:
        return f"{path}:{number}: change {old} to {to} (or rerun with --write-data)"
    lines = path.read_text().splitlines(keepends=True)
    lines[number - 1] = lines[number - 1].replace(old, to, 1)
    written = path.with_name(f".{path.name}.k3ops-new")
    written.write_text("".join(lines))
    written.chmod(path.stat().st_mode & 0o7777)
    os.replace(written, path)  # whole, old or new, for a reader at any moment
    return f"{path}:{number}: {old} -> {to} (written)"
