"""Building an entry of the lab's cache (base image, repositories, venvs, wheelhouse, llama-server) so
that a half-built or broken one is rebuilt, never reused.

An entry is built in a new directory beside its path, checked there, and only then renamed to its
path: a build killed midway leaves nothing at the path. What is found at the path is checked again
before it is reused, so an entry broken since (issue 13: a fresh venv whose pip could not import its
own modules) is rebuilt. A failed build or check is shown and tried once more, since a first build on
a new machine can fail for a passing reason (a download); a second failure stops, naming the cache and
the step. One builder at a time per entry (a lock file beside it): a second `lab up` or test session
waits for the first, then reuses what it built.

Lab instances share the cache (K3OPS_LAB_INSTANCE), so an entry one lab rebuilds may be in use by another: the
hub's olah runs from its venv. A broken entry is replaced only once its new build has passed its check, by a
rename, and a replaced build that a running process still uses (its command line, working directory or mapped
files) is kept until a later `lab up` or `lab build` finds it unused.
"""

from __future__ import annotations

import fcntl
import os
import shlex
import shutil
import subprocess
import tempfile
import textwrap
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

OUTPUT_LINES = 20  # of a failed command's output, shown with its error
COMMAND_WIDTH = 200


class CacheError(RuntimeError):
    """A cache entry that failed to build or check twice."""


def entry(path: Path, what: str, build: Callable[[Path], None], check: Callable[[Path], None], log=print,
          movable: bool = True) -> Path:
    """`path`, reused if `check(path)` passes; else `build(directory)` fills a new empty directory,
    `check(directory)` must pass, and the directory is renamed to `path`.

    `check` raises unless the entry is usable as its consumer uses it. `movable=False` is for a tree
    that records its own location (a venv, in its scripts' #! lines): it stays where it was built and
    `path` becomes a symlink to it.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with _locked(path):
        others = _other_builds(path)
        for retired in [build for build in others if (build / RETIRED).exists() and not _in_use(build)]:
            log(f"removing {retired}, a build of the lab's {what} replaced since, which no process uses")
            _remove(retired)
        if os.path.lexists(path):
            problem = _failure(check, path)
            if problem is None:
                return path
            log(f"the lab's {what} at {path} is broken; rebuilding it. {problem}")
        for stale in [build for build in others if not (build / RETIRED).exists()]:
            log(f"removing {stale}, left by a build of the lab's {what} that did not finish")
            _remove(stale)
        for attempt in (1, 2):
            log(f"building the lab's {what} at {path}")
            built = Path(tempfile.mkdtemp(prefix=f"{path.name}.build-", dir=path.parent))
            built.chmod(0o755)  # not mkdtemp's 0700: an image's root directory, for one, must be traversable
            step, problem = "building", _failure(build, built)
            if problem is None:
                step, problem = "checking", _failure(check, built)
            if problem is None:
                _put_in_place(built, path, movable, log)
                return path
            _remove(built)
            if attempt == 1:
                log(f"{step} the lab's {what} for {path} failed; trying once more. {problem}")
        raise CacheError(f"{step} the lab's {what} for {path} failed twice: {problem}")


RETIRED = ".k3ops-lab-replaced"  # marks a build that was replaced while a process still used it


def _other_builds(path: Path) -> list[Path]:
    """The builds beside `path` (finished or not) other than the one it is or points to."""
    current = path.resolve() if os.path.lexists(path) else None
    return [build for build in sorted(path.parent.glob(f"{path.name}.build-*")) if build.resolve() != current]


def _put_in_place(built: Path, path: Path, movable: bool, log) -> None:
    """The checked build at `path`, by rename (a symlink replaced for a build that stays where it was built);
    what was there before goes, unless a process still uses it."""
    old = path.resolve() if path.is_symlink() else None
    if movable:
        if os.path.lexists(path):
            # Named as a build, so that one left by a crash here is removed as an unfinished build.
            aside = Path(tempfile.mkdtemp(prefix=f"{path.name}.build-", dir=path.parent))
            os.rename(path, aside / path.name)
            built.rename(path)
            _remove(aside)
        else:
            built.rename(path)
        return
    if os.path.lexists(path) and not path.is_symlink():
        _remove(path)
    link = path.with_name(f".{path.name}.link")
    link.unlink(missing_ok=True)
    link.symlink_to(built.name)
    os.replace(link, path)
    if old is not None and old.parent == path.parent and old.name.startswith(f"{path.name}.build-"):
        if _in_use(old):
            log(f"keeping {old}, the replaced build, while a running process uses it")
            (old / RETIRED).write_text("")
        else:
            _remove(old)


def _in_use(directory: Path) -> bool:
    """Whether a running process has `directory` in its command line, as its working directory, or mapped."""
    prefix = f"{directory.resolve()}/"
    for process in Path("/proc").iterdir():
        if not process.name.isdigit():
            continue
        try:
            arguments = (process / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cwd = os.readlink(process / "cwd")
            maps = (process / "maps").read_text(errors="replace")
        except OSError:  # gone, or a kernel thread
            continue
        if prefix in arguments or f"{cwd}/".startswith(prefix) or prefix in maps:
            return True
    return False


def _failure(action: Callable[[Path], None], directory: Path) -> str | None:
    """What went wrong when running `action(directory)`, or None."""
    try:
        action(directory)
    except Exception as error:  # whatever failed, it is shown and the step tried again
        return _describe(error)
    return None


def _describe(error: Exception) -> str:
    """The error's text, and for a failed command, the command and the last lines of its output."""
    output = getattr(error, "stderr", None) or getattr(error, "stdout", None) or ""
    if isinstance(output, bytes):
        output = output.decode(errors="replace")
    if isinstance(error, subprocess.CalledProcessError):
        command = error.cmd if isinstance(error.cmd, str) else shlex.join(map(str, error.cmd))
        text = f"`{textwrap.shorten(command, COMMAND_WIDTH)}` exited with status {error.returncode}"
    else:
        text = str(error) or type(error).__name__
    return "\n".join([text, *output.strip().splitlines()[-OUTPUT_LINES:]])


def _remove(path: Path) -> None:
    """A directory, a file, or a symlink together with the build beside it that it points to."""
    if path.is_symlink():
        target = os.readlink(path)
        path.unlink()
        if "/" not in target and target.startswith(f"{path.name}.build-"):
            _remove(path.parent / target)
    elif path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


@contextmanager
def _locked(path: Path):
    with open(path.with_name(f".{path.name}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
