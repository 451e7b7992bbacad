"""trainsnap.DistributedCheckpointer over torch.distributed (Gloo, CPU): two
rank processes (tests/python/ddp_ranks.py) joined through a file://
rendezvous. A DDP job captures, restores, trains on bitwise, rolls back and
fails all-or-nothing; a ZeroRedundancyOptimizer job restores its shards; the
run directory then loads for evaluation and passes `trainsnap verify`."""

import json
import os
import subprocess
import sys

import torch
from torch import nn

import trainsnap
from kit import HERE, first_difference, python_env

RANKS = os.path.join(HERE, "ddp_ranks.py")
CLI = os.environ.get("TRAINSNAP_CLI", "trainsnap")
# The replica check, on by default, at the capture after rank 1's weight drifted.
DRIFT = ("InvalidArgument: capture step 4: verify_replicas: replicated tensor `0.weight` role param differs between "
         "ranks: rank 1 holds other bytes than rank 0")


def run_ranks(scenario, directory, world=2, timeout=180):
    """Every rank's checks; fails with the ranks' tracebacks."""
    children = [subprocess.Popen([sys.executable, RANKS, scenario, str(rank), str(world), str(directory)],
                                 env=python_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                for rank in range(world)]
    outputs = []
    try:
        for child in children:
            outputs.append(child.communicate(timeout=timeout)[0])
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    results = []
    for rank, child in enumerate(children):
        path = os.path.join(directory, f"result-{rank}.json")
        checks = json.load(open(path))["checks"] if os.path.exists(path) else {}
        assert child.returncode == 0 and "traceback" not in checks, \
            f"rank {rank} exited {child.returncode}:\n{checks.get('traceback', '')}\n{outputs[rank]}"
        results.append(checks)
    return results


def test_ddp_capture_restore_rollback_and_all_or_nothing_errors(tmp_path):
    results = run_ranks("api", tmp_path)
    mismatch = ("ContractMismatch: rank 1: restore step 3: extra state `python:optimizer`: the snapshot holds a "
                "torch.optim.adamw.AdamW, the target is a torch.optim.adam.Adam")
    for rank, checks in enumerate(results):
        assert (checks["rank"], checks["world_size"]) == (rank, 2)
        assert checks["handle"] == [None, True, 2]
        assert checks["steps"] == [1, 2, 3, 4]
        assert checks["restore_3"] == "" and checks["train_on"] == ""
        assert checks["mismatch"] == mismatch and checks["mismatch_unchanged"] == ""
        assert checks["after_rollback"] == [1, 2] and checks["recaptured_3"] == ""
        assert checks["latest"] == 3
        assert checks["misuse"] == [
            "InvalidArgument: a step is an integer, not bool True",
            "NotSupported: DistributedCheckpointer.restore: partial is a Checkpointer option only"]
    assert results[0]["timeout"] == "TimeoutError"  # done only once rank 1 captured too
    for checks in results:
        assert checks["stride_misuse"] == [
            f"InvalidArgument: replica_check_stride must be an integer from 1 to 2**31 - 1, not {s}"
            for s in ("0", "2.5", "True")]
        assert checks["drift"] == DRIFT
        assert checks["after_drift"] == [1, 2, 3]

    run = str(tmp_path / "run")
    model = nn.Sequential(nn.Linear(6, 12), nn.ReLU(), nn.Dropout(0.2), nn.Linear(12, 2))
    assert trainsnap.load(run, model) == 3  # the latest global step; replicated tensors from every rank's store
    assert first_difference(dict(model.state_dict()), torch.load(str(tmp_path / "model-3.pt"))) == ""
    verify = subprocess.run([CLI, "verify", run], capture_output=True, text=True)
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_zero_redundancy_optimizer_shards_restore_with_optimizer_replicated_false(tmp_path):
    results = run_ranks("zero", tmp_path)
    for checks in results:
        assert checks["restore_2"] == "" and checks["train_on_3"] == "" and checks["train_on_4"] == ""
        assert checks["layout"] == ("ContractMismatch: rank 0: restore step 2: optimizer layout: step 2 was captured "
                                    "with a sharded optimizer, DistributedOptions::optimizer_replicated is true")
    # Each rank's local optimizer holds the state of its own parameters only.
    assert [c["shard_sizes"][0] for c in results] != [4, 4] and sum(c["shard_sizes"][0] for c in results) == 4
