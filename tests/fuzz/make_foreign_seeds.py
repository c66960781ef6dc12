#!/usr/bin/env python3
"""Writes the seeds of the foreign-format fuzz targets from files that the real writers produce
(issue 22 part 6; run by hand through `tools/fuzz.sh --make-seeds`, which passes the sidecar writer):

    make_foreign_seeds.py SEEDS_DIR SIDECAR_WRITER...

  pickle/    .metadata of torch.distributed.checkpoint.save (one process; two gloo ranks saving
             DTensors sharded on dim 0 and 1), the one-process Metadata pickled again at protocols 1
             and 2, and CPython pickles of plain values (every opcode family the decoder takes) at
             protocols 2 and 5, and at protocol 0 without str (whose UNICODE opcode spec/FOREIGN.md
             4.3 refuses) for the text INT, LONG, FLOAT, PUT, GET and GLOBAL.
  gguf/      files of gguf.GGUFWriter (llama.cpp's gguf-py): F32/F16, every metadata value type and
             string arrays, Q8_0/Q4_0 from gguf.quants, a custom alignment with integer tensors.
  hf_index/  *.safetensors.index.json written as transformers' save_pretrained writes them
             (json.dumps(index, indent=2, sort_keys=True) + newline; shards model-0000K-of-0000N),
             and as huggingface_hub's save_torch_state_dict does (user metadata beside total_size).
  sidecar/   SIDECAR_WRITER PATH run on a safetensors file of safetensors.torch.save_file, the
             Hugging Face set above, the first GGUF file and the one-process DCP checkpoint; it
             writes PATH.ckptsum (fuzz.sh passes make_seeds --write-sidecar, which calls the
             library's build_sidecar and write_sidecar at 4 KiB chunks, as ckpt-verify
             --write-sidecar --sidecar-chunk-size 4096 does).

Needs torch, safetensors, numpy and gguf. The files are written under a fixed scratch folder, so a
regeneration differs only where the writers put random ids (DCP's save_id).
"""
import io
import json
import os
import pickle
import shutil
import subprocess
import sys

import numpy as np
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp
from safetensors.torch import save_file
import gguf

# The writers the DCP fixtures and the GGUF interop test already use: one way to write each.
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "data", "dcp"))
sys.path.insert(0, os.path.join(HERE, "..", "interop"))
from make_fixtures import save_single, world_rank  # noqa: E402
from test_gguf_interop import write_gguf  # noqa: E402

SCRATCH = "/tmp/ckpt-foreign-seeds"


def save(folder, name, data):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data)


def read(path):
    with open(path, "rb") as f:
        return f.read()


# --- pickle: DCP metadata and plain CPython pickles.

def plain_values():
    shared = [1, 2]
    cycle = ["self"]
    cycle.append(cycle)
    return {
        "none": None, "flags": (True, False), "small": [0, 1, -1, 255, 256, 65535, 65536, -2**31, 2**31],
        "wide": [2**63 - 1, -2**63, 2**64, -2**70, 2**200], "floats": [0.5, -0.0, float("inf"), float("nan"), 1e-300],
        "text": "h\u00e9llo \u2603\n", "bytes": b"\x00\x01\xff", "bytearray": bytearray(b"abc"),
        "tuples": ((), (1,), (1, 2), (1, 2, 3), (1, 2, 3, 4)), "set": {1, 2}, "frozenset": frozenset(["a"]),
        "shared": (shared, shared), "cycle": cycle, "nested": {"a": {"b": {"c": [[], {}]}}},
        "global": torch.float32, "size": torch.Size([2, 3]),
    }


def text_protocol_values():
    """What protocol 0 can pickle without UNICODE: ints within 64 bits, floats, containers, globals."""
    shared = [1, 2]
    cycle = [0]
    cycle.append(cycle)
    return {1: [0, -1, 255, 2**40, -2**63, 0.5, -1e300, float("inf")], 2: (None, True, False, ()),
            3: {4: (5,), 6: []}, 7: torch.float32, 8: (shared, shared), 9: cycle}


def pickle_seeds(seeds):
    single = os.path.join(SCRATCH, "dcp-single")
    save_single(single)
    meta = read(os.path.join(single, ".metadata"))
    save(seeds, "dcp-single.metadata", meta)
    world2 = os.path.join(SCRATCH, "dcp-world2")
    mp.spawn(world_rank, args=(2, world2, 29547), nprocs=2)
    save(seeds, "dcp-world2.metadata", read(os.path.join(world2, ".metadata")))
    loaded = pickle.loads(meta)
    for protocol in (1, 2):
        save(seeds, "dcp-single-protocol%d.pickle" % protocol, pickle.dumps(loaded, protocol=protocol))
    save(seeds, "values-protocol0.pickle", pickle.dumps(text_protocol_values(), protocol=0))
    for protocol in (2, 5):
        save(seeds, "values-protocol%d.pickle" % protocol, pickle.dumps(plain_values(), protocol=protocol))
    return single


# --- gguf: files of GGUFWriter.

def gguf_seeds(seeds):
    rng = np.random.default_rng(7)
    os.makedirs(SCRATCH, exist_ok=True)
    basic = os.path.join(SCRATCH, "basic.gguf")
    write_gguf(basic, [("token_embd.weight", rng.standard_normal((4, 8), dtype=np.float32), None),
                       ("output_norm.weight", np.ones(8, dtype=np.float16), None)],
               [("string", "general.name", "ckpt seed"), ("uint32", "llama.context_length", 128)])
    tokens = ["<s>", "</s>", "hello", "wor\"ld", "\u00e9t\u00e9", "\n"] + ["tok%d" % i for i in range(10)]
    every = [
        ("string", "general.name", "every value type"), ("uint8", "t.u8", 200), ("int8", "t.i8", -5),
        ("uint16", "t.u16", 60000), ("int16", "t.i16", -300), ("uint32", "t.u32", 4096), ("int32", "t.i32", -12),
        ("uint64", "t.u64", 1 << 40), ("int64", "t.i64", -(1 << 40)), ("float32", "t.f32", 10000.0),
        ("float64", "t.f64", 0.25), ("bool", "t.flag", True),
        ("array", "tokenizer.ggml.tokens", tokens), ("array", "tokenizer.ggml.scores", [float(i) / 4 for i in range(len(tokens))]),
        ("array", "t.ints", list(range(20))), ("array", "t.nested", [[1, 2], [3]]),
    ]
    paths = {"basic.gguf": basic}
    paths["metadata.gguf"] = os.path.join(SCRATCH, "metadata.gguf")
    write_gguf(paths["metadata.gguf"], [("w", np.arange(6, dtype=np.float32).reshape(2, 3), None)], every)
    q = rng.standard_normal((2, 64), dtype=np.float32)
    paths["quantized.gguf"] = os.path.join(SCRATCH, "quantized.gguf")
    write_gguf(paths["quantized.gguf"],
               [("q8", gguf.quants.quantize(q, gguf.GGMLQuantizationType.Q8_0), gguf.GGMLQuantizationType.Q8_0),
                ("q4", gguf.quants.quantize(q, gguf.GGMLQuantizationType.Q4_0), gguf.GGMLQuantizationType.Q4_0),
                ("f", np.zeros(3, dtype=np.float32), None)],
               [("string", "general.name", "quantized")])
    paths["aligned64.gguf"] = os.path.join(SCRATCH, "aligned64.gguf")
    write_gguf(paths["aligned64.gguf"],
               [("i8", np.arange(5, dtype=np.int8), None), ("i32", np.arange(3, dtype=np.int32), None),
                ("i64", np.arange(2, dtype=np.int64), None), ("f64", np.ones(2, dtype=np.float64), None)],
               [("string", "general.name", "aligned")], alignment=64)
    for name, path in paths.items():
        save(seeds, name, read(path))
    return basic


# --- hf_index: sharded sets as transformers and huggingface_hub write them.

def hf_set(folder, shards, extra_metadata=None):
    """shards: [{tensor name: tensor}] in file order; returns the index path."""
    os.makedirs(folder, exist_ok=True)
    weight_map, total = {}, 0
    n = len(shards)
    for k, tensors in enumerate(shards):
        name = "model-%05d-of-%05d.safetensors" % (k + 1, n)
        save_file(tensors, os.path.join(folder, name), metadata={"format": "pt"})
        for t, v in tensors.items():
            weight_map[t] = name
            total += v.numel() * v.element_size()
    metadata = dict(extra_metadata or {})
    metadata["total_size"] = total
    index = {"metadata": metadata, "weight_map": weight_map}
    path = os.path.join(folder, "model.safetensors.index.json")
    with open(path, "w") as f:
        f.write(json.dumps(index, indent=2, sort_keys=True) + "\n")  # transformers modeling_utils.save_pretrained
    return path


def hf_index_seeds(seeds):
    g = torch.Generator().manual_seed(3)
    layer = lambda i: {"model.layers.%d.self_attn.q_proj.weight" % i: torch.randn(4, 4, generator=g),
                       "model.layers.%d.mlp.up_proj.weight" % i: torch.randn(8, 4, generator=g).to(torch.bfloat16)}
    two = hf_set(os.path.join(SCRATCH, "hf-two"),
                 [{"model.embed_tokens.weight": torch.randn(16, 4, generator=g), **layer(0)},
                  {**layer(1), "lm_head.weight": torch.randn(16, 4, generator=g), "model.norm.weight": torch.ones(4)}])
    three = hf_set(os.path.join(SCRATCH, "hf-three"),
                   [layer(0), layer(1), {"model.norm.weight": torch.ones(4), "step": torch.tensor(5, dtype=torch.int64)}],
                   extra_metadata={"format": "pt"})  # huggingface_hub.save_torch_state_dict keeps user metadata
    save(seeds, "two-shards.safetensors.index.json", read(two))
    save(seeds, "three-shards-metadata.safetensors.index.json", read(three))
    return two


# --- sidecar: written by the sidecar writer on real checkpoints.

def sidecar_seeds(seeds, writer, checkpoints):
    for name, path in checkpoints:
        subprocess.run(writer + [path], check=True, stdout=subprocess.DEVNULL)
        primary = os.path.join(path, ".metadata") if os.path.isdir(path) and os.path.exists(os.path.join(path, ".metadata")) else path
        save(seeds, name, read(primary + ".ckptsum"))


def main():
    if len(sys.argv) < 3:
        sys.stderr.write(__doc__)
        return 2
    root, writer = sys.argv[1], sys.argv[2:]
    shutil.rmtree(SCRATCH, ignore_errors=True)
    os.makedirs(SCRATCH)
    for target in ("pickle", "gguf", "hf_index", "sidecar"):
        shutil.rmtree(os.path.join(root, target), ignore_errors=True)
    single = pickle_seeds(os.path.join(root, "pickle"))
    basic = gguf_seeds(os.path.join(root, "gguf"))
    index = hf_index_seeds(os.path.join(root, "hf_index"))
    st = os.path.join(SCRATCH, "model.safetensors")
    g = torch.Generator().manual_seed(5)
    save_file({"big": torch.randn(1500, generator=g), "small": torch.arange(3, dtype=torch.int32),
               "half": torch.ones(2, 2, dtype=torch.float16)}, st, metadata={"format": "pt"})
    sidecar_seeds(os.path.join(root, "sidecar"), writer,
                  [("safetensors.ckptsum", st), ("hf-index.ckptsum", index), ("gguf.ckptsum", basic), ("dcp.ckptsum", single)])
    shutil.rmtree(SCRATCH, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
