"""A stand-in of the part of vLLM's public API that envengineer uses, on CPU with transformers.

vLLM cannot be installed on the CPU test machines (no CUDA, no CPU wheel), so the tests put
this directory on the child process's ``PYTHONPATH``. It follows **vLLM 0.24.0** as read from
the PyPI wheel ``vllm-0.24.0-cp38-abi3-manylinux_2_28_x86_64.whl``:

- ``vllm/entrypoints/llm.py``: ``LLM.__init__(model, *, ..., tensor_parallel_size=1,
  dtype="auto", seed=0, gpu_memory_utilization=0.92, enforce_eager=False, ..., **kwargs)``
  with ``**kwargs`` handed to ``EngineArgs`` (a dataclass: an unknown name is a TypeError);
  ``LLM.generate(prompts, sampling_params=None, *, use_tqdm=True, lora_request=None,
  priority=None, tokenization_kwargs=None, mm_processor_kwargs=None)``;
  ``LLM.chat(messages, sampling_params=None, use_tqdm=True, lora_request=None,
  chat_template=None, chat_template_content_format="auto", add_generation_prompt=True,
  continue_final_message=False, tools=None, chat_template_kwargs=None,
  tokenization_kwargs=None, mm_processor_kwargs=None)``. A single ``SamplingParams`` applies
  to every prompt, a list is paired one by one with the prompts.
- ``vllm/sampling_params.py``: ``SamplingParams`` fields (``n=1``, ``temperature=1.0``,
  ``top_p=1.0``, ``top_k=0``, ``seed=None``, ``max_tokens=16``, ...) and ``_verify_args``:
  ``n >= 1``, temperature finite in [0, 2], ``top_p`` in (0, 1], ``max_tokens >= 1``; a
  temperature below 1e-5 is greedy and refuses ``n > 1``; one in (0, 0.01) is raised to 0.01;
  ``seed=-1`` means None.
- ``vllm/outputs.py``: ``RequestOutput(request_id, prompt, prompt_token_ids,
  prompt_logprobs, outputs, finished, ...)`` and ``CompletionOutput(index, text, token_ids,
  cumulative_logprob, logprobs, finish_reason, stop_reason)``.

Real keyword names that this stand-in does not implement raise NotImplementedError (so a
test cannot pass by relying on something it only pretends to do); names vLLM does not have
raise TypeError, as the real signatures do. Sampling is seeded per request (``seed``, else
the engine's seed and the request's number), so the same inputs give the same texts here
too, but not the texts real vLLM would give.

For the tests: ``FAKE_VLLM_LOG=FILE`` appends one JSON line per constructor and
generate/chat call (the arguments received, the rendered prompts); a model path containing
``FAKE_VLLM_SIGKILL`` makes the process SIGKILL itself inside ``LLM(...)`` (a process killed
by the OOM killer while loading).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import signal
from typing import Any

from vllm.sampling_params import StructuredOutputsParams

__version__ = "0.24.0+fake"

_SAMPLING_EPS = 1e-5
_MAX_TEMP = 1e-2
_DTYPES = {"auto": None, "half": "float16", "float16": "float16", "bfloat16": "bfloat16", "float": "float32", "float32": "float32"}


class VLLMValidationError(ValueError):
    """vllm.exceptions.VLLMValidationError: a ValueError naming the parameter and value."""

    def __init__(self, message: str, *, parameter: str | None = None, value: Any = None) -> None:
        super().__init__(message)
        self.parameter = parameter
        self.value = value


def _log(entry: dict[str, Any]) -> None:
    path = os.environ.get("FAKE_VLLM_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(entry, default=str) + "\n")


def _refuse(where: str, given: dict[str, Any], implemented: set[str], real: set[str]) -> None:
    for key in given:
        if key in implemented:
            continue
        if key in real:
            raise NotImplementedError(f"fake vllm: {where} argument {key!r} is real but not implemented by the stand-in")
        raise TypeError(f"{where} got an unexpected keyword argument {key!r}")


# --------------------------------------------------------------------- SamplingParams

_SAMPLING_REAL = {
    "n", "presence_penalty", "frequency_penalty", "repetition_penalty", "temperature", "top_p", "top_k", "min_p", "seed",
    "stop", "stop_token_ids", "ignore_eos", "max_tokens", "min_tokens", "logprobs", "prompt_logprobs", "logprob_token_ids",
    "flat_logprobs", "detokenize", "skip_special_tokens", "spaces_between_special_tokens", "include_stop_str_in_output",
    "output_kind", "skip_clone", "output_text_buffer_length", "structured_outputs", "logit_bias", "allowed_token_ids",
    "extra_args", "routed_experts_prompt_start", "bad_words", "skip_reading_prefix_cache", "thinking_token_budget",
    "repetition_detection",
}
_SAMPLING_IMPLEMENTED = {"n", "temperature", "top_p", "top_k", "seed", "max_tokens", "min_tokens", "skip_special_tokens", "structured_outputs"}


class SamplingParams:
    """vllm.SamplingParams (keyword arguments; the implemented subset)."""

    def __init__(self, **kwargs: Any) -> None:
        _refuse("SamplingParams", kwargs, _SAMPLING_IMPLEMENTED, _SAMPLING_REAL)
        self.n: int = kwargs.get("n", 1)
        self.temperature: float = kwargs.get("temperature", 1.0)
        self.top_p: float = kwargs.get("top_p", 1.0)
        self.top_k: int = kwargs.get("top_k", 0)
        self.seed: int | None = kwargs.get("seed")
        self.max_tokens: int | None = kwargs.get("max_tokens", 16)
        self.min_tokens: int = kwargs.get("min_tokens", 0)
        self.skip_special_tokens: bool = kwargs.get("skip_special_tokens", True)
        self.structured_outputs: StructuredOutputsParams | None = kwargs.get("structured_outputs")
        if self.structured_outputs is not None and not isinstance(self.structured_outputs, StructuredOutputsParams):
            raise TypeError(f"structured_outputs must be StructuredOutputsParams, got {type(self.structured_outputs).__name__}")
        if 0 < self.temperature < _MAX_TEMP:
            self.temperature = _MAX_TEMP
        if self.seed == -1:
            self.seed = None
        self._verify_args()
        if self.temperature < _SAMPLING_EPS:
            self.top_p, self.top_k = 1.0, 0
            if self.n > 1:
                raise ValueError(f"n must be 1 when using greedy sampling, got {self.n}.")

    def _verify_args(self) -> None:
        if not isinstance(self.n, int):
            raise ValueError(f"n must be an int, but is of type {type(self.n)}")
        if self.n < 1:
            raise ValueError(f"n must be at least 1, got {self.n}.")
        if not math.isfinite(self.temperature):
            raise VLLMValidationError(f"temperature must be a finite number, got {self.temperature}.", parameter="temperature", value=self.temperature)
        if self.temperature < 0.0:
            raise VLLMValidationError(f"temperature must be non-negative, got {self.temperature}.", parameter="temperature", value=self.temperature)
        if self.temperature > 2.0:
            raise VLLMValidationError(f"temperature must be in [0, 2], got {self.temperature}.", parameter="temperature", value=self.temperature)
        if not 0.0 < self.top_p <= 1.0:
            raise VLLMValidationError(f"top_p must be in (0, 1], got {self.top_p}.", parameter="top_p", value=self.top_p)
        if self.top_k < -1:
            raise ValueError(f"top_k must be 0 (disable), or at least 1, got {self.top_k}.")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise VLLMValidationError(f"max_tokens must be at least 1, got {self.max_tokens}.", parameter="max_tokens", value=self.max_tokens)
        if self.min_tokens < 0:
            raise ValueError(f"min_tokens must be greater than or equal to 0, got {self.min_tokens}.")
        if self.max_tokens is not None and self.min_tokens > self.max_tokens:
            raise ValueError(f"min_tokens must be less than or equal to max_tokens={self.max_tokens}, got {self.min_tokens}.")

    def __repr__(self) -> str:
        return (f"SamplingParams(n={self.n}, temperature={self.temperature}, top_p={self.top_p}, top_k={self.top_k}, "
                f"seed={self.seed}, max_tokens={self.max_tokens}"
                + (f", structured_outputs={self.structured_outputs!r}" if self.structured_outputs is not None else "") + ")")


# ---------------------------------------------------------------------------- outputs


class CompletionOutput:
    def __init__(self, index: int, text: str, token_ids: list[int], cumulative_logprob: float | None, logprobs: Any,
                 finish_reason: str | None = None, stop_reason: int | str | None = None, lora_request: Any = None) -> None:
        self.index = index
        self.text = text
        self.token_ids = token_ids
        self.cumulative_logprob = cumulative_logprob
        self.logprobs = logprobs
        self.finish_reason = finish_reason
        self.stop_reason = stop_reason
        self.lora_request = lora_request

    def finished(self) -> bool:
        return self.finish_reason is not None


class RequestOutput:
    def __init__(self, request_id: str, prompt: str | None, prompt_token_ids: list[int] | None, prompt_logprobs: Any,
                 outputs: list[CompletionOutput], finished: bool, metrics: Any = None, lora_request: Any = None,
                 encoder_prompt: str | None = None, encoder_prompt_token_ids: list[int] | None = None,
                 num_cached_tokens: int | None = None, *, kv_transfer_params: dict[str, Any] | None = None, **kwargs: Any) -> None:
        self.request_id = request_id
        self.prompt = prompt
        self.prompt_token_ids = prompt_token_ids
        self.prompt_logprobs = prompt_logprobs
        self.outputs = outputs
        self.finished = finished
        self.metrics = metrics
        self.lora_request = lora_request
        self.encoder_prompt = encoder_prompt
        self.encoder_prompt_token_ids = encoder_prompt_token_ids
        self.num_cached_tokens = num_cached_tokens
        self.kv_transfer_params = kv_transfer_params


# -------------------------------------------------------------------------------- LLM

_LLM_REAL = {
    "runner", "convert", "tokenizer", "tokenizer_mode", "skip_tokenizer_init", "trust_remote_code", "allowed_local_media_path",
    "allowed_media_domains", "tensor_parallel_size", "dtype", "quantization", "revision", "tokenizer_revision", "chat_template",
    "seed", "gpu_memory_utilization", "cpu_offload_gb", "offload_group_size", "offload_num_in_group", "offload_prefetch_step",
    "offload_params", "enforce_eager", "enable_return_routed_experts", "disable_custom_all_reduce", "hf_token", "hf_overrides",
    "mm_processor_kwargs", "pooler_config", "structured_outputs_config", "profiler_config", "attention_config",
    "kv_cache_memory_bytes", "compilation_config", "quantization_config", "logits_processors", "spec_method", "spec_model",
    "spec_tokens",
    # EngineArgs fields reached through **kwargs (a few of many)
    "max_model_len", "disable_log_stats", "enable_prefix_caching", "max_num_seqs", "max_num_batched_tokens",
    "pipeline_parallel_size", "data_parallel_size", "distributed_executor_backend", "swap_space", "enable_sleep_mode",
    "load_format", "kv_cache_dtype", "block_size", "generation_config",
}
_LLM_IMPLEMENTED = {"tensor_parallel_size", "dtype", "seed", "gpu_memory_utilization", "enforce_eager", "max_model_len", "disable_log_stats",
                    "trust_remote_code", "tokenizer"}


class LLM:
    """vllm.LLM: loads ``model`` with transformers on CPU."""

    def __init__(self, model: str, **kwargs: Any) -> None:
        for key in kwargs:
            if key not in _LLM_REAL:  # LLM hands the rest to EngineArgs, a dataclass
                raise TypeError(f"EngineArgs.__init__() got an unexpected keyword argument {key!r}")
        _refuse("LLM", kwargs, _LLM_IMPLEMENTED, _LLM_REAL)
        _log({"call": "LLM", "model": model, "kwargs": kwargs})
        if "FAKE_VLLM_SIGKILL" in str(model):
            os.kill(os.getpid(), signal.SIGKILL)
        tensor_parallel_size = kwargs.get("tensor_parallel_size", 1)
        gpu_memory_utilization = kwargs.get("gpu_memory_utilization", 0.92)
        dtype = kwargs.get("dtype", "auto")
        if tensor_parallel_size != 1:
            raise NotImplementedError("fake vllm: one CPU, tensor_parallel_size must be 1")
        if not 0 < gpu_memory_utilization <= 1:
            raise ValueError(f"GPU memory utilization must be within (0, 1]. Got {gpu_memory_utilization}.")
        if dtype not in _DTYPES:
            raise ValueError(f"Unknown dtype: {dtype!r}")
        from transformers import AutoConfig  # the config first, as vLLM checks it before loading weights

        if not os.path.isdir(model):
            raise OSError(f"fake vllm: {model} is not a model directory (the stand-in downloads nothing)")
        config = AutoConfig.from_pretrained(model)
        derived = getattr(config, "max_position_embeddings", None)
        max_model_len = kwargs.get("max_model_len")
        if max_model_len is not None and derived is not None and max_model_len > derived:
            raise ValueError(
                f"User-specified max_model_len ({max_model_len}) is greater than the derived max_model_len "
                f"(max_position_embeddings={derived} in model's config.json)."
            )
        self.max_model_len = max_model_len or derived
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        torch_dtype = getattr(torch, _DTYPES[dtype]) if _DTYPES[dtype] else torch.float32
        self.tokenizer = AutoTokenizer.from_pretrained(kwargs.get("tokenizer") or model)
        self.model = AutoModelForCausalLM.from_pretrained(model, dtype=torch_dtype).eval()
        self.seed = kwargs.get("seed", 0)
        self.request_counter = itertools.count()

    def get_tokenizer(self) -> Any:
        return self.tokenizer

    # -- the two entry points --------------------------------------------------
    def generate(self, prompts: Any, sampling_params: Any = None, *, use_tqdm: Any = True, lora_request: Any = None,
                 priority: list[int] | None = None, tokenization_kwargs: dict[str, Any] | None = None,
                 mm_processor_kwargs: dict[str, Any] | None = None) -> list[RequestOutput]:
        for name, value in (("lora_request", lora_request), ("priority", priority), ("tokenization_kwargs", tokenization_kwargs),
                            ("mm_processor_kwargs", mm_processor_kwargs)):
            if value is not None:
                raise NotImplementedError(f"fake vllm: LLM.generate argument {name!r} is real but not implemented by the stand-in")
        batch = [prompts] if isinstance(prompts, (str, dict)) else list(prompts)
        texts = []
        for prompt in batch:
            if isinstance(prompt, dict):
                if set(prompt) != {"prompt"}:
                    raise NotImplementedError("fake vllm: only {'prompt': str} prompt dicts are implemented")
                prompt = prompt["prompt"]
            if not isinstance(prompt, str):
                raise NotImplementedError(f"fake vllm: prompts of type {type(prompt).__name__} are not implemented")
            texts.append(prompt)
        params = self._params(sampling_params, len(texts))
        ids = [self.tokenizer(t, add_special_tokens=True)["input_ids"] for t in texts]
        _log({"call": "generate", "prompts": texts, "sampling": [repr(p) for p in params], "use_tqdm": use_tqdm})
        return self._run(texts, ids, params)

    def chat(self, messages: Any, sampling_params: Any = None, use_tqdm: Any = True, lora_request: Any = None,
             chat_template: str | None = None, chat_template_content_format: str = "auto", add_generation_prompt: bool = True,
             continue_final_message: bool = False, tools: list[dict[str, Any]] | None = None,
             chat_template_kwargs: dict[str, Any] | None = None, tokenization_kwargs: dict[str, Any] | None = None,
             mm_processor_kwargs: dict[str, Any] | None = None) -> list[RequestOutput]:
        for name, value in (("lora_request", lora_request), ("chat_template", chat_template), ("tools", tools),
                            ("tokenization_kwargs", tokenization_kwargs), ("mm_processor_kwargs", mm_processor_kwargs)):
            if value is not None:
                raise NotImplementedError(f"fake vllm: LLM.chat argument {name!r} is real but not implemented by the stand-in")
        if continue_final_message and add_generation_prompt:
            raise ValueError("continue_final_message cannot be True when add_generation_prompt is True.")
        conversations = [messages] if messages and isinstance(messages[0], dict) else list(messages)
        for conversation in conversations:
            for message in conversation:
                if not isinstance(message, dict) or "role" not in message or not isinstance(message.get("content"), str):
                    raise NotImplementedError("fake vllm: only {'role': ..., 'content': str} messages are implemented")
        params = self._params(sampling_params, len(conversations))
        kwargs = dict(chat_template_kwargs or {})
        texts = [
            self.tokenizer.apply_chat_template(conversation, tokenize=False, add_generation_prompt=add_generation_prompt,
                                               continue_final_message=continue_final_message, **kwargs)
            for conversation in conversations
        ]
        ids = [self.tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]  # the template holds them
        _log({"call": "chat", "chat_template_kwargs": chat_template_kwargs, "add_generation_prompt": add_generation_prompt,
              "prompts": texts, "sampling": [repr(p) for p in params], "use_tqdm": use_tqdm})
        return self._run(texts, ids, params)

    # -- internals ---------------------------------------------------------------
    def _grammar(self, so: StructuredOutputsParams) -> Any:
        """An xgrammar logits processor for ``so`` (only ``json`` is implemented), as vLLM's xgrammar backend compiles it."""
        import xgrammar
        from xgrammar.contrib.hf import LogitsProcessor

        if so.json is None:
            raise NotImplementedError("fake vllm: only StructuredOutputsParams(json=...) is implemented")
        schema = so.json if isinstance(so.json, str) else json.dumps(so.json)
        info = xgrammar.TokenizerInfo.from_huggingface(self.tokenizer, vocab_size=self.model.config.vocab_size)
        compiled = xgrammar.GrammarCompiler(info, max_threads=1).compile_json_schema(schema, any_whitespace=not so.disable_any_whitespace)
        return LogitsProcessor(compiled)

    def _params(self, sampling_params: Any, count: int) -> list[SamplingParams]:
        if sampling_params is None:
            return [SamplingParams()] * count
        if isinstance(sampling_params, SamplingParams):
            return [sampling_params] * count
        params = list(sampling_params)
        if len(params) != count:
            raise ValueError("The lengths of prompts and sampling_params must be the same.")
        if not all(isinstance(p, SamplingParams) for p in params):
            raise TypeError("sampling_params must be SamplingParams or a sequence of them")
        return params

    def _run(self, texts: list[str], ids: list[list[int]], params: list[SamplingParams]) -> list[RequestOutput]:
        import torch

        outputs = []
        for text, prompt_ids, p in zip(texts, ids, params):
            number = next(self.request_counter)
            room = (self.max_model_len or 10**9) - len(prompt_ids)
            if room < 1:
                raise ValueError(f"The decoder prompt (length {len(prompt_ids)}) is longer than the maximum model length of {self.max_model_len}.")
            max_tokens = min(p.max_tokens or room, room)
            greedy = p.temperature < _SAMPLING_EPS
            generator_seed = p.seed if p.seed is not None else self.seed * 1_000_003 + number
            torch.manual_seed(generator_seed)
            kwargs: dict[str, Any] = {"max_new_tokens": max_tokens, "min_new_tokens": p.min_tokens or None,
                                      "pad_token_id": self.tokenizer.pad_token_id, "eos_token_id": self.tokenizer.eos_token_id}
            if greedy:
                kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None, num_return_sequences=1)
            else:
                kwargs.update(do_sample=True, temperature=p.temperature, top_p=p.top_p, top_k=p.top_k if p.top_k > 0 else 0,
                              num_return_sequences=p.n)
            if p.structured_outputs is not None:  # vLLM's default structured-outputs backend is xgrammar
                kwargs["logits_processor"] = [self._grammar(p.structured_outputs)]
                if p.n > 1:
                    raise NotImplementedError("fake vllm: structured outputs with n > 1 are not implemented")
            input_ids = torch.tensor([prompt_ids], dtype=torch.long)
            with torch.inference_mode():
                generated = self.model.generate(input_ids=input_ids, attention_mask=torch.ones_like(input_ids), **kwargs)
            completions = []
            for index, row in enumerate(generated[:, input_ids.shape[1]:].tolist()):
                eos = self.tokenizer.eos_token_id
                finish = "length"
                if eos in row:
                    row = row[: row.index(eos) + 1]
                    finish = "stop"
                completions.append(CompletionOutput(index, self.tokenizer.decode(row, skip_special_tokens=p.skip_special_tokens), row,
                                                    None, None, finish_reason=finish))
            outputs.append(RequestOutput(str(number), text, list(prompt_ids), None, completions, True))
        return outputs


from vllm import sampling_params as _sampling_params  # noqa: E402 - vllm.sampling_params holds SamplingParams too

_sampling_params.SamplingParams = SamplingParams  # type: ignore[attr-defined]

__all__ = ["LLM", "SamplingParams", "RequestOutput", "CompletionOutput"]
