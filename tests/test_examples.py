"""Every example run config is valid: it parses, and every plugin section resolves."""

from pathlib import Path

import pytest
import yaml

from envengineer.runconfig import parse_run_config, resolve

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
RUN_CONFIGS = sorted(p for p in EXAMPLES.rglob("*.yaml") if "engineers" not in p.parts)


@pytest.mark.parametrize("path", RUN_CONFIGS, ids=lambda p: str(p.relative_to(EXAMPLES)))
def test_example_run_config_resolves(path, registry, tmp_path):
    config = parse_run_config(yaml.safe_load(path.read_text()), str(path))
    resolved = resolve(config, registry, base_dir=tmp_path)
    assert resolved.engineer.name == config.engineer["name"]


def test_there_are_paper_presets_for_every_variant():
    names = {p.stem for p in RUN_CONFIGS}
    assert {"v1", "v2", "v3", "v4", "v5", "v6", "baseline-fixed", "baseline-random", "baseline-curriculum",
            "engineer-gpt", "engineer-gemini", "engineer-kimi", "engineer-base", "engineer-checkpoint"} <= names
