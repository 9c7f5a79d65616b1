"""Where each host's exporters listen: the monitoring deploy binds them there, and `k3ops monitoring config` makes
Prometheus' targets from it."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..forms import ip_address

# The exporters' own default ports: node_exporter's, dcgm-exporter's (`-a :9400`) and AMD's device metrics
# exporter's (`ServerPort` in /etc/metrics/config.json).
NODE_EXPORTER_PORT = 9100
DCGM_EXPORTER_PORT = 9400
AMD_METRICS_EXPORTER_PORT = 5000


class MonitoringSpec(BaseModel):
    """A host's exporters: on by default, at their usual ports unless data moves them."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    monitoring: bool = Field(True, description="Prometheus scrapes this host: node_exporter, the GPU vendor's exporter "
                                               "and the engine's metrics (false: left out of `k3ops monitoring config`)")
    exporter_address: str = Field(
        "0.0.0.0", description="the IP address the exporters listen on (the host's management address keeps them "
                               "off the serving network; 0.0.0.0 or :: is every address; AMD's exporter, whose "
                               "configuration has a port alone, listens on every address)")
    node_exporter_port: int = Field(NODE_EXPORTER_PORT, ge=1, le=65535, description="node_exporter's port")
    dcgm_exporter_port: int = Field(DCGM_EXPORTER_PORT, ge=1, le=65535,
                                    description="NVIDIA's DCGM exporter's port (NVIDIA hosts)")
    amd_metrics_exporter_port: int = Field(AMD_METRICS_EXPORTER_PORT, ge=1, le=65535,
                                           description="AMD's device metrics exporter's port (AMD hosts)")

    @field_validator("exporter_address")
    @classmethod
    def _an_address(cls, value: str) -> str:
        return ip_address(value)

    @model_validator(mode="after")
    def _ports_apart(self) -> MonitoringSpec:
        ports = [self.node_exporter_port, self.dcgm_exporter_port, self.amd_metrics_exporter_port]
        if len(set(ports)) != len(ports):
            raise ValueError(f"node_exporter_port, dcgm_exporter_port and amd_metrics_exporter_port must differ, "
                             f"not {ports}")
        return self

    def listen(self, port: int) -> str:
        """An exporter's listen address (`address:port`, IPv6 in brackets), as the exporters take it."""
        return f"[{self.exporter_address}]:{port}" if ":" in self.exporter_address else f"{self.exporter_address}:{port}"
