"""Hugging Face output, silenced inside our own calls (the policies, the warm starts, the model folders)."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator


@contextlib.contextmanager
def quiet_hf() -> Iterator[None]:
    """Silence Hugging Face output inside our own calls, and restore it afterwards.

    The ``Loading weights`` / ``Writing model shards`` progress bars of transformers and
    huggingface_hub, transformers' info/warning log lines, and the FutureWarnings and
    UserWarnings transformers, TRL, torch and accelerate raise about options we set on
    purpose (gradient checkpointing, generation flags). Our own rich progress bars are
    not affected; errors still surface.
    """
    import transformers.utils.logging as hf_logging

    try:
        import huggingface_hub.utils as hub_utils
    except Exception:  # pragma: no cover - huggingface_hub ships with transformers
        hub_utils = None
    bars_on = hf_logging.is_progress_bar_enabled()
    hub_bars_off = hub_utils.are_progress_bars_disabled() if hub_utils is not None else True
    verbosity = hf_logging.get_verbosity()
    hf_logging.disable_progress_bar()
    if hub_utils is not None:
        hub_utils.disable_progress_bars()
    hf_logging.set_verbosity_error()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            warnings.simplefilter("ignore", DeprecationWarning)
            for module in ("transformers", "trl", "torch", "accelerate", "huggingface_hub", "datasets"):
                warnings.filterwarnings("ignore", category=UserWarning, module=module)
            yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars_on:
            hf_logging.enable_progress_bar()
        if hub_utils is not None and not hub_bars_off:
            hub_utils.enable_progress_bars()
