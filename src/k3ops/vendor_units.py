"""The systemd services of the GPU stack, the container runtime, the exporters and time sync, by the names their packages give them.

Deploys start them, facts and the doctor read them, a driver upgrade stops them and the host checks expect
them running: one spelling, so that a vendor's rename is one change.
"""

FABRIC_MANAGER = "nvidia-fabricmanager"  # the same unit whether the package is nvidia-fabricmanager or -<branch>
PERSISTENCED = "nvidia-persistenced"
DCGM = "nvidia-dcgm"  # DCGM's host engine (nv-hostengine)
DCGM_EXPORTER = "nvidia-dcgm-exporter"  # NVIDIA's DCGM exporter (datacenter-gpu-manager-exporter)
NODE_EXPORTER = "prometheus-node-exporter"  # Debian's node_exporter
AMD_METRICS_EXPORTER = "amd-metrics-exporter"  # AMD's device metrics exporter (amdgpu-exporter)
GPU_AGENT = "gpuagent"  # what AMD's exporter reads the GPUs through
IMEX = "nvidia-imex"  # likewise named the same for every branch's package
DOCKER = "docker"
TIME_SYNC = "systemd-timesyncd"  # what GPU checks and DCGM timestamps rely on
