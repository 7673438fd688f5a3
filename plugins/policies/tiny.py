"""The embedded tiny policy: a tokenizer, a ~1 M-parameter Qwen3 and a warm start, all from the task.

Everything is built locally (nothing is downloaded) from what the task family offers
through its ``Generator`` hooks: the tokenizer reads a style's words when the task lists
them (``tiny_vocabulary``: mapf-frozenlake's compact style ``N7 H 2_4 … S1 0_6 G1 1_0 P``
→ ``| 0_6 4_2 | 0_5 3_2 … </s>``) and characters otherwise; the model is randomly
initialised (the task may set starting embedding rows: ``tiny_init_embeddings``) and then
trained by supervised learning on the task's optimal answers (``warm_start_pairs``; by
default generated records answered by ``reference_answer``). So any family with a reference
solver gets the embedded CPU policy. The result is a standard Hugging Face model directory
(the "base model" of a run), cached under a hash of the task, the style and the options that
shape it (:func:`recipe_key`), so it is built once per machine. What the task's hooks hand the
build (the pairs, the vocabulary, the embedding init) is digested too
(:func:`warm_start_fingerprint`) and kept in the cache folder's ``warm_start.json``: a cached
model whose task code now hands it anything else is rebuilt, not reused. This module knows no task.

Measured facts behind the defaults are in docs/tiny-policy.md.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, Field, field_validator

from envengineer.api import ConfigError
from envengineer.plugins.policies.tiny_model import (
    Progress,
    build_base_model,
    cached_state,
    default_cache_dir,
    recipe_key,
    verify_prebuilt,
    warm_start_data,
    warm_start_fingerprint,
)
from envengineer.plugins.policies.hf import quiet_hf
from envengineer.plugins.policies.transformers_policy import TransformersOptions, TransformersPolicy

class TinyOptions(TransformersOptions):
    """Sampling options of the transformers policy, plus the warm start's recipe."""

    prompt_style: str = Field("compact", min_length=1, description="the task's prompt style the model reads and is warm-started on: one of the task's prompt styles (compact: short plain strings; a family without one: full)")
    max_new_tokens: int = Field(128, ge=1, description="most tokens sampled per answer (mapf-frozenlake: compact answers of 2-agent 10x10 instances take ~60-70)")
    batch_size: int = Field(512, ge=1)
    instances: int = Field(18000, ge=1, description="(prompt, reference answer) pairs of the supervised warm start, from the task's Generator.warm_start_pairs (mapf-frozenlake: 18000 × 3 epochs ≈ 2 M tokens, ~3.5 min on one core: 16.5% valid on mapf-2agents-val)")
    epochs: float = Field(3.0, gt=0, description="passes over the warm-start instances")
    lr: float = Field(2e-3, gt=0, description="warm-start learning rate (AdamW, cosine)")
    train_batch_size: int = Field(64, ge=1, description="warm-start batch size")
    hidden_size: int = Field(128, ge=16)
    layers: int = Field(4, ge=1)
    ffn: int = Field(512, ge=16)
    threads: int | None = Field(1, ge=1, description="torch CPU threads (results do not depend on it; a busy second core makes 2 threads slower than 1)")
    cache_dir: str | None = Field(None, description="default: $ENVENGINEER_CACHE/tiny or ~/.cache/envengineer/tiny")
    prebuilt: bool = Field(True, description="use the warm start the task ships for exactly this recipe, if it ships one (checked against its SHA256SUMS); false: build it here")

    @field_validator("warm_start")
    @classmethod
    def _own_warm_start(cls, value: Any) -> Any:
        if value is not None:
            raise ValueError("the tiny policy's warm start is set by its own options (instances, epochs, lr, train_batch_size); "
                             "warm_start is the transformers policy's")
        return value


class TinyPolicy(TransformersPolicy):
    name: ClassVar[str] = "tiny"
    description: ClassVar[str] = "embedded ~1M-parameter Qwen3, warm-started on the task's reference answers (CPU, no download)"
    Options: ClassVar[type[BaseModel]] = TinyOptions
    options: TinyOptions

    def __init__(self, options: BaseModel | None = None) -> None:
        super().__init__(options)
        self._task: str | None = None  # the task of the last prepare(): load() finds its base model
        self._shipped: Path | None = None  # the task's prebuilt base model chosen by the last prepare()
        self._task_recipe: dict[str, Any] = {}  # the last prepare()'s task options that shape the warm start
        #: how the last :meth:`prepare` found its base model: "shipped", "cached", "built", or "rebuilt: WHY"
        self.prepared: str | None = None

    def recipe(self, generator: Any = None) -> dict[str, Any]:
        """Everything that shapes the base model: the task (by name), the style and the warm-start options."""
        o = self.options
        task = generator.name if generator is not None else self._task
        task_recipe = generator.warm_start_recipe() if generator is not None else self._task_recipe
        recipe = {
            "task": task, "style": o.prompt_style,
            "instances": o.instances, "epochs": o.epochs, "lr": o.lr, "batch_size": o.train_batch_size,
            "seed": o.seed, "hidden_size": o.hidden_size, "layers": o.layers, "ffn": o.ffn,
        }
        if task_recipe:  # only when the task has any: keys of recipes without one stay as they were
            recipe["task_options"] = task_recipe
        return recipe

    def base_dir(self, generator: Any = None) -> Path:
        """The warm-started base model of these options for ``generator``'s task (default: the task
        of the last :meth:`prepare`): the one the task ships for this recipe when ``prebuilt`` is on
        and it ships one, else where it is cached."""
        shipped = self.prebuilt_dir(generator)
        return shipped if shipped is not None else self.cache_path(generator)

    def cache_path(self, generator: Any = None) -> Path:
        """Where a base model built here with these options is cached."""
        root = Path(self.options.cache_dir).expanduser() if self.options.cache_dir else default_cache_dir()
        return root / recipe_key(self.recipe(generator))

    def prebuilt_dir(self, generator: Any = None) -> Path | None:
        """The task's shipped base model for this exact recipe (``Generator.tiny_prebuilt``), if
        ``prebuilt`` is on and it ships one; without ``generator``: the last :meth:`prepare`'s."""
        if not self.options.prebuilt:
            return None
        if generator is None:
            return self._shipped
        return generator.tiny_prebuilt(recipe_key(self.recipe(generator)))

    def prepare(self, *, generator: Any = None, force: bool = False, progress: Progress | None = None) -> Path:
        """The base model directory: the task's shipped one for this recipe (checked against its
        SHA256SUMS), else built (tokenizer, random init, warm start) from the task unless cached.
        ``force``: build it here even when cached or shipped.

        A cached model is reused only when its recorded :func:`warm_start_fingerprint` is the
        current task's (the pairs are generated again to tell); otherwise it is rebuilt in place
        and :attr:`prepared` says why. A task's shipped model is not fingerprinted: its recipe key
        and SHA256SUMS are the task's word that it is what this recipe builds (tests pin the
        quickstart's pairs). Without ``generator`` a cached model of the last prepared task is
        returned as it is (that prepare() checked it)."""
        if self.options.path and not force:
            return Path(self.options.path)
        if generator is not None:
            self._task = generator.name
            self._task_recipe = generator.warm_start_recipe()
            self._shipped = None
            if not force:
                shipped = self.prebuilt_dir(generator)
                if shipped is not None:
                    verify_prebuilt(shipped)
                    self._shipped = shipped
                    self.prepared = "shipped"
                    return shipped
        out = self.cache_path(generator)
        o = self.options
        cached = (out / "warm_start.json").exists() and not force
        if cached and generator is None:
            self.prepared = "cached"
            return out
        if generator is None:
            raise ConfigError("policy.tiny: the warm start needs the task's generator (prepare(generator=...))")
        pairs = None
        if cached:
            stage = "checking the cached base model's warm-start data"
            if progress:
                progress(stage, 0, 1)
            pairs = warm_start_data(generator, n=o.instances, seed=o.seed, style=o.prompt_style)
            current = warm_start_fingerprint(generator, style=o.prompt_style, hidden_size=o.hidden_size, pairs=pairs)
            self.prepared = cached_state(out, current)
            if progress:
                progress(stage, 1, 1)
            if self.prepared == "cached":
                return out
        else:
            self.prepared = "built"
        build_base_model(
            out, generator=generator, style=o.prompt_style, instances=o.instances, epochs=o.epochs, lr=o.lr,
            batch_size=o.train_batch_size, seed=o.seed, hidden_size=o.hidden_size, layers=o.layers,
            ffn=o.ffn, threads=o.threads, progress=progress, pairs=pairs,
        )
        return out

    def load(self) -> tuple[Any, Any]:
        if not self.options.path and not (self.base_dir() / "warm_start.json").exists():
            raise ConfigError("policy.tiny: no base model yet: run `envengineer pretrain` (or prepare()) first")
        if not self.options.path:
            self.options = self.options.model_copy(update={"path": str(self.base_dir())})
        return super().load()

    def evaluation_key(self) -> str | None:
        """The model's files' sha256 and every sampling option that can change an answer: on CPU in
        float32 the tiny policy's greedy answers are a function of these (measured: the same verdicts
        on 1 and 2 threads, idle or loaded), so an evaluation of the same weights can be reused."""
        if not self.options.path or self.options.temperature > 0 or self._device() != "cpu":
            return None
        folder = Path(self.options.path)
        if not (folder / "model.safetensors").is_file():
            return None
        from envengineer.api import sha256_file

        files = {name: sha256_file(folder / name) for name in ("model.safetensors", "config.json", "generation_config.json",
                                                                "tokenizer.json", "tokenizer_config.json") if (folder / name).is_file()}
        options = self.options.model_dump(mode="json", exclude={"path", "threads", "cache_dir", "prebuilt", "device", "warm_start"})
        import importlib.metadata

        libraries = {}  # the numerics and the tokenizer behind every answer
        for name in ("torch", "transformers", "tokenizers"):
            try:
                libraries[name] = importlib.metadata.version(name)
            except importlib.metadata.PackageNotFoundError:
                libraries[name] = None
        return json.dumps({"files": files, "options": options, "libraries": libraries}, sort_keys=True)

    def warm_start_info(self, generator: Any = None) -> dict[str, Any] | None:
        """The recorded warm-start figures of the cached base model (of ``generator``'s task, default
        the last prepared one), if it was built."""
        path = self.base_dir(generator) / "warm_start.json"
        return json.loads(path.read_text()) if path.exists() else None
