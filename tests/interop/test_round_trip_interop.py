#!/usr/bin/env python3
"""Round trips through the tools give back what they were given (issue 22).

    test_round_trip_interop.py BINARY_DIR

A safetensors file written by the PyPI package (torch tensors: several dtypes, bfloat16, a scalar, an
empty tensor, names and __metadata__ with non-ASCII text, quotes, backslashes, an empty value) goes
through every chain of the real tools and comes back as a safetensors file:

    ckpt-convert -> .ckpt -> ckpt-convert
    ckpt-convert -> .ckpt -> ckpt-reshard (3 shards) -> ckpt-convert
    ckpt-convert -> .ckpt -> ckpt-merge -> ckpt-convert
    ckpt-convert -> .ckpt -> ckpt-reshard (3 shards) -> ckpt-merge -> ckpt-convert

The package must load the same tensors (names, dtypes, shapes, bytes) and exactly the same
__metadata__: no "ckpt.step" appears where the source had none. A source that has a step keeps it:
the same file with "ckpt.step" in its __metadata__ (as an export carries it) comes back the same
through every chain, and a step numbered by ckpt-reshard --step 12 keeps step 12 through merge,
reshard and merge again, exported as "ckpt.step": "12". Exit 0 all passed, 1 a check failed, 77 the
Python oracles are not installed.
"""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from interop_util import built, check, finish, run, skip, read_safetensors  # noqa: E402

try:
    import safetensors
    import torch
    from safetensors import safe_open
    from safetensors.torch import save_file
except ImportError as e:
    skip("Python oracle missing: %s" % e)

# Several keys, non-ASCII keys and values, JSON escapes, an empty value.
METADATA = {
    "format": "pt",
    "modèle": "Grüße aus Zürich — 模型 🚀",
    "описание": "tab\there, \"quoted\", back\\slash",
    "empty": "",
    "config": json.dumps({"layers": 2, "hidden": 5, "name": "ü"}),
}


def tensors():
    g = torch.Generator().manual_seed(22)
    return {
        "model.embed.weight": torch.randn(7, 5, generator=g),  # 7 rows: an uneven split over 3 ranks
        "model.layers.0.weight": torch.randn(4, 3, 2, generator=g).to(torch.bfloat16),
        "model.layers.0.bias": torch.randn(6, generator=g).to(torch.float16),
        "модель.слой.1.вес": torch.arange(-10, 14, dtype=torch.int64).reshape(4, 6),
        "mask": torch.tensor([True, False, True]),
        "bytes": torch.arange(0, 250, dtype=torch.uint8),
        "scale": torch.tensor(0.5, dtype=torch.float64),  # a scalar: written whole by rank 0
        "empty": torch.zeros(0, 3),
    }


load = read_safetensors  # what the reference implementation sees: tensors and __metadata__


class Tools:
    def __init__(self, bindir):
        self.convert, self.reshard, self.merge = (os.path.join(bindir, t) for t in ("ckpt-convert", "ckpt-reshard", "ckpt-merge"))


def step(tools, label, tool, *args):
    rc, out, err = run(tool, *args)
    check(rc == 0, "%s: %s %s (exit %d %s)" % (label, os.path.basename(tool), " ".join(os.path.basename(a) for a in args), rc,
                                                err.strip()))
    return rc == 0, out


def chains(tools, src, workdir, label):
    """Runs the four chains from src; returns {chain: exported safetensors path, or None}."""
    d = os.path.join(workdir, label)
    os.mkdir(d)
    ckpt = os.path.join(d, "in.ckpt")
    ok, _ = step(tools, label, tools.convert, src, ckpt)
    if not ok:
        return {}
    out = {}
    # convert -> convert
    out["convert"] = os.path.join(d, "convert.safetensors")
    ok, _ = step(tools, label, tools.convert, ckpt, out["convert"])
    # convert -> reshard -> convert, from the store (its latest step) and from the step directory
    store = os.path.join(d, "store")
    ok, text = step(tools, label, tools.reshard, ckpt, "-o", store, "--world-size", "3", "--chunk-size", "4096", "--json")
    if ok:
        out["reshard"] = os.path.join(d, "reshard.safetensors")
        step(tools, label, tools.convert, store, out["reshard"])
        out["reshard (step directory)"] = os.path.join(d, "reshard-dir.safetensors")
        step(tools, label, tools.convert, os.path.join(store, json.loads(text)["directory"]), out["reshard (step directory)"])
    # convert -> merge -> convert
    merged = os.path.join(d, "merged.ckpt")
    if step(tools, label, tools.merge, ckpt, "-o", merged)[0]:
        out["merge"] = os.path.join(d, "merge.safetensors")
        step(tools, label, tools.convert, merged, out["merge"])
    # convert -> reshard -> merge -> convert
    if ok:
        merged_step = os.path.join(d, "merged-step.ckpt")
        if step(tools, label, tools.merge, store, "-o", merged_step)[0]:
            out["reshard, merge"] = os.path.join(d, "reshard-merge.safetensors")
            step(tools, label, tools.convert, merged_step, out["reshard, merge"])
    return out


def compare(label, exported, expected_tensors, expected_meta):
    for chain, path in sorted(exported.items()):
        if path is None or not os.path.exists(path):
            check(False, "%s %s: exported" % (label, chain))
            continue
        got, meta = load(path)
        check(got == expected_tensors, "%s %s: the package loads the same %d tensors (names, dtypes, shapes, bytes)"
              % (label, chain, len(expected_tensors)))
        check(meta == expected_meta, "%s %s: __metadata__ comes back exactly (got %r)" % (label, chain, meta))


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    tools = Tools(sys.argv[1])
    if not built(tools.convert, tools.reshard, tools.merge):
        return finish()
    print("safetensors %s, torch %s" % (safetensors.__version__, torch.__version__))
    with tempfile.TemporaryDirectory(prefix="ckpt-round-trip-") as workdir:
        # A source without a step: nothing is added on the way.
        src = os.path.join(workdir, "source.safetensors")
        save_file(tensors(), src, metadata=METADATA)
        original, original_meta = load(src)
        check(original_meta == METADATA and len(original) == len(tensors()), "the package wrote and reads the source")
        compare("no step", chains(tools, src, workdir, "no-step"), original, original_meta)

        # A source with a step in its __metadata__ (an export's ckpt.step) keeps it, and only it.
        with_step = os.path.join(workdir, "with-step.safetensors")
        save_file(tensors(), with_step, metadata=dict(METADATA, **{"ckpt.step": "12"}))
        compare("ckpt.step in __metadata__", chains(tools, with_step, workdir, "with-step"), original,
                dict(METADATA, **{"ckpt.step": "12"}))

        # A step given by ckpt-reshard --step is a training state of that step: merge, reshard (its
        # step kept) and merge again carry it; every export says ckpt.step 12.
        d = os.path.join(workdir, "numbered")
        os.mkdir(d)
        label = "reshard --step 12"
        ckpt, store, again = os.path.join(d, "in.ckpt"), os.path.join(d, "store"), os.path.join(d, "again")
        merged, merged_again = os.path.join(d, "merged.ckpt"), os.path.join(d, "merged-again.ckpt")
        exported = {}
        if (step(tools, label, tools.convert, src, ckpt)[0] and
                step(tools, label, tools.reshard, ckpt, "-o", store, "--world-size", "2", "--step", "12")[0]):
            exported["store"] = os.path.join(d, "store.safetensors")
            step(tools, label, tools.convert, store, exported["store"])
            if step(tools, label, tools.merge, store, "-o", merged)[0]:
                exported["merge"] = os.path.join(d, "merge.safetensors")
                step(tools, label, tools.convert, merged, exported["merge"])
                ok, text = step(tools, label, tools.reshard, merged, "-o", again, "--world-size", "3", "--json")
                if ok:
                    got = json.loads(text)["step"]
                    check(got == 12, "%s: the merged file reshards as step 12 (got %s)" % (label, got))
                    if step(tools, label, tools.merge, again, "-o", merged_again)[0]:
                        exported["merge, reshard, merge"] = os.path.join(d, "merge-reshard-merge.safetensors")
                        step(tools, label, tools.convert, merged_again, exported["merge, reshard, merge"])
        compare(label, exported, original, dict(METADATA, **{"ckpt.step": "12"}))

        # Without --step, a source without a step is numbered 0 in the store and exported without ckpt.step.
        rc, out, err = run(tools.reshard, os.path.join(workdir, "no-step", "in.ckpt"), "-o", os.path.join(d, "unnumbered"),
                           "--world-size", "1", "--json")
        got = json.loads(out)["step"] if rc == 0 else None
        check(got == 0, "a source without a step is step 0 of its store (got exit %d, step %s %s)" % (rc, got, err.strip()))
    return finish()


if __name__ == "__main__":
    sys.exit(main())
