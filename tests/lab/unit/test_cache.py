"""The lab's cache entries are built aside, checked, then put in place: a half-built or broken one is
rebuilt, never reused (issue 13), and a failed step is shown and tried once more.

On the real file system. Issue 13's own case, the hub venv whose pip cannot import itself, is rebuilt by a
cold `lab up` in tests/lab/test_lab.py.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from k3ops_lab import cache, image, state, vendor_repo, wheelhouse

GOOD = "usable\n"
# A build that dies midway, as a `lab up` killed by the user or the machine.
KILLED_BUILD = """
import os, signal, sys
from pathlib import Path
from k3ops_lab import cache

def build(directory):
    (directory / "half").write_text("half of it")
    os.kill(os.getpid(), signal.SIGKILL)

cache.entry(Path(sys.argv[1]), "test entry", build, lambda directory: None)
"""

# One of two builders started together (processes, as two `lab up`s are): each build leaves a mark.
SLOW_BUILD = """
import os, sys, time
from pathlib import Path
from k3ops_lab import cache

def build(directory):
    (Path(sys.argv[2]) / str(os.getpid())).write_text("")
    time.sleep(1)
    (directory / "content").write_text("usable\\n")

def check(directory):
    assert (directory / "content").read_text() == "usable\\n"

cache.entry(Path(sys.argv[1]), "test entry", build, check)
"""


class Log(list):
    def __call__(self, message: str) -> None:
        self.append(message)

    def text(self) -> str:
        return "\n".join(self)


def build_good(directory: Path) -> None:
    (directory / "content").write_text(GOOD)


def check_good(directory: Path) -> None:
    if (directory / "content").read_text() != GOOD:
        raise RuntimeError(f"{directory / 'content'} holds {(directory / 'content').read_text()!r}")


def never(directory: Path) -> None:
    raise AssertionError("a good entry was built again")


def failing_command(directory: Path) -> None:
    subprocess.run(["sh", "-c", "echo 'E: the mirror went away' >&2; exit 3"], check=True, capture_output=True,
                   text=True)


def failing_once(action):
    calls = []

    def flaky(directory: Path) -> None:
        calls.append(directory)
        if len(calls) == 1:
            failing_command(directory)
        action(directory)
    return flaky, calls


def leftovers(path: Path) -> list[str]:
    return sorted(p.name for p in path.parent.glob(f"{path.name}.build-*"))


def test_a_good_entry_is_reused_without_building(tmp_path):
    path = tmp_path / "entry"
    assert cache.entry(path, "test entry", build_good, check_good, log=Log()) == path
    log = Log()
    assert cache.entry(path, "test entry", never, check_good, log=log) == path
    assert (path / "content").read_text() == GOOD and log == []


def test_a_broken_entry_is_rebuilt_and_the_log_says_where_and_why(tmp_path):
    path = tmp_path / "entry"
    cache.entry(path, "test entry", build_good, check_good, log=Log())
    (path / "content").write_text("trunc")
    log = Log()
    cache.entry(path, "test entry", build_good, check_good, log=log)
    assert (path / "content").read_text() == GOOD
    assert f"the lab's test entry at {path} is broken" in log[0] and "holds 'trunc'" in log[0]
    assert leftovers(path) == []


def test_a_build_killed_midway_leaves_nothing_to_reuse(tmp_path):
    path = tmp_path / "entry"
    killed = subprocess.run([sys.executable, "-c", KILLED_BUILD, str(path)], capture_output=True, text=True)
    assert killed.returncode == -9, killed.stderr
    assert not path.exists() and len(leftovers(path)) == 1
    stale = path.with_name(leftovers(path)[0])
    log = Log()
    cache.entry(path, "test entry", build_good, check_good, log=log)
    assert (path / "content").read_text() == GOOD and leftovers(path) == []
    assert f"removing {stale}, left by a build of the lab's test entry that did not finish" in log


def test_a_failed_build_is_tried_again_after_its_error_is_shown(tmp_path):
    path = tmp_path / "entry"
    flaky, calls = failing_once(build_good)
    log = Log()
    cache.entry(path, "test entry", flaky, check_good, log=log)
    assert len(calls) == 2 and (path / "content").read_text() == GOOD
    assert f"building the lab's test entry for {path} failed; trying once more" in log.text()
    assert "exited with status 3" in log.text() and "E: the mirror went away" in log.text()


def test_failing_twice_raises_an_error_naming_the_cache_and_the_step(tmp_path):
    path = tmp_path / "entry"
    with pytest.raises(cache.CacheError) as raised:
        cache.entry(path, "test entry", failing_command, check_good, log=Log())
    message = str(raised.value)
    assert message.startswith(f"building the lab's test entry for {path} failed twice")
    assert "E: the mirror went away" in message
    assert not path.exists() and leftovers(path) == []


def test_a_check_failing_after_the_build_counts_as_a_failed_build(tmp_path):
    path = tmp_path / "entry"
    builds = []

    def cut_short_once(directory: Path) -> None:
        builds.append(directory)
        (directory / "content").write_text("trunc" if len(builds) == 1 else GOOD)
    log = Log()
    cache.entry(path, "test entry", cut_short_once, check_good, log=log)
    assert len(builds) == 2 and (path / "content").read_text() == GOOD
    assert f"checking the lab's test entry for {path} failed; trying once more" in log.text()
    with pytest.raises(cache.CacheError, match="checking the lab's other entry .* failed twice"):
        cache.entry(tmp_path / "other", "other entry", lambda directory: None, check_good, log=Log())


def test_an_entry_that_records_its_location_stays_where_it_was_built(tmp_path):
    """As a venv: `path` is a symlink to the build, and a rebuild replaces both."""
    path = tmp_path / "venv"

    def build_here(directory: Path) -> None:
        (directory / "location").write_text(str(directory))

    def check_location(directory: Path) -> None:
        assert Path((directory / "location").read_text()).resolve() == directory.resolve()

    cache.entry(path, "test venv", build_here, check_location, log=Log(), movable=False)
    first = path.resolve()
    assert path.is_symlink() and first.name.startswith("venv.build-")
    (first / "location").write_text("/elsewhere")
    cache.entry(path, "test venv", build_here, check_location, log=Log(), movable=False)
    assert path.is_symlink() and not first.exists()
    check_location(path)


def test_a_build_a_process_runs_from_is_kept_until_it_stops(tmp_path):
    """As the hub's venv, which another lab instance's olah runs from while this one rebuilds it."""
    path = tmp_path / "venv"
    cache.entry(path, "test venv", build_good, check_good, log=Log(), movable=False)
    first = path.resolve()
    (first / "content").write_text("trunc")
    running = subprocess.Popen(["sleep", "60"], cwd=first)
    try:
        log = Log()
        cache.entry(path, "test venv", build_good, check_good, log=log, movable=False)
        assert path.resolve() != first and (path / "content").read_text() == GOOD
        assert first.is_dir() and f"keeping {first}, the replaced build, while a running process uses it" in log
        assert cache.entry(path, "test venv", never, check_good, log=Log(), movable=False) == path and first.is_dir()
    finally:
        running.kill()
        running.wait()
    log = Log()
    cache.entry(path, "test venv", never, check_good, log=log, movable=False)
    assert not first.exists() and log == [f"removing {first}, a build of the lab's test venv replaced since, "
                                          "which no process uses"]


def test_a_broken_entry_stays_in_place_until_its_new_build_passes(tmp_path):
    """A lab that serves the entry meanwhile (another instance's) never finds it gone."""
    path = tmp_path / "entry"
    cache.entry(path, "test entry", build_good, check_good, log=Log())
    (path / "content").write_text("trunc")
    seen = []

    def build_while_looking(directory: Path) -> None:
        seen.append((path / "content").read_text())
        failing_command(directory)
    with pytest.raises(cache.CacheError):
        cache.entry(path, "test entry", build_while_looking, check_good, log=Log())
    assert seen == ["trunc", "trunc"] and (path / "content").read_text() == "trunc" and leftovers(path) == []


def test_two_builders_at_once_build_it_once(tmp_path):
    """As two `lab up`s on one machine: the second waits for the first, then reuses its entry."""
    path, builds = tmp_path / "entry", tmp_path / "builds"
    builds.mkdir()
    builders = [subprocess.Popen([sys.executable, "-c", SLOW_BUILD, str(path), str(builds)], stdout=subprocess.PIPE,
                                 text=True) for _ in range(2)]
    outputs = [builder.communicate(timeout=60)[0] for builder in builders]
    assert [builder.returncode for builder in builders] == [0, 0]
    assert len(list(builds.iterdir())) == 1 and (path / "content").read_text() == GOOD
    assert sorted(output.count("building the lab's test entry") for output in outputs) == [0, 1]


@pytest.fixture
def lab_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(state, "CACHE_DIR", tmp_path / "cache")
    return tmp_path / "cache"


def test_a_vendor_repository_with_a_broken_signature_is_rebuilt(lab_cache):
    built = vendor_repo.build(log=Log())
    release = built / "rocm" / "apt" / "7.0.2" / "dists" / "noble" / "InRelease"
    release.write_text(release.read_text()[:100])
    log = Log()
    assert vendor_repo.build(log=log) == built
    assert f"at {built} is broken" in log[0] and "gpgv" in log[0]
    vendor_repo.check(built)


def write_wheel(directory: Path, name: str, requires: tuple[str, ...] = ()) -> None:
    """A pure wheel carrying only its metadata: all pip needs to resolve it."""
    info = f"{name}-1.0.dist-info"
    with zipfile.ZipFile(directory / f"{name}-1.0-py3-none-any.whl", "w") as wheel:
        wheel.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n"
                       + "".join(f"Requires-Dist: {requirement}\n" for requirement in requires))
        wheel.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: k3ops-test\nRoot-Is-Purelib: true\n"
                       "Tag: py3-none-any\n")
        wheel.writestr(f"{info}/RECORD", "")


def test_a_wheelhouse_missing_a_dependency_fails_its_check(tmp_path, monkeypatch):
    monkeypatch.setattr(wheelhouse, "WHEELHOUSE_REQUIREMENTS", ("k3lab-app==1.0",))
    write_wheel(tmp_path, "k3lab_app", ("k3lab-dependency==1.0",))
    write_wheel(tmp_path, "k3lab_dependency")
    wheelhouse.check(tmp_path)
    (tmp_path / "k3lab_dependency-1.0-py3-none-any.whl").unlink()
    with pytest.raises(subprocess.CalledProcessError) as raised:
        wheelhouse.check(tmp_path)
    assert "k3lab-dependency" in raised.value.stderr


def write_dpkg_status(tree: Path, half_configured: str = "") -> None:
    (tree / "var" / "lib" / "dpkg").mkdir(parents=True)
    (tree / "var" / "lib" / "dpkg" / "status").write_text("\n".join(
        f"Package: {package}\nStatus: install ok {'half-configured' if package == half_configured else 'installed'}\n"
        f"Maintainer: k3ops\nVersion: 1\nArchitecture: amd64\nDescription: {package}\n"
        for package in image.BASE_PACKAGES))


def test_a_base_image_with_a_package_left_half_configured_fails_its_check(tmp_path):
    good, broken = tmp_path / "good", tmp_path / "broken"
    for tree, half in ((good, ""), (broken, "openssh-server")):
        write_dpkg_status(tree, half)
        for path in (*image.BOOTS_WITH, "etc/ssh/sshd_config"):
            (tree / path).parent.mkdir(parents=True, exist_ok=True)
            (tree / path).write_text("")
    image.check(good)
    (broken / "etc" / "ssh" / "ssh_host_ed25519_key").write_text("")
    with pytest.raises(RuntimeError) as raised:
        image.check(broken)
    assert "openssh-server is not fully installed (iF)" in str(raised.value)
    assert "host key /etc/ssh/ssh_host_ed25519_key" in str(raised.value)
