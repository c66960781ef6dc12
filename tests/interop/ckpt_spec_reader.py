"""A minimal, independent reader of ckpt shard files, written from spec/FORMAT.md alone.

It shares no code with the C++ library: fields are decoded with the `struct` module and digests are
computed with the Python `xxhash` package. Section numbers below refer to spec/FORMAT.md.

    reader = CkptFile.open("model.ckpt")      # raises FormatError on any rule broken
    reader.verify()                            # every chunk digest and padding byte (8.2)
    data = reader.tensor_bytes("weight")       # whole tensor, row-major, chunk digests checked
"""

import math
import struct

import xxhash

SUPERBLOCK_MAGIC = b"\x89CKPT\r\n\x1a"
INDEX_MAGIC = b"CKPTINDX"
FOOTER_MAGIC = b"CKPTFEND"
SUPERBLOCK_SIZE = 128
FOOTER_SIZE = 64
INDEX_HEADER_SIZE = 64
MAX_INDEX_LENGTH = 1 << 32
MAX_RANK = 64
MAX_NAME = 65535
MAX_PIECES = 4096

# 4.1: code -> (name, bytes per element)
DTYPES = {
    1: ("BOOL", 1), 2: ("U8", 1), 3: ("I8", 1), 4: ("U16", 2), 5: ("I16", 2), 6: ("U32", 4),
    7: ("I32", 4), 8: ("U64", 8), 9: ("I64", 8), 10: ("F16", 2), 11: ("BF16", 2), 12: ("F32", 4),
    13: ("F64", 8), 14: ("F8_E4M3", 1), 15: ("F8_E5M2", 1), 16: ("F8_E8M0", 1), 17: ("C64", 8),
}
# 5.6: metadata value types
META_TYPES = {1: "int64", 2: "float64", 3: "bool", 4: "string", 5: "bytes"}


class FormatError(Exception):
    """A rule of the spec is broken. kind is the error class of section 9."""

    def __init__(self, kind, offset, message):
        super().__init__("%s at offset %d: %s" % (kind, offset, message))
        self.kind = kind
        self.offset = offset


def xxh3(data):
    return xxhash.xxh3_64_intdigest(data)  # 2.2: XXH3-64, seed 0


def align_up(v, a):
    return (v + a - 1) // a * a


def utf8(raw, offset, what):
    # 2.4: strict UTF-8 (Python's decoder rejects overlongs, surrogates and code points past U+10FFFF).
    try:
        return raw.decode("utf-8", errors="strict")
    except UnicodeDecodeError:
        raise FormatError("corrupt", offset, "%s is not valid UTF-8" % what)


def uuid_text(raw):
    h = raw.hex()
    return "%s-%s-%s-%s-%s" % (h[0:8], h[8:12], h[12:16], h[16:20], h[20:32])


class CkptFile:
    def __init__(self, data):
        self.data = data
        self.tensors = []   # dicts: name, dtype, itemsize, shape, pieces (list of piece dicts)
        self.metadata = []  # dicts: key, type, value (bits for float64 too)

    @classmethod
    def open(cls, path):
        with open(path, "rb") as f:
            return cls.parse(f.read())

    @classmethod
    def parse(cls, data):
        r = cls(bytes(data))
        r._parse()
        return r

    # --- 3: superblock ------------------------------------------------------------------------
    def _parse_superblock(self):
        b = self.data[:SUPERBLOCK_SIZE]
        if b[0:8] != SUPERBLOCK_MAGIC:
            raise FormatError("corrupt", 0, "superblock magic")
        (digest,) = struct.unpack_from("<Q", b, 120)
        if digest != xxh3(b[0:120]):
            raise FormatError("corrupt", 120, "superblock digest")
        (version, size, compat, ro_compat, incompat) = struct.unpack_from("<IIQQQ", b, 8)
        if version != 1:
            raise FormatError("version", 8, "format version %d" % version)
        if size != SUPERBLOCK_SIZE:
            raise FormatError("corrupt", 12, "superblock_size %d" % size)
        if incompat != 0:  # 3.2: version 1 knows no incompat feature
            raise FormatError("version", 32, "unknown incompat flags %#x" % incompat)
        self.uuid = b[40:56]
        (align_log2, chunk_log2, hash_id, reserved0, data_offset) = struct.unpack_from("<IIIIQ", b, 56)
        if not 6 <= align_log2 <= 21:
            raise FormatError("corrupt", 56, "alignment_log2 %d" % align_log2)
        if not 12 <= chunk_log2 <= 30:
            raise FormatError("corrupt", 60, "chunk_size_log2 %d" % chunk_log2)
        if hash_id != 1:
            raise FormatError("version", 64, "hash_id %d" % hash_id)
        if reserved0 != 0 or any(b[80:120]):
            raise FormatError("corrupt", 68, "reserved superblock bytes")
        self.alignment = 1 << align_log2
        self.chunk_size = 1 << chunk_log2
        if data_offset != align_up(SUPERBLOCK_SIZE, self.alignment):
            raise FormatError("corrupt", 72, "data_offset %d" % data_offset)
        self.data_offset = data_offset
        self.compat, self.ro_compat = compat, ro_compat

    # --- 6: footer ----------------------------------------------------------------------------
    def _parse_footer(self):
        at = len(self.data) - FOOTER_SIZE
        f = self.data[at:]
        if f[56:64] != FOOTER_MAGIC:
            raise FormatError("incomplete", at + 56, "no footer magic at the end of the file")
        (digest,) = struct.unpack_from("<Q", f, 48)
        if digest != xxh3(f[0:48]):
            raise FormatError("corrupt", at + 48, "footer digest")
        (index_offset, index_length, index_digest) = struct.unpack_from("<QQQ", f, 0)
        (version, reserved) = struct.unpack_from("<II", f, 40)
        if reserved != 0:
            raise FormatError("corrupt", at + 44, "reserved footer bytes")
        if version != 1:
            raise FormatError("version", at + 40, "footer version %d" % version)
        if index_offset > at or index_length != at - index_offset:
            raise FormatError("corrupt", at, "index does not end at the footer")
        if not INDEX_HEADER_SIZE <= index_length <= MAX_INDEX_LENGTH:
            raise FormatError("corrupt", at, "index length %d" % index_length)
        if f[24:40] != self.uuid:
            raise FormatError("corrupt", at + 24, "footer uuid differs from the superblock uuid")
        if index_offset < self.data_offset:
            raise FormatError("corrupt", at, "index offset inside the superblock area")
        self.index_offset, self.index_length, self.index_digest = index_offset, index_length, index_digest
        self.footer_offset = at

    # --- 5: index -----------------------------------------------------------------------------
    def _parse_index(self):
        base = self.index_offset
        ix = self.data[base:base + self.index_length]
        if xxh3(ix) != self.index_digest:
            raise FormatError("corrupt", base, "index digest")
        if ix[0:8] != INDEX_MAGIC:
            raise FormatError("corrupt", base, "index magic")
        (n_t, n_p, n_c, n_d, n_m, n_blob, reserved) = struct.unpack_from("<7Q", ix, 8)
        if reserved != 0:
            raise FormatError("corrupt", base + 56, "reserved index bytes")
        sizes = [n_t * 40, n_p * 48, n_c * 24, n_d * 8, n_m * 32, n_blob]
        starts = []
        at = INDEX_HEADER_SIZE
        for s in sizes:
            starts.append(at)
            at += s
        if at != self.index_length:  # Python integers do not overflow; the sum must match exactly
            raise FormatError("corrupt", base, "tables add up to %d, index is %d" % (at, self.index_length))
        t_at, p_at, c_at, d_at, m_at, b_at = starts
        dims = list(struct.unpack_from("<%dQ" % n_d, ix, d_at))
        blob = ix[b_at:b_at + n_blob]

        def blob_range(off, length, rec):
            if off > n_blob or length > n_blob - off:
                raise FormatError("corrupt", base + rec, "range outside the blob")
            return blob[off:off + length]

        def dims_range(first, count, rec):
            if first > n_d or count > n_d - first:
                raise FormatError("corrupt", base + rec, "range outside the dims table")
            return dims[first:first + count]

        chunks = [struct.unpack_from("<QQQ", ix, c_at + 24 * i) for i in range(n_c)]
        next_piece = next_chunk = 0
        pieces = []
        names = set()
        for i in range(n_t):
            rec = t_at + 40 * i
            (name_off, name_len, dtype, ndim, shape_first, piece_first, piece_count) = struct.unpack_from("<QIHHQQQ", ix, rec)
            if not 1 <= name_len <= MAX_NAME:
                raise FormatError("corrupt", base + rec, "name length %d" % name_len)
            name = utf8(blob_range(name_off, name_len, rec), base + rec, "tensor name")
            if dtype not in DTYPES:
                raise FormatError("corrupt", base + rec + 12, "unknown dtype %d" % dtype)
            if ndim > MAX_RANK:
                raise FormatError("corrupt", base + rec + 14, "rank %d" % ndim)
            shape = dims_range(shape_first, ndim, rec + 16)
            itemsize = DTYPES[dtype][1]
            if math.prod(shape) * itemsize >= 1 << 64:
                raise FormatError("corrupt", base + rec + 16, "tensor size overflows 64 bits")
            if piece_first != next_piece or not 1 <= piece_count <= MAX_PIECES or piece_first + piece_count > n_p:
                raise FormatError("corrupt", base + rec + 24, "piece range of tensor '%s'" % name)
            next_piece += piece_count
            tensor = {"name": name, "dtype": DTYPES[dtype][0], "itemsize": itemsize, "shape": shape, "pieces": []}
            for k in range(piece_first, piece_first + piece_count):
                prec = p_at + 48 * k
                (owner, off, length, chunk_first, chunk_count, dims_first) = struct.unpack_from("<6Q", ix, prec)
                if owner != i:
                    raise FormatError("corrupt", base + prec, "piece owner %d, expected %d" % (owner, i))
                offsets = dims_range(dims_first, ndim, prec + 40)
                local = dims_range(dims_first + ndim, ndim, prec + 40)
                for d in range(ndim):
                    if offsets[d] > shape[d] or local[d] > shape[d] - offsets[d]:
                        raise FormatError("corrupt", base + prec + 40, "piece outside the global shape")
                if length != math.prod(local) * itemsize:
                    raise FormatError("corrupt", base + prec + 16, "piece data length %d" % length)
                if off % self.alignment or off < self.data_offset or off + length > self.index_offset:
                    raise FormatError("corrupt", base + prec + 8, "piece data [%d, +%d) misplaced" % (off, length))
                want_chunks = -(-length // self.chunk_size)
                if chunk_first != next_chunk or chunk_count != want_chunks or chunk_first + chunk_count > n_c:
                    raise FormatError("corrupt", base + prec + 24, "chunk range of a piece of '%s'" % name)
                next_chunk += chunk_count
                piece_chunks = []
                for c in range(chunk_count):
                    (c_off, c_len, c_digest) = chunks[chunk_first + c]
                    want_off = off + c * self.chunk_size
                    want_len = min(self.chunk_size, length - c * self.chunk_size)
                    if c_off != want_off or c_len != want_len:  # 4.4
                        raise FormatError("corrupt", base + c_at + 24 * (chunk_first + c), "chunk range")
                    piece_chunks.append({"offset": c_off, "length": c_len, "digest": c_digest})
                piece = {"tensor": i, "offsets": offsets, "shape": local, "data_offset": off,
                         "data_length": length, "chunks": piece_chunks}
                tensor["pieces"].append(piece)
                pieces.append(piece)
            self.tensors.append(tensor)
        if next_piece != n_p or next_chunk != n_c:
            raise FormatError("corrupt", base + 16, "pieces or chunks that belong to nothing")

        # 4.2: packing rule, no holes; the index starts at the next multiple of 8.
        end = self.data_offset
        for p in sorted(pieces, key=lambda p: (p["data_offset"], p["data_length"])):
            if p["data_offset"] != align_up(end, self.alignment):
                raise FormatError("corrupt", p["data_offset"], "piece not packed")
            end = p["data_offset"] + p["data_length"]
        if self.index_offset != align_up(end, 8):
            raise FormatError("corrupt", self.index_offset, "index does not follow the data")
        self.data_end = end

        # 4.3: pieces of a tensor never overlap.
        for t in self.tensors:
            ps = [p for p in t["pieces"] if math.prod(p["shape"]) > 0]
            for a in range(len(ps)):
                for b in range(a + 1, len(ps)):
                    pa, pb = ps[a], ps[b]
                    if all(pa["offsets"][d] < pb["offsets"][d] + pb["shape"][d] and
                           pb["offsets"][d] < pa["offsets"][d] + pa["shape"][d] for d in range(len(t["shape"]))):
                        raise FormatError("corrupt", base, "pieces of '%s' overlap" % t["name"])
            if t["name"] in names:
                raise FormatError("corrupt", base, "tensor name '%s' twice" % t["name"])
            names.add(t["name"])

        # 5.6: metadata.
        keys = set()
        for i in range(n_m):
            rec = m_at + 32 * i
            (key_off, key_len, mtype, reserved, value, value_len) = struct.unpack_from("<QIHHQQ", ix, rec)
            if not 1 <= key_len <= MAX_NAME:
                raise FormatError("corrupt", base + rec, "key length")
            key = utf8(blob_range(key_off, key_len, rec), base + rec, "metadata key")
            if reserved != 0:
                raise FormatError("corrupt", base + rec + 14, "reserved metadata bytes")
            if mtype in (1, 2, 3) and value_len != 0:
                raise FormatError("corrupt", base + rec + 24, "scalar with a value length")
            entry = {"key": key, "type": META_TYPES.get(mtype)}
            if mtype == 1:
                entry["value"] = struct.unpack("<q", struct.pack("<Q", value))[0]
            elif mtype == 2:
                entry["value"] = struct.unpack("<d", struct.pack("<Q", value))[0]
                entry["bits"] = "%016x" % value
            elif mtype == 3:
                if value > 1:
                    raise FormatError("corrupt", base + rec + 16, "bool %d" % value)
                entry["value"] = value == 1
            elif mtype in (4, 5):
                raw = blob_range(value, value_len, rec + 16)
                entry["value"] = utf8(raw, base + rec + 16, "string value") if mtype == 4 else raw
            else:
                raise FormatError("corrupt", base + rec + 12, "unknown value type %d" % mtype)
            if key in keys:
                raise FormatError("corrupt", base + rec, "metadata key '%s' twice" % key)
            keys.add(key)
            self.metadata.append(entry)

    def _parse(self):
        if len(self.data) < SUPERBLOCK_SIZE + FOOTER_SIZE:
            raise FormatError("incomplete", 0, "file of %d bytes" % len(self.data))
        self._parse_superblock()
        self._parse_footer()
        self._parse_index()

    # --- reading and verifying ----------------------------------------------------------------
    def tensor(self, name):
        for t in self.tensors:
            if t["name"] == name:
                return t
        raise KeyError(name)

    def piece_bytes(self, piece, check=True):
        """The piece's bytes; with check, every chunk digest is verified first (7.2)."""
        if check:
            for c in piece["chunks"]:
                got = xxh3(self.data[c["offset"]:c["offset"] + c["length"]])
                if got != c["digest"]:
                    raise FormatError("corrupt", c["offset"], "chunk digest %016x, expected %016x" % (got, c["digest"]))
        return self.data[piece["data_offset"]:piece["data_offset"] + piece["data_length"]]

    def tensor_bytes(self, name):
        """The whole tensor, row-major, assembled from its pieces; None if they do not cover it."""
        t = self.tensor(name)
        shape, size = t["shape"], t["itemsize"]
        if sum(math.prod(p["shape"]) for p in t["pieces"]) != math.prod(shape):
            return None  # pieces never overlap, so counting elements decides coverage
        out = bytearray(math.prod(shape) * size)
        rank = len(shape)
        strides = [size] * rank
        for d in range(rank - 2, -1, -1):
            strides[d] = strides[d + 1] * shape[d + 1]
        for p in t["pieces"]:
            src = self.piece_bytes(p)
            local = p["shape"]
            if math.prod(local) == 0:
                continue
            row = (local[-1] if rank else 1) * size
            n_rows = math.prod(local[:-1]) if rank else 1
            for r in range(n_rows):
                # Global byte offset of the first element of this row of the piece.
                idx, rem = [], r
                for d in range(rank - 2, -1, -1):
                    idx.append(rem % local[d])
                    rem //= local[d]
                idx.reverse()
                at = sum((p["offsets"][d] + idx[d]) * strides[d] for d in range(rank - 1))
                if rank:
                    at += p["offsets"][-1] * size
                out[at:at + row] = src[r * row:(r + 1) * row]
        return bytes(out)

    def verify(self):
        """Section 8.2: every chunk digest and every padding byte; returns a list of problems."""
        problems = []
        for t in self.tensors:
            for p in t["pieces"]:
                for c in p["chunks"]:
                    if xxh3(self.data[c["offset"]:c["offset"] + c["length"]]) != c["digest"]:
                        problems.append(("data", c["offset"], "chunk digest of '%s'" % t["name"]))
        spans = sorted((p["data_offset"], p["data_offset"] + p["data_length"]) for t in self.tensors for p in t["pieces"])
        at = SUPERBLOCK_SIZE
        gaps = []
        for lo, hi in spans:
            if lo > at:
                gaps.append((at, lo))
            at = max(at, hi)
        if self.index_offset > at:
            gaps.append((at, self.index_offset))
        for lo, hi in gaps:
            if any(self.data[lo:hi]):
                problems.append(("padding", lo, "non-zero padding in [%d, %d)" % (lo, hi)))
        return problems
