"""The catalogue of K3 launch recipes, keyed by engine and hardware, and the command lines they render.

Each recipe is a published starting point (an engine's or a vendor's published K3 recipe) written down
flag for flag, with the hardware it was measured on: a topology that fits one board is wrong on another,
so a recipe asked for on other hardware is refused. Operators change any flag in data (`engine.args`), never in code.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Flags whose value the recipe does not know: the deploy fills them in per host.
MODEL_PATH = "{model_path}"
SERVED_NAME = "{served_name}"
HOST = "{host}"
PORT = "{port}"
NODE_RANK = "{node_rank}"
HEAD_ADDRESS = "{head_address}"
SHUTDOWN_SECONDS = "{shutdown_seconds}"
REQUIRED = "{required}"  # a value the operator must give in data (engine.args); never defaulted
PLACEHOLDERS = {MODEL_PATH, SERVED_NAME, HOST, PORT, NODE_RANK, HEAD_ADDRESS, SHUTDOWN_SECONDS}
# What the spec owns, by the field that sets it: data overriding a flag that carries one of these (or the
# engine's size, or a key, which would sit in argv and a unit file) would bypass the spec's checks.
SPEC_FIELDS = {MODEL_PATH: "model.revision (and engine.model_file)", SERVED_NAME: "model.name",
               HOST: "engine.host", PORT: "engine.port", NODE_RANK: "the cluster's inventory order",
               HEAD_ADDRESS: "the peer_address of the cluster's first host",
               SHUTDOWN_SECONDS: "upgrade_drain_timeout_seconds (a stop drains as long as a rollout's drain)"}
SPEC_FLAGS = {"--nnodes": "engine.recipe (its number of hosts)", "--api-key": "engine.api_key_file",
              "--admin-api-key": "engine.api_key_file", "--api-key-file": "engine.api_key_file",
              "--hf-token": "nothing (engines read the model cache)", "--config": "engine.args (flag by flag)"}


@dataclass(frozen=True)
class Recipe:
    name: str
    engine: str  # vllm, sglang, llama.cpp
    profiles: tuple[str, ...]  # hardware profiles it is written for; () = any
    program: tuple[str, ...]
    args: tuple[tuple[str, str | None], ...]  # (flag, value); None: a flag without a value
    nodes: int = 1
    image: str | None = None  # container engines
    environment: dict[str, str] = field(default_factory=dict)
    head_args: tuple[tuple[str, str | None], ...] = ()
    worker_args: tuple[tuple[str, str | None], ...] = ()
    port: int = 8000
    source: str = ""


K3_TOOLS = (("--enable-auto-tool-choice", None), ("--tool-call-parser", "kimi_k3"), ("--reasoning-parser", "kimi_k3"))
# vLLM aborts requests in flight on SIGTERM unless --shutdown-timeout gives them time (vllm-project/vllm#36666).
VLLM_SERVE = (("--model", MODEL_PATH), ("--served-model-name", SERVED_NAME), ("--host", HOST), ("--port", PORT),
              ("--shutdown-timeout", SHUTDOWN_SECONDS))
VLLM_MULTI_NODE = (("--nnodes", "2"), ("--node-rank", NODE_RANK), ("--master-addr", HEAD_ADDRESS),
                   ("--master-port", "29501"))

RECIPES: dict[str, Recipe] = {recipe.name: recipe for recipe in (
    Recipe(
        name="vllm-b300x8", engine="vllm", profiles=("b300x8",), program=(), image="vllm/vllm-openai:kimi-k3",
        environment={"VLLM_USE_V2_MODEL_RUNNER": "1"},
        args=(*VLLM_SERVE, ("--tensor-parallel-size", "8"), ("--gpu-memory-utilization", "0.95"),
              ("--kv-cache-dtype", "fp8"), ("--attention-backend", "TOKENSPEED_MLA"),
              ("--attention-config", '{"use_prefill_query_quantization":true,"mla_prefill_backend":"TOKENSPEED_MLA"}'),
              ("--prefix-match-unit", "128"), ("--enable-prefix-caching", None), ("--max-model-len", "131072"),
              *K3_TOOLS),
        source="vLLM Blackwell TP8 start template, recipe of 2026-09-10"),
    Recipe(
        name="vllm-gb300x4-2node", engine="vllm", profiles=("gb300x4",), program=(), nodes=2,
        image="vllm/vllm-openai:kimi-k3", environment={"VLLM_USE_V2_MODEL_RUNNER": "1"},
        args=(*VLLM_SERVE, ("--tensor-parallel-size", "8"), *VLLM_MULTI_NODE, ("--gpu-memory-utilization", "0.95"),
              ("--kv-cache-dtype", "fp8"), ("--attention-backend", "TOKENSPEED_MLA"),
              ("--attention-config", '{"use_prefill_query_quantization":true,"mla_prefill_backend":"TOKENSPEED_MLA"}'),
              ("--enable-prefix-caching", None), ("--max-model-len", "131072"), *K3_TOOLS),
        worker_args=(("--headless", None),),
        source="the Blackwell TP8 template across the two 4-GPU trays of a GB300 system (vLLM multi-node, mp backend)"),
    Recipe(
        name="vllm-h200x8-2node", engine="vllm", profiles=("h200x8",), program=(), nodes=2,
        image="vllm/vllm-openai:kimi-k3",
        args=(*VLLM_SERVE, ("--tensor-parallel-size", "8"), ("--pipeline-parallel-size", "2"), *VLLM_MULTI_NODE,
              ("--gpu-memory-utilization", "0.92"), ("--enable-prefix-caching", None), ("--max-model-len", "32768"),
              *K3_TOOLS),
        worker_args=(("--headless", None),),
        source="TP8 within each HGX H200, PP2 across two hosts (16x 141 GB for the pinned revision's weights, "
               "whose size `k3ops model status` shows)"),
    Recipe(
        name="vllm-mi355x8", engine="vllm", profiles=("mi355x8",), program=(), image="rocm/vllm:kimi-k3",
        args=(*VLLM_SERVE, ("--tensor-parallel-size", "8"), ("--gpu-memory-utilization", "0.95"),
              ("--enable-prefix-caching", None), ("--max-model-len", "131072"), *K3_TOOLS),
        source="the vLLM recipe's 8x MI355X minimum, on the ROCm image"),
    Recipe(
        name="sglang-b300x8", engine="sglang", profiles=("b300x8",), program=("sglang", "serve"),
        image="lmsysorg/sglang:v0.5.18", port=30000,
        args=(("--trust-remote-code", None), ("--model-path", MODEL_PATH), ("--served-model-name", SERVED_NAME),
              ("--tp-size", "8"), ("--dcp-size", "8"), ("--mem-fraction-static", "0.85"),
              ("--mamba-full-memory-ratio", REQUIRED), ("--reasoning-parser", "kimi_k3"),
              ("--tool-call-parser", "kimi_k3"), ("--host", HOST), ("--port", PORT), ("--enable-metrics", None)),
        source="SGLang cookbook 'single node 8x B300 Unified/Balanced', SGLang v0.5.18 (71de97b2)"),
    Recipe(
        name="llama.cpp-gguf", engine="llama.cpp", profiles=(), program=("/opt/k3ops/llama.cpp/bin/llama-server",),
        port=8080,
        args=(("--model", MODEL_PATH), ("--alias", SERVED_NAME), ("--host", HOST), ("--port", PORT),
              ("--temp", "1.0"), ("--top-p", "0.95"), ("--jinja", None), ("--metrics", None),
              ("--ctx-size", "32768")),
        source="Unsloth GGUF guide: llama-server -m <first shard> --temp 1.0 --top-p 0.95"),
)}


class RecipeError(ValueError):
    pass


def recipe(name: str, hardware_profile: str) -> Recipe:
    """The named recipe, refused when the hardware is not what it was written for."""
    try:
        found = RECIPES[name]
    except KeyError:
        raise RecipeError(f"unknown recipe {name!r}; known: {', '.join(RECIPES)}") from None
    if found.profiles and hardware_profile not in found.profiles:
        raise RecipeError(f"recipe {name!r} is written for {', '.join(found.profiles)}, not {hardware_profile}: "
                          f"its topology does not carry over; pick one of "
                          f"{', '.join(r.name for r in RECIPES.values() if not r.profiles or hardware_profile in r.profiles)}")
    return found


def arguments(found: Recipe, overrides: dict[str, str | bool | None], node_rank: int = 0) -> list[tuple[str, str | None]]:
    """The recipe's flags with the operator's overrides: a value replaces, True adds a bare flag, False
    or None removes the flag; new flags are appended in the order given."""
    flags = list(found.args) + list(found.head_args if node_rank == 0 else found.worker_args)
    merged = {flag: value for flag, value in flags}
    for flag in overrides:
        owner = SPEC_FIELDS.get(merged.get(flag) or "") or SPEC_FLAGS.get(flag)
        if owner:
            raise RecipeError(f"{flag} is set by k3ops from {owner}; set that instead of engine.args")
    for flag, value in overrides.items():
        if value is None or value is False:
            merged.pop(flag, None)
        else:
            merged[flag] = None if value is True else str(value)
    missing = [flag for flag, value in merged.items() if value == REQUIRED]
    if missing:
        raise RecipeError(f"recipe {found.name!r} needs {', '.join(missing)} in engine.args: it depends on the "
                          "workload and has no default")
    return list(merged.items())


def command_line(found: Recipe, overrides: dict, values: dict[str, str], node_rank: int = 0) -> list[str]:
    """The engine's argv after the program (or image): placeholders filled from `values`."""
    argv = list(found.program)
    for flag, value in arguments(found, overrides, node_rank):
        argv.append(flag)
        if value is not None:
            argv.append(values[value[1:-1]] if value in PLACEHOLDERS else value)
    return argv
