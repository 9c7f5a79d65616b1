"""`k3ops monitoring config`'s directory: what a site's Prometheus and Alertmanager read to watch the fleet.

    prometheus.yml             scrape jobs over targets/*.json, the rules, an Alertmanager
    targets/<job>.json         each exporter's hosts and their labels (file-based discovery: rewritten, not reloaded)
    rules/k3ops.rules.yml      the alerts (alerts.py), each naming its runbook
    alertmanager.example.yml   a route by severity, and the doctor's "explained by" as inhibitions
    dashboards/k3ops.json      a Grafana dashboard of the GPUs, their errors, the fabric and the engines

A site with its own Prometheus copies the jobs and `rule_files` into its configuration, or includes this one.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from .. import maintenance
from ..doctor.findings import EXPLAINED_BY
from .alerts import MAINTENANCE_ALERT, rules_file
from .dashboard import dashboard
from .targets import JOBS, key_files, keyed_job, monitored, target_groups

# dcgm-exporter collects every 30 s (`-c 30000`): a shorter scrape would read the same values again.
SCRAPE_INTERVAL = "30s"
RULES = "rules/k3ops.rules.yml"


def target_file(job: str) -> str:
    return f"targets/{job}.json"


def prometheus_config(alertmanager: str, engine_keys: list[str]) -> dict:
    """Prometheus' configuration: a scrape job per exporter, and one per engine API key file (`key_files`), which
    presents that key and labels its series job="engine" like the others'."""
    keyed = [{"job_name": keyed_job(index), "file_sd_configs": [{"files": [target_file(keyed_job(index))]}],
              "authorization": {"type": "Bearer", "credentials_file": key},
              "relabel_configs": [{"target_label": "job", "replacement": "engine"}]}
             for index, key in enumerate(engine_keys)]
    return {
        "global": {"scrape_interval": SCRAPE_INTERVAL, "evaluation_interval": SCRAPE_INTERVAL},
        "rule_files": [RULES],
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]},
        "scrape_configs": [*({"job_name": job.name, "file_sd_configs": [{"files": [target_file(job.name)]}]}
                             for job in JOBS), *keyed],
    }


def alertmanager_example() -> dict:
    """A starting point: everything to one receiver, critical alerts to a pager, grouped per host; an alert
    the doctor would explain by another on the same host is held back while that one fires."""
    return {
        "route": {"receiver": "team", "group_by": ["alertname", "host"],
                  "routes": [{"receiver": "pager", "matchers": ['severity="critical"']}]},
        "receivers": [{"name": "team"}, {"name": "pager"}],
        "inhibit_rules": [
            *({"source_matchers": [f'runbook="{cause}"'], "target_matchers": [f'runbook="{effect}"'],
               "equal": ["host"]} for effect, cause in sorted(EXPLAINED_BY.items())),
            # a host in maintenance pages no one, unless it stays there past its deadline
            {"source_matchers": [f'alertname="{MAINTENANCE_ALERT}"'],
             "target_matchers": [f'runbook!="{maintenance.RUNBOOK}"'], "equal": ["host"]}],
    }


def write(out: Path, hosts: list[tuple[str, dict]], runbooks_url: str, alertmanager: str, source: str) -> list[Path]:
    """Write the directory for `hosts` (`(name, data)`, in inventory order); returns the files written."""
    header = f"# Made by `k3ops monitoring config` from {json.dumps(source)}; rewrite it rather than edit it.\n"
    documents = {
        "prometheus.yml": header + yaml.safe_dump(prometheus_config(alertmanager, key_files(hosts)), sort_keys=False),
        RULES: header + yaml.safe_dump(rules_file(monitored(hosts), runbooks_url), sort_keys=False, width=120),
        "alertmanager.example.yml": header + yaml.safe_dump(alertmanager_example(), sort_keys=False),
        "dashboards/k3ops.json": json.dumps(dashboard(), indent=2) + "\n",
        **{target_file(job): json.dumps(groups, indent=2) + "\n" for job, groups in target_groups(hosts).items()},
    }
    written = []
    for name, text in documents.items():
        path = out / name
        path.parent.mkdir(parents=True, exist_ok=True)
        staged = path.with_name(f".{path.name}.new")  # Prometheus rereads a target file as it changes: never half
        staged.write_text(text)
        staged.replace(path)
        written.append(path)
    return written
