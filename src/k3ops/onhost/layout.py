"""Every path, unit and user that k3ops puts on a GPU host, named once for both sides.

The controller (deploys, templates, facts, host checks, status commands) and the host-side code
(the checkpoint store, the watchdog) import these names; templates receive them as variables.
Standard library only: this module is copied to hosts with the rest of `k3ops.onhost`.
"""

from __future__ import annotations

CONFIG_DIR = "/etc/k3ops"
MODEL_CONFIG_DIR = f"{CONFIG_DIR}/models"  # <name>.json: one model's fetch settings
# Secrets live in a root-only directory, so a file is never readable by others, even while written.
SECRETS_DIR = f"{CONFIG_DIR}/secrets"
TOKEN_FILE = f"{SECRETS_DIR}/hf.env"  # HF_TOKEN, root 0600, read by systemd for the fetch unit
ENGINE_SECRETS_FILE = f"{SECRETS_DIR}/engine.env"  # the engine's API key, root 0600, read by systemd

INSTALL_DIR = "/opt/k3ops"
VENV = f"{INSTALL_DIR}/venv"  # huggingface_hub for the fetcher
LIBRARY = f"{INSTALL_DIR}/lib"  # where this package lands, as ONHOST_PACKAGE
ONHOST_PACKAGE = "k3ops_onhost"
CHECKPOINT_COMMAND = "/usr/local/sbin/k3ops-checkpoint"
WATCHDOG_COMMAND = f"{INSTALL_DIR}/bin/k3ops-engine-watchdog"
LLAMA_CPP_DIR = f"{INSTALL_DIR}/llama.cpp"

# Root's own state: a root-owned directory no other user writes, so root never writes through a link
# another user planted. The users k3ops makes have their homes beneath it (not /var/lib/<user>: the
# default service user is "k3ops", whose home would be this directory).
STATE_DIR = "/var/lib/k3ops"
USERS_HOME = f"{STATE_DIR}/home"
# Where a deploy stages a file before its owner writes it in place: root 0700.
UPLOAD_DIR = f"{STATE_DIR}/upload"
# A private apt configuration (sources, pins, lists) for the ROCm release a rollout stages: root's.
STAGED_APT_DIR = f"{STATE_DIR}/staged-apt"

PEER_USER = "k3ops-peer"  # peers log in as this user to copy the model cache, read-only
PEER_KEY_NAME = "k3ops-peers"  # the fleet's peer-copy key, in the service user's ~/.ssh
PEER_AUTHORIZED_KEYS = f"{USERS_HOME}/{PEER_USER}/.ssh/authorized_keys"  # the key, confined to rrsync -ro
# The fabric check's MPI runs: an unprivileged user of their own, which hosts of the fleet reach with the
# fleet's MPI key (from their addresses only), and the last check's result on each host.
NCCL_USER = "k3ops-nccl"
NCCL_KEY = f"{USERS_HOME}/{NCCL_USER}/.ssh/id_ed25519"
NCCL_AUTHORIZED_KEYS = f"{USERS_HOME}/{NCCL_USER}/.ssh/authorized_keys"
NCCL_KEY_NAME = "k3ops-nccl"
FABRIC_CHECK_DIR = f"{STATE_DIR}/fabric"
# The run's hosts' keys, written by each check: root's, so the MPI user reads its trust and cannot change it.
NCCL_KNOWN_HOSTS = f"{FABRIC_CHECK_DIR}/known_hosts"
FABRIC_CHECK_RESULT = f"{FABRIC_CHECK_DIR}/last-check.json"
# Left by a rollout (driver upgrade, drain) while it works on the host: the doctor reports the host as under
# maintenance instead of alarming. JSON: {"reason": ..., "since": ISO time, "by": who}.
MAINTENANCE_MARKER = f"{STATE_DIR}/maintenance.json"
# Held by every controller that changes the marker (k3ops.maintenance.compare_and_set).
MAINTENANCE_LOCK = f"{STATE_DIR}/maintenance.lock"

# What only k3ops knows about a host, as Prometheus series: written by METRICS_COMMAND (run by its timer) into
# the directory Debian's node_exporter reads its textfile collector from (its packaged default).
TEXTFILE_DIR = "/var/lib/prometheus/node-exporter"
METRICS_FILE = f"{TEXTFILE_DIR}/k3ops.prom"
METRICS_COMMAND = f"{INSTALL_DIR}/bin/k3ops-metrics"
METRICS_SERVICE = "k3ops-metrics.service"
METRICS_TIMER = "k3ops-metrics.timer"
# The fields NVIDIA's DCGM exporter reads (its -f file): its defaults and the fleet's additions.
DCGM_EXPORTER_COUNTERS = f"{CONFIG_DIR}/dcgm-exporter-counters.csv"
AMD_METRICS_EXPORTER_CONFIG = f"{CONFIG_DIR}/amd-metrics-exporter.json"  # its -amd-metrics-config file

FETCH_UNIT_TEMPLATE = "k3ops-model-fetch@.service"
VERIFY_UNIT_TEMPLATE = "k3ops-model-verify@.service"
VERIFY_TIMER_TEMPLATE = "k3ops-model-verify@.timer"

ENGINE_UNIT = "k3ops-engine.service"
WATCHDOG_SERVICE = "k3ops-engine-watchdog.service"  # one health check
WATCHDOG_TIMER = "k3ops-engine-watchdog.timer"
ENGINE_CONTAINER = "k3ops-engine"
ENGINE_STATE_DIR = f"{STATE_DIR}/engine"  # the service user's: its caches and what it loaded
ENGINE_REVISION_FILE = f"{ENGINE_STATE_DIR}/revision"  # the revision the engine loaded at its last start
WATCHDOG_STATE_FILE = f"{STATE_DIR}/watchdog/state.json"  # root's: the watchdog runs as root
# How each engine takes its API key without it appearing on a command line.
API_KEY_VARIABLES = {"vllm": "VLLM_API_KEY", "llama.cpp": "LLAMA_API_KEY"}

# One model's directory on the cache volume: <cache>/<name>/... (k3ops.onhost.checkpoint.store).
CURRENT_LINK = "current"
REVISIONS_DIR = "revisions"
STAGING_DIR = "staging"
MANIFESTS_DIR = "manifests"
STORE_STATE_FILE = "state.json"


def home(user: str) -> str:
    """The home of a system user k3ops makes (the service user, the peer user)."""
    return f"{USERS_HOME}/{user}"


def peer_key(service_user: str) -> str:
    """Where the service user keeps the fleet's peer-copy key."""
    return f"{home(service_user)}/.ssh/{PEER_KEY_NAME}"


def instance(template_unit: str, model: str) -> str:
    """One model's unit of a template unit: k3ops-model-fetch@.service -> k3ops-model-fetch@kimi-k3.service."""
    return template_unit.replace("@", f"@{model}")


def model_config(model: str) -> str:
    return f"{MODEL_CONFIG_DIR}/{model}.json"


def model_dir(cache_path: str, model: str) -> str:
    return f"{cache_path}/{model}"


def revision_dir(cache_path: str, model: str, revision: str) -> str:
    return f"{model_dir(cache_path, model)}/{REVISIONS_DIR}/{revision}"
