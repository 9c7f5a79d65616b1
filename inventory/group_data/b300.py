"""HGX B300: vLLM with the Blackwell TP8 recipe; the checkpoint on a RAID0 of four NVMe drives."""

hardware_profile = "b300x8"
nvme_devices = ["/dev/nvme0n1", "/dev/nvme1n1", "/dev/nvme2n1", "/dev/nvme3n1"]
# The reviewed checkpoint: a full commit sha, never a branch. Replace it with the commit you reviewed
# ("Files and versions" > "History" on the Hub). Keep it equal to mi355x's: hosts pinning the same
# revision share one Hub download.
model = {"repo_id": "moonshotai/Kimi-K3", "revision": "0000000000000000000000000000000000000000",
         "name": "kimi-k3", "rollback_depth": 1}
engine = {
    "recipe": "vllm-b300x8",
    # `docker buildx imagetools inspect vllm/vllm-openai:kimi-k3` prints the digest to pin.
    "image_digest": "sha256:0000000000000000000000000000000000000000000000000000000000000000",
    # Start shorter than the recipe's 131072 until the KV cache is measured on this fleet.
    "args": {"--max-model-len": 32768},
}
