"""The lab's AMD device metrics exporter against real /metrics pages of AMD's (tests/fixtures/real/exporters/): the
same families and types, the same labels in the same order; and its gpuagent, without which it does not start."""

from k3ops.facts.monitoring import exposition
from k3ops_lab.sim import amd_metrics_exporter

from ...conftest import real_output
from ..fake_host import amd_host, run

CURRENT = "exporters/amd-metrics-exporter_2025-08_mi300x-vf-x1_driver-6.12.12.txt"
OAM = "exporters/amd-metrics-exporter_rocm7-ga-dev-2025-09_mi300x-oam-x8_driver-6.14.14.txt"


def lab_page(tmp_path) -> dict:
    host, _ = amd_host(tmp_path)
    return exposition(amd_metrics_exporter.page(host, "mi-01").splitlines())


def test_a_gpus_series_carry_the_real_exporters_labels_in_its_order(tmp_path):
    real = exposition(real_output(CURRENT).splitlines())
    lab = lab_page(tmp_path)
    for name in ("gpu_edge_temperature", "gpu_free_vram"):
        assert lab[name]["type"] == real[name]["type"] == "gauge", name
    real_labels = list(real["gpu_edge_temperature"]["samples"][0]["labels"])
    assert all(list(sample["labels"]) == real_labels for sample in lab["gpu_edge_temperature"]["samples"])
    assert [sample["labels"]["gpu_id"] for sample in lab["gpu_edge_temperature"]["samples"]] == \
        [str(index) for index in range(8)]
    # a bare-metal host: the Kubernetes and Slurm labels are empty, the card's own are filled (as on an OAM board)
    oam = exposition(real_output(OAM).splitlines())["gpu_gfx_activity"]["samples"][0]["labels"]
    first = lab["gpu_gfx_activity"]["samples"][0]["labels"]
    assert {key for key, value in first.items() if value} >= {key for key, value in oam.items() if value} - {
        "cluster_name"}
    assert first["pod"] == first["job_id"] == first["cluster_name"] == ""


def test_the_gpu_count_is_one_series_of_the_host(tmp_path):
    nodes = lab_page(tmp_path)["gpu_nodes_total"]
    assert nodes["type"] == "gauge" and nodes["samples"] == [{"labels": {"hostname": "mi-01"}, "value": 8.0}]


def test_the_exporter_needs_gpuagent_and_gpuagent_needs_amdgpu(tmp_path, capsys):
    host, _ = amd_host(tmp_path / "loaded")
    config = tmp_path / "config.json"
    config.write_text('{"ServerPort": 5999}')
    status, _, err = run(amd_metrics_exporter, capsys, host, "-amd-metrics-config", str(config))
    assert status == 1 and "gpuagent does not answer" in err
    unloaded, _ = amd_host(tmp_path / "unloaded", amdgpu="")
    status, _, err = run(amd_metrics_exporter.gpuagent_main, capsys, unloaded)
    assert status == 1 and "is the amdgpu driver loaded?" in err
