"""Two processes with torch.distributed (gloo on 127.0.0.1): each iterates its
shard; an all_gather of the sample indices shows every sample exactly once per
epoch, plus the DistributedSampler padding."""

import collections
import json
import os
import socket
import subprocess
import sys

import pytest

from conftest import DEMO_COUNT, LIB, REPO, require_lib

require_lib("dlc_loader_open")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(store, tmp_path, world, drop_last):
    port = free_port()
    env = dict(os.environ, DLCACHE_LIB=LIB,
               PYTHONPATH=os.pathsep.join([os.path.join(REPO, "python"),
                                           os.environ.get("PYTHONPATH", "")]))
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    worker = os.path.join(os.path.dirname(__file__), "dist_worker.py")
    procs, outs = [], []
    for r in range(world):
        out = tmp_path / ("rank%d.json" % r)
        outs.append(out)
        procs.append(subprocess.Popen([sys.executable, worker, str(store), str(r), str(world),
                                       str(port), str(out), "1" if drop_last else "0"],
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    logs = []
    for p in procs:
        try:
            logs.append(p.communicate(timeout=300)[0].decode(errors="replace"))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail("distributed workers did not finish in 300 s")
    for r, p in enumerate(procs):
        assert p.returncode == 0, "rank %d failed:\n%s" % (r, logs[r])
    return [json.loads(o.read_text()) for o in outs]


@pytest.mark.parametrize("drop_last", [False, True])
def test_two_ranks_cover_every_sample_once(store, tmp_path, drop_last):
    world = 2
    res = run_ranks(store, tmp_path, world, drop_last)
    for r, d in enumerate(res):
        assert (d["loader_rank"], d["loader_world"]) == (r, world), \
            "rank and world size come from torch.distributed"
    per_rank = DEMO_COUNT // world if drop_last else -(-DEMO_COUNT // world)
    orders = []
    for epoch in range(2):
        gathered = res[0]["epochs"][epoch]
        assert gathered == res[1]["epochs"][epoch], "all ranks see the same gather"
        shares = gathered
        if drop_last:
            shares = [s[:len(s) - len(s) % 16] for s in shares]  # short last batch dropped
            assert all(len(s) == (per_rank // 16) * 16 for s in shares)
        else:
            assert all(len(s) == per_rank for s in shares)
        flat = [i for s in shares for i in s]
        counts = collections.Counter(flat)
        pad = per_rank * world - DEMO_COUNT
        if drop_last:
            assert all(c == 1 for c in counts.values()), "no sample twice with drop_last"
        else:
            assert set(counts) == set(range(DEMO_COUNT)), "every sample once per epoch"
            assert sum(c - 1 for c in counts.values()) == pad, "plus the padding"
        # DistributedSampler's interleaving: global position p goes to rank p % world.
        glob = [shares[p % world][p // world] for p in range(min(len(s) for s in shares) * world)]
        assert len(set(glob[:DEMO_COUNT if not drop_last else len(glob)])) == \
            len(glob[:DEMO_COUNT if not drop_last else len(glob)])
        orders.append(glob)
    assert orders[0] != orders[1], "set_epoch changes the order"
