"""The host watched between commands: Debian's node_exporter with k3ops' own series in its textfile collector,
NVIDIA's DCGM exporter beside DCGM, and AMD's device metrics exporter on AMD hosts, each listening where the host's
data says (`k3ops monitoring config` points Prometheus at them).

The exporters' listen addresses and flags are k3ops': a drop-in replaces each packaged ExecStart, written before the
package is installed, so that the service its postinst starts already listens where it should. DCGM's exporter
talks to the host's one nv-hostengine (`-r`), as `dcgmi diag` does, instead of starting an embedded one that would
compete with it for the profiling counters, and restarts on any failure (its packaged unit only on an abort). It
wants DCGM (its packaged unit's Wants=) but does not require it: the runbooks stop nv-hostengine for a GPU reset and
start it again, and a Requires= would stop the exporter with it and leave it stopped. In remote mode it holds no GPU,
so it never stands in a reset's way.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.operations import systemd

from ..escape import systemd_command
from ..onhost import layout
from ..onhost.layout import ENGINE_UNIT
from ..operations import owned_files, packages, units
from ..settings import host_settings
from ..settings.host import GpuHostSpec
from ..vendor_units import (AMD_METRICS_EXPORTER, DCGM, DCGM_EXPORTER, DOCKER, FABRIC_MANAGER, GPU_AGENT, IMEX,
                            NODE_EXPORTER, PERSISTENCED)
from . import rendered
from .onhost import config_directory, onhost_command, onhost_package
from .repositories import signed_repository

NODE_EXPORTER_PROGRAM = "/usr/bin/prometheus-node-exporter"
DCGM_EXPORTER_PACKAGE = "datacenter-gpu-manager-exporter"
DCGM_EXPORTER_PROGRAM = "/usr/bin/dcgm-exporter"
HOSTENGINE = "localhost:5555"  # nv-hostengine's own address
AMD_METRICS_EXPORTER_PACKAGE = "amdgpu-exporter"
AMD_METRICS_EXPORTER_PROGRAM = "/usr/local/bin/amd-metrics-exporter"
# The units whose state node_exporter's systemd collector reports, for the alert rules: the GPU stack's and the
# engine's.
WATCHED_UNITS = tuple(f"{unit}.service" for unit in (FABRIC_MANAGER, PERSISTENCED, DCGM, IMEX, DOCKER))
METRICS_INTERVAL_SECONDS = 30  # Prometheus' usual scrape interval: a series is never more than one scrape old


def drop_in(unit: str) -> str:
    return f"/etc/systemd/system/{unit}.service.d/k3ops.conf"


def node_exporter_command(listen: str) -> list[str]:
    """node_exporter's command line: the textfile collector where k3ops writes, and the watched units' states."""
    units = "|".join(name.replace(".", r"\.") for name in (*WATCHED_UNITS, ENGINE_UNIT))
    return [NODE_EXPORTER_PROGRAM, f"--web.listen-address={listen}",
            f"--collector.textfile.directory={layout.TEXTFILE_DIR}",
            "--collector.systemd", f"--collector.systemd.unit-include=({units})"]


def dcgm_exporter_command(listen: str) -> list[str]:
    return [DCGM_EXPORTER_PROGRAM, "-r", HOSTENGINE, "-f", layout.DCGM_EXPORTER_COUNTERS, "-a", listen]


def exporter_drop_in(unit: str, argv: list[str] | None, why: str):
    """The drop-in that runs an exporter k3ops' way (its command, when `argv`), restarted on any failure, and
    systemd told of it."""
    written = owned_files.config_file(
        name=f"Drop-in {drop_in(unit)}", path=drop_in(unit),
        content=rendered("systemd/exporter-dropin.conf.j2", why=why, exec_start=argv and systemd_command(argv)))
    systemd.daemon_reload(name=f"Reload systemd for {unit}'s drop-in", _if=written.did_change)
    return written


@deploy("Monitoring")
def monitoring() -> None:
    settings = host_settings(host)
    if not settings.monitoring.monitoring:
        stopped()
        return
    listen = settings.monitoring.listen(settings.monitoring.node_exporter_port)
    flags = exporter_drop_in(NODE_EXPORTER, node_exporter_command(listen),
                             "node_exporter's listen address, k3ops' textfile series and the GPU units' states")
    packages.installed(name="Install node_exporter (Debian's prometheus-node-exporter)", packages=[NODE_EXPORTER])
    units.service(name="Run node_exporter", unit=NODE_EXPORTER, running=True, enabled=True)
    units.service(name="Restart node_exporter with its new flags", unit=NODE_EXPORTER, restarted=True,
                  _if=flags.did_change)
    k3ops_metrics()


def stopped() -> None:
    """Monitoring turned off: the exporters and k3ops' series stopped and kept from starting at boot (a host that
    never had them is left as it is)."""
    for unit in (NODE_EXPORTER, layout.METRICS_TIMER, DCGM_EXPORTER, AMD_METRICS_EXPORTER, GPU_AGENT):
        units.service(name=f"Stop {unit}: monitoring is off", unit=unit, running=False, enabled=False)


def k3ops_metrics() -> None:
    """k3ops' own series, written for node_exporter by a timer."""
    onhost_package()
    onhost_command(layout.METRICS_COMMAND, "k3ops-metrics.j2")
    written = [owned_files.config_file(name=f"Unit {name}", path=f"/etc/systemd/system/{name}",
                                       content=rendered(f"systemd/{name}.j2", layout=layout,
                                                        interval=METRICS_INTERVAL_SECONDS))
               for name in (layout.METRICS_SERVICE, layout.METRICS_TIMER)]
    systemd.daemon_reload(name="Reload systemd for the metrics units",
                          _if=lambda: any(unit.did_change() for unit in written))
    units.service(name=f"Write k3ops' metrics every {METRICS_INTERVAL_SECONDS} s", unit=layout.METRICS_TIMER,
                  running=True, enabled=True)
    units.service(name="Restart the metrics timer on its new schedule", unit=layout.METRICS_TIMER, restarted=True,
                  _if=written[1].did_change)


def dcgm_exporter(spec: GpuHostSpec, driver_loaded: Callable[[], bool]) -> None:
    """NVIDIA's DCGM exporter at the release paired with DCGM, pinned and held with it, reading the fleet's
    counters from the host's nv-hostengine."""
    monitoring = host_settings(host).monitoring
    if not monitoring.monitoring:
        return  # stopped by `monitoring`, with the others
    config_directory()
    counters = owned_files.config_file(name=f"The DCGM exporter's counters {layout.DCGM_EXPORTER_COUNTERS}",
                                       path=layout.DCGM_EXPORTER_COUNTERS,
                                       content=rendered("k3ops/dcgm-exporter-counters.csv"))
    flags = exporter_drop_in(DCGM_EXPORTER, dcgm_exporter_command(monitoring.listen(monitoring.dcgm_exporter_port)),
                             "the DCGM exporter reads the host's nv-hostengine, k3ops' counters, restarts on failure")
    packages.held_at(name=f"Install the DCGM exporter {spec.dcgm_exporter_package_version}",
                     packages=[DCGM_EXPORTER_PACKAGE], version=spec.dcgm_exporter_package_version)
    units.service(name="Run the DCGM exporter", unit=DCGM_EXPORTER, running=True, enabled=True, _if=driver_loaded)
    units.service(name="Restart the DCGM exporter with its new counters or flags", unit=DCGM_EXPORTER,
                  restarted=True, _if=lambda: (counters.did_change() or flags.did_change()) and driver_loaded())


def amd_metrics_exporter_sources(spec: GpuHostSpec) -> list:
    """AMD's device metrics exporter repository (its release), on a monitored AMD host: refreshed with the others."""
    if spec.gpu_vendor != "amd" or not host_settings(host).monitoring.monitoring:
        return []
    return signed_repository("amd_metrics_exporter", spec.repository("amd_metrics_exporter"))


def amd_metrics_exporter(driver_loaded: Callable[[], bool]) -> None:
    """AMD's device metrics exporter from its release's repository, held, with gpuagent (through which it reads
    the GPUs), serving on `amd_metrics_exporter_port`; its configuration file has a port and no address, so it
    listens on every address."""
    monitoring = host_settings(host).monitoring
    if not monitoring.monitoring:
        return  # stopped by `monitoring`, with the others
    config_directory()
    config = owned_files.config_file(
        name=f"AMD's metrics exporter configuration {layout.AMD_METRICS_EXPORTER_CONFIG}",
        path=layout.AMD_METRICS_EXPORTER_CONFIG,
        content=json.dumps({"ServerPort": monitoring.amd_metrics_exporter_port}, indent=2) + "\n")
    flags = exporter_drop_in(AMD_METRICS_EXPORTER, [AMD_METRICS_EXPORTER_PROGRAM, "-amd-metrics-config",
                                                    layout.AMD_METRICS_EXPORTER_CONFIG],
                             "AMD's metrics exporter reads k3ops' configuration, restarts on failure")
    exporter_drop_in(GPU_AGENT, None, "gpuagent, which AMD's metrics exporter reads the GPUs through, restarts on "
                                      "failure (one started before amdgpu was loaded comes back)")
    packages.installed(name="Install AMD's device metrics exporter", packages=[AMD_METRICS_EXPORTER_PACKAGE])
    packages.held(name="Hold AMD's device metrics exporter at its release", packages=[AMD_METRICS_EXPORTER_PACKAGE])
    for unit in (GPU_AGENT, AMD_METRICS_EXPORTER):
        units.service(name=f"Run {unit}", unit=unit, running=True, enabled=True, _if=driver_loaded)
    units.service(name="Restart AMD's metrics exporter with its new configuration", unit=AMD_METRICS_EXPORTER,
                  restarted=True, _if=lambda: (config.did_change() or flags.did_change()) and driver_loaded())
