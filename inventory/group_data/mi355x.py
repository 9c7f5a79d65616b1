"""MI355X: vLLM on the ROCm image; ROCm 7.0.2 from AMD's repositories."""

hardware_profile = "mi355x8"
rocm_release = "7.0.2"
nvme_devices = ["/dev/nvme0n1", "/dev/nvme1n1"]
model = {"repo_id": "moonshotai/Kimi-K3", "revision": "0000000000000000000000000000000000000000",
         "name": "kimi-k3", "rollback_depth": 1}
engine = {
    "recipe": "vllm-mi355x8",
    "image_digest": "sha256:0000000000000000000000000000000000000000000000000000000000000000",
    "args": {"--max-model-len": 32768},
}
