"""A host's settings are one bundle, validated once per process from its data and equal to each spec
validated on its own."""

from types import SimpleNamespace

import pytest
from pydantic import ValidationError

from k3ops import settings
from k3ops.settings import HostSettings, host_errors, host_settings, settings_of
from k3ops.settings.connection import ConnectionSpec
from k3ops.settings.doctor import DoctorSpec
from k3ops.settings.engine import EngineHostSpec
from k3ops.settings.fabric import FabricCheckSpec
from k3ops.settings.host import GpuHostSpec
from k3ops.settings.model import ModelHostSpec
from k3ops.settings.monitoring import MonitoringSpec
from k3ops.settings.upgrade import UpgradeSpec

MODEL = {"repo_id": "moonshotai/Kimi-K3", "revision": "0123456789abcdef0123456789abcdef01234567", "name": "kimi-k3"}
SERVING = {"hardware_profile": "b300x8", "ssh_hostname": "10.0.0.7", "model": MODEL,
           "engine": {"recipe": "vllm-b300x8", "image_digest": "sha256:" + "a" * 64},
           "nccl_iterations": 50, "doctor_kernel_log_hours": 6, "upgrade_soak_seconds": 60, "ssh_keepalive_seconds": 5,
           "node_exporter_port": 19100}
PARTS = {"gpu": GpuHostSpec, "model": ModelHostSpec, "engine": EngineHostSpec, "fabric": FabricCheckSpec,
         "doctor": DoctorSpec, "upgrade": UpgradeSpec, "connection": ConnectionSpec, "monitoring": MonitoringSpec}


@pytest.fixture
def validations(monkeypatch) -> list[dict]:
    """The data HostSettings validates, from an empty cache."""
    monkeypatch.setattr(settings, "_VALIDATED", {})
    seen, validate = [], HostSettings.model_validate
    monkeypatch.setattr(HostSettings, "model_validate", lambda data: seen.append(data) or validate(data))
    return seen


def pyinfra_host(data: dict):
    return SimpleNamespace(data=SimpleNamespace(dict=lambda: dict(data)))


@pytest.mark.parametrize("data", [SERVING, {"hardware_profile": "mi355x8"}, {"hardware_profile": "cpu"}])
def test_the_bundle_is_each_spec_of_the_data(data):
    bundle = settings_of(data)
    assert set(HostSettings.model_fields) == set(PARTS)
    assert {name: getattr(bundle, name) for name in PARTS} == {name: spec.model_validate(data)
                                                               for name, spec in PARTS.items()}


def test_a_hosts_data_is_validated_once(validations):
    first = host_settings(pyinfra_host(SERVING))
    assert host_settings(pyinfra_host(SERVING)) is first and settings_of(dict(SERVING)) is first
    assert len(validations) == 1
    other = settings_of({**SERVING, "ssh_keepalive_seconds": 6})
    assert other.connection.ssh_keepalive_seconds == 6 and len(validations) == 2


def test_data_of_any_shape_is_validated_and_its_errors_reported():
    data = {"hardware_profile": "h200x8", "nccl_environment": {1: "WARN", "NCCL_DEBUG": "WARN"}}
    with pytest.raises(ValidationError):
        settings_of(data)
    assert host_errors("gpu-01", data) == ["gpu-01: nccl_environment.1.[key]: Input should be a valid string"]


def test_bad_data_is_refused_every_time(validations):
    for _ in range(2):
        with pytest.raises(ValidationError):
            settings_of({"hardware_profile": "h200x8", "ssh_keepalive_seconds": 0})
    assert len(validations) == 2
