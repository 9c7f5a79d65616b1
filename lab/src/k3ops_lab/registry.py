"""The lab's container registry: Debian's docker-registry on the controller, over TLS, serving the stand-in
engine images (standin_image.py) that the container recipes' units pull by digest.

It listens on the controller's lab address only. Its certificate is signed by a CA made for this lab
(`lab up`), which each host trusts for this registry alone, the way a fleet trusts a private registry:
/etc/docker/certs.d/<registry>/ca.crt. Nothing is pulled over plain HTTP and no host's Docker is told to
skip verification. The images are pushed with the registry's HTTP API (blobs, then the manifest), and what
was pushed is recorded in the state directory for the lab's inventory.
"""

from __future__ import annotations

import json
import ssl
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from . import services, standin_image, state

ADDRESS = f"{state.CONTROLLER_ADDRESS}:{state.REGISTRY_PORT}"
CONFIG = """version: 0.1
log:
  level: info
storage:
  filesystem:
    rootdirectory: {storage}
  delete:
    enabled: false
http:
  addr: {address}
  tls:
    certificate: {certificate}
    key: {key}
"""
CERTIFICATE_DAYS = "30"  # a lab lives hours; its CA's key never leaves the state directory
PUSH_TIMEOUT_SECONDS = 120


def directory() -> Path:
    return state.STATE_DIR / "registry"


def ca_certificate() -> Path:
    return directory() / "tls" / "ca.crt"


def host_ca_path() -> str:
    """Where a host's Docker reads the CA it trusts for this registry (relative to the host's root)."""
    return f"etc/docker/certs.d/{ADDRESS}/ca.crt"


def ensure_certificates() -> None:
    """The lab's CA and the registry's certificate for its address, made once per lab."""
    tls = ca_certificate().parent
    if (tls / "server.crt").exists():
        return
    tls.mkdir(parents=True, exist_ok=True)
    tls.chmod(0o700)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    subprocess.run(["openssl", "req", "-x509", *ec, "-keyout", str(tls / "ca.key"), "-out", str(ca_certificate()),
                    "-days", CERTIFICATE_DAYS, "-subj", f"/CN=k3ops lab{state.SUFFIX} registry CA",
                    "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign"],
                   check=True, capture_output=True)
    subprocess.run(["openssl", "req", "-new", *ec, "-keyout", str(tls / "server.key"), "-out", str(tls / "server.csr"),
                    "-subj", f"/CN={state.CONTROLLER_ADDRESS}"], check=True, capture_output=True)
    (tls / "server.ext").write_text(f"subjectAltName=IP:{state.CONTROLLER_ADDRESS}\nextendedKeyUsage=serverAuth\n")
    subprocess.run(["openssl", "x509", "-req", "-in", str(tls / "server.csr"), "-CA", str(ca_certificate()),
                    "-CAkey", str(tls / "ca.key"), "-CAcreateserial", "-days", CERTIFICATE_DAYS,
                    "-extfile", str(tls / "server.ext"), "-out", str(tls / "server.crt")],
                   check=True, capture_output=True)


def start() -> None:
    """The registry, with its storage in this lab's state directory (ensure_certificates() first)."""
    config = directory() / "config.yml"
    tls = ca_certificate().parent
    config.write_text(CONFIG.format(storage=directory() / "storage", address=ADDRESS,
                                    certificate=tls / "server.crt", key=tls / "server.key"))
    services.start_registry(config)
    services.wait_until_listening((state.REGISTRY_PORT,))


def _request(method: str, url: str, body: bytes | None = None, content_type: str | None = None):
    """One call of the registry's API, verified against the lab's CA, never through a proxy."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(
        context=ssl.create_default_context(cafile=str(ca_certificate()))))
    request = urllib.request.Request(url, data=body, method=method,
                                     headers={"Content-Type": content_type} if content_type else {})
    return opener.open(request, timeout=PUSH_TIMEOUT_SECONDS)


def _has_blob(base: str, digest: str) -> bool:
    try:
        _request("HEAD", f"{base}/blobs/{digest}").close()
    except urllib.error.HTTPError as error:
        if error.code == 404:
            return False
        raise
    return True


def push(images: dict[str, Path]) -> dict[str, dict[str, str]]:
    """Push each engine's built image; returns and records the engine data that pins each (`served`)."""
    served = {engine: push_image(image, standin_image.IMAGES[engine][0]) for engine, image in images.items()}
    (directory() / "served.json").write_text(json.dumps(served, indent=2) + "\n")
    return served


def push_image(image: Path, repository: str) -> dict[str, str]:
    """Push a built image (blobs the registry lacks, then its manifest under TAG); the engine data that pins it:
    {"image": registry/repository:tag, "image_digest": sha256:...}."""
    base = f"https://{ADDRESS}/v2/{repository}"
    for digest, _ in standin_image.blobs(image):
        if _has_blob(base, digest):
            continue
        with _request("POST", f"{base}/blobs/uploads/", b"") as started:
            upload = urllib.parse.urljoin(base, started.headers["Location"])
        separator = "&" if "?" in upload else "?"
        _request("PUT", f"{upload}{separator}digest={urllib.parse.quote(digest)}",
                 standin_image.blob(image, digest).read_bytes(), "application/octet-stream").close()
    with _request("PUT", f"{base}/manifests/{standin_image.TAG}", (image / standin_image.MANIFEST).read_bytes(),
                  standin_image.MANIFEST_TYPE) as pushed:
        stored = pushed.headers.get("Docker-Content-Digest")
    digest = standin_image.manifest_digest(image)
    if stored != digest:
        raise RuntimeError(f"the registry stored the manifest as {stored}, not {digest}")
    return {"image": f"{ADDRESS}/{repository}:{standin_image.TAG}", "image_digest": digest}


def served(engine: str = "vllm") -> dict[str, str]:
    """The pinned stand-in image of `engine` this lab's registry serves (push() at `lab up`)."""
    return json.loads((directory() / "served.json").read_text())[engine]
