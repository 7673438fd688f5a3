"""The policy being trained as its own engineer (``checkpoint``), or its starting weights (``base``).

On a GPU the model is served offline by vLLM (``LLM.chat``) in a child process
(:mod:`envengineer.plugins._shared.vllm_child`, shared with the ``vllm`` policy): the design step
returns once that process is gone, so the engineer's model holds no GPU memory the trainer
needs, and this process never imports vllm. On a CPU, or when asked, it runs through
transformers in this process and is freed afterwards. Either way the conversation is
rendered with the policy's ``chat_template_kwargs`` (the design request carries them), the
options the policy is trained and evaluated with. The vLLM path needs a CUDA GPU; the CPU
test suite runs it against a stand-in of vLLM's API (``tests/fake_vllm``).
"""

from __future__ import annotations

import gc
import time
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from envengineer.api import (
    DesignOutcome,
    DesignRequest,
    Engineer,
    EngineerCallError,
    EngineerReply,
    InterfaceOptions,
    PromptBudgetOptions,
    factual_note,
    load_prompt,
    retired_options,
    summary_prompt,
)
from envengineer.plugins._shared.vllm_child import ChildLimits


class CheckpointOptions(ChildLimits, PromptBudgetOptions, InterfaceOptions):
    """The engineer's options; with vLLM also how long its child may wait for GPU memory and stay silent (:class:`ChildLimits`);
    ``max_prompt_tokens`` (:class:`envengineer.components.prompt_budget.PromptBudgetOptions`) counted with the model's own tokenizer;
    the reply's shape (:class:`envengineer.design.structured.InterfaceOptions`): ``interface`` changes or decisions decodes the
    whole reply as JSON under that interface's schema on both backends (transformers: no free analysis first, the schema's
    analysis string is the analysis, bounded by ``analysis_chars``, 400 characters when null)."""

    model_config = ConfigDict(extra="forbid")

    model_path: str | None = Field(None, description="model directory or model name, e.g. smollm2-135m-instruct (default: the policy checkpoint the loop passes)")
    backend: Literal["auto", "vllm", "transformers"] = Field("auto", description="auto: vLLM when CUDA and vllm are available, else transformers")
    temperature: float = Field(0.7, ge=0.0, le=2.0)
    top_p: float = Field(0.95, gt=0.0, le=1.0)
    max_new_tokens: int = Field(2048, ge=1)
    seed: int = 0
    # vLLM
    tensor_parallel_size: int = Field(1, ge=1)
    gpu_memory_utilization: float = Field(0.55, gt=0, le=1)
    max_model_len: int | None = Field(None, ge=256)
    enforce_eager: bool = Field(False, description="vLLM: skip CUDA graph capture (starts faster; one design step samples little)")
    # transformers
    device: str | None = Field(None, description="torch device for transformers (default: cuda if available, else cpu)")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    summary_prompt_file: str | None = None
    structured: bool = Field(
        False, description="structured replies: the config block is decoded under the task's config schema (transformers: free analysis, "
        "then a fenced block forced by an xgrammar grammar; vLLM: the whole reply as {analysis, config} JSON through "
        "StructuredOutputsParams); false: free text ending in a YAML block (the paper's)",
    )
    analysis_tokens: int = Field(256, ge=0, description="structured, transformers: most tokens of free analysis before the forced block "
                                 "(the block then gets as many tokens as the longest block the config schema allows, so it is never "
                                 "cut; max_new_tokens does not bound it)")

    _retired = retired_options(
        enable_thinking="the chat-template options are the policy's (policy.<name>.chat_template_kwargs), "
        "one setting for training, evaluation and this engineer",
    )


class CheckpointEngineer(Engineer):
    name: ClassVar[str] = "checkpoint"
    description: ClassVar[str] = "the current policy checkpoint as engineer (vLLM in a child process on GPU, transformers on CPU)"
    Options: ClassVar[type[BaseModel]] = CheckpointOptions
    options: CheckpointOptions
    uses_llm: ClassVar[bool] = True
    which: ClassVar[str] = "policy_path"

    def __init__(self, options: BaseModel | None = None) -> None:
        super().__init__(options)
        self.last_summary_calls: list[dict[str, Any]] = []

    def model_path(self, request: DesignRequest) -> str:
        path = self.options.model_path or getattr(request, self.which, None)
        if not path:
            raise EngineerCallError(f"engineer.{self.name}: no model_path option and the loop passed no {self.which}")
        from envengineer.api import ConfigError
        from envengineer.plugins._shared.models import resolve_model

        try:
            return resolve_model(path)  # a folder as given, or a model name made into a folder on first use
        except ConfigError as exc:
            raise EngineerCallError(f"engineer.{self.name}.model_path: {exc}") from None

    def backend(self) -> str:
        if self.options.backend != "auto":
            return self.options.backend
        import importlib.util

        try:
            import torch

            if not torch.cuda.is_available():
                return "transformers"
        except ImportError:
            return "transformers"
        # found, not imported: vLLM runs in the child process only
        return "vllm" if importlib.util.find_spec("vllm") is not None else "transformers"

    def generate(
        self, path: str, conversations: list[list[dict[str, str]]], chat_template_kwargs: dict[str, Any] | None = None,
        schema: dict[str, Any] | None = None, seed: int | None = None, whole: bool = False, bare: bool = False,
    ) -> list[tuple[str, dict[str, int]]]:
        """One reply per conversation; ``chat_template_kwargs`` None: the policy's defaults; ``schema``: the
        config block's JSON schema (structured replies: vLLM then returns the whole reply as JSON under
        ``{analysis, config}``, transformers free analysis and the block forced under ``schema``); ``whole``:
        ``schema`` is the whole reply's (vLLM decodes the reply under it as it is; transformers still lets the
        analysis come first, unless ``bare``: then the reply is the JSON alone, as vLLM's whole reply is); ``seed``: the sampling seed (default: the ``seed`` option)."""
        from envengineer.plugins.policies.transformers_policy import DEFAULT_CHAT_TEMPLATE_KWARGS

        kwargs = dict(DEFAULT_CHAT_TEMPLATE_KWARGS if chat_template_kwargs is None else chat_template_kwargs)
        seed = self.options.seed if seed is None else int(seed)
        if self.backend() == "vllm":
            return self._vllm(path, conversations, kwargs, schema, seed, whole)
        return self._transformers(path, conversations, kwargs, schema, seed, bare)

    # -- backends ------------------------------------------------------------------
    def _vllm(self, path: str, conversations: list[list[dict[str, str]]], chat_kwargs: dict[str, Any],
              schema: dict[str, Any] | None = None, seed: int = 0, whole_schema: bool = False) -> list[tuple[str, dict[str, int]]]:
        """``LLM.chat`` in a child process (one per call), gone when this returns; ``schema``: the whole reply
        decoded as ``{analysis, config}`` JSON (``StructuredOutputsParams(json=...)``), turned into the free-text form."""
        from envengineer.plugins._shared import vllm_child

        o = self.options
        engine = vllm_child.engine_kwargs(
            path, tensor_parallel_size=o.tensor_parallel_size, gpu_memory_utilization=o.gpu_memory_utilization,
            max_model_len=o.max_model_len, dtype=o.dtype, enforce_eager=o.enforce_eager, seed=seed,
        )
        whole = None
        if schema is not None and whole_schema:
            whole = schema
        elif schema is not None:
            from envengineer.api import ANALYSIS_DESCRIPTION, with_instruction

            whole = {"type": "object", "properties": {"analysis": {"type": "string", "description": ANALYSIS_DESCRIPTION}, "config": schema},
                     "required": ["analysis", "config"], "additionalProperties": False}
            conversations = [with_instruction(messages) for messages in conversations]
        requests = [vllm_child.request(messages, n=1, seed=seed) for messages in conversations]
        outputs = vllm_child.generate(engine, requests, temperature=o.temperature, top_p=o.top_p, max_tokens=o.max_new_tokens,
                                      chat_template_kwargs=chat_kwargs, what=f"engineer.{self.name}", limits=o, json_schema=whole)
        return [(out["texts"][0], {"prompt_tokens": out["prompt_tokens"], "completion_tokens": out["completion_tokens"][0]}) for out in outputs]

    def _transformers(self, path: str, conversations: list[list[dict[str, str]]], chat_kwargs: dict[str, Any],
                      schema: dict[str, Any] | None = None, seed: int = 0, bare: bool = False) -> list[tuple[str, dict[str, int]]]:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from envengineer.plugins.policies.transformers_policy import chat_text

        o = self.options
        device = o.device or ("cuda" if torch.cuda.is_available() else "cpu")
        tokenizer = AutoTokenizer.from_pretrained(path)
        dtype = "auto" if o.dtype == "auto" else getattr(torch, o.dtype)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(device)
        model.eval()
        results = []
        try:
            for messages in conversations:
                templated = bool(getattr(tokenizer, "chat_template", None))
                if templated:
                    text = chat_text(tokenizer, messages, chat_kwargs)
                else:
                    text = "\n\n".join(m["content"] for m in messages) + "\n\n"
                # a rendered template already holds the special tokens it wants (as in evaluation)
                inputs = tokenizer(text, return_tensors="pt", add_special_tokens=not templated).to(device)
                inputs = _fit_context(model, inputs, o.max_new_tokens)
                torch.manual_seed(seed)
                if schema is not None:
                    results.append(_forced_block(model, tokenizer, text, inputs, schema, o, not templated, device, bare))
                    continue
                with torch.no_grad():
                    out = model.generate(**inputs, max_new_tokens=o.max_new_tokens, **_sampling(o, tokenizer))
                new = out[0, inputs["input_ids"].shape[1]:]
                results.append((tokenizer.decode(new, skip_special_tokens=True), {"prompt_tokens": int(inputs["input_ids"].shape[1]), "completion_tokens": int(new.shape[0])}))
        finally:
            del model
            _free()
        return results

    # -- engineer interface --------------------------------------------------------
    def prompt_token_counter(self, request: DesignRequest) -> tuple[str, Any]:
        """The model's own tokenizer (transformers, loaded here only when a budget is set): the prompt's tokens
        without the chat template's few."""
        from envengineer.api import ConfigError

        try:
            path = self.model_path(request)
        except EngineerCallError as exc:
            raise ConfigError(f"{exc} (needed to count max_prompt_tokens)") from None
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(path)
        return f"the tokenizer of {path}", lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"])

    def _run(self, request: DesignRequest, messages: list[dict[str, str]], schema: dict[str, Any] | None = None,
             whole: bool = False, bare: bool = False) -> EngineerReply:
        path = self.model_path(request)
        started = time.monotonic()
        try:
            [(text, usage)] = self.generate(path, [messages], request.chat_template_kwargs, schema,
                                            seed=sampling_seed(self.options.seed, getattr(request, "seed", None)), whole=whole,
                                            bare=bare)
        except EngineerCallError:
            raise
        except Exception as exc:
            error = f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
            raise EngineerCallError(error, [{"model": path, "attempt": 1, "usage": {}, "latency_s": round(time.monotonic() - started, 3), "error": error}]) from None
        latency = time.monotonic() - started
        call = {"model": path, "attempt": 1, "usage": usage, "latency_s": round(latency, 3), "error": None, "backend": self.backend()}
        if schema is not None:
            call["structured"] = "json_schema" if self.backend() == "vllm" else "fenced block grammar (xgrammar)"
        return EngineerReply(text=text, usage=usage, latency_s=latency, model=path, attempts=1, calls=[call])

    def propose(self, request: DesignRequest) -> EngineerReply:
        if not self.options.structured:
            return self._run(request, request.messages)
        from envengineer.api import config_schema, structured_reply

        if self.options.interface != "config":
            try:
                schema, messages, decide = self.options.reply_shape(request, WHOLE_ANALYSIS_CHARS)
            except ValueError as exc:
                raise EngineerCallError(f"engineer.{self.name}.structured: {exc}") from None
            return structured_reply(self._run(request, messages, schema, whole=True, bare=True), request.generator.knob_table, decide)

        try:
            schema = config_schema(request.generator, request.current_config)
        except ValueError as exc:
            raise EngineerCallError(f"engineer.{self.name}.structured: {exc}") from None
        reply = self._run(request, request.messages, schema)
        # vLLM answers the whole reply as JSON; transformers already wrote the free-text form
        return structured_reply(reply) if self.backend() == "vllm" else reply

    def ask(self, request: DesignRequest, messages: list[dict[str, str]], schema: dict[str, Any] | None = None) -> EngineerReply:
        """Another question on the design request's context (the engineer benchmark's self-prediction): ``schema`` the
        answer's JSON schema (transformers: free analysis, then a fenced block forced under it; vLLM: the whole reply
        decoded under it)."""
        return self._run(request, messages, schema, whole=True)

    def summarize(self, request: DesignRequest, outcome: DesignOutcome) -> str | None:
        self.last_summary_calls = []
        if outcome.fallback and outcome.reason.startswith("engineer call failed"):
            return factual_note(request, outcome)
        prompt = summary_prompt(request, outcome, load_prompt("summary", self.options.summary_prompt_file))
        try:
            reply = self._run(request, [{"role": "user", "content": prompt}])
        except EngineerCallError as exc:
            self.last_summary_calls = exc.calls
            return factual_note(request, outcome)
        self.last_summary_calls = reply.calls
        return reply.text.strip() or factual_note(request, outcome)


class BaseEngineer(CheckpointEngineer):
    name: ClassVar[str] = "base"
    description: ClassVar[str] = "the starting weights (not the trained checkpoint) as engineer"
    which: ClassVar[str] = "base_policy_path"


def sampling_seed(option_seed: int, request_seed: int | None) -> int:
    """The sampling seed of one call: the ``seed`` option mixed with the design request's seed (the loop's: the run's
    seed and the round; the engineer benchmark's: one per proposal), so the same request samples the same reply and
    K proposals asked on one round's evidence are K draws, not one reply K times."""
    if request_seed is None:
        return int(option_seed)
    import hashlib

    return int(hashlib.sha256(f"engineer-sampling|{int(option_seed)}|{int(request_seed)}".encode()).hexdigest()[:8], 16)


def _sampling(o: CheckpointOptions, tokenizer: Any) -> dict[str, Any]:
    return {
        "do_sample": o.temperature > 0,
        "temperature": o.temperature if o.temperature > 0 else None,
        "top_p": o.top_p if o.temperature > 0 else None,
        "pad_token_id": tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id,
    }


#: What opens the forced block (the design step takes the last fenced YAML block).
BLOCK_OPEN, BLOCK_CLOSE = "\n\n```yaml\n", "\n```\n"
#: The analysis string's bound where an interface's whole-JSON reply is forced on transformers and ``analysis_chars`` is
#: null: the grammar's block needs a longest form (:func:`envengineer.design.structured.block_token_limit`).
WHOLE_ANALYSIS_CHARS = 400



def _fit_context(model: Any, inputs: Any, new_tokens: int) -> Any:
    """``inputs`` cut from the front so that they and ``new_tokens`` fit the model's context (the end holds the
    instructions and the question)."""
    limit = getattr(model.config, "max_position_embeddings", None)
    if limit and inputs["input_ids"].shape[1] + new_tokens > limit:
        keep = max(1, limit - new_tokens)
        return {k: v[:, -keep:] for k, v in inputs.items()}
    return inputs


def _forced_block(model: Any, tokenizer: Any, text: str, inputs: Any, schema: dict[str, Any], o: CheckpointOptions,
                  special: bool, device: str, bare: bool = False) -> tuple[str, dict[str, int]]:
    """Free analysis (at most ``analysis_tokens``, ended early by a fence), then the fenced block decoded
    under ``schema`` by an xgrammar grammar: the block is JSON (which YAML parses) that the schema allows,
    given :func:`envengineer.design.structured.block_token_limit` new tokens (the longest block the grammar
    allows), so it always closes. ``bare``: no free analysis, and the reply is the block alone (the whole reply's JSON)."""
    import json

    import torch

    from envengineer.api import block_token_limit

    try:
        import xgrammar
        from xgrammar.contrib.hf import LogitsProcessor
    except ImportError:
        raise RuntimeError('structured replies on the transformers backend need xgrammar: pip install "envengineer[smollm2]" (or xgrammar)') from None
    prompt_tokens = int(inputs["input_ids"].shape[1])
    analysis, spent = "", 0
    if o.analysis_tokens > 0 and not bare:
        with torch.no_grad():
            out = model.generate(**inputs, max_new_tokens=o.analysis_tokens, stop_strings=["```"], tokenizer=tokenizer, **_sampling(o, tokenizer))
        new = out[0, prompt_tokens:]
        spent = int(new.shape[0])
        analysis = tokenizer.decode(new, skip_special_tokens=True).split("```", 1)[0].rstrip()
    info = xgrammar.TokenizerInfo.from_huggingface(tokenizer, vocab_size=model.config.vocab_size)
    compiled = xgrammar.GrammarCompiler(info, max_threads=1).compile_json_schema(json.dumps(schema), any_whitespace=False)
    # the block is never cut: it gets the tokens of the longest block the grammar allows (not max_new_tokens)
    block_limit = block_token_limit(schema)
    head = text + analysis + BLOCK_OPEN
    forced = tokenizer(head, return_tensors="pt", add_special_tokens=special).to(device)
    forced = _fit_context(model, forced, block_limit)
    with torch.no_grad():
        out = model.generate(**forced, max_new_tokens=block_limit, logits_processor=[LogitsProcessor(compiled)], **_sampling(o, tokenizer))
    new = out[0, forced["input_ids"].shape[1]:]
    block = tokenizer.decode(new, skip_special_tokens=True).strip()
    reply = block if bare else f"{analysis}{BLOCK_OPEN}{block}{BLOCK_CLOSE}".lstrip()
    return reply, {"prompt_tokens": prompt_tokens, "completion_tokens": spent + int(new.shape[0]), "analysis_tokens": spent,
                   "block_tokens": int(new.shape[0]), "block_token_limit": block_limit}


def _free() -> None:
    gc.collect()
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except ImportError:
        pass


ENGINEERS = (CheckpointEngineer, BaseEngineer)
