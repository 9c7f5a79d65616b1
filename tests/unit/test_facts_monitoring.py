"""The exposition parser the host checks read exporters with, on real /metrics pages of NVIDIA's DCGM exporter and
AMD's device metrics exporter (tests/fixtures/real/exporters/), and on hostile label values."""

import pytest

from k3ops.facts.monitoring import ExporterMetrics, exposition

from ..conftest import REAL_FIXTURES, real_output

PAGES = sorted(path.relative_to(REAL_FIXTURES).as_posix() for path in (REAL_FIXTURES / "exporters").glob("*.txt"))


def test_an_l4_dcgm_exporter_page_reads_as_prometheus_reads_it():
    page = exposition(real_output("exporters/dcgm-exporter_4.x-era_l4-x1_580.105.08_gpu-operator.txt").splitlines())
    temperature = page["DCGM_FI_DEV_GPU_TEMP"]
    assert temperature["type"] == "gauge" and len(temperature["samples"]) == 1
    assert temperature["samples"][0] == {"labels": {
        "gpu": "0", "UUID": "GPU-c2f76b33-7953-256e-8f33-1343419b1a1c", "pci_bus_id": "00000000:31:00.0",
        "device": "nvidia0", "modelName": "NVIDIA L4", "Hostname": "i-030791dc5a37cd257",
        "DCGM_FI_DRIVER_VERSION": "580.105.08"}, "value": 31.0}
    assert page["DCGM_FI_DEV_POWER_USAGE"]["samples"][0]["value"] == 16.365
    assert page["DCGM_FI_DEV_ROW_REMAP_FAILURE"]["type"] == "gauge"
    assert page["DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"]["type"] == "counter"


def test_the_xid_series_of_a_gpu_operator_page_carries_its_error_labels():
    page = exposition(real_output(
        "exporters/dcgm-exporter_4.x_gpu-operator-v25.10.0_rtx4000ada-x1_580.95.05.txt").splitlines())
    (xid,) = page["DCGM_FI_DEV_XID_ERRORS"]["samples"]
    assert xid["value"] == 0 and xid["labels"]["err_code"] == "0" and xid["labels"]["err_msg"] == "No Error"


def test_amd_pages_of_two_label_schemes_read_with_every_label():
    current = exposition(real_output("exporters/amd-metrics-exporter_2025-08_mi300x-vf-x1_driver-6.12.12.txt")
                         .splitlines())
    (edge,) = current["gpu_edge_temperature"]["samples"]
    assert edge["labels"]["card_series"] == "Aqua Vanjaram [Instinct MI300X VF]"
    assert edge["labels"]["card_model"] == "" and edge["labels"]["gpu_id"] == "0"
    assert current["gpu_free_vram"] == {"type": "gauge", "samples": []}  # its sample was cut from the capture
    early = exposition(real_output(
        "exporters/amd-metrics-exporter_v1.0-era-sample_metricutil-mini_uppercase-labels.txt").splitlines())
    assert early["gpu_nodes_total"]["samples"] == [{"labels": {}, "value": 1.0}]


@pytest.mark.parametrize("capture", PAGES)
def test_every_sample_line_of_every_capture_is_read(capture):
    lines = real_output(capture).splitlines()
    page = exposition(lines)
    samples = [line for line in lines if line.strip() and not line.startswith("#")]
    assert sum(len(family["samples"]) for family in page.values()) == len(samples)


def test_hostile_label_values_are_unescaped_and_end_nothing():
    page = exposition(['# TYPE k3ops_maintenance gauge',
                       'k3ops_maintenance{state="live",by="a\\"} 1\\n# TYPE x counter\\\\"} 1'])
    (sample,) = page["k3ops_maintenance"]["samples"]
    assert sample == {"labels": {"state": "live", "by": 'a"} 1\n# TYPE x counter\\'}, "value": 1.0}
    assert list(page) == ["k3ops_maintenance"]


def test_nothing_answering_is_none():
    assert ExporterMetrics().process([""]) is None
