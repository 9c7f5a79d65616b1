"""The checkpoint store that runs on each GPU host: fetch, verify, activate and roll back a pinned revision.

This package is copied to hosts (as `k3ops_checkpoint`) and run by systemd units, so that a download
of hundreds of GB outlives the SSH session that started it. It needs only the standard library and,
for the Hub, huggingface_hub; it imports nothing else from k3ops (relative imports only).
"""
