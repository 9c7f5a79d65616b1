"""The engine units as rendered from templates/systemd: pinned image, GPUs, the cache, loopback, no secrets."""

import configparser
import re
import shlex

import pytest

from k3ops.engines.recipes import RECIPES
from k3ops.facts.nvidia import IMEX_CHANNEL
from k3ops.onhost.layout import API_KEY_VARIABLES, ENGINE_SECRETS_FILE, SECRETS_DIR

from ..engine_units import (DIGEST, HEAD_ADDRESS, MODEL_DIR, SHUTDOWN_SECONDS, engine_variables as variables,
                            rendered_units)


def render(name: str, variables: dict) -> configparser.ConfigParser:
    """One unit the host gets, parsed."""
    unit = configparser.ConfigParser(strict=False, interpolation=None, delimiters=("=",))
    unit.optionxform = str
    unit.read_string(rendered_units(variables)[name])
    return unit


def unquoted(command: str) -> list[str]:
    """A systemd command line split and unescaped as systemd does for the words we write (double quotes
    with C escapes; %% and $$ for a literal % and $)."""
    return [word.replace("%%", "%").replace("$$", "$") for word in shlex.split(command)]


def test_vllm_runs_the_pinned_image_from_the_cache_offline():
    unit = render("k3ops-engine.service", variables("vllm-b300x8", image_digest=DIGEST))
    argv = unquoted(unit["Service"]["ExecStart"])
    assert argv[:2] == ["/usr/bin/docker", "run"]
    assert f"vllm/vllm-openai:kimi-k3@{DIGEST}" in argv
    assert f"{MODEL_DIR}:{MODEL_DIR}:ro" in argv
    assert {"HF_HUB_OFFLINE=1", "VLLM_USE_V2_MODEL_RUNNER=1"} <= {argv[i + 1] for i, a in enumerate(argv) if a == "--env"}
    assert argv[argv.index("--model") + 1] == f"{MODEL_DIR}/current"
    assert argv[argv.index("--host") + 1] == "127.0.0.1"
    service = unit["Service"]
    assert service["Restart"] == "always" and service["User"] == "k3ops"
    assert unit["Unit"]["RequiresMountsFor"] == "/srv/k3ops/models"


# The oldest Docker Engine each docker_source installs: Debian 12's docker.io 20.10; Docker's own
# repository ships 25 and newer for bookworm. CDI devices (vendor/class=name) need Docker 25.
DOCKER_VERSIONS = {"distribution": (20, 10), "vendor": (25, 0)}
CDI_DOCKER_VERSION = (25, 0)
CDI_DEVICE_REGEX = r"^[a-z0-9.-]+/[a-z0-9.-]+=\S+$"


def docker_needs(docker_argv: list[str]) -> tuple[int, int]:
    """The oldest Docker Engine that runs these `docker run` arguments."""
    devices = [docker_argv[i + 1] for i, word in enumerate(docker_argv[:-1]) if word == "--device"]
    return CDI_DOCKER_VERSION if any(re.match(CDI_DEVICE_REGEX, device) for device in devices) else (0, 0)


CONTAINERS = [(recipe, vendor, source) for recipe, vendor in (("vllm-b300x8", "nvidia"), ("sglang-b300x8", "nvidia"),
                                                              ("vllm-mi355x8", "amd"))
              for source in DOCKER_VERSIONS]


@pytest.mark.parametrize(("recipe", "vendor", "docker_source"), CONTAINERS)
def test_the_hosts_docker_supports_every_argument_and_hands_over_the_gpus(recipe, vendor, docker_source):
    """Debian's docker.io (20.10) has no CDI: there the nvidia runtime hands over the GPUs."""
    values = variables(recipe, vendor, docker_source=docker_source, image_digest=DIGEST,
                       args={"--mamba-full-memory-ratio": 0.5} if recipe.startswith("sglang") else {})
    docker = unquoted(render("k3ops-engine.service", values)["Service"]["ExecStart"])
    assert docker_needs(docker) <= DOCKER_VERSIONS[docker_source]
    gpus = {docker[i + 1] for i, word in enumerate(docker) if word in ("--device", "--runtime")}
    assert gpus & {"nvidia.com/gpu=all", "nvidia"} if vendor == "nvidia" else {"/dev/kfd", "/dev/dri"} <= gpus


@pytest.mark.parametrize("docker_source", DOCKER_VERSIONS)
def test_an_nvlink_domain_engine_opens_the_imex_channel_in_its_container(docker_source):
    """Multi-node NVLink needs IMEX channel 0 inside the container, beside the GPUs, with either Docker."""
    values = variables("vllm-gb300x4-2node", docker_source=docker_source, image_digest=DIGEST, cluster="gb300-a",
                       devices=(IMEX_CHANNEL,))
    docker = unquoted(render("k3ops-engine.service", values)["Service"]["ExecStart"])
    assert docker_needs(docker) <= DOCKER_VERSIONS[docker_source]
    image = next(word for word in docker if word.endswith(DIGEST))
    assert docker[docker.index(IMEX_CHANNEL) - 1] == "--device" and docker.index(IMEX_CHANNEL) < docker.index(image)


def test_cdi_devices_are_known_to_need_docker_25():
    assert docker_needs(["run", "--device", "nvidia.com/gpu=all", "image"]) == (25, 0)
    assert docker_needs(["run", "--device", "/dev/kfd", "image"]) < DOCKER_VERSIONS["distribution"]


@pytest.mark.parametrize("recipe", ["vllm-b300x8", "llama.cpp-gguf"])
def test_the_api_key_reaches_the_engine_only_through_the_environment_systemd_loads(recipe):
    """systemd (root) reads the root-only secrets file; the engine and the docker client, running as the
    service user, get the key from their environment and never open a secrets file themselves."""
    engine = {"image_digest": DIGEST} if recipe != "llama.cpp-gguf" else {
        "binary_url": "http://x/ls.tgz", "binary_sha256": "c" * 64, "model_file": "tiny-k3.gguf"}
    unit = render("k3ops-engine.service", variables(recipe, host="10.0.0.5", api_key_file="/k", **engine))
    service = unit["Service"]
    assert service["EnvironmentFile"] == f"-{ENGINE_SECRETS_FILE}" and service["User"] != "root"
    argv = unquoted(service["ExecStart"])
    assert not any(SECRETS_DIR in word for word in argv)
    key = API_KEY_VARIABLES[RECIPES[recipe].engine]
    if argv[0] == "/usr/bin/docker":
        assert argv[argv.index(key) - 1] == "--env"  # by name: docker copies the value from its environment


def test_amd_containers_get_kfd_and_dri():
    argv = unquoted(render("k3ops-engine.service", variables("vllm-mi355x8", vendor="amd",
                                                                   image_digest=DIGEST))["Service"]["ExecStart"])
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--device"] == ["/dev/kfd", "/dev/dri"]


def test_llama_server_runs_natively_and_hardened():
    unit = render("k3ops-engine.service", variables("llama.cpp-gguf", vendor=None, binary_url="http://x/ls.tgz",
                                                       binary_sha256="c" * 64, model_file="tiny-k3.gguf"))
    argv = unquoted(unit["Service"]["ExecStart"])
    assert argv[0] == "/opt/k3ops/llama.cpp/bin/llama-server"
    assert argv[argv.index("--model") + 1] == f"{MODEL_DIR}/current/tiny-k3.gguf"
    assert unit["Service"]["ProtectSystem"] == "strict" and unit["Service"]["NoNewPrivileges"] == "yes"
    assert "Requires" not in unit["Unit"]


@pytest.mark.parametrize("rank", [0, 1])
def test_multi_node_units_carry_rank_and_head(rank):
    values = variables("vllm-gb300x4-2node", node_rank=rank, image_digest=DIGEST, cluster="gb300-a")
    argv = unquoted(render("k3ops-engine.service", values)["Service"]["ExecStart"])
    assert argv[argv.index("--node-rank") + 1] == str(rank)
    assert argv[argv.index("--master-addr") + 1] == HEAD_ADDRESS
    # Only the head serves HTTP, so only the head gets the watchdog.
    assert ("k3ops-engine-watchdog.service" in rendered_units(values)) == (rank == 0)


def test_the_watchdog_checks_health_and_the_served_model():
    values = variables("llama.cpp-gguf", vendor=None, binary_url="http://x/ls.tgz", binary_sha256="c" * 64, model_file="tiny-k3.gguf",
                       host="0.0.0.0", api_key_file="/etc/k3ops/key", health_failures=4)
    watchdog = unquoted(render("k3ops-engine-watchdog.service", values)["Service"]["ExecStart"])
    assert watchdog[watchdog.index("--url") + 1] == "http://127.0.0.1:8080/health"
    assert watchdog[watchdog.index("--models-url") + 1] == "http://127.0.0.1:8080/v1/models"
    assert watchdog[watchdog.index("--failures") + 1] == "4"
    timer = render("k3ops-engine-watchdog.timer", values)
    assert timer["Timer"]["OnUnitActiveSec"] == "30"


@pytest.mark.parametrize("recipe", ["vllm-b300x8", "sglang-b300x8", "vllm-mi355x8"])
def test_a_stop_drains_as_long_as_a_rollout_and_each_wait_outlasts_the_one_inside_it(recipe):
    """The engine drains for the drain limit (vLLM's --shutdown-timeout; SGLang drains on SIGTERM by its own
    rule), `docker stop` waits longer before it kills the container, systemd longer again; the watchdog, which
    restarts only an engine that does not answer, kills the container with the unit."""
    values = variables(recipe, image_digest=DIGEST,
                       args={"--mamba-full-memory-ratio": "0.9"} if recipe.startswith("sglang") else {})
    unit = render("k3ops-engine.service", values)
    argv = unquoted(unit["Service"]["ExecStart"])
    stop = unquoted(unit["Service"]["ExecStop"])
    assert stop[:3] == ["/usr/bin/docker", "stop", "--time"] and stop[-1] == argv[argv.index("--name") + 1]
    if RECIPES[recipe].engine == "vllm":
        assert int(argv[argv.index("--shutdown-timeout") + 1]) == SHUTDOWN_SECONDS
    assert SHUTDOWN_SECONDS < int(stop[3]) < int(unit["Service"]["TimeoutStopSec"])
    watchdog = unquoted(render("k3ops-engine-watchdog.service", values)["Service"]["ExecStart"])
    assert watchdog[watchdog.index("--container") + 1] == stop[-1]


def test_no_secret_reaches_a_unit():
    for recipe, engine in (("vllm-b300x8", {"image_digest": DIGEST, "host": "10.0.0.5", "api_key_file": "/k"}),
                           ("llama.cpp-gguf", {"binary_url": "http://x/ls.tgz", "binary_sha256": "c" * 64, "model_file": "tiny-k3.gguf"})):
        values = variables(recipe, **engine)
        for name in ("k3ops-engine.service", "k3ops-engine-watchdog.service"):
            text = str(dict(render(name, values)["Service"]))
            assert "api-key" not in text and "API_KEY=" not in text and "HF_TOKEN" not in text


# Legitimate-looking data with everything systemd or a shell would act on: specifiers, variables, quotes,
# backslashes, a separator and the text of another directive.
HOSTILE = 'a %n $HOME ${PATH} "quoted" \\back ; ExecStartPre=/bin/false'
LLAMA_CPP = {"binary_url": "http://x/ls.tgz", "binary_sha256": "c" * 64, "model_file": "tiny-k3.gguf"}


def directives(text: str) -> list[str]:
    return [line.split("=", 1)[0] for line in text.splitlines() if "=" in line and not line.startswith("#")]


@pytest.mark.parametrize(("recipe", "engine"), [("llama.cpp-gguf", LLAMA_CPP), ("vllm-b300x8", {"image_digest": DIGEST})])
def test_hostile_values_stay_literal_words_and_add_no_directive(recipe, engine):
    clean = rendered_units(variables(recipe, **engine))["k3ops-engine.service"]
    values = variables(recipe, environment={"K3_NOTE": HOSTILE}, args={"--chat-template": HOSTILE}, **engine)
    text = rendered_units(values)["k3ops-engine.service"]
    added = [name for name in directives(text) if name not in directives(clean)]
    assert added == [] and directives(text).count("ExecStartPre") == directives(clean).count("ExecStartPre")
    argv = unquoted(render("k3ops-engine.service", values)["Service"]["ExecStart"])
    assert argv[argv.index("--chat-template") + 1] == HOSTILE
    if argv[0] == "/usr/bin/docker":
        assert f"K3_NOTE={HOSTILE}" in argv
    else:
        (assignment,) = [line.removeprefix("Environment=") for line in text.splitlines() if "K3_NOTE" in line]
        assert [word.replace("%%", "%") for word in shlex.split(assignment)] == [f"K3_NOTE={HOSTILE}"]
