"""Runs on several nodes under `envengineer suite --launcher slurm|ray`.

Slurm: the job's tasks are two real processes on this machine with the Slurm variables submitit's
JobEnvironment reads (ranks 0 and 1 of a 2-node job on node-a and node-b); rank 0 starts a real
Ray head, rank 1 a real Ray node that joins it (no GPUs: a custom resource `fake_gpu` stands in
for them), the run's worker sees the head through RAY_ADDRESS, and every Ray process ends with the
job. Ray: a `ray.cluster_utils.Cluster` of two nodes (logical GPUs), where a 2-node run's driver
attaches to the same cluster and sees both nodes, and a 3-node run waits until a third joins.
"""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

ray = pytest.importorskip("ray")
pytest.importorskip("submitit")

TEMP_PREFIX = "/tmp/envengineer-ray-"
SPEC = ("RayNodes(nodes=2, per_node=1, resource='fake_gpu', num_gpus=0, num_cpus=1, resources={{'fake_gpu': 1}}, "
        "join_timeout_s={timeout}, stop_timeout_s=30, poll_s=0.2)")
RANK = "import sys; from envengineer.plugins.suite.launch.nodes import RayNodes, main; sys.exit(main(sys.argv[1], {spec}))"


def one_run(tmp_path: Path, env: dict[str, str]):
    """A one-round run of the simulated student in ``tmp_path``, as the suite plans it, and its job file (what `submit` writes)."""
    from envengineer.fileio import write_json
    from envengineer.registry import load_registry
    from envengineer.plugins.suite.tables import plan

    folder = tmp_path / "suite"
    folder.mkdir(parents=True)
    base = {"name": "sim", "task": {"name": "grid-walk"}, "rounds": 1, "budget": 24, "engineer": "fixed",
            "policy": "simulated", "trainer": "simulated", "eval": {"validation": "grid-walk-val", "limit": 20}}
    (folder / "base.yaml").write_text(yaml.safe_dump(base))
    (folder / "suite.yaml").write_text(yaml.safe_dump({"base": "base.yaml", "table": "sim", "arms": {"fixed": None}}))
    suite = plan([folder], seeds=1, output=tmp_path / "out", registry=load_registry())
    entry, run = suite.entries[0], suite.runs[0]
    stem = run.run_dir.parent / run.run_dir.name
    job = Path(f"{stem}.job.json")
    job.parent.mkdir(parents=True, exist_ok=True)
    write_json(job, {"config": run.config.model_dump(mode="json"), "log": f"{stem}.log", "result": f"{stem}.result.json",
                     "where": f"{stem}.node.json", "env": env, "cwd": str(Path.cwd())})
    return entry, run, job


def rank(job: Path, rank: int, timeout: float, nodelist: str = "node-a,node-b") -> subprocess.Popen:
    """One task of a 2-node Slurm job (job id 4242), as srun starts it: the variables submitit's SlurmJobEnvironment reads."""
    env = {**os.environ, "SUBMITIT_EXECUTOR": "slurm", "SLURM_JOB_ID": "4242", "SLURM_JOB_NUM_NODES": "2", "SLURM_NTASKS": "2",
           "SLURM_JOB_NODELIST": nodelist, "SLURM_PROCID": str(rank), "SLURM_NODEID": str(rank), "SLURM_LOCALID": "0",
           "RAY_USAGE_STATS_ENABLED": "0", "ENVENGINEER_LOAD_PLUGINS": ""}
    env.pop("RAY_ADDRESS", None)
    code = RANK.format(spec=SPEC.format(timeout=timeout))
    return subprocess.Popen([sys.executable, "-c", code, str(job)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def ray_dirs() -> set[str]:
    return {str(p) for p in Path("/tmp").glob("envengineer-ray-*")}


def ray_processes(dirs: set[str]) -> list[str]:
    """Processes of this machine that belong to a Ray node whose files are in ``dirs`` (gcs_server, raylet, agents,
    workers: each names its session folder on its command line), read from /proc."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            line = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (proc / "stat").read_text().rsplit(")", 1)[-1].split()[0]
        except OSError:
            continue  # ended meanwhile
        if state != "Z" and any(d in line for d in dirs):
            found.append(f"{proc.name}: {line[:120]}")
    return found


@pytest.fixture
def our_ray_dirs():
    """The Ray folders this test's nodes make; afterwards none of their processes may be left (they are ended if so)."""
    before = ray_dirs()
    made: set[str] = set()
    yield made
    made |= ray_dirs() - before
    left = ray_processes(made)
    for line in left:
        try:
            os.kill(int(line.split(":")[0]), 9)
        except ProcessLookupError:
            pass
    for folder in made:
        shutil.rmtree(folder, ignore_errors=True)
    assert not left, left


@pytest.mark.long  # the long tier (docs/docs-tests.md#the-two-tiers)
@pytest.mark.parametrize("token", [True, False], ids=["ray-token", "no-ray-token"])
def test_a_two_node_slurm_job_makes_a_ray_cluster_runs_the_run_on_it_and_leaves_no_ray_behind(tmp_path, our_ray_dirs, monkeypatch, token):
    import secrets

    from envengineer.plugins.suite.launch.nodes import _listening, head_file

    home = tmp_path / "home"  # the nodes' shared home: with Ray's token in it, or none (Ray's authentication off)
    (home / ".ray").mkdir(parents=True)
    if token:
        (home / ".ray" / "auth_token").write_text(secrets.token_hex(32))
    monkeypatch.setenv("HOME", str(home))
    for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(name, raising=False)
    _, run, job = one_run(tmp_path, env={})  # a multi-node job's file sets no RAY_ADDRESS: the job's cluster does
    handoff = head_file(job)
    handoff.write_text(json.dumps({"address": "10.0.0.9:1", "job": "4241"}))  # an earlier job's: never read as this one's
    before = ray_dirs()
    ranks = [rank(job, 0, timeout=90), rank(job, 1, timeout=90)]
    outputs = [p.communicate(timeout=240)[0] for p in ranks]
    assert [p.returncode for p in ranks] == [0, 0], "\n".join(o[-3000:] for o in outputs)
    our_ray_dirs.update(ray_dirs() - before)
    assert len(our_ray_dirs) == 2  # one Ray node per rank, each in a folder of its own
    assert ("Token authentication is disabled" in outputs[0]) is not token  # Ray's own warning when it starts without

    assert json.loads(Path(f"{job}".replace(".job.json", ".result.json")).read_text()) == {"ok": True}  # rank 0 recorded it
    assert (run.run_dir / "run.yaml").is_file()
    head = json.loads(handoff.read_text())
    assert head["job"] == "4242" and head["stop"] is True and head["address"].rsplit(":", 1)[1].isdigit()
    where = json.loads(Path(str(job).replace(".job.json", ".node.json")).read_text())
    assert where["ray_address"] == head["address"]  # the run (and the verl it would start) attached to the job's head
    log = Path(str(job).replace(".job.json", ".log")).read_text()
    assert f"job 4242: Ray cluster at {head['address']}, 2 node(s): node-a, node-b" in log  # rank 1 joined under its Slurm host name

    assert not ray_processes(our_ray_dirs)  # every rank's Ray ended: no raylet, GCS or worker is left
    host, port = head["address"].rsplit(":", 1)
    assert not _listening(host, port)  # nothing answers at the head's address any more (`ray status` would wait 40 s to say so)


@pytest.mark.long  # the long tier (docs/docs-tests.md#the-two-tiers)
def test_rank_0_names_the_hosts_that_did_not_join_and_records_the_failure(tmp_path, our_ray_dirs):
    _, run, job = one_run(tmp_path, env={})
    before = ray_dirs()
    alone = rank(job, 0, timeout=4)  # rank 1 (node-b) never starts
    seen: set[str] = set()
    while alone.poll() is None:  # while the head waits, its processes are there to be seen
        seen |= {line.split(":")[0] for line in ray_processes(ray_dirs() - before)}
        time.sleep(0.5)
    output = alone.communicate(timeout=120)[0]
    assert len(seen) >= 2, seen  # the head's gcs_server and raylet at least: what the checks below look for
    assert alone.returncode == 1, output[-3000:]
    our_ray_dirs.update(ray_dirs() - before)
    result = json.loads(Path(str(job).replace(".job.json", ".result.json")).read_text())
    assert result["ok"] is False
    assert "did not form within 4s: 1 of 2 node(s) joined with 1 fake_gpu each; not joined: node-b" in result["error"]
    assert result["error"] in Path(str(job).replace(".job.json", ".log")).read_text()
    assert not (run.run_dir / "run.yaml").exists()  # the run never started
    assert not ray_processes(our_ray_dirs)  # the head stopped all the same


CHECK = """
import json, os, sys
from pathlib import Path
from envengineer.fileio import write_json
from envengineer.registry import load_registry
from envengineer.plugins.suite.launch.nodes import RayNodes, _auth_env, await_cluster, free_port, head_args, head_file, node_ip, start_ray, stop_cluster
job, model, out = map(Path, sys.argv[1:4])
spec = {spec}
_auth_env()  # as rank 0 does, before Ray is imported
ip, port = node_ip(), free_port()
address, handoff = f"{{ip}}:{{port}}", head_file(job)
head = start_ray(head_args(port), spec, "node-a", ip)
try:
    joined = await_cluster(address, spec, ["node-a", "node-b"], head, lambda: write_json(handoff, {{"address": address, "job": "4242"}}))
    os.environ["RAY_ADDRESS"] = address  # as rank 0 sets it for the run
    trainer = load_registry().create("trainer", "verl", {{"nnodes": 2, "n_gpus_per_node": 1, "train_batch_size": 8,
                                                         "ppo_mini_batch_size": 8, "num_generations": 4}})
    checked = trainer.check_nodes(model, out)  # ray_address unset: "auto", which is RAY_ADDRESS
finally:
    stop_cluster(handoff, address, "4242", head, spec)
print(json.dumps({{"joined": joined, "checked": checked}}))
"""


@pytest.mark.long  # the long tier (docs/docs-tests.md#the-two-tiers)
def test_verls_node_check_sees_every_node_of_the_jobs_cluster(tmp_path, our_ray_dirs):
    """The verl trainer's check before a multi-node round, inside the job: rank 0's functions with the check between
    the cluster's forming and its end (where the run would be), rank 1 as in a job."""
    _, _, job = one_run(tmp_path, env={})
    model, out = tmp_path / "model", tmp_path / "round"
    model.mkdir()
    out.mkdir()
    (model / "config.json").write_text("{}")
    before = ray_dirs()
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    head = subprocess.Popen([sys.executable, "-c", CHECK.format(spec=SPEC.format(timeout=90)), str(job), str(model), str(out)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    other = rank(job, 1, timeout=90)
    outputs = [head.communicate(timeout=300)[0], other.communicate(timeout=120)[0]]
    our_ray_dirs.update(ray_dirs() - before)
    assert (head.returncode, other.returncode) == (0, 0), "\n".join(o[-3000:] for o in outputs)
    found = json.loads(outputs[0].strip().splitlines()[-1])
    assert found["joined"] == ["node-a", "node-b"] and len(found["checked"]) == 2  # every node has the model, the folder, the packages
    assert not ray_processes(our_ray_dirs)


def test_a_two_node_slurm_job_asks_for_two_nodes_one_task_each_and_starts_the_ray_bootstrap(tmp_path, monkeypatch):
    from submitit.slurm.slurm import SlurmExecutor, _make_sbatch_string

    from envengineer.plugins.suite.launch.base import Job, launcher_options
    from envengineer.registry import load_registry
    from envengineer.loop.runconfig import parse_run_config
    from envengineer.plugins.suite.launch.jobs import run_resources
    from envengineer.plugins.suite.launch.nodes import RayNodes, main
    from envengineer.plugins.suite.launch.slurm import SlurmLauncher, job_call, sbatch_parameters

    registry = load_registry()
    entry, run, _ = one_run(tmp_path, env={})
    verl = {"name": "verl", "nnodes": 2, "n_gpus_per_node": 4, "preset": "paper-4xh100"}
    run.config = parse_run_config({**run.config.model_dump(mode="json"), "trainer": verl}, "x", registry)
    options = launcher_options({"name": "slurm", "partition": "h100"})
    resources = run_resources(run, registry, options)
    params = sbatch_parameters(resources, options, "v6-seed-0")
    assert set(params) <= SlurmExecutor._valid_parameters()
    script = _make_sbatch_string(command="python -m submitit.core._submit x", folder=tmp_path / "sub", **params)
    for line in ("#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1", "#SBATCH --gpus-per-node=4", "#SBATCH --cpus-per-task=5"):
        assert line in script, line
    job = Job(entry, run, "fixed/seed-0", resources)
    function, file, spec = job_call(job)
    assert function is main and file.endswith("seed-0.job.json") and spec == RayNodes(nodes=2, per_node=4, resource="GPU")
    launcher = SlurmLauncher(options, tmp_path / "out")
    assert launcher.job_env(resources) == {}  # no RAY_ADDRESS=local: rank 0 sets the job's head
    assert launcher.job_env(resources.__class__(gpus_per_node=4)) == {"RAY_ADDRESS": "local"}


# ------------------------------------------------------------------ ray: a cluster of two nodes


@pytest.fixture
def two_nodes():
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 1, "include_dashboard": False})
    cluster.add_node(num_cpus=1, num_gpus=1)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False)
    try:
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


def follow(launcher, job_id: str, timeout: float = 120) -> None:
    from envengineer.plugins.suite.launch.base import ENDED

    deadline = time.monotonic() + timeout
    try:
        while launcher.state(job_id) != ENDED:
            assert time.monotonic() < deadline, f"job {job_id} did not end"
            time.sleep(0.5)
    finally:
        launcher.release(job_id)


def outcome(job_file: Path, suffix: str) -> dict:
    return json.loads(Path(str(job_file).replace(".job.json", suffix)).read_text())


@pytest.mark.long  # the long tier (docs/docs-tests.md#the-two-tiers)
def test_a_two_node_run_on_ray_attaches_to_the_cluster_and_a_three_node_run_waits_for_a_third(tmp_path, two_nodes):
    from envengineer.components import Resources
    from envengineer.plugins.suite.launch.base import PENDING, Job, launcher_options
    from envengineer.plugins.suite.launch.ray import RayLauncher

    launcher = RayLauncher(launcher_options({"name": "ray", "address": two_nodes.address}))
    two, three = Resources(gpus_per_node=1, nodes=2, cpus=2), Resources(gpus_per_node=1, nodes=3, cpus=2)
    assert launcher.fits(two) is None
    assert launcher.job_env(two) == {"RAY_ADDRESS": launcher.address}

    entry, run, job_file = one_run(tmp_path / "two", env=launcher.job_env(two))
    [job_id] = launcher.submit([Job(entry, run, "fixed/seed-0", two)])
    follow(launcher, job_id)
    assert outcome(job_file, ".result.json") == {"ok": True}
    where = outcome(job_file, ".node.json")
    assert where["ray_address"] == launcher.address and launcher.address.rsplit(":", 1)[1] == two_nodes.address.rsplit(":", 1)[1]
    # the address the run was given is this cluster's, and verl's node check through it sees both nodes
    probe = subprocess.run([sys.executable, "-m", "envengineer.plugins.trainers.verl_probe", "--nodes", "auto"],
                           env={**os.environ, "RAY_ADDRESS": where["ray_address"]}, capture_output=True, text=True, timeout=300)
    assert probe.returncode == 0, probe.stderr[-2000:]
    assert len(json.loads(probe.stdout.strip().splitlines()[-1])) == 2

    assert "the Ray cluster has 2 alive node(s) with 1 GPU(s) and the run trains on 3" in launcher.fits(three)
    entry, run, job_file = one_run(tmp_path / "three", env=launcher.job_env(three))
    [job_id] = launcher.submit([Job(entry, run, "fixed/seed-0", three)])
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        assert launcher.state(job_id) == PENDING  # placed (one CPU, no GPU) but waiting for a third node
        time.sleep(0.5)
    assert not Path(str(job_file).replace(".job.json", ".node.json")).exists()  # the run has not started
    two_nodes.add_node(num_cpus=1, num_gpus=1)
    follow(launcher, job_id)
    assert outcome(job_file, ".result.json") == {"ok": True}
