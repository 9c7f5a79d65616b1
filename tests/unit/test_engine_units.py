"""The engine units as rendered from templates/systemd: pinned image, GPUs, the cache, loopback, no secrets."""

import configparser
import shlex

import pytest

from k3ops.onhost.layout import ENGINE_SECRETS_FILE

from ..engine_units import DIGEST, HEAD_ADDRESS, MODEL_DIR, engine_variables as variables, rendered_units


def render(name: str, variables: dict) -> configparser.ConfigParser:
    """One unit the host gets, parsed."""
    unit = configparser.ConfigParser(strict=False, interpolation=None, delimiters=("=",))
    unit.optionxform = str
    unit.read_string(rendered_units(variables)[name])
    return unit


def test_vllm_runs_the_pinned_image_on_the_cdi_gpus_from_the_cache_offline():
    unit = render("k3ops-engine.service", variables("vllm-b300x8", image_digest=DIGEST))
    argv = shlex.split(unit["Service"]["ExecStart"])
    assert argv[:2] == ["/usr/bin/docker", "run"]
    assert f"vllm/vllm-openai:kimi-k3@{DIGEST}" in argv
    assert argv[argv.index("--device") + 1] == "nvidia.com/gpu=all"
    assert f"{MODEL_DIR}:{MODEL_DIR}:ro" in argv
    assert {"HF_HUB_OFFLINE=1", "VLLM_USE_V2_MODEL_RUNNER=1"} <= {argv[i + 1] for i, a in enumerate(argv) if a == "--env"}
    assert argv[argv.index("--env-file") + 1] == ENGINE_SECRETS_FILE
    assert argv[argv.index("--model") + 1] == f"{MODEL_DIR}/current"
    assert argv[argv.index("--host") + 1] == "127.0.0.1"
    service = unit["Service"]
    assert service["Restart"] == "always" and service["User"] == "k3ops"
    assert service["EnvironmentFile"] == f"-{ENGINE_SECRETS_FILE}"
    assert unit["Unit"]["RequiresMountsFor"] == "/srv/k3ops/models"


def test_amd_containers_get_kfd_and_dri():
    argv = shlex.split(render("k3ops-engine.service", variables("vllm-mi355x8", vendor="amd",
                                                                   image_digest=DIGEST))["Service"]["ExecStart"])
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--device"] == ["/dev/kfd", "/dev/dri"]


def test_llama_server_runs_natively_and_hardened():
    unit = render("k3ops-engine.service", variables("llama.cpp-gguf", vendor=None, binary_url="http://x/ls.tgz",
                                                       binary_sha256="c" * 64, model_file="tiny-k3.gguf"))
    argv = shlex.split(unit["Service"]["ExecStart"])
    assert argv[0] == "/opt/k3ops/llama.cpp/bin/llama-server"
    assert argv[argv.index("--model") + 1] == f"{MODEL_DIR}/current/tiny-k3.gguf"
    assert unit["Service"]["ProtectSystem"] == "strict" and unit["Service"]["NoNewPrivileges"] == "yes"
    assert "Requires" not in unit["Unit"]


@pytest.mark.parametrize("rank", [0, 1])
def test_multi_node_units_carry_rank_and_head(rank):
    values = variables("vllm-gb300x4-2node", node_rank=rank, image_digest=DIGEST, cluster="gb300-a")
    argv = shlex.split(render("k3ops-engine.service", values)["Service"]["ExecStart"])
    assert argv[argv.index("--node-rank") + 1] == str(rank)
    assert argv[argv.index("--master-addr") + 1] == HEAD_ADDRESS
    # Only the head serves HTTP, so only the head gets the watchdog.
    assert ("k3ops-engine-watchdog.service" in rendered_units(values)) == (rank == 0)


def test_the_watchdog_checks_health_and_the_served_model():
    values = variables("llama.cpp-gguf", vendor=None, binary_url="http://x/ls.tgz", binary_sha256="c" * 64, model_file="tiny-k3.gguf",
                       host="0.0.0.0", api_key_file="/etc/k3ops/key", health_failures=4)
    watchdog = shlex.split(render("k3ops-engine-watchdog.service", values)["Service"]["ExecStart"])
    assert watchdog[watchdog.index("--url") + 1] == "http://127.0.0.1:8080/health"
    assert watchdog[watchdog.index("--models-url") + 1] == "http://127.0.0.1:8080/v1/models"
    assert watchdog[watchdog.index("--failures") + 1] == "4"
    timer = render("k3ops-engine-watchdog.timer", values)
    assert timer["Timer"]["OnUnitActiveSec"] == "30"


def test_no_secret_reaches_a_unit():
    for recipe, engine in (("vllm-b300x8", {"image_digest": DIGEST, "host": "10.0.0.5", "api_key_file": "/k"}),
                           ("llama.cpp-gguf", {"binary_url": "http://x/ls.tgz", "binary_sha256": "c" * 64, "model_file": "tiny-k3.gguf"})):
        values = variables(recipe, **engine)
        for name in ("k3ops-engine.service", "k3ops-engine-watchdog.service"):
            text = str(dict(render(name, values)["Service"]))
            assert "api-key" not in text and "API_KEY=" not in text and "HF_TOKEN" not in text
