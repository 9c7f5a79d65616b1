"""`k3ops monitoring config INVENTORY --out DIR`: the Prometheus and Alertmanager files that watch the fleet."""

from __future__ import annotations

import argparse
from pathlib import Path
from urllib.parse import urlsplit

from .output import add_inventory_command

URL_SCHEMES = ("http", "https", "file")


def runbooks_url(value: str) -> str:
    """An http(s) or file URL, which lands in every alert's annotations: Prometheus expands `{{ }}` there, and a
    space or quote would not survive a link."""
    parts = urlsplit(value)
    if parts.scheme not in URL_SCHEMES or not (parts.netloc or parts.path) or any(
            text in value for text in ("{{", "}}", " ", '"', "\n")):
        raise argparse.ArgumentTypeError(f"{value!r} is not an http, https or file URL without spaces, quotes or "
                                         "template braces (like https://git.example.com/k3ops/-/tree/main/runbooks)")
    return value


def host_port(value: str) -> str:
    """HOST:PORT (an IPv6 host in brackets), as Prometheus' alertmanagers targets take it."""
    from ..forms import network_address

    host, _, port = value.rpartition(":")
    try:
        network_address(host.strip("[]") if host.startswith("[") else host)
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not HOST:PORT (like alertmanager.example.com:9093 or "
                                         "[fd00::9]:9093)") from None
    return value

def register(verbs) -> None:
    monitoring = verbs.add_parser("monitoring", help="Prometheus' view of the fleet")
    commands = monitoring.add_subparsers(dest="monitoring_command", required=True)
    config = add_inventory_command(commands, "config", write_config,
                                   "scrape targets, alert rules naming the runbooks, and an Alertmanager example")
    config.add_argument("--out", required=True, type=Path, help="directory to write the files into")
    config.add_argument("--runbooks-url", metavar="URL", type=runbooks_url,
                        help="where on-call engineers read the runbooks, each alert's runbook_url below it "
                             "(default: this installation's runbooks directory, as a file:// URL)")
    config.add_argument("--alertmanager", default="localhost:9093", metavar="HOST:PORT", type=host_port,
                        help="the Alertmanager Prometheus sends alerts to (default: %(default)s)")


def write_config(args) -> int:
    from ..doctor.runbooks import runbooks_directory
    from ..inventory import selected
    from ..monitoring.config import write

    hosts = [(host.name, host.data.dict()) for host in selected(args.inventory, None)]
    url = args.runbooks_url or runbooks_directory().as_uri()
    for path in write(args.out, hosts, url, args.alertmanager, str(args.inventory)):
        print(path)
    return 0
