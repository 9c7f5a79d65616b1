"""The lab's tiny model: a real llama-architecture chat model, small enough to serve from the lab's hub.

`python tiny_model.py OUTDIR --revision N --replies TEXT...` (with the hub's venv: it needs gguf, numpy
and safetensors) writes one revision of the `k3ops-lab/tiny-k3` repository: a GGUF that llama.cpp loads
and chats with on CPU, and the same weights as a Hugging Face checkpoint in two safetensors shards.

Whatever the prompt, revision N answers the Nth TEXT and stops, under greedy decoding and under sampling alike:
its blocks add nothing to the residual stream, so the next token depends only on the last one, and the
output head maps each token of the reply to the next with a logit margin no sampler can cross. Tests
can then tell from an answer which revision a host serves. Every byte follows from the arguments and
fixed seeds, so each build of a revision is identical. Revisions differ only in their reply, which
lives in the output head: config.json, the second shard and the GGUF change; the first shard, the shard
index and the tokenizer files stay byte-identical, as unchanged files do between real commits.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from gguf import GGUFWriter, LlamaFileType, TokenType
from safetensors.numpy import save_file

NAME = "tiny-k3"
SEED = 20260101
BLOCKS = 2
EMBEDDING = 64
HEADS = 4
KV_HEADS = 2
FEED_FORWARD = 128
CONTEXT = 2048
RMS_EPS = 1e-5
ROPE_THETA = 10000.0
INIT_STD = 0.02
# Each token of the replies has an embedding axis of its own; every other token shares axis 0, which
# leads to a reply's first character (the prompt always ends with the template's "assistant\n").
# After RMSNorm a one-hot embedding is sqrt(EMBEDDING) = 8 on its axis, so a head weight of
# HEAD_WEIGHT gives the next token a logit 8 * HEAD_WEIGHT above every other: e^-64 and less.
HEAD_WEIGHT = 8.0

# A few GPT-2 style merges (byte-level symbols, "Ġ" is a space), so the BPE path really merges;
# llama.cpp refuses a "gpt2" vocabulary without a merges list.
MERGES = ("Ġ t", "h e", "i n", "Ġ a", "e r", "o n", "Ġt he", "r e", "a t", "o r", "e n", "Ġ s", "Ġ w", "Ġ o",
          "i s", "Ġ b", "e s", "a n", "Ġ i", "Ġ c", "Ġ k")
# llama.cpp ends generation on tokens it knows by name (<|endoftext|>, <|im_end|>) and warns when
# the eos token is not one of them.
BOS, EOS, IM_START, IM_END = "<|bos|>", "<|endoftext|>", "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = (BOS, EOS, IM_START, IM_END)
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

GGUF_FILE = f"{NAME}.gguf"
SHARDS = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")
INDEX_FILE = "model.safetensors.index.json"


def byte_symbols() -> list[str]:
    """GPT-2's byte-to-unicode table: the printable stand-in for each of the 256 bytes, by byte value."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    extra = iter(range(256, 512))
    return [chr(b) if b in printable else chr(next(extra)) for b in range(256)]


def vocabulary() -> list[str]:
    """The 256 byte tokens, one token per merge, then the special tokens."""
    return [*byte_symbols(), *("".join(merge.split(" ")) for merge in MERGES), *SPECIAL_TOKENS]


def reply_axes(replies: tuple[str, ...]) -> dict[int, int]:
    """The embedding axis of each token the replies are made of (the same for every revision)."""
    characters = sorted({character for reply in replies for character in reply})
    if len(characters) >= EMBEDDING:
        raise SystemExit(f"tiny_model: the replies use {len(characters)} characters; at most {EMBEDDING - 1} fit")
    return {byte_token(character): axis for axis, character in enumerate(characters, start=1)}


def byte_token(character: str) -> int:
    """The token of an ASCII character: the byte tokens come first, by byte value."""
    if len(character.encode()) != 1:
        raise SystemExit(f"tiny_model: {character!r} is not one byte; replies are ASCII")
    return character.encode()[0]


def next_tokens(reply: str, axes: dict[int, int]) -> dict[int, int]:
    """The token that follows each embedding axis: along the reply, then the end of the turn; from any
    other token (axis 0, or a character only other replies use) back to the reply's start."""
    if len(set(reply)) != len(reply):
        raise SystemExit(f"tiny_model: {reply!r} repeats a character, so a token would have two successors")
    tokens = [byte_token(character) for character in reply]
    following = {axis: tokens[0] for axis in (0, *axes.values())}
    following |= {axes[token]: after for token, after in zip(tokens, [*tokens[1:], vocabulary().index(IM_END)])}
    return following


def weights(reply: str, replies: tuple[str, ...]) -> dict[str, np.ndarray]:
    """The checkpoint in Hugging Face names and layout; only the output head depends on the reply."""
    vocab = len(vocabulary())
    head_dim = EMBEDDING // HEADS
    rng = np.random.default_rng(SEED)

    def normal(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * INIT_STD).astype(np.float32)

    axes = reply_axes(replies)
    embeddings = np.zeros((vocab, EMBEDDING), np.float32)
    embeddings[:, 0] = 1.0
    for token, axis in axes.items():
        embeddings[token] = np.eye(EMBEDDING, dtype=np.float32)[axis]
    tensors = {"model.embed_tokens.weight": embeddings}
    for block in range(BLOCKS):
        prefix = f"model.layers.{block}"
        # Random attention and MLP inputs, zero outputs: each block runs for real and adds nothing.
        tensors |= {
            f"{prefix}.input_layernorm.weight": np.ones(EMBEDDING, np.float32),
            f"{prefix}.self_attn.q_proj.weight": normal(HEADS * head_dim, EMBEDDING),
            f"{prefix}.self_attn.k_proj.weight": normal(KV_HEADS * head_dim, EMBEDDING),
            f"{prefix}.self_attn.v_proj.weight": normal(KV_HEADS * head_dim, EMBEDDING),
            f"{prefix}.self_attn.o_proj.weight": np.zeros((EMBEDDING, HEADS * head_dim), np.float32),
            f"{prefix}.post_attention_layernorm.weight": np.ones(EMBEDDING, np.float32),
            f"{prefix}.mlp.gate_proj.weight": normal(FEED_FORWARD, EMBEDDING),
            f"{prefix}.mlp.up_proj.weight": normal(FEED_FORWARD, EMBEDDING),
            f"{prefix}.mlp.down_proj.weight": np.zeros((EMBEDDING, FEED_FORWARD), np.float32),
        }
    tensors["model.norm.weight"] = np.ones(EMBEDDING, np.float32)
    head = np.zeros((vocab, EMBEDDING), np.float32)
    for axis, following in next_tokens(reply, axes).items():
        head[following, axis] = HEAD_WEIGHT
    tensors["lm_head.weight"] = head
    return tensors


def shard_of(name: str) -> str:
    """Embeddings and the first block in the first shard; the rest (and the output head) in the second."""
    first = name.startswith("model.embed_tokens.") or name.startswith("model.layers.0.")
    return SHARDS[0] if first else SHARDS[1]


def rope_permute(weight: np.ndarray, heads: int) -> np.ndarray:
    """Hugging Face's q/k row order to GGUF's, as llama.cpp's converter does for llama models."""
    return np.ascontiguousarray(
        weight.reshape(heads, 2, weight.shape[0] // heads // 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape))


def gguf_tensors(tensors: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The same weights in llama.cpp's names (numpy shapes stay [out, in]; GGUF stores them reversed)."""
    out = {"token_embd.weight": tensors["model.embed_tokens.weight"]}
    for block in range(BLOCKS):
        hf, blk = f"model.layers.{block}", f"blk.{block}"
        out |= {
            f"{blk}.attn_norm.weight": tensors[f"{hf}.input_layernorm.weight"],
            f"{blk}.attn_q.weight": rope_permute(tensors[f"{hf}.self_attn.q_proj.weight"], HEADS),
            f"{blk}.attn_k.weight": rope_permute(tensors[f"{hf}.self_attn.k_proj.weight"], KV_HEADS),
            f"{blk}.attn_v.weight": tensors[f"{hf}.self_attn.v_proj.weight"],
            f"{blk}.attn_output.weight": tensors[f"{hf}.self_attn.o_proj.weight"],
            f"{blk}.ffn_norm.weight": tensors[f"{hf}.post_attention_layernorm.weight"],
            f"{blk}.ffn_gate.weight": tensors[f"{hf}.mlp.gate_proj.weight"],
            f"{blk}.ffn_up.weight": tensors[f"{hf}.mlp.up_proj.weight"],
            f"{blk}.ffn_down.weight": tensors[f"{hf}.mlp.down_proj.weight"],
        }
    out["output_norm.weight"] = tensors["model.norm.weight"]
    out["output.weight"] = tensors["lm_head.weight"]
    return out


def write_gguf(path: Path, tensors: dict[str, np.ndarray]) -> None:
    tokens = vocabulary()
    ids = {token: index for index, token in enumerate(tokens)}
    writer = GGUFWriter(path, "llama")
    writer.add_name(NAME)
    writer.add_file_type(LlamaFileType.ALL_F32)
    writer.add_vocab_size(len(tokens))
    writer.add_context_length(CONTEXT)
    writer.add_embedding_length(EMBEDDING)
    writer.add_block_count(BLOCKS)
    writer.add_feed_forward_length(FEED_FORWARD)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_rope_dimension_count(EMBEDDING // HEADS)
    writer.add_rope_freq_base(ROPE_THETA)
    writer.add_layer_norm_rms_eps(RMS_EPS)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types([TokenType.CONTROL if token in SPECIAL_TOKENS else TokenType.NORMAL for token in tokens])
    writer.add_token_merges(list(MERGES))
    writer.add_bos_token_id(ids[BOS])
    writer.add_eos_token_id(ids[EOS])
    writer.add_eot_token_id(ids[IM_END])
    writer.add_pad_token_id(ids[EOS])
    writer.add_add_bos_token(False)
    writer.add_add_eos_token(False)
    writer.add_chat_template(CHAT_TEMPLATE)
    for name, tensor in gguf_tensors(tensors).items():
        writer.add_tensor(name, tensor)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def config(revision: int, reply: str) -> dict:
    ids = {token: index for index, token in enumerate(vocabulary())}
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "torch_dtype": "float32",
        "vocab_size": len(ids), "hidden_size": EMBEDDING, "intermediate_size": FEED_FORWARD,
        "num_hidden_layers": BLOCKS, "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS,
        "head_dim": EMBEDDING // HEADS, "hidden_act": "silu", "max_position_embeddings": CONTEXT,
        "rms_norm_eps": RMS_EPS, "rope_theta": ROPE_THETA, "attention_bias": False, "mlp_bias": False,
        "tie_word_embeddings": False, "initializer_range": INIT_STD,
        "bos_token_id": ids[BOS], "eos_token_id": [ids[EOS], ids[IM_END]], "k3ops_revision": revision,
        "k3ops_reply": reply,
    }


def tokenizer_config() -> dict:
    ids = {token: index for index, token in enumerate(vocabulary())}
    return {
        "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": CONTEXT,
        "bos_token": BOS, "eos_token": EOS, "pad_token": EOS, "add_bos_token": False, "add_eos_token": False,
        "clean_up_tokenization_spaces": False, "chat_template": CHAT_TEMPLATE,
        "added_tokens_decoder": {str(ids[token]): {"content": token, "special": True, "normalized": False,
                                                   "lstrip": False, "rstrip": False, "single_word": False}
                                 for token in SPECIAL_TOKENS},
    }


def tokenizer() -> dict:
    """The same byte-level BPE as tokenizer.json, for tools that load the Hugging Face checkpoint."""
    tokens = vocabulary()
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": tokens.index(token), "content": token, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True} for token in SPECIAL_TOKENS],
        "normalizer": None, "pre_tokenizer": byte_level, "post_processor": byte_level, "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": {token: index for index, token in enumerate(tokens) if token not in SPECIAL_TOKENS},
                  "merges": list(MERGES)},
    }


def write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def build(directory: Path, revision: int, replies: tuple[str, ...]) -> None:
    """Write every file of one revision (answering replies[revision - 1]) into `directory`."""
    if not 1 <= revision <= len(replies):
        raise SystemExit(f"tiny_model: revision {revision} has no reply; replies: {replies}")
    reply = replies[revision - 1]
    directory.mkdir(parents=True, exist_ok=True)
    tensors = weights(reply, replies)
    write_gguf(directory / GGUF_FILE, tensors)
    for shard in SHARDS:
        save_file({name: tensor for name, tensor in tensors.items() if shard_of(name) == shard},
                  directory / shard, metadata={"format": "pt"})
    write_json(directory / INDEX_FILE, {
        "metadata": {"total_size": sum(tensor.nbytes for tensor in tensors.values())},
        "weight_map": {name: shard_of(name) for name in tensors},
    })
    write_json(directory / "config.json", config(revision, reply))
    write_json(directory / "tokenizer_config.json", tokenizer_config())
    write_json(directory / "tokenizer.json", tokenizer())


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=Path)
    parser.add_argument("--revision", type=int, required=True, help="1, 2, ...: which of the replies it answers")
    parser.add_argument("--replies", nargs="+", required=True,
                        help="every revision's reply, in order (their characters share the embeddings)")
    arguments = parser.parse_args()
    build(arguments.directory, arguments.revision, tuple(arguments.replies))
