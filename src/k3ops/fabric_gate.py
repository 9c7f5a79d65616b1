"""The engine's fabric gate: what a host's last fabric check must show before a multi-node engine starts on it.

`k3ops nccl check` records on each host the driver it measured on (`measured_driver`); the serving deploy
reads that record back (the LastFabricCheck fact) and compares it with the driver the host's data pins
(`driver_identity`): the two agree on one spelling here.
"""

from __future__ import annotations

from .settings.host import GpuHostSpec

CHECK_COMMAND = "k3ops nccl check INVENTORY --limit {members}"
OVERRIDE = "--data nccl_gate=off"


def driver_identity(spec: GpuHostSpec) -> str:
    """What a result must have been measured on to vouch for the host: its driver (NVIDIA) or ROCm release."""
    return spec.nvidia_driver_version if spec.gpu_vendor == "nvidia" else f"ROCm {spec.rocm_release}"


def measured_driver(vendor: str, module: dict | None, rocm: str | None) -> str | None:
    """driver_identity as the host runs it: the loaded nvidia module, or the installed ROCm release."""
    if vendor == "nvidia":
        return module["version"] if module else None
    return f"ROCm {rocm.split('-')[0]}" if rocm else None


def gate_refusal(host: str, cluster: str, members: list[str], spec: GpuHostSpec, result: dict | None) -> str | None:
    """Why a multi-node engine must not start on `host` (None: its last check vouches for it)."""
    expected = driver_identity(spec)
    recorded = (result or {}).get("cluster") or {}
    if result is None:
        why = "no fabric check has run on it"
    elif recorded.get("name") != cluster or recorded.get("members") != members:
        why = (f"its last fabric check ({result.get('time')}) did not test cluster {cluster!r} as "
               f"{', '.join(members)}")
    elif recorded.get("verdict") != "pass" or result.get("verdict") != "pass":
        reasons = "; ".join(result.get("reasons", [])) or "see `k3ops nccl status`"
        why = f"its last fabric check ({result.get('time')}) failed: {reasons}"
    elif result.get("driver") != expected:
        why = (f"its last fabric check ({result.get('time')}) ran on {result.get('driver')}, not the driver it runs "
               f"now ({expected})")
    else:
        return None
    check = CHECK_COMMAND.format(members=",".join(members))
    return (f"{host}: cluster {cluster!r} will not start: {why}. Check the fabric on the driver the hosts will run "
            f"(`pyinfra INVENTORY deploys/gpu_host.py` installs it), then `{check}`; to start it anyway, rerun the "
            f"deploy with `{OVERRIDE}`")
