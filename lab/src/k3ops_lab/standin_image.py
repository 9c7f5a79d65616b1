"""The lab's stand-in engine images: what the vLLM and SGLang recipes' container units pull, by digest, from the
lab registry.

One layer, built on the controller without Docker from files the lab already has: the base image's
python3 (its interpreter, standard library and the libraries they load), the lab's pinned llama-server
build, and engine_standin.py as /usr/local/bin/vllm and /usr/local/bin/sglang. The vLLM image's entry point is
`vllm serve`, as vllm/vllm-openai's is, so the unit's `docker run IMAGE --model ... --port ...` runs it
unchanged; the SGLang image has none, as lmsysorg/sglang has none, and its recipes run `sglang serve ...`. Every
byte follows from those inputs (sorted members, no times, no owners), so each digest is the same on every build
of them. Each engine's entry (CACHE_DIR/images/<engine>-standin-<key>) holds the blobs by digest and the manifest.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import io
import json
import tarfile
from pathlib import Path

from . import cache, engine_standin, llama_server, state

# Each engine's image: its repository in the registry, its entry point, what it stands in for.
IMAGES = {"vllm": ("k3ops-lab/vllm-openai", ["vllm", "serve"], "vllm/vllm-openai"),
          "sglang": ("k3ops-lab/sglang", None, "lmsysorg/sglang")}
TAG = "kimi-k3-standin"
STANDIN = Path(engine_standin.__file__)
PROGRAMS = tuple(f"usr/local/bin/{engine}" for engine in IMAGES)  # the stand-in, under each engine's name
LLAMA_SERVER = engine_standin.LLAMA_SERVER.lstrip("/")
PYTHON = "usr/bin/python3.11"
STDLIB = "usr/lib/python3.11"
LIBRARIES = "usr/lib/x86_64-linux-gnu"
LOADER = "usr/lib64/ld-linux-x86-64.so.2"
# Parts of the standard library a web server never imports: left out to keep the layer small.
STDLIB_LEFT_OUT = ("test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3", "pydoc_data", "__pycache__",
                   "config-3.11-x86_64-linux-gnu")
LAYOUT_LINKS = {"bin": "usr/bin", "lib": "usr/lib", "lib64": "usr/lib64", "sbin": "usr/sbin",
                "usr/bin/python3": "python3.11", LOADER: f"../lib/x86_64-linux-gnu/{Path(LOADER).name}"}
# The AMD recipe's `--group-add video --group-add render` name groups the image must have (as ROCm's images do).
ETC = {"etc/passwd": "root:x:0:0:root:/root:/bin/sh\n", "etc/group": "root:x:0:\nvideo:x:44:\nrender:x:109:\n"}
CREATED_BY = "k3ops lab (k3ops_lab.standin_image)"  # the config's history: part of the digest, so of the cache key
MANIFEST_TYPE = "application/vnd.docker.distribution.manifest.v2+json"
CONFIG_TYPE = "application/vnd.docker.container.image.v1+json"
LAYER_TYPE = "application/vnd.docker.image.rootfs.diff.tar.gzip"
MANIFEST = "manifest.json"
BLOBS = "blobs"


def entry_path(base: Path, engine: str) -> Path:
    """Where the engine's image built from this base image, llama-server build and stand-in lives in the cache."""
    inputs = json.dumps([base.name, llama_server.sha256(), hashlib.sha256(STANDIN.read_bytes()).hexdigest(),
                         STDLIB_LEFT_OUT, sorted(LAYOUT_LINKS.items()), sorted(ETC.items()), CREATED_BY,
                         IMAGES[engine]])
    return state.CACHE_DIR / "images" / f"{engine}-standin-{hashlib.sha256(inputs.encode()).hexdigest()[:12]}"


def build(base: Path, log=print) -> dict[str, Path]:
    """Each engine's cached image for today's inputs (llama_server.build() first), built when missing or broken.
    The images share their one layer, made once for those that are built (its gzip takes seconds)."""
    shared_layer = functools.cache(lambda: layer(base))
    return {engine: cache.entry(entry_path(base, engine), f"stand-in {engine} image",
                                lambda image, engine=engine: _build(image, engine, *shared_layer()), check, log)
            for engine in IMAGES}


def manifest_digest(image: Path) -> str:
    return "sha256:" + hashlib.sha256((image / MANIFEST).read_bytes()).hexdigest()


def blob(image: Path, digest: str) -> Path:
    return image / BLOBS / digest.replace(":", "/")


def blobs(image: Path) -> list[tuple[str, str]]:
    """(digest, media type) of the config and the layer, in the manifest's order."""
    manifest = json.loads((image / MANIFEST).read_text())
    return [(part["digest"], part["mediaType"]) for part in (manifest["config"], *manifest["layers"])]


def check(image: Path) -> None:
    """Every blob is what its digest says, the config names the layer's uncompressed digest, and the layer
    holds the entry point, llama-server and the interpreter with its loader."""
    for digest, _ in blobs(image):
        found = "sha256:" + hashlib.sha256(blob(image, digest).read_bytes()).hexdigest()
        if found != digest:
            raise RuntimeError(f"{blob(image, digest)} has digest {found}, not {digest}")
    (config_digest, _), (layer_digest, _) = blobs(image)
    layer = gzip.decompress(blob(image, layer_digest).read_bytes())
    diff_ids = json.loads(blob(image, config_digest).read_text())["rootfs"]["diff_ids"]
    if diff_ids != ["sha256:" + hashlib.sha256(layer).hexdigest()]:
        raise RuntimeError(f"{image}: the config's diff_ids {diff_ids} are not its layer's")
    with tarfile.open(fileobj=io.BytesIO(layer)) as archive:
        names = set(archive.getnames())
    missing = {*PROGRAMS, LLAMA_SERVER, PYTHON, LOADER} - names
    if missing:
        raise RuntimeError(f"{image}: its layer lacks {', '.join(sorted(missing))}")


def layer_files(base: Path) -> dict[str, bytes]:
    """Path in the image -> content, for every regular file of the layer."""
    files = {PYTHON: (base / PYTHON).read_bytes(), **{program: STANDIN.read_bytes() for program in PROGRAMS}}
    with tarfile.open(llama_server.directory() / llama_server.ARCHIVE) as archive:
        files[LLAMA_SERVER] = archive.extractfile(llama_server.MEMBER).read()
    for path in sorted((base / STDLIB).rglob("*")):
        relative = path.relative_to(base)
        if path.is_file() and not path.is_symlink() and not set(relative.parts[3:]) & set(STDLIB_LEFT_OUT):
            files[str(relative)] = path.read_bytes()
    binaries = [base / PYTHON, *sorted((base / STDLIB / "lib-dynload").glob("*.so"))]
    needed = set().union(*(llama_server.needed_libraries(binary) for binary in binaries), llama_server.RUNTIME_LIBRARIES)
    for name in sorted(needed - {"linux-vdso.so.1"}):
        source = base / LIBRARIES / name
        if not source.exists():
            raise RuntimeError(f"{base} has no {LIBRARIES}/{name}, which the image's python3 or llama-server loads")
        files[f"{LIBRARIES}/{name}"] = source.resolve().read_bytes()
    files.update({path: text.encode() for path, text in ETC.items()})
    return files


def layer_tar(files: dict[str, bytes]) -> bytes:
    """The layer as a tar whose bytes depend only on `files` (parents first, then in name order)."""
    directories = {"tmp", "root", "dev", "proc", "sys"} | {str(parent) for path in [*files, *LAYOUT_LINKS]
                                                           for parent in Path(path).parents if str(parent) != "."}
    stream = io.BytesIO()
    with tarfile.open(fileobj=stream, mode="w", format=tarfile.PAX_FORMAT) as tar:
        def add(info: tarfile.TarInfo, content: bytes | None = None) -> None:
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            tar.addfile(info, io.BytesIO(content) if content is not None else None)

        for name in sorted(directories):
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if name == "tmp" else 0o755
            add(info)
        for name, target in sorted(LAYOUT_LINKS.items()):
            info = tarfile.TarInfo(name)
            info.type, info.linkname, info.mode = tarfile.SYMTYPE, target, 0o777
            add(info)
        for name, content in sorted(files.items()):
            info = tarfile.TarInfo(name)
            executable = name.startswith(("usr/bin/", "usr/local/")) or ".so" in name
            info.size, info.mode = len(content), 0o755 if executable else 0o644
            add(info, content)
    return stream.getvalue()


def layer(base: Path) -> tuple[str, bytes]:
    """The images' layer: the digest of its tar (the config's diff_id), and the tar gzipped (its blob)."""
    tar = layer_tar(layer_files(base))
    compressed = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=compressed, mtime=0) as zipped:
        zipped.write(tar)
    return "sha256:" + hashlib.sha256(tar).hexdigest(), compressed.getvalue()


def _build(image: Path, engine: str, diff_id: str, compressed: bytes) -> None:
    _, entry_point, stands_in_for = IMAGES[engine]
    config = json.dumps({
        "architecture": "amd64", "os": "linux",
        "config": {"Entrypoint": entry_point, "Env": ["PATH=/usr/local/bin:/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE=1"],
                   "Labels": {"org.opencontainers.image.description":
                              f"k3ops lab: a stand-in for {stands_in_for} serving a GGUF with llama-server"}},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created_by": CREATED_BY}],
    }, sort_keys=True).encode()
    parts = []
    for content, media_type in ((config, CONFIG_TYPE), (compressed, LAYER_TYPE)):
        digest = "sha256:" + hashlib.sha256(content).hexdigest()
        blob(image, digest).parent.mkdir(parents=True, exist_ok=True)
        blob(image, digest).write_bytes(content)
        parts.append({"mediaType": media_type, "size": len(content), "digest": digest})
    manifest = {"schemaVersion": 2, "mediaType": MANIFEST_TYPE, "config": parts[0], "layers": parts[1:]}
    (image / MANIFEST).write_text(json.dumps(manifest, indent=3, sort_keys=True))
