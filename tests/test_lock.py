"""The tested set of versions (requirements/lock.txt) and ``envengineer doctor``'s report of the environment
against it (envengineer.plugins.gpu.lock)."""

from __future__ import annotations

import importlib.metadata
import os
import sys
import textwrap
from pathlib import Path

import pytest

from envengineer.plugins.gpu.lock import (
    canonical, compare, extra_requirements, find_lock, install_paths, read_lock, same_version, unmet_requirements,
)

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements" / "lock.txt"


def test_the_lock_covers_every_requirement_of_the_dev_extra():
    """What scripts/lock.py check says, offline: each requirement of ``.[dev]`` (train, verl-cpu, ... expanded) is
    pinned, within its range; a pyproject change that the lock does not follow fails here."""
    pins = read_lock(LOCK)
    assert unmet_requirements(ROOT / "pyproject.toml", "dev", pins) == []
    names = {canonical(line.split("[")[0].split(">")[0].split("=")[0].split("<")[0].split(";")[0].strip())
             for line in extra_requirements(ROOT / "pyproject.toml", "dev")}
    assert {"transformers", "trl", "torch", "verl", "pytest"} <= names
    assert pins["torch"] == "2.13.0"


def test_the_quickstart_and_the_tests_get_one_transformers():
    """The defect the lock removes: ``.[train]`` alone resolved a newer transformers than ``.[dev]`` (verl's bound).
    Through the lock both installs are constrained to the same pins; this checks the pins satisfy both extras."""
    pins = read_lock(LOCK)
    assert unmet_requirements(ROOT / "pyproject.toml", "train", pins) == []
    assert "kernels" not in pins  # transformers 5.10.4 refuses the kernels release [train] once brought in


def test_a_requirement_the_lock_misses_or_pins_outside_its_range_is_named(tmp_path):
    project = tmp_path / "pyproject.toml"
    project.write_text(textwrap.dedent("""
        [project]
        name = "demo"
        version = "0"
        dependencies = ["pyyaml>=6"]
        [project.optional-dependencies]
        a = ["rich>=13", "tomli; python_version < '3.11'"]
        dev = ["demo[a]", "pytest>=8"]
    """))
    assert sorted(extra_requirements(project, "dev")) == sorted(["pyyaml>=6", "rich>=13", "tomli; python_version < '3.11'", "pytest>=8"])
    problems = unmet_requirements(project, "dev", {"pyyaml": "5.4", "rich": "13.7.0"})
    assert problems == ["pyyaml>=6: the lock pins pyyaml==5.4", "pytest>=8: not in the lock"]  # tomli's marker is false on 3.11
    with pytest.raises(ValueError, match="no extra 'nope'"):
        extra_requirements(project, "nope")


def test_a_line_that_is_not_a_pin_names_the_file_and_line(tmp_path):
    lock = tmp_path / "lock.txt"
    lock.write_text("# comment\nPyYAML==6.0.2\n    # via x\n\nrich>=13\n")
    with pytest.raises(ValueError, match=r"lock.txt:5: not a pin"):
        read_lock(lock)
    lock.write_text("PyYAML==6.0.2  # pinned\nsome_pkg[extra]==1.0\n")
    assert read_lock(lock) == {"pyyaml": "6.0.2", "some-pkg": "1.0"}


def test_a_local_label_matches_its_public_version():
    assert same_version("2.13.0+cpu", "2.13.0") and same_version("2.13.0", "2.13.0")
    assert not same_version("2.13.1", "2.13.0") and not same_version("2.13.0+cpu", "2.13.0+cu130")


def _dist(site: Path, name: str, version: str, requires: list[str] = (), extras: list[str] = ()) -> None:
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    lines = [f"Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    lines += [f"Provides-Extra: {e}" for e in extras] + [f"Requires-Dist: {r}" for r in requires]
    (info / "METADATA").write_text("\n".join(lines) + "\n")


def test_compare_names_a_changed_version_a_missing_dependency_and_a_package_outside_the_lock(tmp_path, monkeypatch):
    """Real distributions (dist-info folders on sys.path), the kernels case among them: a package the lock does not
    pin, installed beside a locked package that names it in an extra."""
    site = tmp_path / "site"
    _dist(site, "ee-demo-transformers", "5.10.4", requires=["ee-demo-kernels>=0.3; extra == 'kernels'"], extras=["kernels"])
    _dist(site, "ee-demo-kernels", "0.19.1")
    _dist(site, "ee-demo-trl", "1.16.0", requires=["ee-demo-transformers>=5", "ee-demo-accelerate>=1"])
    _dist(site, "ee-demo-other", "2.0")  # installed by the user, named by nothing of the lock: not reported
    pins = {"ee-demo-transformers": "5.10.4", "ee-demo-trl": "1.15.0", "ee-demo-accelerate": "1.16.0"}
    monkeypatch.setattr(sys, "path", [str(site), *sys.path])
    assert not [f for f in compare(pins) if f.name.startswith("ee-demo-")]  # on sys.path alone (vendored): no install
    found = {f.name: f for f in compare(pins, paths=[str(site), *install_paths()]) if f.name.startswith("ee-demo-")}
    assert set(found) == {"ee-demo-trl", "ee-demo-accelerate", "ee-demo-kernels"}
    assert found["ee-demo-trl"].found == "1.16.0" and found["ee-demo-trl"].fix == 'pip install -c requirements/lock.txt "ee-demo-trl==1.15.0"'
    assert "required by ee-demo-trl" in found["ee-demo-accelerate"].found
    assert found["ee-demo-kernels"].locked == "not in the lock" and found["ee-demo-kernels"].fix.startswith("pip uninstall -y ee-demo-kernels")
    assert "ee-demo-transformers" in found["ee-demo-kernels"].found


def test_doctor_reports_the_environment_against_the_lock(tmp_path):
    """``envengineer doctor --lock FILE``: a pin this environment does not match is named with its fix; a lock of
    this environment's own versions reports nothing."""
    from typer.testing import CliRunner

    from envengineer.cli.commands import app

    yaml_version = importlib.metadata.version("pyyaml")
    lock = tmp_path / "lock.txt"
    lock.write_text(f"pyyaml=={yaml_version}\n")
    runner = CliRunner()
    ok = runner.invoke(app, ["doctor", "--lock", str(lock)], env={"COLUMNS": "200"})
    assert ok.exit_code == 0, ok.output
    assert "every installed package" in ok.output and "tested version (1 pins)" in ok.output
    lock.write_text("pyyaml==0.0.1\n")
    bad = runner.invoke(app, ["doctor", "--lock", str(lock)], env={"COLUMNS": "250"})
    assert bad.exit_code == 0, bad.output  # reported, not an error
    assert "pyyaml" in bad.output and yaml_version in bad.output and '"pyyaml==0.0.1"' in bad.output
    lock.write_text("rich>=13\n")
    broken = runner.invoke(app, ["doctor", "--lock", str(lock)])
    assert broken.exit_code != 0 and "not a pin" in str(broken.exception or broken.output)


def test_doctor_finds_the_checkout_lock():
    assert find_lock() == LOCK.resolve() or find_lock(ROOT) == LOCK.resolve()


@pytest.mark.skipif(os.environ.get("ENVENGINEER_REQUIRE_LOCK") != "1",
                    reason="set ENVENGINEER_REQUIRE_LOCK=1 where the environment was installed through the lock (CI does)")
def test_this_environment_is_the_lock():
    """In CI's venv, made by the README's two commands, nothing differs from the lock (its site-packages: a package
    imported earlier in this process, ray, puts vendored metadata on sys.path, colorama's, which nobody installed)."""
    assert [f"{f.name}: {f.found} (lock {f.locked})" for f in compare(read_lock(LOCK))] == []


def _lock_script():
    import importlib.util

    spec = importlib.util.spec_from_file_location("lock_script", ROOT / "scripts" / "lock.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("culprit", ["a", "d", "g"])
def test_the_drift_check_finds_the_one_release_that_breaks(culprit):
    """scripts/lock.py drift's search: the smoke subset passes exactly when the culprit is back at the lock's
    version; the search names it in about log2(n) tries."""
    find = _lock_script().find_culprit
    changed = list("abcdefg")
    found, tries, why = find(changed, lambda at_lock: culprit in at_lock)
    assert found == culprit and why == "" and len(tries) <= 2 + 3
    assert tries[0] == {"at_lock": changed, "passes": True}


def test_the_drift_check_says_when_no_single_release_is_to_blame():
    find = _lock_script().find_culprit
    found, tries, why = find(list("abcd"), lambda at_lock: False)
    assert found is None and "the code, not a release" in why and len(tries) == 1
    found, _, why = find(list("abcd"), lambda at_lock: {"a", "d"} <= set(at_lock))  # two releases together
    assert found is None and "more than one new release" in why


def test_the_lock_script_checks_pyproject_offline():
    from typer.testing import CliRunner

    result = CliRunner().invoke(_lock_script().app, ["check"])
    assert result.exit_code == 0, result.output
    assert "every requirement of .[dev] is pinned within its range" in " ".join(result.output.split())
