"""The HTTP side of the lab's exporters: /metrics in Prometheus' text format, until the process is stopped."""

from __future__ import annotations

import socket
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def serve_metrics(bind: str, port: int, render: Callable[[], str | None], unavailable: str = "unavailable") -> None:
    """Serve `render()` at /metrics on bind:port (IPv6 when `bind` is); a 500 saying `unavailable` when it
    returns None (what the exporter reads from is away)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            if self.path != "/metrics":
                self.send_error(404)
                return
            text = render()
            if text is None:
                self.send_error(500, unavailable)
                return
            body = text.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_):
            pass

    server_class = type("Server", (ThreadingHTTPServer,), {"address_family": socket.AF_INET6 if ":" in bind
                                                           else socket.AF_INET})
    server_class((bind, port), Handler).serve_forever()
