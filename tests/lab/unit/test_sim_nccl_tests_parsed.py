"""The lab's nccl-tests and rccl-tests reports read by production's parser (k3ops.nccl.report) as real ones are."""

import contextlib
import io

from k3ops.nccl.report import busbw_at, parse, row_at, wrong_values
from k3ops_lab.sim import nccl_tests
from k3ops_lab.sim.host import PACKAGE_VERSIONS

from ..fake_host import amd_host, nvidia_host, write

GIB = 1 << 30


def simulated_report(host, collective, vendor, environ):
    output = io.StringIO()
    with contextlib.redirect_stdout(output):
        assert nccl_tests.main(collective, vendor, ["-b", "1G", "-e", "8G", "-f", "2", "-g", "8"], host, environ) == 0
    return parse(output.getvalue())


def test_the_lab_nccl_tests_report_reads_like_the_real_one(tmp_path):
    host, hardware = nvidia_host(tmp_path)
    report = simulated_report(host, "all_reduce", "nvidia", {"NCCL_DEBUG": "INFO"})
    assert (report.tool, report.tests_version, report.library_version, report.collective) == (
        "nccl-tests", "2.17.6", "2.28.7", "all_reduce_perf")
    assert [rank.bus_id for rank in report.ranks] == [gpu["pci_bus_id"][:-2] for gpu in hardware["gpus"]]
    assert [row.size_bytes for row in report.rows] == [1 * GIB, 2 * GIB, 4 * GIB, 8 * GIB] and report.finished
    largest = row_at(report, 8 * GIB)
    assert busbw_at(report, 8 * GIB) == min(largest.out_of_place.busbw, largest.in_place.busbw) > 470


def test_the_lab_rccl_tests_alltoall_reads_like_the_real_one_with_its_warning(tmp_path):
    host, _ = amd_host(tmp_path)
    write(tmp_path, nccl_tests.RCCL_LIBRARY, "simulated RCCL\n")
    write(tmp_path, f"{PACKAGE_VERSIONS}/{nccl_tests.RCCL_VERSION_MARKER}", "2.26.6\n")
    write(tmp_path, f"{PACKAGE_VERSIONS}/{nccl_tests.RCCL_TESTS_VERSION_MARKER}", "develop:5272cd1\n")
    report = simulated_report(host, "alltoall", "amd", {"NCCL_DEBUG": "WARN"})
    assert (report.tool, report.collective) == ("rccl-tests", "alltoall_perf")
    assert report.tests_version.startswith("develop:5272cd1:")  # the branch and commit rccl-tests was built from
    assert {row.in_place.wrong for row in report.rows} == {None} and wrong_values(report) == 0
    assert len(report.warnings) == 1 and report.warnings[0].endswith('NCCL WARN Missing "iommu=pt" from kernel '
                                                                       'command line which can lead to system '
                                                                       'instablity or hang!')
