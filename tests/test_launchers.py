"""`envengineer suite --launcher ray|slurm`: a small manifest (the simulated student, seconds a run)
on a local Ray cluster started here and through submitit's local executor gives byte-identical
tables to `--jobs 1`; job ids are kept and followed, never submitted twice; `--status`; failures
with their log's tail; the Slurm jobs' #SBATCH lines from the paper configs' resources."""

import json
import re
import shutil
import time
from pathlib import Path

import pytest
import yaml
from rich.console import Console
from typer.testing import CliRunner

from envengineer.cli.commands import app

REPO = Path(__file__).resolve().parents[1]
ENV = {"ENVENGINEER_LOAD_PLUGINS": "", "COLUMNS": "200", "RAY_USAGE_STATS_ENABLED": "0"}
RUNS = [f"{arm}/seed-{seed}" for arm in ("fixed", "heuristic") for seed in (0, 1)]
runner = CliRunner()


def write_suite(folder: Path, launcher: dict | None = None, **arms) -> Path:
    """Two arms (fixed, heuristic) of the simulated student on grid walks, two rounds."""
    folder.mkdir(parents=True, exist_ok=True)
    base = {"name": "sim", "task": {"name": "grid-walk"}, "rounds": 2, "budget": 48, "engineer": "heuristic",
            "policy": "simulated", "trainer": "simulated", "eval": {"validation": "grid-walk-val", "limit": 40}}
    (folder / "base.yaml").write_text(yaml.safe_dump(base, sort_keys=False))
    manifest = {"base": "base.yaml", "table": "sim", "arms": {"fixed": {"engineer.name": "fixed"}, "heuristic": None, **arms}}
    if launcher is not None:
        manifest["launcher"] = launcher
    (folder / "suite.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
    return folder


def suite_cmd(folder: Path, out: Path, *extra: str):
    return runner.invoke(app, ["suite", str(folder), "--seeds", "2", "--output", str(out), *extra], env=ENV)


def tables(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.suffix in (".md", ".csv")}


def results(run_dir: Path, out: Path) -> dict[str, str]:
    """What a run produced that must not depend on where it ran (history lines carry times: only their steps)."""
    found = {}
    for path in sorted(run_dir.rglob("*")):
        if path.is_file() and path.name in ("config.yaml", "train.jsonl", "verdicts.jsonl", "run.yaml", "student.json", "projection.yaml"):
            found[path.relative_to(run_dir).as_posix()] = path.read_text().replace(str(out), "OUT")
    found["steps"] = json.dumps([(line["step"], line.get("round")) for line in map(json.loads, (run_dir / "history.jsonl").read_text().splitlines())])
    return found


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The suite with --jobs 1: the tables and runs every launcher must reproduce."""
    root = tmp_path_factory.mktemp("launch")
    folder = write_suite(root / "s", launcher={"poll_seconds": 0.2})
    out = root / "jobs-1"
    result = suite_cmd(folder, out, "--jobs", "1")
    assert result.exit_code == 0, result.output + repr(result.exception)
    assert len(tables(out)) >= 4 and all((out / rel / "run.yaml").is_file() for rel in RUNS)
    return {"root": root, "folder": folder, "out": out}


def same_as_reference(reference, out: Path) -> None:
    assert tables(out) == tables(reference["out"])  # byte for byte
    for rel in RUNS:
        assert results(out / rel, out) == results(reference["out"] / rel, reference["out"]), rel
    assert "jobs" not in json.loads((out / "suite.json").read_text())  # every job seen to end


# ------------------------------------------------------------------ ray


@pytest.fixture(scope="module")
def ray_cluster():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def test_ray_runs_give_the_tables_of_jobs_1_and_a_second_invocation_submits_nothing(reference, ray_cluster):
    out = reference["root"] / "ray"
    result = suite_cmd(reference["folder"], out, "--launcher", "ray")
    assert result.exit_code == 0, result.output + repr(result.exception)
    assert "submitted 4 run(s) with --launcher ray" in result.output
    same_as_reference(reference, out)
    for rel in RUNS:  # each run's worker wrote its log and its node beside the run directory
        assert (out / f"{rel}.log").is_file() and json.loads((out / f"{rel}.node.json").read_text())["host"]
    for line in ("fixed     │ 0    │ done", "heuristic │ 1    │ done"):
        assert line in result.output
    again = suite_cmd(reference["folder"], out, "--launcher", "ray")
    assert again.exit_code == 0 and "4 finished run(s) skipped" in again.output and "submitted" not in again.output
    assert tables(out) == tables(reference["out"])
    assert cpus_freed(ray_cluster)


def test_ray_jobs_submitted_by_an_earlier_invocation_are_followed_not_submitted_again(reference, ray_cluster):
    from envengineer.plugins.suite.launch.base import launcher_options
    from envengineer.registry import load_registry
    from envengineer.plugins.suite.tables import plan
    from envengineer.plugins.suite.launch.jobs import make_launcher, submit
    from envengineer.plugins.suite.local import unfinished

    out = reference["root"] / "ray-followed"
    registry = load_registry()
    suite = plan([reference["folder"]], seeds=2, output=out, registry=registry)
    options = launcher_options({"name": "ray", "poll_seconds": 0.2})
    launcher = make_launcher(options, out)
    _, ids = submit(suite, unfinished(suite), launcher, options, registry=registry, console=Console(quiet=True))
    launcher.close()  # the suite that submitted them is gone; two run, two wait for the cluster's CPUs
    saved = json.loads((out / "suite.json").read_text())["jobs"]
    assert {k: v["id"] for k, v in saved.items()} == ids and len(set(ids.values())) == 4
    status = suite_cmd(reference["folder"], out, "--launcher", "ray", "--status")
    assert status.exit_code == 0, status.output
    assert all(job in status.output for job in ids.values()) and "submitted" not in status.output
    result = suite_cmd(reference["folder"], out, "--launcher", "ray")
    assert result.exit_code == 0, result.output + repr(result.exception)
    # every run followed (or seen finished, its actor released), none submitted again
    followed = int(re.search(r"following (\d) job", result.output).group(1))
    skipped = int(m.group(1)) if (m := re.search(r"(\d) finished run", result.output)) else 0
    assert followed + skipped == 4 and "submitted" not in result.output.replace("submitted earlier", "")
    same_as_reference(reference, out)
    assert cpus_freed(ray_cluster)


def cpus_freed(ray, seconds: float = 10.0) -> bool:
    """No actor left holding the cluster's CPUs (a kill takes a moment to show)."""
    deadline = time.monotonic() + seconds
    while ray.available_resources().get("CPU") != 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    return ray.available_resources().get("CPU") == 2


def test_a_run_waiting_for_resources_shows_pending_and_a_run_on_several_nodes_needs_a_cluster(reference, ray_cluster):
    from envengineer.plugins.suite.launch.base import launcher_options
    from envengineer.registry import load_registry
    from envengineer.plugins.suite.tables import plan
    from envengineer.plugins.suite.launch.jobs import make_launcher, submit
    from envengineer.plugins.suite.local import unfinished

    out = reference["root"] / "ray-pending"
    registry = load_registry()
    suite = plan([reference["folder"]], seeds=1, output=out, only="fixed", registry=registry)
    options = launcher_options({"name": "ray", "cpus": 3})  # more than the cluster has: never placed
    launcher = make_launcher(options, out)
    console = Console(record=True, width=300)
    _, ids = submit(suite, unfinished(suite), launcher, options, registry=registry, console=console)
    assert "no node of the Ray cluster has 3 CPU(s) and 0 GPU(s)" in console.export_text()
    try:
        result = runner.invoke(app, ["suite", str(reference["folder"]), "--seeds", "1", "--only", "fixed", "--output", str(out),
                                     "--status"], env=ENV)
        assert result.exit_code == 0, result.output
        assert "│ pending" in result.output and ids["fixed/seed-0"] in result.output and "0 of 2 done" in result.output
    finally:
        launcher.release(ids["fixed/seed-0"])
        launcher.close()
    assert cpus_freed(ray_cluster)
    from envengineer.components import Resources
    from envengineer.errors import EnvEngineerError
    from envengineer.loop.runconfig import parse_run_config
    from envengineer.plugins.suite.launch.jobs import run_resources

    run = suite.runs[0]
    verl = {"name": "verl", "nnodes": 2, "n_gpus_per_node": 4, "preset": "paper-4xh100"}
    run.config = parse_run_config({**run.config.model_dump(mode="json"), "trainer": verl, "policy": {"name": "vllm", "path": "m"}}, "x", registry)
    assert run_resources(run, registry, options) == Resources(gpus_per_node=4, nodes=2, cpus=3)  # ray: one run over the cluster's nodes (cpus: the launcher's)
    slurm = launcher_options({"name": "slurm", "executor": "local"})
    with pytest.raises(EnvEngineerError, match="trains on 2 nodes; launcher.executor: local runs every job on this machine"):
        run_resources(run, registry, slurm)  # submitit's local executor is one machine
    assert run_resources(run, registry, slurm.model_copy(update={"executor": "slurm"})).nodes == 2


# ------------------------------------------------------------------ slurm (submitit)


def test_slurm_jobs_through_submitits_local_executor_give_the_tables_of_jobs_1(reference):
    pytest.importorskip("submitit")
    out = reference["root"] / "slurm"
    result = suite_cmd(reference["folder"], out, "--launcher", "slurm", "--slurm-executor", "local")
    assert result.exit_code == 0, result.output + repr(result.exception)
    assert "submitted 4 run(s) with --launcher slurm" in result.output
    same_as_reference(reference, out)
    assert len(list((out / ".submitit").glob("*_submitted.pkl"))) == 4  # submitit's own files, in the suite folder
    status = suite_cmd(reference["folder"], out, "--status")
    assert status.exit_code == 0 and status.output.count("│ done") == 4


def test_slurm_jobs_still_running_are_followed_and_a_failed_run_shows_its_logs_tail(reference, tmp_path):
    pytest.importorskip("submitit")
    from envengineer.plugins.suite.launch.base import launcher_options
    from envengineer.registry import load_registry
    from envengineer.plugins.suite.tables import plan
    from envengineer.plugins.suite.launch.jobs import make_launcher, submit
    from envengineer.plugins.suite.local import unfinished

    folder = write_suite(tmp_path / "s", launcher={"name": "slurm", "executor": "local", "poll_seconds": 0.2},
                         broken={"policy.path": str(tmp_path / "no-student")})  # fails only when the run loads it
    out = tmp_path / "out"
    shutil.copytree(reference["out"] / "fixed", out / "fixed")  # finished: never submitted
    registry = load_registry()
    suite = plan([folder], seeds=2, output=out, registry=registry)
    options = launcher_options({"name": "slurm", "executor": "local"})
    _, ids = submit(suite, unfinished(suite), make_launcher(options, out), options, registry=registry, console=Console(quiet=True))
    assert sorted(ids) == ["broken/seed-0", "broken/seed-1", "heuristic/seed-0", "heuristic/seed-1"]
    result = suite_cmd(folder, out)  # the manifest names the launcher
    assert result.exit_code == 1, result.output + repr(result.exception)
    # every job is followed, none submitted twice; a job that ended before the follow (a fast machine) is a finished
    # run by then, skipped like fixed's two
    followed = int(re.search(r"following (\d+) job\(s\) submitted earlier", result.output).group(1))
    skipped = int(re.search(r"(\d+) finished run\(s\) skipped", result.output).group(1))
    assert followed >= 2 and followed + skipped - 2 == 4, result.output  # the broken runs fail only once followed
    assert "submitted" not in result.output.replace("submitted earlier", "")
    assert "broken seed 0 failed" in result.output and "no-student" in result.output
    assert "last lines:" in result.output  # the log's tail, under the error
    state = json.loads((out / "suite.json").read_text())
    assert "no-student" in state["errors"]["broken/seed-0"] and "jobs" not in state
    for rel in ("heuristic/seed-0", "heuristic/seed-1"):
        assert results(out / rel, out) == results(reference["out"] / rel, reference["out"])
    status = suite_cmd(folder, out, "--status")
    assert status.output.count("│ failed") == 2 and status.output.count("│ done") == 4


def test_the_sbatch_lines_of_the_paper_suite_come_from_its_configs_and_the_launcher_section(tmp_path, monkeypatch):
    submitit = pytest.importorskip("submitit")
    from submitit.slurm.slurm import SlurmExecutor, _make_sbatch_string

    from envengineer.plugins.suite.launch.base import launcher_options
    from envengineer.registry import load_registry
    from envengineer.plugins.suite.tables import plan
    from envengineer.plugins.suite.launch.jobs import run_resources
    from envengineer.plugins.suite.launch.slurm import sbatch_parameters

    monkeypatch.chdir(REPO)
    registry = load_registry()
    suite = plan(["examples/paper"], seeds=1, output=tmp_path / "out", only="v6", registry=registry)
    section = {"name": "slurm", "partition": "h100", "time": 600, "setup": ["source .venv/bin/activate"], "sbatch": {"qos": "high"}}
    options = launcher_options(section, {"partition": None, "account": "rl-lab"})  # a command-line option on top; None: not given
    run = suite.runs[0]
    resources = run_resources(run, registry, options)
    from envengineer.loop.runconfig import resolve

    trainer = resolve(run.config, registry).trainer.options  # the verl preset paper-4xh100
    assert (resources.gpus_per_node, resources.nodes) == (trainer.n_gpus_per_node, trainer.nnodes) == (4, 1)
    params = sbatch_parameters(resources, options, "v6-seed-0")
    assert set(params) <= SlurmExecutor._valid_parameters()  # what submitit's SlurmExecutor.update_parameters accepts
    script = _make_sbatch_string(command="python -m submitit.core._submit x", folder=tmp_path / "sub", **params)
    for line in ("#SBATCH --gpus-per-node=4", "#SBATCH --nodes=1", "#SBATCH --ntasks-per-node=1", "#SBATCH --cpus-per-task=5",
                 "#SBATCH --partition=h100", "#SBATCH --time=600", "#SBATCH --account=rl-lab", "#SBATCH --qos=high",
                 "#SBATCH --job-name=v6-seed-0", "source .venv/bin/activate"):
        assert line in script, line
    cpu = sbatch_parameters(run_resources(run, registry, launcher_options(section, {"name": "slurm"}).model_copy(update={"gpus_per_node": 0, "cpus": 2})), options, "x")
    assert "gpus_per_node" not in cpu and cpu["cpus_per_task"] == 2
    assert submitit.__version__


def test_a_bad_launcher_section_is_named_and_jobs_is_for_the_local_launcher(tmp_path):
    folder = write_suite(tmp_path / "s", launcher={"name": "pbs"})
    result = suite_cmd(folder, tmp_path / "out")
    assert result.exit_code != 0 and "suite.yaml: launcher.name" in str(result.exception)
    folder = write_suite(tmp_path / "t", launcher={"name": "slurm", "walltime": 5})
    result = suite_cmd(folder, tmp_path / "out")
    assert "launcher.walltime" in str(result.exception)
    folder = write_suite(tmp_path / "u")
    result = suite_cmd(folder, tmp_path / "out", "--launcher", "slurm", "--jobs", "2")
    assert result.exit_code != 0 and "--jobs 2: for --launcher local" in str(result.exception)
    assert not (tmp_path / "out").exists()
    # a folder of configs has no manifest: its settings come from a file; the command line wins over both
    settings = tmp_path / "slurm.yaml"
    settings.write_text("name: slurm\npartition: h100\nsbatch: {qos: high}\nwalltime: 5\n")
    result = suite_cmd(folder, tmp_path / "out", "--launcher-file", str(settings))
    assert "slurm.yaml: launcher.walltime: Extra inputs are not permitted" in str(result.exception)
    from envengineer.plugins.suite.launch.base import suite_launcher
    from envengineer.plugins.suite.manifest import read_entries

    settings.write_text("name: slurm\npartition: h100\nsbatch: {qos: high}\n")
    plain, ray, slurm = (read_entries([write_suite(tmp_path / n, launcher=section)]) for n, section in
                         (("p", None), ("r", {"name": "ray"}), ("s", {"name": "slurm"})))
    options = suite_launcher(plain + ray, settings, {"partition": "a100", "time": None})
    assert (options.name, options.partition, options.sbatch, options.time) == ("slurm", "a100", {"qos": "high"}, 24 * 60)
    assert suite_launcher(plain + ray).name == "ray"  # the one manifest that has a section
    with pytest.raises(Exception, match="set different launcher sections; give the one to use with --launcher-file"):
        suite_launcher(plain + ray + slurm)


# ------------------------------------------------------------------ pieces: the worker's start, Slurm's states, resources


def test_a_cluster_job_starts_in_the_suites_folder_with_its_variables_and_notes_its_node(tmp_path, monkeypatch):
    import os
    import socket

    from envengineer.plugins.suite import worker as suite_worker

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.chdir(tmp_path.parent)
    where = tmp_path / "seed-0.node.json"
    suite_worker._started({"cwd": str(tmp_path), "env": {"RAY_ADDRESS": "local"}, "where": str(where)})
    try:
        assert Path.cwd() == tmp_path and os.environ["RAY_ADDRESS"] == "local"
        assert json.loads(where.read_text()) == {"host": socket.gethostname(), "pid": os.getpid(), "ray_address": "local"}
    finally:
        os.environ.pop("RAY_ADDRESS", None)


def test_slurm_states_map_to_the_suites_and_without_srun_the_error_says_what_to_do(tmp_path, monkeypatch):
    """sacct cannot run here: submitit's SlurmJob is replaced by one that reports a given state."""
    submitit = pytest.importorskip("submitit")
    from envengineer.components import Resources
    from envengineer.errors import EnvEngineerError
    from envengineer.plugins.suite.launch.base import ENDED, PENDING, RUNNING, UNKNOWN, launcher_options
    from envengineer.plugins.suite.launch.slurm import SlurmLauncher

    launcher = SlurmLauncher(launcher_options({"name": "slurm"}), tmp_path)
    for state, expected in (("PENDING", PENDING), ("REQUEUED", PENDING), ("RUNNING", RUNNING), ("COMPLETING", RUNNING),
                            ("COMPLETED", ENDED), ("FAILED", ENDED), ("TIMEOUT", ENDED), ("OUT_OF_MEMORY", ENDED),
                            ("CANCELLED by 1234", ENDED), ("NODE_FAIL", ENDED), ("UNKNOWN", UNKNOWN)):
        monkeypatch.setattr(submitit, "SlurmJob", lambda folder, job_id, s=state: type("Job", (), {"state": s})())
        assert launcher.state("42") == expected, state
    if shutil.which("srun") is None:
        with pytest.raises(EnvEngineerError, match="executor: local runs the jobs on this machine"):
            launcher.executor(Resources(), "x")


def test_a_runs_resources_are_the_larger_of_its_trainers_and_policys_and_the_launcher_overrides_them():
    from envengineer.components import Resources
    from envengineer.registry import load_registry

    registry = load_registry()
    trl = registry.create("trainer", "trl", {"use_cpu": False, "threads": 3}).resources()
    vllm = registry.create("policy", "vllm", {"path": "m", "tensor_parallel_size": 2}).resources()
    assert trl == Resources(gpus_per_node=1, nodes=1, cpus=3) and vllm == Resources(gpus_per_node=2)
    assert trl.union(vllm) == Resources(gpus_per_node=2, nodes=1, cpus=3)
    assert registry.create("trainer", "trl", {}).resources() == Resources()  # use_cpu auto: decided on the node
    assert registry.create("trainer", "trl", {"generation": "vllm"}).resources().gpus_per_node == 1  # colocated vLLM: a GPU
    verl = registry.create("trainer", "verl", {"nnodes": 2, "n_gpus_per_node": 8, "train_batch_size": 16, "ppo_mini_batch_size": 16,
                                               "num_generations": 8}).resources()
    assert verl == Resources(gpus_per_node=8, nodes=2, cpus=9)


def test_a_finished_run_whose_config_leaves_validation_to_the_task_counts_as_finished(tmp_path):
    """The loop records the validation set the task declares in run.yaml; the suite compares with that."""
    from envengineer.plugins.suite.tables import plan

    folder = write_suite(tmp_path / "s")
    base = yaml.safe_load((folder / "base.yaml").read_text())
    base["eval"].pop("validation")
    (folder / "base.yaml").write_text(yaml.safe_dump(base, sort_keys=False))
    out = tmp_path / "out"
    result = runner.invoke(app, ["suite", str(folder), "--seeds", "1", "--only", "fixed", "--output", str(out)], env=ENV)
    assert result.exit_code == 0, result.output
    assert yaml.safe_load((out / "fixed/seed-0/run.yaml").read_text())["eval"]["validation"] == "grid-walk-val"
    assert [run.status for run in plan([folder], seeds=1, output=out, only="fixed").runs] == ["finished"]
    status = runner.invoke(app, ["suite", str(folder), "--seeds", "1", "--only", "fixed", "--output", str(out), "--status"], env=ENV)
    assert "│ done" in status.output
