"""An example production fleet serving Kimi K3: copy it, then put your own hosts and pins in.

    k3ops validate inventory/prod.py            # every host's data checked; nothing is contacted

As shipped its pins (revision, image digest, binary sha256) are all-zero placeholders, which validation
refuses, naming each one and where to find the real value.
    pyinfra inventory/prod.py deploys/model.py  # the NVMe cache and the pinned checkpoint

Hosts are grouped by what they run; each group's settings are in inventory/group_data/<group>.py, and
what every host shares in group_data/all.py (pyinfra's own group of every host).
The addresses are documentation addresses (RFC 5737): replace them.
"""

from k3ops.inventory import validate_inventory

# Two HGX B300 hosts, each serving K3 on its own 8 GPUs with vLLM's Blackwell TP8 recipe.
b300 = [
    ("b300-01", {"ssh_hostname": "192.0.2.11"}),
    ("b300-02", {"ssh_hostname": "192.0.2.12"}),
]

# One MI355X host serving K3 with vLLM on ROCm.
mi355x = [
    ("mi355x-01", {"ssh_hostname": "192.0.2.21"}),
]

# One CPU host serving a community GGUF build with llama.cpp (slow, but no GPU needed).
llamacpp = [
    ("cpu-01", {"ssh_hostname": "192.0.2.31"}),
]

validate_inventory(__file__)
