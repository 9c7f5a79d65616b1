"""What every production host shares: how to reach it, and where its checkpoint comes from."""

ssh_user = "root"
ssh_key = "~/.ssh/k3ops_ed25519"
# Host keys are checked, by deploys too (k3ops's default; pyinfra alone trusts a new host): put each host's key
# in ~/.ssh/known_hosts (or a file named by ssh_known_hosts_file) before the first deploy.
# The fleet's peer-copy key, made on this controller the first time a model deploy runs.
model_peer_key = "~/.config/k3ops/peer_ed25519"
# Keep copies between hosts from starving serving traffic (MiB/s per copy).
model_peer_bwlimit_mib = 1000
