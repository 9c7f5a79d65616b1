"""`dcgmi diag` read from real captured tables (DCGM 2.x) and from the lab's DCGM 4 (its per-GPU lines and
wrapped warnings, which no capture here shows)."""

import pytest

from k3ops.facts.gpu_health import DIAG_EXIT_MARKER, DcgmDiag, diag_failures
from k3ops_lab.sim import dcgmi

from ..conftest import real_output
from ..lab.fake_host import nvidia_host, run

DEPLOYMENT = ["Blacklist", "NVML Library", "CUDA Main Library", "Permissions and OS Blocks", "Persistence Mode",
              "Environment Variables", "Page Retirement", "Graphics Processes", "Inforom"]


def diag(text: str, status: int) -> dict:
    return DcgmDiag().process([*text.splitlines(), f"{DIAG_EXIT_MARKER}{status}"])


@pytest.mark.parametrize(("capture", "failed"), [
    ("dcgmi/dcgmi-diag-r1_deployment-pass_dcgm2x.txt", []),
    ("dcgmi/dcgmi-diag-r1_deployment-fail_dcgm2x.txt", DEPLOYMENT[4:]),
])
def test_the_quick_diag_names_each_deployment_check_and_what_failed(capture, failed):
    found = diag(real_output(capture), 226 if failed else 0)
    assert list(found["tests"]) == DEPLOYMENT
    assert {test["category"] for test in found["tests"].values()} == {"Deployment"}
    assert diag_failures(found) == [f"{name}: Fail" for name in failed]


def test_every_level_of_a_long_diag_is_read():
    found = diag(real_output("dcgmi/dcgmi-diag-r4_all-pass_dcgm2x-era.txt"), 0)
    assert {test["category"] for test in found["tests"].values()} == {"Deployment", "Integration", "Hardware",
                                                                      "Stress"}
    assert found["tests"]["Targeted Power"]["result"] == "Pass" and diag_failures(found) == []


def test_dcgm4_per_gpu_lines_and_wrapped_warnings_belong_to_their_test(tmp_path, capsys):
    host, _ = nvidia_host(tmp_path, faults={"remapped_rows_pending": [3]})
    status, out, _ = run(dcgmi, capsys, host, "diag", "-r", "1")
    found = diag(out, status)
    assert list(found["tests"]) == ["software"]  # the Metadata rows are no test
    software = found["tests"]["software"]
    assert software["result"] == "Fail" and "GPU3: Fail" in software["details"]
    failure = diag_failures(found)[0]
    assert failure.startswith("software: Fail (") and "row remappings are pending" in failure


def test_a_diag_that_could_not_run_is_a_failure():
    assert diag_failures(diag("Error: unable to establish a connection to the specified host: localhost", 235)) == \
        ["dcgmi diag exited 235 without a result"]
