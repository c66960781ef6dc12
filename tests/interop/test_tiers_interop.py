#!/usr/bin/env python3
"""The tier log and the step digest against spec/TIERS.md, independently of the C++ library.

Walks a directory of memory roots and a persistent store left by the MPI failure table
(tests/mpi/tier_failures.py), reads every TIERS log with the journal framing of spec/JOURNAL.md 3
decoded here with `struct` and the `xxhash` package, and checks, for every record it can:
  CAPTURED   its step digest is XXH3-128 of "CKPTTIER", step, world and every shard digest
             (spec/TIERS.md 5.3), its own shard digest is the detail's entry, and the shard file of
             its memory store (own/step-<step>-<txn>) has that digest: the identity root of
             spec/IDENTITY.md 2 recomputed from the file by tests/interop/ckpt_spec_reader.py, every
             chunk digest checked against the data;
  HELD       the replica's file (held-<shard>/step-<step>-<txn>) has the record's shard digest;
  PERSISTED  the persistent store's shard file of that transaction has the record's shard digest;
  SDC        its detail decodes as spec/TIERS.md 11.2 lays it out, to the last byte, and the odd rank it
             names is the one holder whose digest differs while every other holder's agree;
  PARITY     its detail decodes as the parity layout of spec/TIERS.md 12.3, the parity store's file of that
             transaction carries the same layout, and each stripe's parity segment equals the Reed-Solomon
             parity recomputed here from the members' own shard files: GF(2^8) over x^8+x^4+x^3+x^2+1, the
             Cauchy coefficients 1/((m+p) xor d) and the segments of 12.2, in plain Python (no ISA-L).
Exit 0 all agree, 1 a mismatch, 77 the xxhash package is missing (skipped).

usage: test_tiers_interop.py DIR
"""
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import interop_util  # noqa: E402
from interop_util import check, finish, skip  # noqa: E402

try:
    import xxhash
except ImportError:
    skip("the xxhash package is not installed")

from ckpt_spec_reader import CkptFile  # noqa: E402

PAGE = 4096
TIER_BASE = 0x8000 | 0x0100
EVENTS = {1: "CAPTURED", 2: "HELD", 3: "REPLICATED", 4: "PERSISTED", 5: "EVICTED", 6: "SET_ASIDE", 7: "LOAD_FAILED", 8: "RESUMED",
          9: "SKIPPED", 10: "SDC", 11: "PARITY", 12: "REBUILT"}
NO_RANK = 0xFFFFFFFF
counts = {}


def records(path):
    """Applied records of a journal-framed file (spec/JOURNAL.md 3): whole sync groups only."""
    data = open(path, "rb").read()
    out, group, off = [], [], 0
    while off + 16 <= len(data):
        length, rtype, flags = struct.unpack_from("<IHH", data, off)
        end = off + 8 + length
        if end + 8 > len(data):
            break  # a torn tail
        (digest,) = struct.unpack_from("<Q", data, end)
        if digest != xxhash.xxh3_64_intdigest(data[off:end], seed=off):
            break
        if flags & 1:
            group = []
        group.append((off, rtype, data[off + 8:end]))
        off = end + 8
        if flags & 2:  # LAST: the group is complete
            out.extend(g for g in group if g[1] & 0xFF00 == TIER_BASE & 0xFF00 and g[1] & 0x8000)
            group = []
    return out


def decode(payload):
    step, world, shard = struct.unpack_from("<QII", payload, 0)
    sd = struct.unpack_from("<QQ", payload, 16)
    hd = struct.unpack_from("<QQ", payload, 32)
    txn, copies, detail_len = struct.unpack_from("<QII", payload, 48)
    detail = payload[64:]
    assert len(detail) == detail_len
    return dict(step=step, world=world, shard=shard, step_digest=sd, shard_digest=hd, txn=txn, copies=copies, detail=detail)


def decode_sdc(detail, where):
    """An SDC record's detail (spec/TIERS.md 11.2): name, first differing chunk, count, odd rank, holders."""
    try:
        (n,) = struct.unpack_from("<I", detail, 0)
        tensor = detail[4:4 + n].decode()
        chunk, differing, odd, count = struct.unpack_from("<QQII", detail, 4 + n)
        off = 4 + n + 24
        holders = [struct.unpack_from("<IQ", detail, off + 12 * i) for i in range(count)]
        check(off + 12 * count == len(detail), where + f": detail of {len(detail)} bytes, the layout takes {off + 12 * count}")
        return tensor, chunk, differing, odd, holders
    except (struct.error, UnicodeDecodeError) as e:
        check(False, where + f": undecodable SDC detail: {e}")
        return None


def d128(data):
    return struct.unpack(">QQ", xxhash.xxh3_128_digest(data))  # canonical: high half first


def u64(v):
    return struct.pack("<Q", v)


def string(b):
    return u64(len(b)) + b


def shard_digest(path):
    """spec/IDENTITY.md 2 over one shard file, every chunk digest first checked against its bytes."""
    f = CkptFile.open(path)
    f.verify()
    tensors = []
    for t in f.tensors:
        e = b"CKPTTNSR" + struct.pack("<I", 1) + string(t["name"].encode()) + string(t["dtype"].encode())
        e += u64(len(t["shape"])) + b"".join(u64(d) for d in t["shape"]) + u64(len(t["pieces"]))
        for p in sorted(t["pieces"], key=lambda p: (p["offsets"], p["shape"])):
            e += u64(len(p["offsets"])) + b"".join(u64(v) for v in p["offsets"]) + b"".join(u64(v) for v in p["shape"])
            e += u64(p["data_length"]) + u64(f.chunk_size) + u64(len(p["chunks"]))
            e += b"".join(u64(c["digest"]) for c in p["chunks"])
        h, l = d128(e)
        tensors.append((t["name"].encode(), u64(h) + u64(l)))
    check(not f.metadata, f"{path}: a memory shard carries no index metadata")
    mh, ml = d128(b"CKPTMETA" + struct.pack("<I", 1) + u64(0))
    r = b"CKPTROOT" + struct.pack("<I", 1) + u64(len(tensors)) + b"".join(d for _, d in sorted(tensors)) + u64(mh) + u64(ml)
    return d128(r)


def step_file(store, step, txn):
    d = os.path.join(store, f"step-{step}-{txn}")
    if not os.path.isdir(d):
        return None
    files = sorted(x for x in os.listdir(d) if x.endswith(".ckpt"))
    return [os.path.join(d, x) for x in files]


# GF(2^8) of spec/TIERS.md 12.2, from its polynomial alone: exp and log tables of the generator 2.
GF_EXP, GF_LOG = [0] * 512, [0] * 256
_x = 1
for _i in range(255):
    GF_EXP[_i] = _x
    GF_LOG[_x] = _i
    _x <<= 1
    if _x & 0x100:
        _x ^= 0x11D
for _i in range(255, 512):
    GF_EXP[_i] = GF_EXP[_i - 255]


def gf_mul(a, b):
    return 0 if a == 0 or b == 0 else GF_EXP[GF_LOG[a] + GF_LOG[b]]


def gf_inv(a):
    return GF_EXP[255 - GF_LOG[a]]


def gf_scale(c, data):
    """c times every byte of data, as one byte translation."""
    return data.translate(bytes(gf_mul(c, x) for x in range(256)))


def xor(a, b):
    return (int.from_bytes(a, "little") ^ int.from_bytes(b, "little")).to_bytes(len(a), "little")


def decode_layout(detail, where):
    """spec/TIERS.md 12.3, to the last byte: n, k, n ranks, stripes (j, p, length, n - k members)."""
    n, k = struct.unpack_from("<II", detail, 0)
    at = 8
    ranks = list(struct.unpack_from(f"<{n}I", detail, at))
    at += 4 * n
    (count,) = struct.unpack_from("<I", detail, at)
    at += 4
    stripes = []
    for _ in range(count):
        j, p, length, members = struct.unpack_from("<IIQI", detail, at)
        at += 20
        check(members == n - k, where + f": stripe {j} has {members} members, n - k is {n - k}")
        ms = []
        for _ in range(members):
            rank, file_length, high, low = struct.unpack_from("<IQQQ", detail, at)
            at += 28
            ms.append((rank, file_length, (high, low)))
        stripes.append((j, p, length, ms))
    check(at == len(detail), where + f": the layout ends at byte {at} of {len(detail)}")
    return n, k, ranks, stripes


def own_file(job, rank, step, digest):
    """The shard file of `rank`'s own store holding `step` with that shard digest, on whichever node holds it."""
    for dirpath, dirs, _ in os.walk(job):
        if os.path.basename(dirpath) == "own" and os.path.basename(os.path.dirname(dirpath)) == f"rank-{rank}":
            for d in dirs:
                if d.startswith(f"step-{step}-"):
                    for f in step_file(dirpath, step, int(d.split("-")[2])) or []:
                        if shard_digest(f) == digest:
                            return f
    return None


def check_parity(job, dirpath, r, where):
    n, k, ranks, stripes = decode_layout(r["detail"], where)
    m = n - k
    me = ranks.index(r["shard"]) if r["shard"] in ranks else -1
    check(me >= 0, where + ": the holder is a member of its group")
    files = step_file(os.path.join(dirpath, "parity"), r["step"], r["txn"])
    if not files:
        return  # retired since
    f = CkptFile.open(files[0])
    f.verify()
    tensors = {t["name"]: t for t in f.tensors}

    def tensor_bytes(name):
        piece = tensors[name]["pieces"][0]
        return f.data[piece["data_offset"]:piece["data_offset"] + piece["data_length"]]

    check(tensor_bytes("__ckpt_tiers__/parity/layout") == r["detail"], where + ": the parity file's layout tensor is the record's")
    for j, p, length, members in stripes:
        check((j + p) % n == me, where + f": stripe {j} parity {p} is held at position (j + p) mod n")
        parity = bytes(length)
        for d, (rank, file_length, digest) in enumerate(members):
            check(ranks[(j + k + d) % n] == rank, where + f": stripe {j} data {d} comes from position (j + k + d) mod n")
            src = own_file(job, rank, r["step"], digest)
            if src is None:
                counts["parity stripes without their data"] = counts.get("parity stripes without their data", 0) + 1
                parity = None
                break
            with open(src, "rb") as fh:
                data = fh.read()
            check(len(data) == file_length, where + f": rank {rank}'s shard file is {len(data)} bytes, the layout says {file_length}")
            seg = -(-file_length // m)
            segment = data[d * seg:(d + 1) * seg].ljust(length, b"\0")
            parity = xor(parity, gf_scale(gf_inv((m + p) ^ d), segment))
        if parity is not None:
            check(parity == tensor_bytes(f"__ckpt_tiers__/parity/stripe-{j}"), where + f": stripe {j}'s parity recomputed from the spec")
            counts["parity stripes recomputed"] = counts.get("parity stripes recomputed", 0) + 1


def main():
    root = sys.argv[1]
    interop_util.only_failures()  # a check per record and per file: print the failures only
    for dirpath, _, files in os.walk(root):
        if "TIERS" not in files or not os.path.basename(dirpath).startswith("rank-"):
            continue
        job = dirpath
        while os.path.basename(job) and not os.path.isdir(os.path.join(job, "persistent")):
            job = os.path.dirname(job)
        for off, rtype, payload in records(os.path.join(dirpath, "TIERS")):
            r = decode(payload)
            event = EVENTS.get(rtype & 0xFF, "?")
            where = f"{dirpath}/TIERS at {off}: {event} step {r['step']} shard {r['shard']}"
            check(0 < r["world"] and r["shard"] < r["world"], where + f": shard {r['shard']} of a world of {r['world']} (spec/TIERS.md 5.2)")
            if event == "CAPTURED":
                shards = [struct.unpack_from("<QQ", r["detail"], 16 * i) for i in range(r["world"])]
                check(len(r["detail"]) == 16 * r["world"], where + ": detail is world x 16 bytes")
                e = b"CKPTTIER" + u64(r["step"]) + struct.pack("<I", r["world"]) + b"".join(u64(h) + u64(l) for h, l in shards)
                check(d128(e) == r["step_digest"], where + ": step digest recomputed from the shard digests")
                check(shards[r["shard"]] == r["shard_digest"], where + ": its own entry in the detail")
                files = step_file(os.path.join(dirpath, "own"), r["step"], r["txn"])
                if files:  # retention may have retired it since
                    check(shard_digest(files[0]) == r["shard_digest"], where + ": the own shard file's identity")
                    counts["own files"] = counts.get("own files", 0) + 1
            elif event == "HELD":
                files = step_file(os.path.join(dirpath, f"held-{r['shard']}"), r["step"], r["txn"])
                if files:
                    check(shard_digest(files[0]) == r["shard_digest"], where + ": the replica file's identity")
                    counts["held files"] = counts.get("held files", 0) + 1
            elif event == "PERSISTED":
                files = step_file(os.path.join(job, "persistent"), r["step"], r["txn"])
                if files:
                    mine = [f for f in files if os.path.basename(f).startswith("shard-%05d-" % r["shard"])]
                    check(len(mine) == 1 and shard_digest(mine[0]) == r["shard_digest"], where + ": the persistent shard's identity")
                    counts["persistent files"] = counts.get("persistent files", 0) + 1
            elif event == "SDC":
                sdc = decode_sdc(r["detail"], where)
                if sdc:
                    tensor, chunk, differing, odd, holders = sdc
                    check(differing >= 1 and len(holders) >= 2, where + ": a finding has a differing chunk and two holders")
                    digests = [d for _, d in holders]
                    lone = [rank for rank, d in holders if digests.count(d) == 1 and len(set(digests)) == 2]
                    expected = lone[0] if len(holders) >= 3 and len(lone) == 1 else NO_RANK
                    check(odd == expected, where + f": odd rank {odd}, the digests say {expected}")
            elif event == "PARITY":
                check_parity(job, dirpath, r, where)
            counts[event] = counts.get(event, 0) + 1
    print("checked:", ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    for need in ("CAPTURED", "HELD", "PERSISTED", "SDC", "PARITY", "REBUILT", "own files", "held files", "persistent files",
                 "parity stripes recomputed"):
        check(counts.get(need, 0) > 0, f"no {need} seen under {root}")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
