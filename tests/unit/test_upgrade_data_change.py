"""After a rollout the inventory's data is made to say what the fleet runs: the exact edit is named, and with
--write-data a group_data file's own assignment of the old version is rewritten, and nothing else."""

from __future__ import annotations

from k3ops.upgrade.data_change import change, revision_change


def inventory_with(tmp_path, group_data: dict[str, str], inventory: str = "hgx = ['gpu-01']\n") -> str:
    (tmp_path / "group_data").mkdir()
    for name, text in group_data.items():
        (tmp_path / "group_data" / name).write_text(text)
    (tmp_path / "fleet.py").write_text(inventory)
    return str(tmp_path / "fleet.py")


def test_the_group_data_assignment_of_the_old_version_is_named_then_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fleet = inventory_with(tmp_path, {"hgx.py": 'ssh_user = "root"\nnvidia_driver_version = "580.105.08"  # pinned\n',
                                      "all.py": "ssh_port = 22\n"})
    said = change(fleet, "nvidia_driver_version", "580.126.09", {"580.105.08"}, write=False)
    assert said == [f"{tmp_path}/group_data/hgx.py:2: change 580.105.08 to 580.126.09 (or rerun with --write-data)"]
    assert "580.105.08" in (tmp_path / "group_data" / "hgx.py").read_text()
    said = change(fleet, "nvidia_driver_version", "580.126.09", {"580.105.08"}, write=True)
    assert said == [f"{tmp_path}/group_data/hgx.py:2: 580.105.08 -> 580.126.09 (written)"]
    assert (tmp_path / "group_data" / "hgx.py").read_text() == \
        'ssh_user = "root"\nnvidia_driver_version = "580.126.09"  # pinned\n'
    assert change(fleet, "nvidia_driver_version", "580.126.09", {"580.105.08"}, write=True) == [
        f"{tmp_path}/group_data/hgx.py:2: already says 580.126.09"]


def test_what_is_set_per_host_or_to_another_version_is_left_to_a_person(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fleet = inventory_with(
        tmp_path, {"lab.py": 'nvidia_driver_version = "570.195.03"\n'},
        inventory='hgx = [("gpu-01", {"nvidia_driver_version": "580.105.08"})]\n')
    said = change(fleet, "nvidia_driver_version", "580.126.09", {"580.105.08"}, write=True)
    assert said == [f"{tmp_path}/fleet.py:1: `hgx = [(\"gpu-01\", {{\"nvidia_driver_version\": \"580.105.08\"}})]`: "
                    "set it to \"580.126.09\" by hand",
                    f"{tmp_path}/group_data/lab.py:1: says 570.195.03, which no upgraded host ran: left as it is"]
    assert (tmp_path / "group_data" / "lab.py").read_text() == 'nvidia_driver_version = "570.195.03"\n'


def test_a_fleet_on_the_default_version_is_told_where_to_set_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fleet = inventory_with(tmp_path, {"all.py": "ssh_port = 22\n"})
    assert change(fleet, "nvidia_driver_version", "580.126.09", {"580.105.08"}, write=True) == [
        f"no file sets nvidia_driver_version (every host takes k3ops' default): add "
        f"`nvidia_driver_version = \"580.126.09\"` to {tmp_path}/group_data/all.py"]


def test_a_rocm_rollout_edits_rocm_release(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fleet = inventory_with(tmp_path, {"mi355x.py": 'rocm_release = "6.4.1"\nnvidia_driver_version = "580.105.08"\n'})
    assert change(fleet, "rocm_release", "7.0.2", {"6.4.1"}, write=True) == [
        f"{tmp_path}/group_data/mi355x.py:1: 6.4.1 -> 7.0.2 (written)"]
    assert (tmp_path / "group_data" / "mi355x.py").read_text() == \
        'rocm_release = "7.0.2"\nnvidia_driver_version = "580.105.08"\n'


def test_a_model_revision_is_found_where_the_model_dict_writes_it(tmp_path, monkeypatch):
    """The revision sits in the model's dict, wherever its key is: the line holding the revision the hosts ran is
    named, then rewritten in a group_data file; in the inventory itself it is left to a person."""
    monkeypatch.chdir(tmp_path)
    old, new = "0123456789abcdef" * 2 + "01234567", "89abcdef" * 5
    fleet = inventory_with(tmp_path, {"all.py": f'model = {{\n    "repo_id": "moonshotai/Kimi-K3",\n'
                                                f'    "revision": "{old}",\n    "name": "kimi-k3",\n}}\n'},
                           inventory=f'hgx = [("gpu-09", {{"model_revision_note": "{old}"}})]\n')
    said = revision_change(fleet, new, {old}, write=False)
    assert said == [f"{tmp_path}/fleet.py:1: `hgx = [(\"gpu-09\", {{\"model_revision_note\": \"{old}\"}})]`: set it "
                    f"to \"{new}\" by hand",
                    f"{tmp_path}/group_data/all.py:3: change {old} to {new} (or rerun with --write-data)"]
    revision_change(fleet, new, {old}, write=True)
    assert f'    "revision": "{new}",\n' in (tmp_path / "group_data" / "all.py").read_text()
    assert revision_change(tmp_path / "fleet.py", new, {"f" * 40}, write=True)[0].startswith(
        "no file of the inventory's data names the revision the hosts ran")
