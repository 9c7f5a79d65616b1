"""The simulated vendor repositories: named, versioned, pinned and signed like the real ones."""

import importlib
import re
import subprocess

import pytest

from k3ops_lab import state, vendor_repo


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    original = state.CACHE_DIR
    state.CACHE_DIR = cache
    try:
        yield vendor_repo.build(log=lambda message: None)
    finally:
        state.CACHE_DIR = original


def stanzas(index_file) -> list[dict[str, str]]:
    """The stanzas of an apt Packages index, field -> value."""
    return [dict(line.split(": ", 1) for line in stanza.splitlines() if ": " in line)
            for stanza in index_file.read_text().split("\n\n") if stanza.strip()]


def packages_index(index_file) -> set[tuple[str, str]]:
    """(package, version) pairs listed in an apt Packages index."""
    return {(stanza["Package"], stanza["Version"]) for stanza in stanzas(index_file)}


def test_cuda_repository_has_two_driver_branches_with_their_pieces(built):
    index = packages_index(built / vendor_repo.CUDA_REPO_PATH / "Packages")
    for version in ("570.195.03", "580.105.08", "580.126.09"):
        for package in ("nvidia-open", "nvidia-driver", "nvidia-kernel-open-dkms", "nvidia-kernel-dkms",
                        "nvidia-driver-cuda", "nvidia-persistenced", f"cuda-drivers-{version[:3]}",
                        f"nvidia-driver-pinning-{version[:3]}"):
            assert (package, f"{version}-1") in index
    assert ("nvidia-fabricmanager-570", "570.195.03-1") in index
    assert ("nvidia-fabricmanager", "580.126.09-1") in index
    names = {name for name, _ in index}
    assert {"datacenter-gpu-manager-4-cuda13", "libnccl2", "nccl-tests"} <= names


def test_amd_repositories_exist_for_two_rocm_releases(built):
    for release in vendor_repo.ROCM_RELEASES:
        amdgpu = packages_index(built / f"amdgpu/{release}/ubuntu/dists/noble/main/binary-amd64/Packages")
        rocm = packages_index(built / f"rocm/apt/{release}/dists/noble/main/binary-amd64/Packages")
        assert [name for name, _ in amdgpu] == ["amdgpu-dkms"]
        assert {name for name, version in rocm if version.startswith(release + ".")} == {
            "rocm", "rocm-core", "rocm-smi-lib", "amd-smi-lib", "rccl", "rccl-tests"}


@pytest.mark.parametrize("release_dir", [
    vendor_repo.CUDA_REPO_PATH, vendor_repo.CONTAINER_TOOLKIT_REPO_PATH, "rocm/apt/7.0.2/dists/noble",
])
def test_release_files_verify_against_the_published_key(built, release_dir, tmp_path):
    keyring = tmp_path / "keyring.gpg"
    key = (built / vendor_repo.SIGNING_KEY_PATHS[0]).read_bytes()
    subprocess.run(["gpg", "--batch", "--dearmor", "-o", str(keyring)], input=key, check=True)
    verify = ["gpgv", "--keyring", str(keyring)]
    assert subprocess.run([*verify, str(built / release_dir / "InRelease")], capture_output=True).returncode == 0
    tampered = tmp_path / "InRelease"
    tampered.write_text((built / release_dir / "InRelease").read_text().replace("SHA256", "SHA512", 1))
    assert subprocess.run([*verify, str(tampered)], capture_output=True).returncode != 0


def package_stanza(index_file, name) -> dict[str, str]:
    return next(stanza for stanza in stanzas(index_file) if stanza["Package"] == name)


def deb_contents(deb) -> dict[str, str]:
    """Path -> link target ('' for a file) of each entry in a .deb, as dpkg-deb lists them."""
    listing = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True, check=True).stdout
    entries = {}
    for line in listing.splitlines():
        path, _, target = line.split(maxsplit=5)[5].partition(" -> ")
        if not path.endswith("/"):
            entries[path.removeprefix(".")] = target
    return entries


def test_nccl_tests_installs_both_binaries_and_what_they_need_for_mpirun(built):
    cuda = built / vendor_repo.CUDA_REPO_PATH
    stanza = package_stanza(cuda / "Packages", "nccl-tests")
    assert stanza["Version"] == vendor_repo.NCCL_TESTS_VERSION == "2.17.6-1"
    assert stanza["Depends"] == "libnccl2, libopenmpi3, python3-mpi4py"
    assert set(deb_contents(cuda / stanza["Filename"])) == {"/usr/bin/all_reduce_perf", "/usr/bin/alltoall_perf"}


@pytest.mark.parametrize("release", vendor_repo.ROCM_RELEASES)
def test_each_rocm_release_ships_rccl_and_rccl_tests_at_its_version(built, release):
    repo = built / f"rocm/apt/{release}"
    index = repo / "dists/noble/main/binary-amd64/Packages"
    rocm_version = package_stanza(index, "rocm-core")["Version"]
    rccl, tests = package_stanza(index, "rccl"), package_stanza(index, "rccl-tests")
    assert rccl["Version"] == tests["Version"] == rocm_version
    assert tests["Depends"] == f"rccl (= {rocm_version}), libopenmpi3, python3-mpi4py"
    number = rocm_version.split(".")[3].split("-")[0]
    library = deb_contents(repo / rccl["Filename"])
    assert library[f"/opt/rocm-{release}/lib/librccl.so.1"] == f"librccl.so.1.0.{number}"
    assert f"/opt/rocm-{release}/lib/librccl.so.1.0.{number}" in library
    assert {f"/opt/rocm-{release}/bin/all_reduce_perf", f"/opt/rocm-{release}/bin/alltoall_perf"} <= set(
        deb_contents(repo / tests["Filename"]))


def test_rccl_records_the_rccl_its_release_ships():
    _, rocm = vendor_repo.rocm_packages("7.0.2")
    rccl = next(package for package in rocm if package.name == "rccl")
    assert rccl.files[f"{vendor_repo.VERSION_MARKERS}/rccl"] == "2.26.6\n"


def test_pinning_package_pins_its_branch():
    pinning = next(p for p in vendor_repo.nvidia_driver_packages("580.105.08") if p.name == "nvidia-driver-pinning-580")
    (preferences,) = pinning.files.values()
    assert "Pin: version 580.*" in preferences and "Pin-Priority: 1000" in preferences


def test_driver_meta_package_requires_the_exact_same_release():
    driver = next(p for p in vendor_repo.nvidia_driver_packages("580.126.09") if p.name == "nvidia-driver")
    assert "nvidia-driver-cuda (= 580.126.09-1)" in driver.depends
    assert "nvidia-kernel-open-dkms (= 580.126.09-1) | nvidia-kernel-dkms (= 580.126.09-1)" in driver.depends


def test_every_tool_entry_point_names_a_real_simulator_function():
    """A package's /usr/bin script imports labsim.<module>.<function>: each must exist."""
    entry = re.compile(r"^from labsim\.(\w+) import (\w+)$", re.MULTILINE)
    checked = 0
    for _suite, packages in vendor_repo.repositories().values():
        for package in packages:
            for path, content in package.files.items():
                for module, function in entry.findall(content):
                    simulator = importlib.import_module(f"k3ops_lab.sim.{module}")
                    assert callable(getattr(simulator, function, None)), f"{package.name}: {path}"
                    checked += 1
    assert checked >= 12


def test_building_leaves_no_gpg_agent_running(built):
    agents = subprocess.run(["pgrep", "-af", "gpg-agent"], capture_output=True, text=True).stdout
    assert str(built.parent.parent / "gnupg") not in agents
