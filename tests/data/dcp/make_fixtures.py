"""Regenerates the DCP .metadata fixtures of tests/test_dcp.cpp (run by hand; needs torch).

single.metadata: dcp.save of a nested state dict in one process (float32, bfloat16, int64, an int,
a BytesIO, a list). world2.metadata: dcp.save by two gloo ranks of DTensors sharded on dim 0 and 1, a
replicated int64 tensor and an int. The others are world2.metadata with one thing damaged, pickled
the way FileSystemWriter pickles it. test_dcp.cpp creates the .distcp files (their sizes only
matter: single __0_0.distcp 8578 bytes; world2 __0_0 3154, __1_0 5992).
"""
import copy, io, os, pickle, shutil, sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp
from torch.distributed.checkpoint.metadata import ChunkStorageMetadata, MetadataIndex

HERE = os.path.dirname(os.path.abspath(__file__))


def save_single(out):
    sd = {"w": torch.arange(6, dtype=torch.float32).reshape(2, 3), "b": torch.ones(3, dtype=torch.bfloat16),
          "step": 7, "extra": {"blob": io.BytesIO(b"hello"), "lst": [1, 2]},
          "i": torch.tensor([1, 2, 3], dtype=torch.int64)}
    dcp.save(sd, checkpoint_id=out)


def world_rank(rank, world, out, port):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    mesh = init_device_mesh("cpu", (world,))
    a = torch.arange(20, dtype=torch.float32).reshape(5, 4)
    b = torch.arange(12, dtype=torch.float32).reshape(2, 6).to(torch.bfloat16)
    sd = {"a": distribute_tensor(a, mesh, [Shard(0)]), "b": distribute_tensor(b, mesh, [Shard(1)]),
          "r": torch.arange(4, dtype=torch.int64), "step": 3}
    dcp.save(sd, checkpoint_id=out)
    dist.destroy_process_group()


def damaged(meta, name, change):
    m = copy.deepcopy(meta)
    change(m)
    with open(os.path.join(HERE, name + ".metadata"), "wb") as f:
        pickle.dump(m, f)


def key(m, fqn, offsets):
    return next(k for k in m.storage_data if k.fqn == fqn and k.offset == torch.Size(offsets))


def main():
    for name, make in (("single", lambda d: save_single(d)),
                       ("world2", lambda d: mp.spawn(world_rank, args=(2, d, 29541), nprocs=2))):
        d = "/tmp/ckpt-dcp-fixture-" + name
        shutil.rmtree(d, ignore_errors=True)
        make(d)
        shutil.copy(os.path.join(d, ".metadata"), os.path.join(HERE, name + ".metadata"))
    with open(os.path.join(HERE, "world2.metadata"), "rb") as f:
        meta = pickle.load(f)

    def overlap(m):  # a's second item starts one byte early in __1_0.distcp
        k = key(m, "a", [3, 0])
        m.storage_data[k].offset -= 1

    def uncovered(m):  # a's second chunk holds one row of the two it should
        m.state_dict_metadata["a"].chunks[1].sizes = torch.Size([1, 4])

    def outside(m):  # a's second chunk runs past row 5
        m.state_dict_metadata["a"].chunks[1].sizes = torch.Size([3, 4])

    def chunks_overlap(m):  # a's second chunk starts at row 2, sharing row 2 with the first
        m.state_dict_metadata["a"].chunks[1] = ChunkStorageMetadata(torch.Size([2, 0]), torch.Size([3, 4]))
        k = key(m, "a", [3, 0])
        m.storage_data[MetadataIndex("a", [2, 0], 1)] = m.storage_data.pop(k)

    def dotdot(m):  # every item of rank 1 names a file above the directory
        for v in m.storage_data.values():
            if v.relative_path == "__1_0.distcp":
                v.relative_path = "../__1_0.distcp"

    def no_storage(m):  # b's second chunk has no storage entry
        del m.storage_data[key(m, "b", [0, 3])]

    for name, change in (("overlap", overlap), ("uncovered", uncovered), ("outside", outside),
                         ("chunks_overlap", chunks_overlap), ("dotdot", dotdot), ("no_storage", no_storage)):
        damaged(meta, "world2_" + name, change)


if __name__ == "__main__":
    main()
