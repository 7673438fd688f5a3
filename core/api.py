"""The public plugin API: everything a plugin author imports, from one place.

A task family, an engineer, a context module, a trainer, a policy or a tracker needs only::

    from envengineer.api import Generator, Validator, Verdict, Grouping, Knob, hookimpl, ...

Names here are stable across minor releases; the modules they come from may move. The
extension points themselves (the hooks a plugin implements) are documented in
:mod:`envengineer.hookspecs`.

The built-in plugins and tasks (``plugins/``, ``tasks/``) import the core through this module
(``tests/test_import_layers.py`` holds them to it), so what they use is what a third-party plugin can
use too; the exceptions the layer test lists by name are the four command plugins (report, suite, gpu,
score), which are part of the framework's command line and import core modules directly, and a few
uses of :mod:`envengineer.processes`.

Importing this module stays light (no torch, transformers, ...; no plugin). The names in
:data:`_LAZY` come from modules this import does not otherwise load: each is looked up in its
module when it is imported from here (PEP 562 ``__getattr__``), at every import, never cached,
so the module's current attribute is what a caller gets (a test's ``monkeypatch`` of
``envengineer.registry.load_registry`` reaches ``from envengineer.api import load_registry``).
"""

from typing import TYPE_CHECKING, Any

from envengineer.store.benchmarks import SUMS, frozen_benchmark, read_checksums, sha256_file
from envengineer.components import (
    Aggregate,
    Benchmark,
    Change,
    Component,
    ContextModule,
    Engineer,
    GenerationResult,
    Generator,
    Grouping,
    Knob,
    NoOptions,
    Policy,
    Projection,
    Resources,
    Tracker,
    TrackerUnavailable,
    Trainer,
    Validator,
    Verdict,
    missing_package,
    retired_options,
)
from envengineer.design.contract import DesignOutcome, DesignRequest, EngineerCallError, EngineerReply
from envengineer.cli.state import CommandState
from envengineer.display import stage_progress
from envengineer.loop.preflight import Check, package_check, torch_check, version
from envengineer.errors import ConfigError, EnvEngineerError, InputError
from envengineer.design.evidence import Evidence, RoundRecord, load_signal, round_failures
from envengineer.fileio import (
    atomic_open,
    cache_root,
    fsync_dir,
    read_json,
    read_jsonl,
    read_yaml,
    replace_folder,
    write_json,
    write_jsonl,
    write_text,
    write_yaml,
)
from envengineer.processes import cpu_features, cpu_model, free_port
from envengineer.components.gpus import Gpu, GpuProcess, driver_problem, read_gpus, read_processes, visible_gpus
from envengineer.hookspecs import hookimpl
from envengineer.components.knobs import WHOLE, number, split_budget, toward
from envengineer.components.resources import Fix, MemoryEstimate
from envengineer.components.model_shape import GB, ModelShape
from envengineer.design.prompts import build_request, factual_note, load_prompt, summary_prompt
from envengineer.design.proposals import UnusableProposal, extract_yaml_block, parse_proposal, proposal_of
from envengineer.store.rundir import RunDir
from envengineer.loop.trackers import (
    benchmark_scalars,
    benchmark_step,
    curve_points,
    design_scalars,
    display_name,
    group_name,
    hyperparameters,
    needs_curves,
    notes_text,
    read_state,
    redact,
    redacted,
    round_scalars,
    write_state,
)
from envengineer.components.training import (
    CURVE_KEYS,
    REWARDS,
    ROLLOUTS_FILE,
    Drawn,
    TrainRequest,
    TrainResult,
    fill_kept,
    reward_text,
    reward_value,
    screening_samples,
)

#: Names looked up in their module at each import from here (see the module's docstring), each -> that module.
_LAZY: dict[str, str] = {
    # prompt budgets (context modules, engineers)
    "Cut": "envengineer.design.budget",
    "PromptBudgetOptions": "envengineer.components.prompt_budget",
    # structured replies (engineers: docs/engineers.md#structured-replies)
    "ANALYSIS_DESCRIPTION": "envengineer.design.structured",
    "SCHEMA_NAME": "envengineer.design.structured",
    "block_token_limit": "envengineer.design.structured",
    "config_schema": "envengineer.design.structured",
    "reply_schema": "envengineer.design.structured",
    "changes_schema": "envengineer.design.structured",
    "decisions_schema": "envengineer.design.structured",
    "decided_config": "envengineer.design.structured",
    "config_moves": "envengineer.design.structured",
    "interface_schema": "envengineer.design.structured",
    "INTERFACES": "envengineer.design.structured",
    "InterfaceOptions": "envengineer.design.structured",
    "structured_reply": "envengineer.design.structured",
    "with_instruction": "envengineer.design.structured",
    # per-group success and rollout lines (engineers, trainers)
    "group_success": "envengineer.loop.signal",
    "rollout_line": "envengineer.loop.signal",
    # scoring and evaluation sets (trainers, commands)
    "score_response": "envengineer.loop.evaluation",
    "spread": "envengineer.loop.evaluation",
    # model folders (policies, trainers)
    "folder_problem": "envengineer.components.model_folder",
    "missing_files": "envengineer.components.model_folder",
    # the registry and run configs (commands a plugin adds); load_registry is also ``envengineer.load_registry``
    "load_registry": "envengineer.registry",
    "only_task": "envengineer.loop.runconfig",
    # the lifecycle hooks' payloads as models (plugins, trackers: docs/writing-a-plugin.md#lifecycle-hooks-and-their-payloads)
    "PAYLOADS": "envengineer.loop.payloads",
    "BenchmarkPayload": "envengineer.loop.payloads",
    "DesignPayload": "envengineer.loop.payloads",
    "RoundPayload": "envengineer.loop.payloads",
    "RunEndPayload": "envengineer.loop.payloads",
    "RunStartPayload": "envengineer.loop.payloads",
    "watched": "envengineer.loop.payloads",
}

if TYPE_CHECKING:  # what static tools see; at run time these come through __getattr__
    from envengineer.components.prompt_budget import PromptBudgetOptions
    from envengineer.design.budget import Cut
    from envengineer.loop.evaluation import score_response, spread
    from envengineer.components.model_folder import folder_problem, missing_files
    from envengineer.loop.payloads import PAYLOADS, BenchmarkPayload, DesignPayload, RoundPayload, RunEndPayload, RunStartPayload, watched
    from envengineer.registry import load_registry
    from envengineer.loop.runconfig import only_task
    from envengineer.loop.signal import group_success, rollout_line
    from envengineer.design.structured import (
        ANALYSIS_DESCRIPTION,
        SCHEMA_NAME,
        block_token_limit,
        INTERFACES,
        changes_schema,
        config_moves,
        config_schema,
        decided_config,
        decisions_schema,
        interface_schema,
        reply_schema,
        structured_reply,
        with_instruction,
    )


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    # base classes of the components a plugin registers
    "Component", "ContextModule", "Engineer", "Generator", "Policy", "Tracker", "Trainer", "Validator",
    "NoOptions", "retired_options",
    # task declarations and value types
    "Aggregate", "Benchmark", "Change", "GenerationResult", "Grouping", "Knob", "Projection", "Resources", "Verdict",
    # knob arithmetic (task families, engineers)
    "WHOLE", "number", "split_budget", "toward",
    # errors
    "ConfigError", "EnvEngineerError", "InputError", "TrackerUnavailable",
    # the plugin hooks
    "hookimpl",
    # the engineer contract: requests, replies, prompts, proposals
    "DesignOutcome", "DesignRequest", "EngineerCallError", "EngineerReply", "UnusableProposal",
    "build_request", "extract_yaml_block", "factual_note", "load_prompt", "parse_proposal", "proposal_of", "summary_prompt",
    # structured replies (engineers)
    "ANALYSIS_DESCRIPTION", "INTERFACES", "InterfaceOptions", "SCHEMA_NAME", "block_token_limit", "changes_schema", "config_moves", "config_schema",
    "decided_config", "decisions_schema", "interface_schema", "reply_schema", "structured_reply", "with_instruction",
    # prompt budgets and evidence (context modules, engineers)
    "Cut", "Evidence", "PromptBudgetOptions", "RoundRecord", "group_success", "load_signal", "round_failures",
    # training: requests, results, rewards, rollouts (trainers)
    "CURVE_KEYS", "Drawn", "REWARDS", "ROLLOUTS_FILE", "TrainRequest", "TrainResult", "fill_kept", "reward_text",
    "reward_value", "rollout_line", "score_response", "screening_samples", "spread",
    # memory plans and model folders (trainers, policies)
    "Fix", "GB", "MemoryEstimate", "ModelShape", "folder_problem", "missing_files",
    # machine checks (envengineer doctor) and GPUs
    "Check", "Gpu", "GpuProcess", "driver_problem", "package_check", "read_gpus", "read_processes", "torch_check",
    "version", "visible_gpus", "cpu_model", "cpu_features", "free_port",
    # trackers' helpers (docs/trackers.md)
    "benchmark_scalars", "benchmark_step", "curve_points", "design_scalars", "display_name", "group_name",
    "hyperparameters", "missing_package", "needs_curves", "notes_text", "read_state", "redact", "redacted",
    "round_scalars", "write_state",
    # the lifecycle hooks' payloads (plugins, trackers)
    "BenchmarkPayload", "DesignPayload", "PAYLOADS", "RoundPayload", "RunEndPayload", "RunStartPayload", "watched",
    # run directories, files, checksums, caches
    "RunDir", "SUMS", "atomic_open", "cache_root", "frozen_benchmark", "fsync_dir", "read_checksums", "read_json", "read_jsonl",
    "read_yaml", "replace_folder", "sha256_file", "write_json", "write_jsonl", "write_text", "write_yaml",
    # commands a plugin adds (register_commands)
    "CommandState", "load_registry", "only_task", "stage_progress",
]
