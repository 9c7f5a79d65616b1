"""The lab's dcgm-exporter against real /metrics pages of NVIDIA's (tests/fixtures/real/exporters/): the same families
with the same types, the same labels in the same order, the same number formats; and k3ops' counters file against
the types the real exporter gives its fields."""

import subprocess

import pytest

from k3ops.deploys import TEMPLATES
from k3ops.facts.monitoring import exposition
from k3ops_lab.sim import dcgm_exporter

from ...conftest import real_output
from ..fake_host import nvidia_host

REAL_PAGES = ("exporters/dcgm-exporter_4.x-era_l4-x1_580.105.08_gpu-operator.txt",
              "exporters/dcgm-exporter_4.x_gpu-operator-v25.10.0_rtx4000ada-x1_580.95.05.txt")
CLOCK_EVENTS_PAGE = "exporters/dcgm-exporter_3.3.x-dev_t400-x1_545.29.02_exp-clock-events-count.txt"
# Labels the GPU operator's pod mapping adds in Kubernetes; a bare-metal exporter has none of them.
POD_LABELS = ("container", "namespace", "pod", "pod_uid")
COUNTERS = TEMPLATES / "k3ops/dcgm-exporter-counters.csv"


def families(page: str) -> dict[str, dict]:
    """Each family of a page, as the host checks read it: its TYPE and its samples' label names (in order, less the
    pod mapping's) and values as written."""
    found = exposition(page.splitlines())
    written = [line.rpartition(" ")[2] for line in page.splitlines() if line.strip() and not line.startswith("#")]
    values = iter(written)
    return {name: {"type": family["type"],
                   "samples": [([label for label in sample["labels"] if label not in POD_LABELS], next(values))
                               for sample in family["samples"]]}
            for name, family in found.items()}


def lab_page(tmp_path, faults=None) -> str:
    host, _ = nvidia_host(tmp_path, faults=faults)
    return dcgm_exporter.page(host, dcgm_exporter.counters(str(COUNTERS)), "gpu-01")


@pytest.mark.parametrize("capture", REAL_PAGES)
def test_the_families_both_serve_have_the_real_types_labels_and_number_formats(tmp_path, capture):
    real, lab = families(real_output(capture)), families(lab_page(tmp_path))
    shared = set(real) & set(lab)
    assert len(shared) >= 10, sorted(shared)
    for name in shared:
        assert lab[name]["type"] == real[name]["type"], name
        real_labels, real_value = real[name]["samples"][0]
        for labels, value in lab[name]["samples"]:
            assert labels == real_labels, name
            assert ("." in value) == ("." in real_value), (name, value, real_value)
            if "." in value:
                assert len(value.split(".")[1]) == len(real_value.split(".")[1]), (name, value, real_value)
    assert len(lab["DCGM_FI_DEV_GPU_TEMP"]["samples"]) == 8  # one series per GPU of an h200x8


def test_k3ops_counters_give_each_field_the_type_the_real_exporter_does():
    fields = dcgm_exporter.counters(str(COUNTERS))
    real = {name: family["type"] for capture in REAL_PAGES for name, family in families(real_output(capture)).items()}
    compared = [(field, kind, real[field]) for field, kind, _ in fields if field in real]
    assert len(compared) >= 10
    assert [(field, kind) for field, kind, expected in compared if kind != expected] == []


def test_a_power_brake_is_a_clock_event_labelled_as_the_real_exporter_labels_it(tmp_path):
    real = families(real_output(CLOCK_EVENTS_PAGE))["DCGM_EXP_CLOCK_EVENTS_COUNT"]
    lab = families(lab_page(tmp_path, faults={"power_brake": [3]}))["DCGM_EXP_CLOCK_EVENTS_COUNT"]
    assert lab["type"] == real["type"] == "gauge"
    (labels, value), = lab["samples"]
    real_labels = real["samples"][0][0]
    assert [name for name in labels if name != "pci_bus_id"] == real_labels  # 3.3 had no pci_bus_id yet
    assert 'clock_event="hw_power_brake"' in lab_page(tmp_path / "again", faults={"power_brake": [3]})
    assert "DCGM_EXP_CLOCK_EVENTS_COUNT" not in families(lab_page(tmp_path / "healthy"))


def test_promtool_parses_the_lab_page_as_it_parses_the_real_ones(tmp_path):
    """promtool's linter complains of DCGM's names alike on both (counters without _total); it must find no
    syntax error in either."""
    for page in (lab_page(tmp_path), real_output(REAL_PAGES[0])):
        checked = subprocess.run(["promtool", "check", "metrics"], input=page, capture_output=True, text=True)
        assert checked.returncode in (0, 3), checked.stdout + checked.stderr
        assert "parsing error" not in checked.stdout + checked.stderr
