#!/usr/bin/env python
"""Build a tiny random Qwen3 with a Qwen3-like tokenizer and chat template, offline.

    python scripts/build_tiny_qwen3.py DIR [--hidden-size 256] [--layers 4] [--vocab-size 1024] [--seed 0]

A stand-in for Qwen3-0.6B where nothing may be downloaded (scripts/verl_smoke.sh): the same
architecture (``Qwen3ForCausalLM``, grouped-query attention, tied embeddings, bfloat16 weights,
``max_position_embeddings`` 8192) at ~3.3 M parameters, randomly initialised, and a byte-level
BPE tokenizer (any text round-trips) with Qwen3's special tokens ``<|endoftext|>`` (pad),
``<|im_start|>`` and ``<|im_end|>`` (end of sequence) and ``<think>``/``</think>`` as ordinary
added tokens. Its merges are learned from MAPF-FrozenLake prompts and answers in the ``full``
style (a few hundred instances of the project's own generator): ~570 tokens in all, and a
mapf-2agents-val prompt is 416–535 tokens (5 agents: up to 586), not ~1,500 bytes. The chat template is Qwen3's in shape: ``<|im_start|>role\\ncontent<|im_end|>``
turns, and after the generation prompt an empty ``<think>\\n\\n</think>\\n\\n`` block exactly when
``enable_thinking`` is false (as tests/test_trl_trainer.py's ``chat_model`` fixture).

Saved with ``save_pretrained`` (model, tokenizer, generation config), then reloaded with
transformers and checked: the template honours ``enable_thinking``, text round-trips, and
the model generates a few tokens on the CPU. Deterministic in ``--seed``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
THINK = ["<think>", "</think>"]

QWEN3_LIKE_TEMPLATE = (
    "{%- for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{ '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
    "{%- endif %}"
)


def corpus(instances: int, seed: int) -> list[str]:
    """MAPF-FrozenLake prompts (full style) and their optimal answers, 2–4 agents."""
    from envengineer.registry import load_registry

    registry = load_registry()
    texts: list[str] = []
    for agents in (2, 3, 4):
        generator, _ = registry.task("mapf-frozenlake", {"agents": agents})
        records = generator.generate(generator.default_config(), n=instances // 3 + 1, seed=seed + agents).records
        for record in records:
            prompt = generator.render(record, "full")
            texts += [m["content"] for m in prompt] if isinstance(prompt, list) else [prompt]
            texts.append(generator.reference_answer(record))
    return texts


def build_tokenizer(vocab_size: int, instances: int, seed: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    core.train_from_iterator(corpus(instances, seed), trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<|endoftext|>", eos_token="<|im_end|>", additional_special_tokens=["<|im_start|>"],
        model_max_length=8192, padding_side="left", clean_up_tokenization_spaces=False,
    )
    tokenizer.add_tokens(THINK)  # ordinary added tokens, as in Qwen3
    tokenizer.chat_template = QWEN3_LIKE_TEMPLATE
    return tokenizer


def build_model(tokenizer, *, hidden_size: int, layers: int, seed: int):
    import torch
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    pad, eos = tokenizer.convert_tokens_to_ids("<|endoftext|>"), tokenizer.convert_tokens_to_ids("<|im_end|>")
    heads = max(2, hidden_size // 64)
    config = Qwen3Config(
        vocab_size=-(-len(tokenizer) // 64) * 64,  # padded like Qwen3's (151,936 ids for 151,669 tokens)
        hidden_size=hidden_size,
        intermediate_size=3 * hidden_size,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=max(1, heads // 2),
        head_dim=hidden_size // heads,
        max_position_embeddings=8192,
        tie_word_embeddings=True,
        bos_token_id=pad,
        eos_token_id=eos,
        pad_token_id=pad,
        use_cache=True,
    )
    model = Qwen3ForCausalLM(config).to(torch.bfloat16)
    # end-of-sequence as Qwen3's generation_config.json has it; no sampling defaults (callers set their own)
    model.generation_config = GenerationConfig(bos_token_id=pad, eos_token_id=[eos, pad], pad_token_id=pad)
    return model


def check(path: Path) -> dict[str, object]:
    """Reload ``path`` with transformers and check the template, the tokenizer and generation."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    messages = [{"role": "user", "content": "Plan paths for 2 agents on a frozen lake.\n   0 1 2\n0  F F H"}]
    off = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, enable_thinking=False)
    on = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, enable_thinking=True)
    assert off.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n"), off
    assert on.endswith("<|im_start|>assistant\n") and "<think>" not in on, on
    text = "Agent 1: (0,0) -> (0,1) -> (1,1)\nÜnïcode ✓ \t end"
    assert tokenizer.decode(tokenizer(text)["input_ids"]) == text
    for token in [*SPECIALS, *THINK]:
        ids = tokenizer(token, add_special_tokens=False)["input_ids"]
        assert len(ids) == 1, (token, ids)
    ids = tokenizer(off, return_tensors="pt", add_special_tokens=False)
    with torch.no_grad():
        out = model.generate(**ids, max_new_tokens=8, do_sample=False)
    return {
        "class": type(model).__name__,
        "dtype": str(model.dtype),
        "parameters": sum(p.numel() for p in model.parameters()),
        "tokenizer_tokens": len(tokenizer),
        "vocab_size": model.config.vocab_size,
        "prompt_tokens": ids["input_ids"].shape[1],
        "generated": tokenizer.decode(out[0, ids["input_ids"].shape[1]:]),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--hidden-size", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--vocab-size", type=int, default=1024, help="BPE vocabulary before the added <think> tokens")
    parser.add_argument("--instances", type=int, default=300, help="MAPF instances the BPE merges are learned from")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    from envengineer.plugins.policies.hf import quiet_hf

    with quiet_hf():  # no Hugging Face progress bars or info lines
        tokenizer = build_tokenizer(args.vocab_size, args.instances, args.seed)
        model = build_model(tokenizer, hidden_size=args.hidden_size, layers=args.layers, seed=args.seed)
        args.out_dir.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(args.out_dir)
        tokenizer.save_pretrained(args.out_dir)
        info = check(args.out_dir)
    (args.out_dir / "tiny_qwen3.json").write_text(json.dumps({**vars(args), "out_dir": str(args.out_dir), **info}, indent=2) + "\n")
    print(f"tiny Qwen3 in {args.out_dir}: {json.dumps(info)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
