"""Frozen benchmarks: checksums verify, rebuilds are identical, tampering is caught, contents follow the spec."""

import hashlib
import json
from collections import Counter
from pathlib import Path

from typer.testing import CliRunner

from envengineer import hookimpl
from envengineer.store.benchmarks import build, read_checksums, verify
from envengineer.cli.commands import app
from envengineer.components import Benchmark
from envengineer.fileio import read_jsonl
from envengineer.registry import Registry
from envengineer.tasks.mapf_frozenlake.benchmarks import HOLE_RATIOS, PER_CELL, SUBSETS, build_set, fitting_sizes


def test_every_frozen_set_matches_its_checksum(registry):
    assert verify(registry) == []
    result = CliRunner().invoke(app, ["bench", "verify"])
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(app, ["bench", "list"])
    assert result.exit_code == 0 and "mapf-5agents" in result.output


def test_sets_follow_the_spec(registry):
    for name, agents in (("mapf-2agents-val", 2), ("mapf-2agents-test", 2), ("mapf-3agents", 3), ("mapf-4agents", 4), ("mapf-5agents", 5)):
        records = read_jsonl(registry.benchmark(name).path)
        sizes = fitting_sizes(agents)
        assert len(records) == len(SUBSETS) * len(sizes) * len(HOLE_RATIOS) * PER_CELL
        assert {len(r["agents"]) for r in records} == {agents}
        assert len({r["id"] for r in records}) == len(records)
        for subset, wait_ratio in SUBSETS.items():
            cell = Counter((r["size"], r["hole_ratio"]) for r in records if r["subset"] == subset and r["requires_wait"])
            assert set(cell.values()) == {int(wait_ratio * PER_CELL + 0.5)}
        assert all(r["optimal_cost"] is not None for r in records)
    assert 3 not in fitting_sizes(5) and 10 in fitting_sizes(5)
    # the test set mirrors the validation set, and shares no instance with the engineer's evidence
    val, test = (read_jsonl(registry.benchmark(n).path) for n in ("mapf-2agents-val", "mapf-2agents-test"))
    assert not {r["id"] for r in val} & {r["id"] for r in test}
    assert Counter((r["size"], r["hole_ratio"], r["subset"]) for r in val) == Counter((r["size"], r["hole_ratio"], r["subset"]) for r in test)


def test_rebuild_is_identical_to_the_frozen_file(registry):
    bench = registry.benchmark("mapf-3agents")
    data = "".join(json.dumps(r, ensure_ascii=False, separators=(", ", ": ")) + "\n" for r in build_set("mapf-3agents", 3))
    assert hashlib.sha256(data.encode()).hexdigest() == bench.sha256


def test_tampering_is_caught_and_build_refuses_to_refreeze(tmp_path, pm):
    source = Path(__file__).resolve().parents[1] / "tasks/mapf_frozenlake/data/mapf-2agents-val.jsonl"
    path = tmp_path / "val.jsonl"
    path.write_bytes(source.read_bytes())
    frozen = read_checksums(source.parent)[source.name]

    class Frozen:
        @hookimpl
        def register_benchmarks(self, register):
            register(Benchmark("tmp-val", "mapf-frozenlake", "copy", path, frozen, build=lambda: [{"x": 1}]))

    pm.register(Frozen(), name="frozen")
    registry = Registry(pm)
    assert verify(registry, ["tmp-val"]) == []
    path.write_text(path.read_text().replace('"optimal_cost": 2,', '"optimal_cost": 3,', 1))
    assert verify(registry, ["tmp-val"])
    before = path.read_bytes()
    assert build(registry, ["tmp-val"])  # a different rebuild is refused without --update
    assert path.read_bytes() == before
