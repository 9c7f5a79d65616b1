"""`k3ops upgrade`: rolling driver upgrades of a serving fleet, an engine group at a time (plan.py the order and
the budget, record.py the controller's record, steps.py what each state does to the hosts, rollout.py the loop)."""
