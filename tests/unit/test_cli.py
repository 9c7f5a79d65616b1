"""The command line refuses bad flags before touching the machine."""

import subprocess
import sys


def run(*args):
    return subprocess.run([sys.executable, "-m", "k3ops.cli", *args], capture_output=True, text=True)


def test_more_profiles_than_hosts_is_refused():
    result = run("lab", "up", "--hosts", "1", "--profile", "h200x8", "--profile", "cpu")
    assert result.returncode == 1
    assert "2 profiles given for 1 hosts" in result.stderr


def test_unknown_profile_is_refused_with_the_known_ones():
    result = run("lab", "up", "--hosts", "1", "--profile", "a100x8")
    assert result.returncode == 1
    assert "unknown hardware profile 'a100x8'" in result.stderr and "gb300x4" in result.stderr


def test_zero_hosts_is_refused():
    result = run("lab", "up", "--hosts", "0")
    assert result.returncode == 2 and "--hosts must be at least 1" in result.stderr


def test_validate_reports_each_bad_host_and_field(tmp_path):
    inventory = tmp_path / "fleet.py"
    inventory.write_text(
        'hgx = [("@fake/gpu-01", {"hardware_profile": "h200x8", "gpu_vendor": "nvidia", "gpu_count": 8}),\n'
        '       ("@fake/gpu-02", {"hardware_profile": "mi355x8", "gpu_vendor": "amd", "gpu_count": 8,'
        ' "rocm_release": "7"})]\n')
    result = run("validate", str(inventory))
    assert result.returncode == 1
    assert result.stderr.strip() == "@fake/gpu-02: rocm_release: '7' is not a ROCm release like '7.0.2' (major.minor.patch)"


def test_validate_passes_a_good_inventory(tmp_path):
    inventory = tmp_path / "fleet.py"
    inventory.write_text('cpu = [("@fake/cpu-01", {"hardware_profile": "cpu"})]\n')
    result = run("validate", str(inventory))
    assert result.returncode == 0 and "valid" in result.stdout


def test_validate_refuses_what_would_reach_a_unit_or_a_shell_naming_host_and_field(tmp_path):
    """Each host one bad value; every line names its host and field, and nothing else is reported."""
    inventory = tmp_path / "fleet.py"
    inventory.write_text(
        'model = {"repo_id": "moonshotai/Kimi-K3", "revision": "0123456789abcdef0123456789abcdef01234567",'
        ' "name": "kimi-k3"}\n'
        'vllm = {"recipe": "vllm-b300x8", "image_digest": "sha256:" + "b" * 64}\n'
        'cpu = [("cpu-01", {"hardware_profile": "cpu", "model_cache_path": "/srv/k3ops/$(reboot)"}),\n'
        '       ("cpu-02", {"hardware_profile": "cpu", "nvme_devices": ["/dev/nvme0n1"],'
        ' "model_cache_wipe": ["/dev/sda"]}),\n'
        '       ("cpu-03", {"hardware_profile": "cpu", "service_user": "nobody"}),\n'
        '       ("cpu-04", {"hardware_profile": "cpu", "peer_address": "gpu 04"}),\n'
        '       ("cpu-05", {"hardware_profile": "cpu", "hf_endpoint": "https://hub.example/\\"; reboot"})]\n'
        'b300 = [("b300-01", {"hardware_profile": "b300x8", "model": model,'
        ' "engine": {**vllm, "environment": {"X": "1\\nExecStartPre=/bin/sh -c reboot"}}}),\n'
        '        ("b300-02", {"hardware_profile": "b300x8", "model": model,'
        ' "engine": {**vllm, "image": "vllm/vllm-openai:kimi-k3\\nExecStartPre=/bin/reboot"}}),\n'
        '        ("b300-03", {"hardware_profile": "b300x8", "model": model,'
        ' "engine": {**vllm, "args": {"--tool-call-parser": "k3\\rx"}}})]\n'
        'mi355x = [("mi355x-01", {"hardware_profile": "mi355x8", "rocm_release": "5.7.1"})]\n')
    result = run("validate", str(inventory))
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "cpu-01: model_cache_path: '/srv/k3ops/$(reboot)' is not a plain absolute path: letters, digits and ._-/ "
        "only, no '..', '//' or trailing '/'; give the model cache a directory of its own, e.g. '/srv/k3ops/models'",
        "cpu-02: model_cache_wipe: '/dev/sda' is not one of nvme_devices; only a cache device may be wiped (list it "
        "in nvme_devices too, or remove it here)",
        "cpu-03: service_user: 'nobody' is a system account; run the engines as a user of their own, e.g. 'k3ops'",
        "cpu-04: peer_address: 'gpu 04' is not a host name or an IP address (like 'gpu-01.example.com', "
        "'10.0.0.7' or 'fd00::7')",
        "cpu-05: hf_endpoint: 'https://hub.example/\"; reboot' is not an http(s) URL like "
        "'https://mirror.example.com/path/' (letters, digits and -._~%/+=:@, only: no spaces, quotes, query string "
        "or credentials)",
        "b300-01: engine.environment: X: '1\\nExecStartPre=/bin/sh -c reboot' contains a line break or control "
        "character ('\\n'): give one line of plain text",
        "b300-02: engine.image: 'vllm/vllm-openai:kimi-k3\\nExecStartPre=/bin/reboot' is not an image reference "
        "like 'registry.example.com:5000/team/vllm:tag' (optional registry host[:port], lowercase repository, "
        "optional tag)",
        "b300-03: engine.args: --tool-call-parser: 'k3\\rx' contains a line break or control character ('\\r'): "
        "give one line of plain text",
        "mi355x-01: rocm_release: 5.7.1 does not support the AMD Instinct MI355X (CDNA4), which needs ROCm 7.0.0 or "
        "newer (e.g. 7.0.2)",
    ]


def test_validate_refuses_a_host_defined_twice_and_two_hosts_at_one_address(tmp_path):
    """pyinfra would merge the two definitions of gpu-01 (the last wins) before any check could see them: the
    inventory file's own groups are read by validate_inventory, which every inventory file ends with."""
    inventory = tmp_path / "fleet.py"
    inventory.write_text(
        "from k3ops.inventory import validate_inventory\n\n"
        'hgx = [("gpu-01", {"hardware_profile": "h200x8", "ssh_hostname": "192.0.2.1"}),\n'
        '       ("gpu-02", {"hardware_profile": "h200x8", "ssh_hostname": "192.0.2.2"}),\n'
        '       ("gpu-03", {"hardware_profile": "h200x8", "ssh_hostname": "192.0.2.2"})]\n'
        'canary = ["gpu-02"]  # membership: a name alone\n'
        'cpu = [("gpu-01", {"hardware_profile": "cpu", "ssh_hostname": "192.0.2.9"})]\n'
        "validate_inventory(__file__)\n")
    result = run("validate", str(inventory))
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "invalid inventory data:",
        "  gpu-01: defined twice, in groups 'hgx' and 'cpu', with different data (pyinfra would merge them, the last "
        "winning); give its data once and name it alone in its other groups",
        "  gpu-03: ssh_hostname: 192.0.2.2 port 22 is also the SSH address of gpu-02; each inventory host must be a "
        "machine of its own",
    ]


def test_nccl_check_refuses_bad_data_and_an_unknown_limit_before_connecting(tmp_path):
    """The hosts' addresses are unroutable (TEST-NET-1): reaching for one would hang or fail differently."""
    inventory = tmp_path / "fleet.py"
    inventory.write_text(
        'hgx = [("gpu-01", {"ssh_hostname": "192.0.2.1", "hardware_profile": "h200x8",'
        ' "nccl_thresholds": {"cluster_all_reduce": 0}}),\n'
        '       ("gpu-02", {"ssh_hostname": "192.0.2.2", "hardware_profile": "h200x8"})]\n')
    result = run("nccl", "check", str(inventory))
    assert result.returncode == 2  # bad input: no host was asked
    assert "gpu-01: nccl_thresholds: cluster_all_reduce: 0.0 GB/s is not a bandwidth" in result.stderr
    inventory.write_text('hgx = [("gpu-01", {"ssh_hostname": "192.0.2.1", "hardware_profile": "h200x8"})]\n')
    result = run("nccl", "check", str(inventory), "--limit", "gpu-09")
    assert result.returncode == 2 and "--limit: 'gpu-09' matches no host of" in result.stderr
