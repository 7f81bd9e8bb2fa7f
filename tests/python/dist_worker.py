"""One rank of tests/python/test_distributed.py: iterate this rank's shard of
two epochs and all_gather the sample indices over gloo. Rank and world size
reach dlcache.Loader only through torch.distributed (RANK/WORLD_SIZE are not
set in the environment)."""

import json
import sys

import torch
import torch.distributed as dist

import dlcache


def main():
    store, rank, world, port, out, drop_last = sys.argv[1:7]
    rank, world, drop_last = int(rank), int(world), drop_last == "1"
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%s" % port, rank=rank,
                            world_size=world)
    result = {"rank": rank, "epochs": []}
    with dlcache.Loader(store, batch_size=16, seed=4, crop=8, drop_last=drop_last,
                        return_indices=True, threads=1) as ld:
        result["loader_rank"], result["loader_world"] = ld.rank, ld.world_size
        result["len"] = len(ld)
        for epoch in range(2):
            ld.set_epoch(epoch)
            mine = torch.cat([idx.clone() for _, _, idx in ld])
            # Ranks have equal shares (padding), so plain all_gather works.
            n = torch.tensor([mine.numel()])
            sizes = [torch.zeros_like(n) for _ in range(world)]
            dist.all_gather(sizes, n)
            assert len({int(s) for s in sizes}) == 1, sizes
            parts = [torch.zeros_like(mine) for _ in range(world)]
            dist.all_gather(parts, mine)
            result["epochs"].append([p.tolist() for p in parts])
    dist.destroy_process_group()
    with open(out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
