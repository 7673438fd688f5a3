"""The multi-node check before a verl round, against a real local Ray cluster of two nodes.

``ray.cluster_utils.Cluster`` starts two raylets on this machine; the second one's environment puts a
folder holding another verl release (its ``dist-info``) first on ``PYTHONPATH``: a node whose Python
environment is not the launching node's, as a node with another install would be. The check runs one
task pinned to each node and must name that node.
"""

from __future__ import annotations

import sys

import pytest

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory):
    pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    site = tmp_path_factory.mktemp("other-site")
    (site / "verl-0.0.1.dist-info").mkdir()
    (site / "verl-0.0.1.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: verl\nVersion: 0.0.1\n")
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    other = cluster.add_node(num_cpus=1, env_vars={"PYTHONPATH": str(site)})
    try:
        yield cluster, other
    finally:
        cluster.shutdown()


def test_the_node_with_another_environment_is_named(two_nodes, tmp_path):
    from envengineer.plugins.trainers.verl_probe import node_problems, probe, probe_cluster

    cluster, other = two_nodes
    model = tmp_path / "model"
    model.mkdir()
    nodes = probe_cluster(sys.executable, cluster.address, [str(model), str(tmp_path / "absent")])
    assert len(nodes) == 2
    problems = node_problems(probe(sys.executable), nodes, nnodes=2)
    [bad] = [p for p in problems if "verl 0.0.1 (here 0.9.1)" in p]
    assert other.unique_id[:8] in bad  # the node is named by its address and id
    assert all(f"no {tmp_path / 'absent'}" in p for p in problems) and len(problems) == 2
    assert node_problems(probe(sys.executable), nodes, nnodes=3)[0] == "the Ray cluster has 2 alive node(s), trainer.verl.nnodes is 3"


def test_a_multi_node_round_stops_before_launch_naming_the_node(two_nodes, registry, tmp_path):
    """The trainer's own check: the model's config.json and a marker in the round's folder must be seen by every node."""
    from envengineer.errors import ConfigError

    cluster, other = two_nodes
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    trainer = registry.create("trainer", "verl", {"nnodes": 2, "n_gpus_per_node": 1, "train_batch_size": 8, "ppo_mini_batch_size": 8,
                                                  "num_generations": 4, "ray_address": cluster.address})
    out = tmp_path / "round"
    out.mkdir()
    with pytest.raises(ConfigError) as failed:
        trainer.check_nodes(model, out)
    message = str(failed.value)
    assert "the Ray cluster is not ready" in message and other.unique_id[:8] in message and "verl 0.0.1 (here 0.9.1)" in message
    assert "no " + str(model / "config.json") not in message  # the model is at the same path on both nodes
    assert not (out / ".node-check").exists()


def test_doctor_lists_a_running_clusters_nodes_without_starting_one(two_nodes):
    import ray

    from envengineer.plugins.trainers.verl_doctor import ray_check

    cluster, _ = two_nodes
    check = ray_check(sys.executable, ray.__version__, cluster.address, nnodes=2)
    assert check.status == "ok" and f"cluster at {cluster.address}, 2 alive node(s)" in check.detail
    assert check.detail.count("0 GPUs, 1 CPUs") == 2
    short = ray_check(sys.executable, ray.__version__, cluster.address, nnodes=3)
    assert short.status == "missing" and "2 alive node(s), nnodes is 3" in short.detail
