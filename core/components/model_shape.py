"""A decoder model's shape, from its ``config.json``, and the byte arithmetic a memory plan is made of.

:func:`model_shape` finds the shape of the model a run starts from without loading it or downloading
anything: a local model directory's ``config.json``, else a cached Hugging Face hub snapshot of that id,
else a built-in table of known shapes (:data:`KNOWN_SHAPES`, matched by the model's name), and says
which it used. The arithmetic (parameters, KV cache per token, activations, logits) is that of a dense
decoder with grouped-query attention and a gated MLP (Llama, Qwen2, Qwen3, Mistral); sizes are in bytes,
shown in GB of 10⁹ bytes.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from pathlib import Path

from envengineer.errors import ConfigError

GB = 1e9

#: Bytes per element of the dtypes a plan names (verl's short names and torch's long ones).
DTYPE_BYTES = {"float32": 4, "fp32": 4, "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2}


def dtype_bytes(dtype: str) -> int:
    try:
        return DTYPE_BYTES[dtype]
    except KeyError:
        raise ConfigError(f"unknown dtype {dtype!r} (known: {', '.join(DTYPE_BYTES)})") from None


@dataclass(frozen=True)
class ModelShape:
    """The numbers of a model's ``config.json`` that its memory depends on, and where they came from."""

    name: str
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tied_embeddings: bool
    qk_norm: bool = False  # Qwen3's per-head RMSNorm on queries and keys
    source: str = ""

    # ------------------------------------------------------------------ parameters

    @property
    def embedding_parameters(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def layer_parameters(self) -> int:
        """One decoder layer: q, k, v, o projections (no bias), the gated MLP, two RMSNorms (and Qwen3's q/k norms)."""
        h, q, kv = self.hidden_size, self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        attention = h * q + 2 * h * kv + q * h
        mlp = 3 * h * self.intermediate_size
        norms = 2 * h + (2 * self.head_dim if self.qk_norm else 0)
        return attention + mlp + norms

    @property
    def parameters(self) -> int:
        head = 0 if self.tied_embeddings else self.embedding_parameters
        return self.embedding_parameters + self.num_layers * self.layer_parameters + self.hidden_size + head

    @property
    def largest_unit(self) -> int:
        """Parameters of the largest block FSDP gathers at once (a decoder layer, or the embedding)."""
        return max(self.layer_parameters, self.embedding_parameters)

    def weights(self, dtype: str) -> float:
        return self.parameters * dtype_bytes(dtype)

    # ------------------------------------------------------------------ per token

    def kv_per_token(self, dtype: str) -> float:
        """KV cache of one token: keys and values of every layer's KV heads."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * dtype_bytes(dtype)

    def layer_activations(self, tokens: int, dtype: str) -> float:
        """What one decoder layer keeps for its backward pass over ``tokens`` tokens: the two norms' outputs and the
        residual inputs (4 × hidden), queries, keys, values and the attention output (2 × heads + 2 × KV heads,
        × head_dim), the MLP's gate, up, activation and product (4 × intermediate). Attention scores are not
        materialised (flash or memory-efficient attention)."""
        width = 4 * self.hidden_size + (2 * self.num_heads + 2 * self.num_kv_heads) * self.head_dim + 4 * self.intermediate_size
        return tokens * width * dtype_bytes(dtype)

    def activations(self, tokens: int, dtype: str, checkpointing: bool) -> float:
        """A forward/backward pass's activations: with gradient checkpointing each layer's input plus one layer
        recomputed at a time; without it every layer's."""
        if checkpointing:
            return self.num_layers * tokens * self.hidden_size * dtype_bytes(dtype) + self.layer_activations(tokens, dtype)
        return self.num_layers * self.layer_activations(tokens, dtype)

    def logits(self, tokens: int, dtype: str) -> float:
        return tokens * self.vocab_size * dtype_bytes(dtype)


#: Real ``config.json`` values of models a run may name without a local copy (hub id -> shape).
KNOWN_SHAPES: dict[str, ModelShape] = {
    shape.name: shape
    for shape in (
        ModelShape("Qwen/Qwen3-0.6B", 1024, 28, 16, 8, 128, 3072, 151936, True, True),
        ModelShape("Qwen/Qwen3-1.7B", 2048, 28, 16, 8, 128, 6144, 151936, True, True),
        ModelShape("Qwen/Qwen3-4B", 2560, 36, 32, 8, 128, 9728, 151936, True, True),
        ModelShape("Qwen/Qwen3-8B", 4096, 36, 32, 8, 128, 12288, 151936, False, True),
        # the model name smollm2-135m-instruct (envengineer.plugins._shared.models) plans by this shape before its first use
        ModelShape("HuggingFaceTB/SmolLM2-135M-Instruct", 576, 30, 9, 3, 64, 1536, 49152, True, False),
        # and the model names qwen2.5-coder-0.5b-instruct / -1.5b-instruct by these, as their GGUF files ship them:
        # the metadata's sizes, and an output matrix of its own (output.weight), so not tied as the hub's configs are
        ModelShape("Qwen/Qwen2.5-Coder-0.5B-Instruct", 896, 24, 14, 2, 64, 4864, 151936, False, False),
        ModelShape("Qwen/Qwen2.5-Coder-1.5B-Instruct", 1536, 28, 12, 2, 128, 8960, 151936, False, False),
    )
}


def shape_from_config(config: dict, name: str, source: str) -> ModelShape:
    """The shape of a ``config.json``'s contents (a multimodal config's ``text_config`` when it has one)."""
    config = config.get("text_config") or config
    missing = [k for k in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size") if k not in config]
    if missing:
        raise ConfigError(f"{source}: no {', '.join(missing)} (not a decoder model's config.json?)")
    heads = int(config["num_attention_heads"])
    return ModelShape(
        name=name,
        hidden_size=int(config["hidden_size"]),
        num_layers=int(config["num_hidden_layers"]),
        num_heads=heads,
        num_kv_heads=int(config.get("num_key_value_heads") or heads),
        head_dim=int(config.get("head_dim") or int(config["hidden_size"]) // heads),
        intermediate_size=int(config["intermediate_size"]),
        vocab_size=int(config["vocab_size"]),
        tied_embeddings=bool(config.get("tie_word_embeddings", False)),
        qk_norm=str(config.get("model_type", "")).startswith("qwen3"),
        source=source,
    )


def _read_config(path: Path, name: str, source: str) -> ModelShape:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: cannot read the model's config.json: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a JSON object")
    return shape_from_config(data, name, source)


def hub_cache() -> Path:
    """The Hugging Face hub cache, as huggingface_hub finds it (HF_HUB_CACHE, else HF_HOME/hub)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "huggingface")
    return Path(home) / "hub"


def cached_snapshot(repo_id: str) -> Path | None:
    """The ``config.json`` of a cached snapshot of ``repo_id`` (the one ``refs/main`` names, else the newest)."""
    folder = hub_cache() / ("models--" + repo_id.replace("/", "--"))
    snapshots = folder / "snapshots"
    if not snapshots.is_dir():
        return None
    ref = folder / "refs" / "main"
    if ref.is_file():
        chosen = snapshots / ref.read_text().strip() / "config.json"
        if chosen.is_file():
            return chosen
    found = sorted(snapshots.glob("*/config.json"), key=lambda p: p.stat().st_mtime)
    return found[-1] if found else None


def model_shape(model: str, *, where: str = "policy.path") -> ModelShape:
    """The shape of ``model`` (a local directory or a hub id), from the first of: its ``config.json``, a cached
    hub snapshot, the built-in table (by the last part of the name, case-insensitively). ``source`` says which."""
    path = Path(model)
    if (path / "config.json").is_file():
        return _read_config(path / "config.json", path.name, f"config.json in {path}")
    if model.count("/") == 1 and not path.exists():
        snapshot = cached_snapshot(model)
        if snapshot is not None:
            return _read_config(snapshot, model, f"cached hub snapshot {snapshot.parent}")
    key = path.name.lower()
    for name, shape in KNOWN_SHAPES.items():
        if name.split("/")[-1].lower() == key:
            return replace(shape, source=f"built-in shape of {name} (no config.json at {model}, none cached)")
    known = ", ".join(KNOWN_SHAPES)
    raise ConfigError(
        f"{where}: no config.json at {model}, no cached hub snapshot of it, and its name is not one of the built-in "
        f"shapes ({known}); point it at a model directory"
    )
