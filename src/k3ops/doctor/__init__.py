"""Reading a failing host's state and naming the runbook."""
