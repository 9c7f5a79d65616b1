"""What a revision holds: every file's path, size and the Hub's own digest of it.

The Hub gives a sha256 for files in LFS or Xet storage (the weights) and only the git blob id for small
files kept in git (config.json): both are checked, each with its own hash.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True)
class FileEntry:
    path: str
    size: int
    sha256: str | None = None
    blob_id: str | None = None


@dataclass(frozen=True)
class Manifest:
    repo_id: str
    revision: str
    files: tuple[FileEntry, ...]

    @property
    def total_bytes(self) -> int:
        return sum(entry.size for entry in self.files)

    def to_json(self) -> str:
        return json.dumps({"repo_id": self.repo_id, "revision": self.revision,
                           "files": [asdict(entry) for entry in self.files]}, indent=1, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Manifest:
        data = json.loads(text)
        return cls(repo_id=data["repo_id"], revision=data["revision"],
                   files=tuple(FileEntry(**entry) for entry in data["files"]))

    def save(self, path: Path) -> None:
        write_atomically(path, self.to_json())

    @classmethod
    def load(cls, path: Path) -> Manifest:
        return cls.from_json(path.read_text())


def write_atomically(path: Path, text: str) -> None:
    """Write a small file so that readers see the old content or the new, never a torn one."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(temporary, "w") as file:
        file.write(text)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, path)
