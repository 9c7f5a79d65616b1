"""Which host checks run on which host: a multi-node engine's workers get the engine checks that apply to
them, never the head's port, watchdog and HTTP checks (collected against a written inventory, no host
contacted)."""

import subprocess
import sys

from k3ops.settings import cluster_members, node_rank

from ..conftest import REPO_ROOT

MODEL = {"repo_id": "moonshotai/Kimi-K3", "revision": "0123456789abcdef0123456789abcdef01234567", "name": "kimi-k3"}
DIGEST = "sha256:" + "a" * 64
HEAD_ONLY = ("test_the_watchdog_checks_the_engine", "test_engine_listens_only_where_data_says",
             "test_engine_serves_the_pinned_model")


def two_node_engine(name: str, cluster: str, key: str) -> tuple[str, dict]:
    return name, {"hardware_profile": "h200x8", "model": MODEL, "engine": {
        "recipe": "vllm-h200x8-2node", "image_digest": DIGEST, "cluster": cluster, "api_key_file": key}}


def test_ranks_follow_inventory_order_within_each_cluster():
    hosts = [two_node_engine("a1", "a", "/k"), two_node_engine("b1", "b", "/k"), two_node_engine("a2", "a", "/k"),
             ("solo", {"hardware_profile": "cpu"})]
    assert cluster_members("a", hosts) == ["a1", "a2"]
    assert [node_rank(name, hosts) for name, _ in hosts] == [0, 0, 1, 0]


def test_workers_are_not_given_the_heads_checks(tmp_path):
    key = tmp_path / "api-key"
    key.write_text("k3-key-0123456789abcdef\n")
    key.chmod(0o600)
    hosts = [two_node_engine(name, "h200-a", str(key)) for name in ("h200-01", "h200-02")]
    inventory = tmp_path / "cluster.py"
    inventory.write_text(f"h200 = {[(name, {**data, 'ssh_hostname': f'10.0.0.{i}'}) for i, (name, data) in enumerate(hosts, 1)]!r}\n")
    collected = subprocess.run([sys.executable, "-m", "pytest", "-q", "--collect-only", "-p", "no:cacheprovider",
                                "tests/hosts/test_serving.py", "--inventory", str(inventory)],
                               cwd=REPO_ROOT, capture_output=True, text=True).stdout
    for test in HEAD_ONLY:
        assert f"{test}[h200-01]" in collected and f"{test}[h200-02]" not in collected, test
    assert "test_a_worker_has_no_watchdog_and_no_http_port[h200-02]" in collected
    assert "test_a_worker_has_no_watchdog_and_no_http_port[h200-01]" not in collected
    for host in ("h200-01", "h200-02"):
        assert f"test_engine_runs_as_the_service_user_and_restarts_always[{host}]" in collected
