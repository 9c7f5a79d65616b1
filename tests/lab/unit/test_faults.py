"""The lab's faults and the runbooks that drill them agree: every fault has its runbook, and a runbook whose
fault writes to the kernel's log is drilled on a VM host (the one lab host with a kernel of its own)."""

from __future__ import annotations

import json
import subprocess

import pytest

from k3ops.doctor.runbooks import runbooks
from k3ops.facts.kernel_log import KernelXidEvents
from k3ops_lab import faults
from k3ops_lab.faults import FAULTS
from k3ops_lab.profiles import get_profile


def test_every_lab_fault_has_a_runbook_that_drills_it():
    drilled = {book.lab_fault: book for book in runbooks().values() if book.lab_fault}
    assert set(drilled) == set(FAULTS)
    assert all(drilled[name].id == fault.runbook for name, fault in FAULTS.items())
    assert faults.INJECTED.startswith("/var/lib/k3ops-lab/")


def test_a_fault_in_the_kernel_log_is_drilled_on_a_vm_host():
    on_vm = {book.lab_fault for book in runbooks().values() if book.drilled_on_vm}
    assert on_vm == {name for name, fault in FAULTS.items() if fault.kernel_log} == {"gpu-lost-xid", "gsp-timeout"}


@pytest.mark.parametrize("name", sorted(name for name, fault in FAULTS.items() if fault.kernel_log))
def test_a_kernel_log_fault_writes_the_line_the_doctor_reads(tmp_path, name):
    """The fault's commands, run against a b300x8 hardware document and a file standing in for the stand-in
    module's knob: the knob gets one driver line, and the doctor's Xid fact reads it as the Xid of the runbook's
    own GPU (the kernel prefixes "NVRM: ", as kmod/nvidia.c does)."""
    hardware, knob = tmp_path / "hardware.json", tmp_path / "knob"
    document = get_profile("b300x8").hardware("gpu-01")
    hardware.write_text(json.dumps(document))
    for command in FAULTS[name].inject:
        command = command.replace(faults.HARDWARE, str(hardware)).replace(faults.DRIVER_LOG_KNOB, str(knob))
        subprocess.run(["sh", "-c", command], check=True, capture_output=True)
    [event] = KernelXidEvents().process([f"NVRM: {knob.read_text()}"])
    assert event["pci"] == document["gpus"][faults.FAULTY_GPU]["pci_bus_id"].rsplit(".", 1)[0]
    assert event["xid"] == {"gpu-lost-xid": 79, "gsp-timeout": 119}[name]
    assert event["pid"] is None and event["process"] is None
