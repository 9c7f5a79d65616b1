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
