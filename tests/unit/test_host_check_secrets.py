"""A host check that guards a secret fails without printing it: pytest shows an assertion's values, so the
checks compare through k3ops.host_checks.secrets, run here by pytest itself as `k3ops check` runs them."""

import subprocess
import sys

SECRET = "k3-api-key-never-printed-0123456789"

LEAKING_CHECK = f"""
from k3ops.host_checks.secrets import shown_nowhere


def test_a_leak_is_caught():
    unit = "ExecStart=/usr/bin/vllm serve --api-key {SECRET}"
    shown_nowhere(["{SECRET}"], {{"the engine unit": unit, "a process's arguments": ""}})
"""


def test_a_failing_secret_check_names_the_place_and_not_the_secret(tmp_path):
    check = tmp_path / "test_leak.py"
    check.write_text(LEAKING_CHECK)
    result = subprocess.run([sys.executable, "-m", "pytest", str(check), "-p", "no:cacheprovider", "-c", "/dev/null",
                             "--rootdir", str(tmp_path), "-vv"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stdout
    assert "a secret appears in the engine unit" in result.stdout
    # Only the check's own source holds the secret; nothing pytest printed of the values does.
    printed = result.stdout.replace(f'"ExecStart=/usr/bin/vllm serve --api-key {SECRET}"', "")
    printed = printed.replace(f'["{SECRET}"]', "")
    leaked = SECRET in printed + result.stderr
    assert not leaked, "pytest printed the secret"
