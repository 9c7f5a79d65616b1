"""The engine serving the model: its pinned artifact, its unit and watchdog, and a wait until it answers.

The unit reads the checkpoint from the cache's active revision with the Hub off; the engine restarts
when its unit, its secrets or the active revision change, and only then. On a host under maintenance (a
rollout's or a person's marker) the engine is left as it is: started, stopped or disabled, it is theirs.
"""

from __future__ import annotations


from pyinfra import host
from pyinfra.api import DeployError, QuoteString, StringCommand, deploy
from pyinfra.operations import docker, files, server, systemd
from pyinfra.operations.util import any_changed

from ..engines.recipes import Recipe, recipe
from ..engines.units import engine_urls, unit_names, unit_variables
from ..facts.engine import EngineState
from ..fabric_gate import gate_refusal
from ..facts.fabric_check import LastFabricCheck
from ..facts.maintenance import MaintenanceMarker
from ..facts.nvidia import IMEX_CHANNEL
from ..maintenance import owner
from ..onhost import layout
from ..onhost.layout import ENGINE_SECRETS_FILE, ENGINE_STATE_DIR, ENGINE_UNIT, LLAMA_CPP_DIR
from ..operations import engine as engine_operations
from ..operations import owned_files, units
from ..settings import cluster_members, host_settings
from ..settings.controller import ControllerFileError, read_api_key
from ..settings.engine import EngineSpec
from ..ssh_liveness import watched
from . import fleet, rendered
from .onhost import onhost_command, onhost_package
from .secrets import secret_file
from .uploads import staged_privately
from .users import state_directory


@watched
@staged_privately
@deploy("Engine")
def serving() -> None:
    settings = host_settings(host)
    spec, model_host, engine = settings.gpu, settings.model, settings.engine.engine
    if engine is None:
        host.noop("no engine in this host's data")
        return
    found = recipe(engine.recipe, spec.hardware_profile)
    if engine.cluster is not None:
        fabric_gate(engine.cluster)
    model_dir = layout.model_dir(model_host.model_cache_path, model_host.model.name)
    rank, head = cluster_position(engine)
    values = unit_variables(found=found, engine=engine, served_name=model_host.model.name, model_dir=model_dir,
                            cache_path=model_host.model_cache_path, service_user=spec.service_user,
                            gpu_vendor=spec.gpu_vendor, docker_source=spec.docker_source,
                            shutdown_seconds=settings.upgrade.upgrade_drain_timeout_seconds, node_rank=rank,
                            head_address=head, devices=(IMEX_CHANNEL,) if spec.board.nvlink_domain else ())
    urls = engine_urls(engine, rank)
    if found.image:
        image = f"{engine.image or found.image}@{engine.image_digest}"
        docker.image(name=f"Pull {image}", image=image)
    else:
        llama_server(engine)
    user = spec.service_user
    state_directory()
    files.directory(name=f"Engine state {ENGINE_STATE_DIR}", path=ENGINE_STATE_DIR, user=user, group=user,
                    mode="750")
    owned_files.directory(name="Engine caches (compiled kernels)", path=f"{ENGINE_STATE_DIR}/cache",
                          owner=user, mode="750")
    secrets = api_key(engine, found)
    onhost_package()
    onhost_command(layout.WATCHDOG_COMMAND, "k3ops-engine-watchdog.j2")
    unit_files = [owned_files.config_file(name=f"Unit {name}", path=f"/etc/systemd/system/{name}",
                                          content=rendered(f"systemd/{name}.j2", **values))
                  for name in unit_names(rank)]
    systemd.daemon_reload(name="Reload systemd for the engine units", _if=any_changed(*unit_files))
    loaded = layout.revision_dir(model_host.model_cache_path, model_host.model.name, model_host.model.revision)

    def running_stale() -> bool:
        """Running, but on an old unit, key or revision: restart it (once, before the start below)."""
        if not units.switches(ENGINE_UNIT)["running"]:
            return False
        state = host.get_fact(EngineState, health_url=urls["health_url"], models_url=urls["models_url"],
                              served_name=model_host.model.name)
        return any(op.did_change() for op in [*unit_files, secrets]) or state["revision"] not in (None, loaded)

    marker = host.get_fact(MaintenanceMarker)
    if marker is not None:  # a rollout or a person took the host out of service: its engine is theirs
        host.noop(f"engine left as it is: the host is under maintenance ({marker.get('reason', '?')}, by "
                  f"{owner(marker)}); remove {layout.MAINTENANCE_MARKER} to return it to service")
        return
    units.service(name="Restart the engine onto its new unit, key or revision", unit=ENGINE_UNIT,
                  restarted=True, _if=running_stale)
    units.service(name=f"Engine {found.engine} ({found.name})", unit=ENGINE_UNIT, running=True, enabled=True)
    if rank == 0:
        units.service(name="Engine watchdog timer", unit=layout.WATCHDOG_TIMER, running=True, enabled=True)
        engine_operations.ready(name=f"Wait until the engine serves {model_host.model.name}",
                                health_url=urls["health_url"], models_url=urls["models_url"],
                                served_name=model_host.model.name, timeout=engine.ready_timeout_seconds)


def fabric_gate(cluster: str) -> None:
    """A multi-node engine starts only on a fabric its hosts' last check passed, on the driver they run now."""
    if host_settings(host).fabric.nccl_gate == "off":
        host.noop(f"fabric gate off (nccl_gate): cluster {cluster} starts without a passing fabric check")
        return
    refusal = gate_refusal(host.name, cluster, cluster_hosts(cluster), host_settings(host).gpu,
                           host.get_fact(LastFabricCheck))
    if refusal:
        raise DeployError(refusal)
    host.noop(f"fabric check passed for cluster {cluster} on this driver")


def llama_server(engine: EngineSpec) -> None:
    """A pinned llama-server build: downloaded, checked against its sha256, unpacked once."""
    release = f"{LLAMA_CPP_DIR}/{engine.binary_sha256[:16]}"
    files.directory(name=f"Directory {LLAMA_CPP_DIR}", path=LLAMA_CPP_DIR, mode="755")
    archive = files.download(name="Download the pinned llama-server build", src=engine.binary_url,
                             dest=f"{release}.tar.gz", sha256sum=engine.binary_sha256)
    files.directory(name=f"Directory {release}", path=release, mode="755")
    server.shell(name="Unpack llama-server",
                 commands=[StringCommand("tar", "-xzf", QuoteString(f"{release}.tar.gz"), "-C", QuoteString(release))],
                 _if=archive.did_change)
    files.link(name=f"{LLAMA_CPP_DIR}/bin is the pinned build", path=f"{LLAMA_CPP_DIR}/bin", target=f"{release}/bin")


def api_key(engine: EngineSpec, found: Recipe):
    """The engine's secrets file (root, 0600: systemd reads it for the unit), with the API key when data names one."""
    lines = ""
    if engine.api_key_file:
        try:
            lines = f"{layout.API_KEY_VARIABLES[found.engine]}={read_api_key(engine.api_key_file)}\n"
        except ControllerFileError as error:
            raise DeployError(f"{host.name}: engine.api_key_file: {error}") from None
    return secret_file(ENGINE_SECRETS_FILE, lines, "Engine secrets")


def cluster_hosts(cluster: str) -> list[str]:
    """The names of the inventory's hosts in the cluster, in rank order (the head first)."""
    return cluster_members(cluster, [(member.name, member.data.dict()) for member in fleet.members(lambda _: True)])


def cluster_position(engine: EngineSpec) -> tuple[int, str]:
    """This host's rank in its multi-node engine and the head's address ((0, "") for one node)."""
    if engine.cluster is None:
        return 0, ""
    ranks = cluster_hosts(engine.cluster)
    head = next(member for member in fleet.members(lambda _: True) if member.name == ranks[0])
    return ranks.index(host.name), host_settings(head).model.address_for_peers(head.name)
