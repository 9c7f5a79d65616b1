"""The checkpoint store on each GPU host: fetch, verify, activate and roll back a pinned revision.

Run by systemd units (`k3ops-checkpoint`, see `..layout`), so that a download of hundreds of GB
outlives the SSH session that started it.
"""
