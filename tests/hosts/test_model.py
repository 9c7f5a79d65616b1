"""The model cache volume and the pinned checkpoint (k3ops.deploys.model_cache, k3ops.deploys.checkpoint)."""

import hashlib
import json
import os

from k3ops.deploys.model_cache import VOLUME_LABEL
from k3ops.facts.checkpoint import ModelCheckpoints
from k3ops.facts.storage import BlockDeviceSignature, MdadmConfArrays
from k3ops.onhost import layout
from k3ops.onhost.layout import PEER_AUTHORIZED_KEYS, PEER_USER, TOKEN_FILE

from .secrets import secret_values, shown_nowhere


def checkpoint_state(host, model) -> dict:
    return host.get_fact(ModelCheckpoints, cache_path=model.model_cache_path)[model.model.name]


def model_dir(model) -> str:
    return layout.model_dir(model.model_cache_path, model.model.name)


def test_cache_is_the_nvme_volume_mounted_by_uuid(host, spec, model):
    path = model.model_cache_path
    mount = host.mount_point(path)
    if not model.nvme_devices:
        assert host.file(path).is_directory
        return
    assert mount.exists and mount.filesystem == "xfs" and "noatime" in mount.options
    volume = model.nvme_devices[0] if len(model.nvme_devices) == 1 else f"/dev/md/{VOLUME_LABEL}"
    uuid = host.check_output(f"blkid -p -s UUID -o value {volume}")
    assert host.check_output(f"blkid -p -s LABEL -o value {volume}") == VOLUME_LABEL
    entries = [line.split() for line in host.file("/etc/fstab").content_string.splitlines()
               if line.strip() and not line.startswith("#")]
    assert [entry[0] for entry in entries if entry[1] == path] == [f"UUID={uuid}"]


def test_a_raid0_cache_is_assembled_under_its_name_at_every_boot(host, spec, model):
    """mdadm.conf names the array its members belong to, so the initramfs and udev assemble it as /dev/md/<name>
    at every boot, not as a stranger's /dev/md127."""
    if len(model.nvme_devices) < 2:
        return
    member = host.get_fact(BlockDeviceSignature, device=model.nvme_devices[0])
    recorded = host.get_fact(MdadmConfArrays).get(f"/dev/md/{VOLUME_LABEL}", {})
    assert member["type"] == "linux_raid_member" and recorded.get("uuid"), recorded
    assert recorded["uuid"].replace(":", "") == member["uuid"].replace("-", "")
    assert host.file(f"/dev/md/{VOLUME_LABEL}").exists


def test_cache_belongs_to_the_service_user(host, spec, model):
    cache = host.file(model.model_cache_path)
    assert cache.user == spec.service_user and cache.mode == 0o755


def test_roots_state_is_roots_alone_and_the_users_homes_are_beneath_it(host, spec, model):
    """No user k3ops made can plant a link where root writes (the maintenance marker, the fabric check's
    result): their homes are below root's state directory, and their keys are theirs alone."""
    for path in (layout.STATE_DIR, layout.USERS_HOME):
        directory = host.file(path)
        assert (directory.is_directory, directory.user, directory.group, directory.mode) == (True, "root", "root",
                                                                                             0o755)
    for user in (spec.service_user, PEER_USER):
        assert host.user(user).home == layout.home(user)
    key = host.file(layout.peer_key(spec.service_user))
    assert (key.is_symlink, key.user, key.mode) == (False, spec.service_user, 0o600)


def test_the_pinned_revision_is_active_and_verified(host, spec, model):
    current = host.file(f"{model_dir(model)}/{layout.CURRENT_LINK}")
    assert current.is_symlink and current.linked_to.endswith(f"/{layout.REVISIONS_DIR}/{model.model.revision}")
    state = checkpoint_state(host, model)
    assert state["active"] == model.model.revision
    assert state["bad_files"] == [] and state["phase"] == "active"
    manifest = json.loads(host.file(f"{model_dir(model)}/{layout.MANIFESTS_DIR}/{model.model.revision}.json")
                          .content_string)
    assert manifest["repo_id"] == model.model.repo_id and manifest["files"]
    for entry in manifest["files"]:
        assert host.file(f"{current.linked_to}/{entry['path']}").size == entry["size"]


def test_rollback_depth_bounds_the_revisions_kept(host, spec, model):
    """The active revision, rollback_depth earlier ones, and one a model rollout staged beside them."""
    state = checkpoint_state(host, model)
    assert len(state["installed"]) <= 1 + model.model.rollback_depth + (1 if state.get("staged") else 0)


def test_hub_token_is_the_one_given_and_readable_only_by_root(host, spec, model):
    """HF_TOKEN given to the check (as to the deploy): the file holds it, root's alone (compared by digest, so
    a failure shows no token); not given: no token file at all, as a deploy without HF_TOKEN leaves it."""
    token, given = host.file(TOKEN_FILE), os.environ.get("HF_TOKEN")
    if not given:
        assert not token.exists, f"{TOKEN_FILE} exists, but this check was given no HF_TOKEN (give it the deploy's)"
    else:
        assert (token.user, token.group, token.mode) == ("root", "root", 0o600)
        assert token.sha256sum == hashlib.sha256(f"HF_TOKEN={given}\n".encode()).hexdigest(), \
            f"{TOKEN_FILE} holds another token than the HF_TOKEN given"
    fetch_unit = host.check_output(f"systemctl cat {layout.instance(layout.FETCH_UNIT_TEMPLATE, model.model.name)}")
    reads_the_file, sets_a_token = f"EnvironmentFile=-{TOKEN_FILE}" in fetch_unit, "HF_TOKEN=" in fetch_unit
    assert reads_the_file and not sets_a_token, f"the fetch unit must take HF_TOKEN from {TOKEN_FILE} alone"


def test_no_secret_in_unit_properties_or_process_arguments(host, spec, model):
    token = host.file(TOKEN_FILE)
    if not token.exists:
        return
    units = [layout.instance(template, model.model.name)
             for template in (layout.FETCH_UNIT_TEMPLATE, layout.VERIFY_UNIT_TEMPLATE)]
    shown_nowhere(secret_values(host, TOKEN_FILE), {
        **{f"{unit}'s properties": host.check_output(f"systemctl show {unit}") for unit in units},
        "a process's arguments": host.check_output("ps -eo args")})


def test_peers_can_only_read_the_cache(host, spec, model):
    keys = host.file(PEER_AUTHORIZED_KEYS)
    assert keys.user == PEER_USER and keys.mode == 0o600
    entries = [line for line in keys.content_string.splitlines() if line and not line.startswith("#")]
    assert entries and all(line.startswith(f'restrict,command="/usr/bin/rrsync -ro {model.model_cache_path}" ')
                           for line in entries)
    assert host.file("/usr/bin/rrsync").is_file


def test_weekly_verification_is_scheduled(host, spec, model):
    timer = host.service(layout.instance(layout.VERIFY_TIMER_TEMPLATE, model.model.name))
    assert timer.is_enabled and timer.is_running
