"""The lab site's load balancer, as far as a rollout sees one: a directory with a file per backend it sends
requests to. `python3 load_balancer.py DIRECTORY register|deregister|status HOST ADDRESS` (what
upgrade_lb_*_command runs on the controller; status exits 0 for a registered host, 1 for another); the tests'
poller sends chat completions to exactly the registered backends."""

import sys
from pathlib import Path

directory, action, host, address = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
directory.mkdir(parents=True, exist_ok=True)
if action == "register":
    (directory / host).write_text(address + "\n")
elif action == "deregister":
    (directory / host).unlink(missing_ok=True)
elif action == "status":
    sys.exit(0 if (directory / host).exists() else 1)
else:
    sys.exit(f"unknown action {action!r}")
