"""Prometheus' view of the fleet, made from the inventory: what to scrape (targets), the alerts that name the
runbooks (alerts), a dashboard, and the directory `k3ops monitoring config` writes (config)."""
