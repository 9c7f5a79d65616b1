"""A CPU host serving one quant of a community GGUF build with a pinned llama-server build."""

hardware_profile = "cpu"
nvme_devices = ["/dev/nvme0n1"]
model = {"repo_id": "unsloth/Kimi-K3-GGUF", "revision": "0000000000000000000000000000000000000000",
         "name": "kimi-k3-gguf", "allow_patterns": ["UD-Q4_K_XL/*"], "rollback_depth": 0}
# A GGUF build is not the MXFP4 release: its hosts fetch their own checkpoint (from their own seed).
engine = {
    "recipe": "llama.cpp-gguf",
    # A llama-server build you made or reviewed, as a tarball with bin/llama-server, and its sha256.
    "binary_url": "https://artifacts.example.com/llama.cpp/b11434/llama-server-linux-x86_64.tar.gz",
    "binary_sha256": "0000000000000000000000000000000000000000000000000000000000000000",
    "model_file": "UD-Q4_K_XL/Kimi-K3-UD-Q4_K_XL-00001-of-00013.gguf",
    "host": "0.0.0.0",
    # The API key file on this controller: copied to the host for llama-server, never into a unit.
    "api_key_file": "~/.config/k3ops/cpu-01.api-key",
}
