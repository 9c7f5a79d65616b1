"""The lab's tiny model and its Hub repository: deterministic, complete for llama.cpp, two pinned revisions.

The builder runs in the hub's venv (gguf, numpy, safetensors), built once and cached by hub.build().
"""

from __future__ import annotations

import hashlib
import json
import subprocess

import pytest

from k3ops_lab import hub

MAX_REVISION_BYTES = 4 * 1024 * 1024  # olah reads whole files into memory; the lab model stays tiny
CHANGED_IN_REVISION_2 = {"config.json", "model-00002-of-00002.safetensors", "tiny-k3.gguf"}
LLAMA_TENSORS = ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up",
                 "ffn_down")
# Runs in the hub's venv: the GGUF as llama.cpp's own reader sees it, and the checkpoint's tensors.
INSPECT = """
import json, sys
from gguf import GGUFReader
from safetensors.numpy import load_file
directory = sys.argv[1]
reader = GGUFReader(f"{directory}/tiny-k3.gguf")
fields = {}
for name, field in reader.fields.items():
    if not name.startswith("GGUF."):
        value = field.contents()
        fields[name] = value if not hasattr(value, "tolist") else value.tolist()
tensors = {t.name: {"shape": [int(n) for n in t.shape], "type": t.tensor_type.name, "sum": float(t.data.sum())}
           for t in reader.tensors}
shards = {}
for shard in ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"):
    shards[shard] = {name: float(array.sum()) for name, array in load_file(f"{directory}/{shard}").items()}
print(json.dumps({"fields": fields, "tensors": tensors, "shards": shards}))
"""


@pytest.fixture(scope="session")
def hub_repository():
    return hub.build(log=lambda message: None)


def build_revision(directory, revision: int) -> dict[str, bytes]:
    subprocess.run(hub.tiny_model_command(directory, revision), check=True)
    return {path.name: path.read_bytes() for path in sorted(directory.iterdir())}


@pytest.fixture(scope="module")
def revisions(hub_repository, tmp_path_factory):
    return {revision: build_revision(tmp_path_factory.mktemp(f"revision-{revision}"), revision) for revision in (1, 2)}


@pytest.fixture(scope="module")
def inspected(hub_repository, tmp_path_factory):
    directory = tmp_path_factory.mktemp("inspect")
    build_revision(directory, 1)
    return json.loads(subprocess.run([str(hub.venv_python()), "-c", INSPECT, str(directory)], check=True,
                                     capture_output=True, text=True).stdout)


def test_every_build_is_byte_identical(revisions, tmp_path):
    assert build_revision(tmp_path, 1) == revisions[1]


def test_revision_2_changes_the_head_and_keeps_the_rest(revisions):
    assert set(revisions[1]) == set(revisions[2]) == set(hub.TINY_MODEL_FILES) - {".gitattributes"}
    changed = {name for name in revisions[1] if revisions[1][name] != revisions[2][name]}
    assert changed == CHANGED_IN_REVISION_2
    assert json.loads(revisions[2]["config.json"])["k3ops_revision"] == 2


def test_each_revision_records_the_reply_it_gives(revisions):
    for number, reply in enumerate(hub.TINY_MODEL_REPLIES.values(), start=1):
        assert json.loads(revisions[number]["config.json"])["k3ops_reply"] == reply


def test_each_revision_is_a_few_megabytes_at_most(revisions):
    for files in revisions.values():
        assert sum(len(content) for content in files.values()) < MAX_REVISION_BYTES


def test_gguf_is_a_llama_model_with_a_byte_level_vocabulary(inspected):
    fields = inspected["fields"]
    assert fields["general.architecture"] == "llama" and fields["general.name"] == "tiny-k3"
    for key in ("context_length", "embedding_length", "block_count", "feed_forward_length", "attention.head_count",
                "attention.head_count_kv", "attention.layer_norm_rms_epsilon", "rope.dimension_count"):
        assert f"llama.{key}" in fields
    assert (fields["tokenizer.ggml.model"], fields["tokenizer.ggml.pre"]) == ("gpt2", "default")
    tokens, types = fields["tokenizer.ggml.tokens"], fields["tokenizer.ggml.token_type"]
    assert len(tokens) == len(types) == fields["llama.vocab_size"]
    assert (tokens[ord(" ")], tokens[ord("\n")], tokens[ord("A")]) == ("Ġ", "Ċ", "A")
    assert len(set(tokens[:256])) == 256 and set(types[:256]) == {1}  # every byte, as normal tokens
    for key, token in (("bos", "<|bos|>"), ("eos", "<|endoftext|>"), ("eot", "<|im_end|>")):
        assert tokens[fields[f"tokenizer.ggml.{key}_token_id"]] == token
    specials = [i for i, token in enumerate(tokens) if token.startswith("<|") and token.endswith("|>")]
    assert len(specials) == 4 and all(types[i] == 3 for i in specials)  # control tokens
    merges = fields["tokenizer.ggml.merges"]
    assert merges and all("".join(merge.split(" ")) in tokens for merge in merges)
    assert "<|im_start|>" in fields["tokenizer.chat_template"]


def test_gguf_has_every_tensor_llama_needs(inspected):
    fields, tensors = inspected["fields"], inspected["tensors"]
    embedding, vocab = fields["llama.embedding_length"], fields["llama.vocab_size"]
    expected = {"token_embd.weight", "output_norm.weight", "output.weight"} | {
        f"blk.{block}.{name}.weight" for block in range(fields["llama.block_count"]) for name in LLAMA_TENSORS}
    assert set(tensors) == expected
    assert tensors["token_embd.weight"]["shape"] == tensors["output.weight"]["shape"] == [embedding, vocab]
    head_dim = embedding // fields["llama.attention.head_count"]
    assert tensors["blk.0.attn_k.weight"]["shape"] == [embedding, head_dim * fields["llama.attention.head_count_kv"]]
    assert tensors["blk.0.ffn_down.weight"]["shape"] == [fields["llama.feed_forward_length"], embedding]
    assert {tensor["type"] for tensor in tensors.values()} == {"F32"}


def test_safetensors_shards_hold_the_same_weights(inspected, revisions):
    shards, tensors, fields = inspected["shards"], inspected["tensors"], inspected["fields"]
    index = json.loads(revisions[1]["model.safetensors.index.json"])
    assert index["weight_map"] == {name: shard for shard, names in shards.items() for name in names}
    first, second = shards["model-00001-of-00002.safetensors"], shards["model-00002-of-00002.safetensors"]
    assert first["model.embed_tokens.weight"] == pytest.approx(tensors["token_embd.weight"]["sum"])
    assert second["lm_head.weight"] == pytest.approx(tensors["output.weight"]["sum"])
    config = json.loads(revisions[1]["config.json"])
    assert config["model_type"] == "llama" and config["vocab_size"] == fields["llama.vocab_size"]
    template = json.loads(revisions[1]["tokenizer_config.json"])["chat_template"]
    assert template == fields["tokenizer.chat_template"]


def git(repository, *args: str) -> bytes:
    return subprocess.run(["git", "-C", str(repository), *args], check=True, capture_output=True).stdout


def test_hub_repository_pins_the_revisions_with_lfs_objects(hub_repository, revisions):
    assert tuple(git(hub_repository, "rev-list", "--reverse", "main").decode().split()) == hub.TINY_MODEL_REVISIONS
    for number, sha in enumerate(hub.TINY_MODEL_REVISIONS, start=1):
        assert git(hub_repository, "ls-tree", "--name-only", sha).decode().split() == list(hub.TINY_MODEL_FILES)
        for name, content in revisions[number].items():
            stored = git(hub_repository, "show", f"{sha}:{name}")
            if name.endswith((".gguf", ".safetensors")):
                oid = hashlib.sha256(content).hexdigest()
                pointer = f"version https://git-lfs.github.com/spec/v1\noid sha256:{oid}\nsize {len(content)}\n"
                assert stored.decode() == pointer
                assert (hub_repository / ".git" / "lfs" / "objects" / oid[:2] / oid[2:4] / oid).read_bytes() == content
            else:
                assert stored == content
    assert b"*.gguf filter=lfs diff=lfs merge=lfs -text" in git(hub_repository, "show", "main:.gitattributes")
