"""deploys/model.py on a 3-host lab against the lab's Hub: one Hub download for the fleet, verified
copies everywhere, repair from a peer, resumed fetches, refusals before any byte moves, rollback; each
engine answers with the words of the revision it loaded."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import time
from pathlib import Path

from k3ops.onhost import layout
from k3ops.onhost.layout import ENGINE_UNIT
from k3ops_lab import hub, state

from ..conftest import REPO_ROOT
from .conftest import changed_operations, deploy_report, host_checks, k3ops, lab_inventory, on_host, pyinfra

LAB_PROFILES = ("cpu", "cpu", "cpu")
HOSTS = ("gpu-01", "gpu-02", "gpu-03")
CACHE = "/srv/k3ops/models/tiny-k3"
FIRST, SECOND = hub.TINY_MODEL_REVISIONS
TEST_TOKEN = "hf_labTokenNeverLogged0123456789"


def deploy(inventory: str = "inventory/lab/hosts.py", *args: str) -> dict:
    return deploy_report("deploys/model.py", *args, inventory=inventory, env={"HF_TOKEN": TEST_TOKEN})


def hub_downloads() -> list[str]:
    """Files the lab Hub has served, one entry per download."""
    return [path for _, path in hub.downloads()]


def store_state(host: str) -> dict:
    return json.loads(on_host(host, f"cat {CACHE}/state.json").stdout)


def serve(inventory: str = "inventory/lab/hosts.py") -> None:
    """The engine on every host (deploys/serving.py), serving the active revision."""
    result = pyinfra("deploys/serving.py", inventory=inventory)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


def answers(inventory: str = "inventory/lab/hosts.py") -> dict[str, str]:
    """Each host's answer through `k3ops serve chat`: the reply names the revision the engine loaded."""
    lines = k3ops("serve", "chat", inventory, check=False).stdout.splitlines()
    return dict(line.split(": ", 1) for line in lines)


def restart_engines() -> None:
    for host in HOSTS:
        on_host(host, f"systemctl restart {ENGINE_UNIT}")


def wait_for_answers(expected: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while (found := answers()) != dict.fromkeys(HOSTS, expected):
        assert time.monotonic() < deadline, f"answers {found}, not {expected!r} from every host"
        time.sleep(1)


def manifest(revision: str) -> dict:
    return json.loads(on_host("gpu-01", f"cat {CACHE}/manifests/{revision}.json").stdout)


def test_a_branch_as_revision_is_refused_before_any_host_is_touched(lab, tmp_path):
    inventory = lab_inventory(tmp_path / "branch.py", model={"revision": "main"})
    result = pyinfra("deploys/model.py", inventory=inventory)
    assert result.returncode != 0
    for host in HOSTS:
        assert f"{host}: model.revision: 'main' is not a commit sha: pin the full 40-hex commit" in result.stderr
        assert on_host(host, "test -e /etc/k3ops", check=False).returncode == 1


def test_the_fleet_fetches_from_the_hub_once(lab):
    report = deploy()
    assert changed_operations(report)
    files = manifest(FIRST)["files"]
    total = sum(entry["size"] for entry in files)
    assert sorted(hub_downloads()) == sorted(entry["path"] for entry in files)
    states = {host: store_state(host) for host in HOSTS}
    assert sum(state["bytes_from_hub"] for state in states.values()) == total
    assert states["gpu-01"]["bytes_from_peers"] == 0
    for host in ("gpu-02", "gpu-03"):  # bytes on the wire: the files plus rsync's own few hundred
        assert total <= states[host]["bytes_from_peers"] < total * 1.01
    for host in HOSTS:
        assert on_host(host, f"readlink {CACHE}/current").stdout.strip() == f"revisions/{FIRST}"


def test_every_host_serves_the_pinned_revision_it_got_once_from_the_hub(lab):
    serve()
    assert answers() == dict.fromkeys(HOSTS, hub.TINY_MODEL_REPLIES[FIRST])


def test_host_checks_pass(lab):
    checks = host_checks(checks="tests/hosts/test_model.py", env={"HF_TOKEN": TEST_TOKEN})
    assert checks.returncode == 0, checks.stdout[-4000:]
    assert " passed" in checks.stdout and " failed" not in checks.stdout


def test_second_run_changes_nothing(lab):
    before = len(hub_downloads())
    assert changed_operations(deploy()) == []
    assert len(hub_downloads()) == before


def test_status_shows_each_host(lab):
    status = k3ops("model", "status", "inventory/lab/hosts.py")
    for host in HOSTS:
        assert re.search(rf"^{host}\s+tiny-k3\s+{FIRST[:12]}\s+yes\s+active\s", status.stdout, re.MULTILINE), status.stdout
    rows = json.loads(k3ops("model", "status", "inventory/lab/hosts.py", "--json").stdout)
    assert [row["bad_files"] for row in rows] == [[], [], []]


def test_a_corrupt_byte_is_found_and_repaired_from_a_peer(lab):
    shard = "model-00002-of-00002.safetensors"
    path = f"{CACHE}/current/{shard}"
    original = on_host("gpu-02", f"sha256sum {path}").stdout.split()[0]
    on_host("gpu-02", f"printf '\\x5a' | dd of={path} bs=1 seek=4096 conv=notrunc status=none")
    verify = k3ops("model", "verify", "inventory/lab/hosts.py", check=False)
    assert verify.returncode == 1 and "gpu-02" in verify.stderr
    assert store_state("gpu-02")["bad_files"] == [shard]
    downloads, from_peers = len(hub_downloads()), store_state("gpu-02")["bytes_from_peers"]
    assert changed_operations(deploy())
    assert on_host("gpu-02", f"sha256sum {path}").stdout.split()[0] == original
    assert store_state("gpu-02")["bad_files"] == []
    assert len(hub_downloads()) == downloads
    assert store_state("gpu-02")["bytes_from_peers"] > from_peers


def test_a_killed_fetch_resumes_and_completes(lab, tmp_path):
    """gpu-03 loses its copy and copies it again from gpu-01 at 50 KiB/s; stopped part-way (SIGTERM, as
    `systemctl stop` or a shutdown sends), the next run goes on from the bytes already there."""
    slow = lab_inventory(tmp_path / "slow.py", model_peer_bwlimit_mib=0.05)
    total = sum(entry["size"] for entry in manifest(FIRST)["files"])
    on_host("gpu-03", f"rm -rf {CACHE}")
    run = subprocess.Popen([str(Path(sys.executable).parent / "pyinfra"), "-y", slow, "--limit", "gpu-03",
                            "deploys/model.py"], cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            done = on_host("gpu-03", f"cat {CACHE}/state.json 2>/dev/null || echo {{}}").stdout
            if 0 < json.loads(done).get("bytes_done", 0) < total // 2:
                break
            time.sleep(0.2)
        else:
            raise AssertionError("the slow copy never started")
        on_host("gpu-03", "systemctl kill k3ops-model-fetch@tiny-k3.service")
        assert run.wait(timeout=120) != 0
    finally:
        run.kill()
    left = json.loads(on_host("gpu-03", f"cat {CACHE}/state.json").stdout)
    assert left["phase"] != "active" and on_host("gpu-03", f"test -e {CACHE}/current", check=False).returncode == 1
    deploy("inventory/lab/hosts.py", "--limit", "gpu-03")
    resumed = store_state("gpu-03")
    assert resumed["active"] == FIRST and resumed["bytes_from_hub"] == 0
    assert 0 < resumed["bytes_from_peers"] < total


def test_a_disk_too_small_is_refused_before_any_byte_is_fetched(lab):
    on_host("gpu-03", f"rm -rf {CACHE}")
    free = int(on_host("gpu-03", "df --output=avail -B1 /srv/k3ops/models | tail -1").stdout)
    on_host("gpu-03", f"fallocate -l {free - 64 * 1024 * 1024} /srv/k3ops/models/filler")
    try:
        result = pyinfra("deploys/model.py", "--limit", "gpu-03")
        assert result.returncode != 0
        assert "not enough space on /srv/k3ops/models for k3ops-lab/tiny-k3@" in result.stdout + result.stderr
        assert on_host("gpu-03", f"find {CACHE}/staging -type f | wc -l").stdout.strip() == "0"
        assert store_state("gpu-03")["phase"] == "failed"
    finally:
        on_host("gpu-03", "rm -f /srv/k3ops/models/filler")
    deploy("inventory/lab/hosts.py", "--limit", "gpu-03")
    assert store_state("gpu-03")["active"] == FIRST


def test_a_plain_deploy_does_not_switch_the_serving_fleet_to_a_new_revision_at_once(lab, tmp_path):
    """Every engine restarting onto the new weights at once is a dark fleet: refused before any host changes,
    naming the rollout; one host alone may switch (that is how a rollout's group moves)."""
    second = lab_inventory(tmp_path / "second.py", model={"revision": SECOND})
    before = hub_downloads()
    refused = pyinfra("deploys/model.py", inventory=second, env={"HF_TOKEN": TEST_TOKEN})
    assert refused.returncode != 0
    assert f"`k3ops upgrade model INVENTORY --to {SECOND}`" in refused.stdout + refused.stderr
    assert hub_downloads() == before
    for host in HOSTS:
        assert store_state(host)["active"] == FIRST
        assert on_host(host, f"systemctl is-active {ENGINE_UNIT}").stdout.strip() == "active"


def test_a_second_revision_keeps_the_first_for_rollback(lab, tmp_path):
    """Data that lets the fleet go dark (model_switch_together) switches every host in one deploy."""
    second = lab_inventory(tmp_path / "second.py", model={"revision": SECOND}, model_switch_together=True)
    before = hub_downloads()
    deploy(second)
    changed = {entry["path"]: entry for entry in manifest(SECOND)["files"]}
    unchanged = {entry["path"] for entry in manifest(FIRST)["files"] if changed.get(entry["path"]) == entry}
    new_downloads = hub_downloads()[len(before):]
    assert sorted(new_downloads) == sorted(set(changed) - unchanged)
    for host in HOSTS:
        assert on_host(host, f"readlink {CACHE}/current").stdout.strip() == f"revisions/{SECOND}"
        assert store_state(host)["history"] == [FIRST]
    serve(second)  # the engine restarts onto the new active revision
    assert answers(second) == dict.fromkeys(HOSTS, hub.TINY_MODEL_REPLIES[SECOND])
    rolled = k3ops("model", "rollback", second)
    for host in HOSTS:
        assert f"{host}: tiny-k3: active revision is now {FIRST}" in rolled.stdout
        assert on_host(host, f"readlink {CACHE}/current").stdout.strip() == f"revisions/{FIRST}"
    restart_engines()
    wait_for_answers(hub.TINY_MODEL_REPLIES[FIRST])


def test_ipv6_peer_addresses_and_long_host_names_converge_and_serve(lab, tmp_path):
    """Legitimate but unusual data: every host named by a long FQDN and reached by its peers at its IPv6
    address. gpu-02 and gpu-03 lose their copies and copy them again from gpu-01 over IPv6; the fleet serves,
    and a second run changes nothing."""
    names = {host: f"{host}.rack-a17.row-04.hall-west.inference-fleet.k3ops-lab.example" for host in HOSTS}
    addresses = {host.name: host.address6 for host in state.load().hosts}
    inventory = tmp_path / "ipv6.py"
    inventory.write_text(
        "from k3ops_lab.inventory import groups\n"
        "from k3ops.inventory import validate_inventory\n\n"
        f"NAMES = {names!r}\n"
        f"ADDRESSES = {addresses!r}\n"
        "globals().update({profile: [(NAMES[name], {**data, 'peer_address': ADDRESSES[name]}) for name, data in hosts]\n"
        "                  for profile, hosts in groups().items()})\n"
        "validate_inventory(__file__)\n")
    for host in HOSTS[1:]:
        on_host(host, f"systemctl stop {ENGINE_UNIT} && rm -rf {CACHE}")
    downloads = len(hub_downloads())
    deploy(str(inventory))
    assert len(hub_downloads()) == downloads
    for host in HOSTS[1:]:
        fetch_settings = json.loads(on_host(host, f"cat {layout.model_config('tiny-k3')}").stdout)
        assert fetch_settings["peers"] == [addresses["gpu-01"]]
        copied = store_state(host)
        assert (copied["active"], copied["bytes_from_hub"]) == (FIRST, 0) and copied["bytes_from_peers"] > 0
    serve(str(inventory))
    assert answers(str(inventory)) == {names[host]: hub.TINY_MODEL_REPLIES[FIRST] for host in HOSTS}
    assert changed_operations(deploy(str(inventory))) == []


def test_a_new_token_is_written_but_never_shown_even_by_diff(lab):
    """`pyinfra --diff` prints what a deploy changes in a file, old and new: never a secret's file."""
    rotated = "hf_labRotatedTokenNeverShown98765"
    result = pyinfra("--diff", "--limit", "gpu-01", "deploys/model.py", env={"HF_TOKEN": rotated})
    assert result.returncode == 0, result.stderr[-3000:]
    printed = result.stdout + result.stderr
    shown = rotated in printed or TEST_TOKEN in printed
    assert not shown, "pyinfra printed a token"
    assert f"Hub token in {layout.TOKEN_FILE}" in printed  # the operation ran, and changed the file
    written = on_host("gpu-01", f"sha256sum < {layout.TOKEN_FILE}").stdout.split()[0]
    assert written == hashlib.sha256(f"HF_TOKEN={rotated}\n".encode()).hexdigest()


SUDO_DEPLOY = '''"""A secret deployed over an unprivileged login with sudo."""
from pyinfra.api import deploy

from k3ops.deploys.secrets import secret_file
from k3ops.deploys.uploads import staged_privately


@staged_privately
@deploy("Probe")
def probe():
    secret_file("/etc/k3ops/secrets/probe.env", "PROBE_SECRET={secret}\\n", "Probe secret")


probe()
'''


def test_under_sudo_a_secret_passes_only_through_directories_no_other_user_enters(lab, tmp_path):
    """A host reached as an unprivileged user with sudo: pyinfra uploads as that user, then copies as root.
    The secret goes through that user's own 0700 staging directory and root's, never a name in /tmp."""
    secret = "labProbeSecretNeverShown4242"
    on_host("gpu-03", "DEBIAN_FRONTEND=noninteractive apt-get install -y -q sudo >/dev/null && "
                      "useradd -m -s /bin/sh ops && install -d -o ops -g ops -m 700 /home/ops/.ssh && "
                      "install -o ops -g ops -m 600 /root/.ssh/authorized_keys /home/ops/.ssh/ && "
                      "echo 'ops ALL=(ALL) NOPASSWD: ALL' > /etc/sudoers.d/ops")
    inventory = lab_inventory(tmp_path / "sudo.py", per_host={"gpu-03": {"ssh_user": "ops", "_sudo": True}})
    probe = tmp_path / "probe.py"
    probe.write_text(SUDO_DEPLOY.format(secret=secret))
    result = pyinfra("--limit", "gpu-03", str(probe), inventory=inventory)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    shown = secret in result.stdout + result.stderr
    assert not shown, "pyinfra printed the secret"
    written = on_host("gpu-03", "stat -c '%U %G %a' /etc/k3ops/secrets/probe.env && "
                                "sha256sum < /etc/k3ops/secrets/probe.env").stdout.split()
    assert written[:3] == ["root", "root", "600"]
    assert written[3] == hashlib.sha256(f"PROBE_SECRET={secret}\n".encode()).hexdigest()
    staging = on_host("gpu-03", "stat -c '%U %a' /home/ops/.cache/k3ops-staging && "
                                f"ls -A /home/ops/.cache/k3ops-staging {layout.UPLOAD_DIR} /tmp").stdout
    assert staging.startswith("ops 700\n") and "pyinfra-" not in staging
    assert changed_operations(deploy_report(str(probe), "--limit", "gpu-03", inventory=inventory)) == []
