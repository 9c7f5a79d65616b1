"""Engine metrics from real /metrics pages (shared/fixtures/real), read by the EngineMetrics fact."""

from k3ops.facts.engine import EngineMetrics

from ..conftest import real_output


def metrics(page: str) -> dict:
    return EngineMetrics().process(page.splitlines())


def test_vllm_v0_names_from_a_real_scrape():
    page = real_output("vllm/vllm-metrics_prometheus_v0-names_qwen2.5-coder-32b_excerpt.txt")
    assert metrics(page) == {"requests_running": 0.0, "requests_waiting": 0.0, "kv_cache_usage": 0.0}


def test_newer_names_win_and_series_add_up():
    page = ('# TYPE vllm:num_requests_running gauge\n'
            'vllm:num_requests_running{engine="0",model_name="kimi-k3"} 3.0\n'
            'vllm:num_requests_running{engine="1",model_name="kimi-k3"} 2.0\n'
            'vllm:kv_cache_usage_perc{engine="0",model_name="kimi-k3"} 0.25\n')
    assert metrics(page) == {"requests_running": 5.0, "requests_waiting": None, "kv_cache_usage": 0.25}


def test_an_unreachable_page_shows_no_quantity():
    """The watchdog prints a comment line when the page cannot be fetched."""
    assert metrics("# unavailable: <urlopen error [Errno 111] Connection refused>\n") == EngineMetrics.default()
