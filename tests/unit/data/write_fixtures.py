#!/usr/bin/python3
"""Fixtures for data_test, written by the reference tools (NumPy, gzip, csv, json).

  /usr/bin/python3 write_fixtures.py OUTDIR
      writes every fixture under OUTDIR and OUTDIR/expect.json: what NumPy and Python read
      back from those files (the values the C++ readers must agree with).
  /usr/bin/python3 write_fixtures.py --read-block BLOCK OUT.json
      parses a serialized block by data/FORMAT.md with NumPy alone and writes its columns to
      OUT.json (bytes as hex), so the C++ writer is checked against an independent reader.

Debian's Python with python3-numpy: run it as /usr/bin/python3.
"""

import csv
import gzip
import io
import json
import os
import struct
import sys

import numpy as np

FASHION = "/usr/share/datasets/fashion-mnist"


def values(a):
    """A column as data_test compares it: dtype name, per-row shape, flattened values."""
    a = np.asarray(a)
    return {"dtype": a.dtype.name, "shape": list(a.shape[1:]), "rows": int(a.shape[0]),
            "values": a.reshape(-1).tolist()}


def mkdir(*parts):
    path = os.path.join(*parts)
    os.makedirs(path, exist_ok=True)
    return path


# ---------------------------------------------------------------------------------------- idx

IDX_CODES = {np.uint8: 0x08, np.int8: 0x09, np.int16: 0x0B, np.int32: 0x0C,
             np.float32: 0x0D, np.float64: 0x0E}


def idx_bytes(a):
    """An IDX file: zero, zero, type code, ndim, big-endian dims, big-endian data."""
    code = IDX_CODES[a.dtype.type]
    head = bytes([0, 0, code, a.ndim]) + struct.pack(">" + "I" * a.ndim, *a.shape)
    return head + a.astype(a.dtype.newbyteorder(">")).tobytes()


def write_idx(path, a, gz=False):
    data = idx_bytes(a)
    if gz:
        with gzip.open(path, "wb") as f:
            f.write(data)
    else:
        with open(path, "wb") as f:
            f.write(data)


def idx_fixtures(out, expect):
    d = mkdir(out, "idx")
    rng = np.random.default_rng(7)
    # An MNIST-like pair: images raw, labels gzipped.
    images = rng.integers(0, 256, size=(7, 3, 4), dtype=np.uint8)
    labels = rng.integers(0, 10, size=(7,), dtype=np.uint8)
    pair = mkdir(d, "pair")
    write_idx(os.path.join(pair, "toy-images-idx3-ubyte"), images)
    write_idx(os.path.join(pair, "toy-labels-idx1-ubyte.gz"), labels, gz=True)
    expect["idx_pair"] = {"image": values(images), "label": values(labels)}

    # Multi-byte types, whose bytes the reader must swap; one column per file name.
    typed = mkdir(d, "typed")
    arrays = {
        "i16": np.array([[-32768, -1, 0], [1, 255, 256], [32767, -256, 4660],
                         [-4660, 17, -17], [1000, -1000, 12345]], dtype=np.int16),
        "i32": np.array([-2**31, -1, 0, 1, 2**31 - 1], dtype=np.int32),
        "i8": np.array([-128, -1, 0, 1, 127], dtype=np.int8),
        "f32": np.array([[[0.5, -1.25], [3.4028235e38, 1e-45]],
                         [[np.pi, -np.e], [0.0, -0.0]],
                         [[1.0, 2.0], [3.0, 4.0]],
                         [[1e10, -1e-10], [7.0, 8.0]],
                         [[0.1, 0.2], [0.3, 0.4]]], dtype=np.float32),
        "f64": np.array([0.1, -1e300, 2.0**-1074, 123456789.125, -0.5], dtype=np.float64),
    }
    expect["idx_typed"] = {}
    for name, a in arrays.items():
        write_idx(os.path.join(typed, name + "-idx%d-ubyte" % a.ndim), a,
                  gz=(name in ("f32", "i32")))
        expect["idx_typed"][name] = values(a)

    # Shards named through `columns:`, in sorted order.
    shards = mkdir(d, "shards")
    s_images = [rng.integers(0, 256, size=(n, 2, 2), dtype=np.uint8) for n in (3, 4)]
    s_labels = [rng.integers(0, 10, size=(n,), dtype=np.uint8) for n in (3, 4)]
    for i, (im, lb) in enumerate(zip(s_images, s_labels)):
        write_idx(os.path.join(shards, "part%d-img.idx" % i), im, gz=(i == 1))
        write_idx(os.path.join(shards, "part%d-lbl.idx" % i), lb)
    expect["idx_shards"] = {"image": values(np.concatenate(s_images)),
                            "label": values(np.concatenate(s_labels))}

    # Truncated inside row 6 of 10 (rows of 16 bytes).
    trunc = mkdir(d, "trunc")
    full = idx_bytes(rng.integers(0, 256, size=(10, 4, 4), dtype=np.uint8))
    header = 4 + 3 * 4
    with open(os.path.join(trunc, "cut-idx3-ubyte"), "wb") as f:
        f.write(full[:header + 6 * 16 + 5])
    expect["idx_trunc_row"] = 6
    packed = gzip.compress(idx_bytes(rng.integers(0, 256, size=(500,), dtype=np.uint8)))
    with open(os.path.join(trunc, "cutgz-idx1-ubyte.gz"), "wb") as f:
        f.write(packed[:len(packed) // 2])
    # A corrupt header whose sizes overflow 64 bits: 2^16 x 2^24 x 2^24 bytes.
    with open(os.path.join(trunc, "huge-idx3-ubyte"), "wb") as f:
        f.write(bytes([0, 0, 0x08, 3]) + struct.pack(">III", 2**16, 2**24, 2**24) + bytes(64))


def fashion_fixtures(expect):
    if not os.path.isdir(FASHION):
        expect["fashion"] = None
        return
    out = {}
    for split in ("train", "t10k"):
        with gzip.open(os.path.join(FASHION, split + "-images-idx3-ubyte.gz"), "rb") as f:
            raw = f.read()
        n, rows, cols = struct.unpack(">III", raw[4:16])
        images = np.frombuffer(raw, dtype=np.uint8, offset=16).reshape(n, rows, cols)
        with gzip.open(os.path.join(FASHION, split + "-labels-idx1-ubyte.gz"), "rb") as f:
            raw = f.read()
        labels = np.frombuffer(raw, dtype=np.uint8, offset=8)
        picks = [0, 1, n // 2 + 7, n - 1]
        out[split] = {
            "rows": int(n), "image_shape": [int(rows), int(cols)],
            "pixel_sum": int(images.sum(dtype=np.int64)),
            "label_sum": int(labels.sum(dtype=np.int64)),
            "picks": picks,
            "images": [images[i].reshape(-1).tolist() for i in picks],
            "labels": [int(labels[i]) for i in picks],
        }
    expect["fashion"] = out


# ---------------------------------------------------------------------------------- npy / npz

def npy_fixtures(out, expect):
    d = mkdir(out, "npy")
    rng = np.random.default_rng(11)
    cols = mkdir(d, "cols")
    arrays = {
        "a_u8": rng.integers(0, 256, size=(6, 2, 3), dtype=np.uint8),
        "b_i8": np.array([-128, -5, 0, 5, 127, 1], dtype=np.int8),
        "c_u16": np.array([0, 1, 255, 256, 65535, 4660], dtype=np.uint16),
        "d_i16": np.array([-32768, -1, 0, 1, 32767, -4660], dtype=np.int16),
        "e_u32": np.array([[0, 2**32 - 1], [1, 2], [3, 4], [5, 6], [7, 8], [2**31, 9]],
                          dtype=np.uint32),
        "f_i32": np.array([-2**31, -1, 0, 1, 2**31 - 1, 42], dtype=np.int32),
        "g_i64": np.array([[-2**63, 2**63 - 1, 0, -1]] * 3 + [[1, 2, 3, 4]] * 3,
                          dtype=np.int64),
        "h_f32": rng.standard_normal(size=(6, 2, 2)).astype(np.float32),
        "i_f64": np.array([0.1, -1e300, 5e-324, 2.5, -0.0, 1e-7], dtype=np.float64),
    }
    for name, a in arrays.items():
        np.save(os.path.join(cols, name + ".npy"), a)
    expect["npy_cols"] = {name: values(a) for name, a in arrays.items()}

    # Format version 2.0 (a 4-byte header length) and a big header.
    v2 = mkdir(d, "v2")
    a = np.arange(12, dtype=np.float64).reshape(4, 3) / 7
    with open(os.path.join(v2, "wide.npy"), "wb") as f:
        np.lib.format.write_array(f, a, version=(2, 0))
    expect["npy_v2"] = {"wide": values(a)}

    # .npz, stored and deflated; two archives are row shards of one table.
    npz = mkdir(d, "npz")
    x0 = rng.standard_normal(size=(5, 3)).astype(np.float32)
    y0 = np.arange(5, dtype=np.int64) * -3
    x1 = rng.standard_normal(size=(4, 3)).astype(np.float32)
    y1 = np.arange(4, dtype=np.int64) + 100
    np.savez(os.path.join(npz, "part-0.npz"), x=x0, y=y0)
    np.savez_compressed(os.path.join(npz, "part-1.npz"), x=x1, y=y1)
    expect["npz"] = {"x": values(np.concatenate([x0, x1])), "y": values(np.concatenate([y0, y1]))}
    with np.load(os.path.join(npz, "part-1.npz")) as z:  # what NumPy reads back
        assert (z["x"] == x1).all() and (z["y"] == y1).all()

    # Shards of one column through `columns:` globs, cut differently per column (one empty).
    shards = mkdir(d, "shards")
    x = rng.integers(-1000, 1000, size=(8, 2), dtype=np.int32)
    y = rng.standard_normal(size=(8,)).astype(np.float64)
    for i, (lo, hi) in enumerate([(0, 3), (3, 3), (3, 8)]):
        np.save(os.path.join(shards, "x_%03d.npy" % i), x[lo:hi])
    for i, (lo, hi) in enumerate([(0, 4), (4, 8)]):
        np.save(os.path.join(shards, "y_%03d.npy" % i), y[lo:hi])
    expect["npy_shards"] = {"x": values(x), "y": values(y)}

    bad = mkdir(d, "bad")
    np.save(os.path.join(bad, "fortran.npy"), np.asfortranarray(np.arange(12.0).reshape(3, 4)))
    with open(os.path.join(bad, "fortran.npy"), "rb") as f:
        assert b"'fortran_order': True" in f.read(128)
    whole = io.BytesIO()
    np.save(whole, np.arange(40, dtype=np.int32).reshape(10, 4))
    raw = whole.getvalue()
    header = len(raw) - 40 * 4
    with open(os.path.join(bad, "cut.npy"), "wb") as f:
        f.write(raw[:header + 7 * 16 + 3])  # inside row 7
    expect["npy_cut"] = {"header": header, "row": 7}
    np.save(os.path.join(bad, "m_000.npy"), np.zeros((3, 2), dtype=np.float32))
    np.save(os.path.join(bad, "m_001.npy"), np.zeros((3, 3), dtype=np.float32))
    np.save(os.path.join(bad, "complex.npy"), np.zeros((3,), dtype=np.complex64))
    # Corrupt headers: sizes that overflow 64 bits, a dimension past 64 bits.
    for name, shape in (("huge.npy", (2**16, 2**24, 2**24)), ("long.npy", (10**20,))):
        with open(os.path.join(bad, name), "wb") as f:
            np.lib.format.write_array_header_1_0(
                f, {"descr": "|u1", "fortran_order": False, "shape": shape})
            f.write(bytes(64))


# ------------------------------------------------------------------------------------- tokens

MEGATRON_CODES = {np.uint16: 8, np.int32: 4}


def write_megatron(prefix, docs, dtype):
    """A Megatron .bin + .idx pair as megatron/core/datasets/indexed_dataset.py writes it."""
    item = np.dtype(dtype).itemsize
    with open(prefix + ".bin", "wb") as f:
        for doc in docs:
            f.write(np.asarray(doc, dtype=dtype).tobytes())
    sizes = np.array([len(doc) for doc in docs], dtype=np.int32)
    pointers = np.concatenate([[0], np.cumsum(sizes[:-1], dtype=np.int64) * item]).astype(np.int64)
    doc_idx = np.arange(len(docs) + 1, dtype=np.int64)
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00")
        f.write(struct.pack("<Q", 1))
        f.write(struct.pack("<B", MEGATRON_CODES[dtype]))
        f.write(struct.pack("<Q", len(sizes)))
        f.write(struct.pack("<Q", len(doc_idx)))
        f.write(sizes.tobytes())
        f.write(pointers.tobytes())
        f.write(doc_idx.tobytes())


def token_fixtures(out, expect):
    d = mkdir(out, "tokens")
    rng = np.random.default_rng(13)
    nano = mkdir(d, "nano")
    # Not starting with 0x1f 0x8b: that would look like gzip (see the report on FileBytes).
    t = rng.integers(0, 65536, size=(1001,), dtype=np.uint16)
    t[0] = 50256
    t.tofile(os.path.join(nano, "train.bin"))
    u = rng.integers(0, 65536, size=(1000,), dtype=np.uint16)
    u[0] = 1
    u.tofile(os.path.join(nano, "val.bin"))
    expect["nano"] = {"train": t.tolist(), "val": u.tolist()}
    wide = mkdir(d, "wide")
    w = rng.integers(-2**31, 2**31 - 1, size=(53,), dtype=np.int32)
    w[0] = 7
    w.tofile(os.path.join(wide, "w.bin"))
    expect["tokens_i32"] = w.tolist()
    odd = mkdir(d, "odd")
    with open(os.path.join(odd, "odd.bin"), "wb") as f:
        f.write(b"\x01\x02\x03")

    mega = mkdir(d, "megatron")
    docs16 = [rng.integers(0, 65536, size=(n,), dtype=np.uint16) for n in (5, 1, 17, 9)]
    docs16[0][0] = 3
    write_megatron(os.path.join(mega, "corpus_u16"), docs16, np.uint16)
    docs32 = [rng.integers(-2**31, 2**31 - 1, size=(n,), dtype=np.int32) for n in (12, 7)]
    docs32[0][0] = 5
    write_megatron(os.path.join(mega, "corpus_i32"), docs32, np.int32)
    # The .bin lost its last document's tail.
    write_megatron(os.path.join(mega, "short_u16"), docs16, np.uint16)
    with open(os.path.join(mega, "short_u16.bin"), "r+b") as f:
        f.truncate(20)
    # An index promising 2^62 sequences.
    with open(os.path.join(mega, "lying.idx"), "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 8, 2**62, 2) + bytes(64))
    with open(os.path.join(mega, "lying.bin"), "wb") as f:
        f.write(bytes(64))
    expect["megatron"] = {"u16": np.concatenate(docs16).tolist(),
                          "i32": np.concatenate(docs32).tolist()}


# ---------------------------------------------------------------------------------------- csv

def csv_fixtures(out, expect):
    d = mkdir(out, "csv")
    rows = [
        [1, 0.5, 'say "hi"', -7],
        [2, -1.25e-3, "a,b,c", 3],
        [-3, 1e20, "line one\nline two", 4],
        [4, "", "", 5.5],          # empty float field: NaN; the last column turns float
        [5, 7, "héllo, wörld", 6],
        [6, 2.0, '""', 0],
    ]
    good = mkdir(d, "good")
    with open(os.path.join(good, "table.csv"), "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["id", "score", "note", "mixed"])
        w.writerows(rows)
    # What Python's csv module reads back is the truth.
    with open(os.path.join(good, "table.csv"), newline="", encoding="utf-8") as f:
        back = list(csv.reader(f))[1:]
    expect["csv_table"] = {
        "id": [int(r[0]) for r in back],
        "score": [None if r[1] == "" else float(r[1]) for r in back],
        "note": [r[2] for r in back],
        "mixed": [float(r[3]) for r in back],
    }

    # Two shards with one header, and a tab-separated file without a header.
    shards = mkdir(d, "shards")
    for i, part in enumerate([[["a", 1], ["b", 2]], [["c", 3]]]):
        path = os.path.join(shards, "part-%d.csv" % i)
        with open(path, "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(["name", "n"])
            w.writerows(part)
    tsv = mkdir(d, "tsv")
    with open(os.path.join(tsv, "x.tsv"), "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, delimiter="\t", lineterminator="\n")
        w.writerows([[1, "x\ty"], [2, "z"]])

    # Row 3 (line 5, after a row spanning two lines) has two fields.
    bad = mkdir(d, "bad")
    with open(os.path.join(bad, "bad.csv"), "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["k", "v", "t"])
        w.writerow([1, 10, "ok"])
        w.writerow([2, 20, "two\nlines"])
        w.writerow([3, 30])
        w.writerow([4, 40, "fine"])
    expect["csv_bad"] = {"row": 3, "line": 5, "k": [1, 2, 4]}
    # One column whose values are blank but for spaces: rows all the same.
    spaces = mkdir(d, "spaces")
    with open(os.path.join(spaces, "one.csv"), "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([["v"], ["a"], [" "], ["\t"], [""], ["b"]])
    with open(os.path.join(spaces, "one.csv"), newline="", encoding="utf-8") as f:
        expect["csv_spaces"] = [r[0] for r in csv.reader(f)][1:]
    headers = mkdir(d, "headers")
    for name, header in (("h1.csv", ["a", "b"]), ("h2.csv", ["a", "c"])):
        with open(os.path.join(headers, name), "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(header)
            w.writerow([1, 2])


# -------------------------------------------------------------------------------------- jsonl

def jsonl_fixtures(out, expect):
    d = mkdir(out, "jsonl")
    rows = [
        {"id": 1, "score": 0.5, "name": "ann", "ok": True, "vec": [[1, 2], [3, 4.5]], "n": 3},
        {"id": -2, "score": -1e-3, "name": 'quote " and \\ and \n', "ok": False,
         "vec": [[0.25, -1], [1e10, 0]], "n": 4.5, "extra": [1, "x"]},
        {"id": 2**40, "score": 3, "name": "ünïcødé ☃", "ok": True,
         "vec": [[5, 6], [7, 8]], "n": -1},
    ]
    good = mkdir(d, "good")
    with open(os.path.join(good, "rows.jsonl"), "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    expect["jsonl_rows"] = {
        "id": [r["id"] for r in rows],
        "score": [float(r["score"]) for r in rows],
        "name": [r["name"] for r in rows],
        "ok": [int(r["ok"]) for r in rows],
        "vec": [float(np.float32(v)) for r in rows for v in np.asarray(r["vec"]).reshape(-1)],
        "n": [float(r["n"]) for r in rows],
    }
    # Row 3 (line 4, after a blank line) lacks "name"; row 4 has a string id.
    bad = mkdir(d, "bad")
    with open(os.path.join(bad, "bad.jsonl"), "w") as f:
        f.write(json.dumps({"id": 1, "name": "a"}) + "\n")
        f.write(json.dumps({"id": 2, "name": "b"}) + "\n\n")
        f.write(json.dumps({"id": 3}) + "\n")
        f.write(json.dumps({"id": "4", "name": "d"}) + "\n")
        f.write(json.dumps({"id": 5, "name": "e"}) + "\n")
    expect["jsonl_bad"] = {"row": 3, "line": 4, "id": [1, 2, 5], "name": ["a", "b", "e"]}


# ------------------------------------------------------------------------------ block reading

def read_block(path):
    """data/FORMAT.md, with NumPy only."""
    buf = np.fromfile(path, dtype=np.uint8)
    if buf[:8].tobytes() != b"RAYDBLK1":
        raise ValueError("no magic")
    (hlen,) = struct.unpack("<Q", buf[8:16].tobytes())
    if (16 + hlen) % 64:
        raise ValueError("16 + H = %d is not a multiple of 64" % (16 + hlen))
    header = json.loads(buf[16:16 + hlen].tobytes().decode("utf-8"))
    rows = header["num_rows"]
    out = {"num_rows": rows, "columns": []}
    for col in header["columns"]:
        at, nbytes = col["data"]
        if at % 64:
            raise ValueError("column %s data at %d" % (col["name"], at))
        entry = {"name": col["name"], "dtype": col["dtype"], "shape": col["shape"]}
        if col["dtype"] == "|S":
            oat, onbytes = col["offsets"]
            if oat % 64 or onbytes != 8 * (rows + 1):
                raise ValueError("column %s offsets %r" % (col["name"], col["offsets"]))
            offsets = np.frombuffer(buf, dtype="<i8", count=rows + 1, offset=oat)
            data = buf[at:at + nbytes].tobytes()
            entry["values"] = [data[offsets[i]:offsets[i + 1]].hex() for i in range(rows)]
        else:
            count = rows * int(np.prod(col["shape"], dtype=np.int64))
            dt = np.dtype(col["dtype"])
            if nbytes != count * dt.itemsize:
                raise ValueError("column %s has %d bytes" % (col["name"], nbytes))
            a = np.frombuffer(buf, dtype=dt, count=count, offset=at)
            a = a.reshape((rows, *col["shape"]))
            entry["values"] = a.reshape(-1).tolist()
        out["columns"].append(entry)
    return out


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--read-block":
        with open(sys.argv[3], "w") as f:
            json.dump(read_block(sys.argv[2]), f)
        return
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    expect = {"numpy": np.__version__}
    idx_fixtures(out, expect)
    fashion_fixtures(expect)
    npy_fixtures(out, expect)
    token_fixtures(out, expect)
    csv_fixtures(out, expect)
    jsonl_fixtures(out, expect)
    with open(os.path.join(out, "expect.json"), "w") as f:
        json.dump(expect, f, allow_nan=False)


if __name__ == "__main__":
    main()
