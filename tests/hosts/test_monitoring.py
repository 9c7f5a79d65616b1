"""Monitored hosts serve what Prometheus scrapes: node_exporter with k3ops' own series, fresh, and the GPU units'
states; on NVIDIA hosts DCGM's exporter at the release paired with DCGM, held, with a series for every GPU; on AMD
hosts AMD's device metrics exporter, held, counting every GPU."""

import time

import pytest

from k3ops.deploys.monitoring import AMD_METRICS_EXPORTER_PACKAGE, DCGM_EXPORTER_PACKAGE, METRICS_INTERVAL_SECONDS
from k3ops.facts.apt import AptHeldPackages, AptPolicyVersion
from k3ops.facts.monitoring import ExporterMetrics
from k3ops.vendor_units import AMD_METRICS_EXPORTER, DCGM_EXPORTER, GPU_AGENT, NODE_EXPORTER, PERSISTENCED


def page(host, monitoring, port: int) -> dict:
    """What the exporter on `port` serves, read on the host at the address it listens on."""
    address = monitoring.listen(port).replace("0.0.0.0", "127.0.0.1").replace("[::]", "[::1]")
    found = host.get_fact(ExporterMetrics, url=f"http://{address}/metrics")
    assert found is not None, f"nothing answers at {address}"
    return found


def value(family: dict, **labels: str) -> float | None:
    return next((sample["value"] for sample in family["samples"] if labels.items() <= sample["labels"].items()), None)


def test_node_exporter_serves_k3ops_series_written_within_two_intervals(host, spec, monitoring):
    assert host.service(NODE_EXPORTER).is_enabled
    served = page(host, monitoring, monitoring.node_exporter_port)
    written = value(served["k3ops_metrics_timestamp_seconds"])
    assert time.time() - written < 2 * METRICS_INTERVAL_SECONDS + 15, "k3ops' series are stale: is its timer running?"
    assert "k3ops_maintenance" in served


@pytest.mark.applies_to("nvidia", "amd")
def test_node_exporter_sees_the_gpu_driver_loaded_as_installed(host, spec, monitoring):
    served = page(host, monitoring, monitoring.node_exporter_port)
    module = {"nvidia": "nvidia", "amd": "amdgpu"}[spec.gpu_vendor]
    assert value(served["k3ops_gpu_driver_mismatch"], module=module) == 0


@pytest.mark.applies_to("nvidia")
def test_node_exporter_reports_the_gpu_units_states(host, spec, monitoring):
    served = page(host, monitoring, monitoring.node_exporter_port)
    assert value(served["node_systemd_unit_state"], name=f"{PERSISTENCED}.service", state="active") == 1


@pytest.mark.applies_to("nvidia")
def test_the_dcgm_exporter_is_the_paired_release_held_and_serves_every_gpu(host, spec, monitoring):
    if not spec.dcgm:
        pytest.skip("DCGM is off for this host")
    assert host.get_fact(AptPolicyVersion, package=DCGM_EXPORTER_PACKAGE)["installed"] == \
        spec.dcgm_exporter_package_version
    assert DCGM_EXPORTER_PACKAGE in host.get_fact(AptHeldPackages)
    assert host.service(DCGM_EXPORTER).is_enabled
    temperatures = page(host, monitoring, monitoring.dcgm_exporter_port)["DCGM_FI_DEV_GPU_TEMP"]["samples"]
    assert sorted(int(sample["labels"]["gpu"]) for sample in temperatures) == list(range(spec.gpu_count))
    assert {sample["labels"]["DCGM_FI_DRIVER_VERSION"] for sample in temperatures} == {spec.nvidia_driver_version}


@pytest.mark.applies_to("amd")
def test_amds_metrics_exporter_is_held_and_counts_every_gpu(host, spec, monitoring):
    assert AMD_METRICS_EXPORTER_PACKAGE in host.get_fact(AptHeldPackages)
    assert host.service(GPU_AGENT).is_enabled and host.service(AMD_METRICS_EXPORTER).is_enabled
    served = page(host, monitoring, monitoring.amd_metrics_exporter_port)
    assert value(served["gpu_nodes_total"]) == spec.gpu_count
    assert sorted(int(sample["labels"]["gpu_id"]) for sample in served["gpu_edge_temperature"]["samples"]) == \
        list(range(spec.gpu_count))
