#!/usr/bin/python3
"""Writes the HDF5 fixtures of tests/unit/data/hdf5_test.cc with h5py (Debian's python3-h5py).

Usage: /usr/bin/python3 write_hdf5.py OUT_DIR

Every array is also written as NAME.bin: its values as NumPy holds them, C order, little-endian
(astype with '<'), so the test compares the rows rayd reads with what NumPy wrote, byte for byte.
"""
import os
import sys

import h5py
import numpy as np


def raw(out, name, array):
    le = array.astype(array.dtype.newbyteorder("<"))
    with open(os.path.join(out, name + ".bin"), "wb") as f:
        f.write(np.ascontiguousarray(le).tobytes())


def main(out):
    rng = np.random.default_rng(1234)

    # a.h5: one table of 100 rows, every dtype rayd holds, contiguous and chunked/compressed
    # datasets, a big-endian one, and a dataset in a group (not at the root).
    n = 100
    a = {
        "x": rng.standard_normal((n, 3, 4)).astype(np.float32),
        "y": np.arange(n, dtype=np.int64) * 1_000_000_007,
        "u8": rng.integers(0, 256, (n, 28), dtype=np.uint8),
        "i8": rng.integers(-128, 128, n, dtype=np.int8),
        "u16": rng.integers(0, 65536, n, dtype=np.uint16),
        "i16": rng.integers(-32768, 32768, (n, 2), dtype=np.int16),
        "u32": rng.integers(0, 2**32, n, dtype=np.uint32),
        "i32": rng.integers(-(2**31), 2**31, n, dtype=np.int32),
        "f64": rng.standard_normal((n, 5)),
        "be": rng.integers(-(2**31), 2**31, n, dtype=np.int32).astype(">i4"),
    }
    with h5py.File(os.path.join(out, "a.h5"), "w") as f:
        for name, array in a.items():
            if name == "f64":  # chunked, gzip: rows 7 at a time, so runs cross chunk edges
                f.create_dataset(name, data=array, chunks=(7, 5), compression="gzip")
            else:
                f.create_dataset(name, data=array)
            raw(out, name, array)
        ids = np.arange(n, dtype=np.uint16)[::-1].copy()
        f.create_dataset("meta/ids", data=ids)
        raw(out, "ids", ids)
        f.attrs["note"] = "rows are the first dimension"

    # Two row shards of one table (60 + 90 rows); then shards that disagree.
    x = rng.standard_normal((150, 8)).astype(np.float32)
    label = rng.integers(0, 10, 150, dtype=np.int32)
    raw(out, "shard_x", x)
    raw(out, "shard_label", label)
    for i, (lo, hi) in enumerate([(0, 60), (60, 150)]):
        with h5py.File(os.path.join(out, "shard-%03d.hdf5" % i), "w") as f:
            f.create_dataset("x", data=x[lo:hi], chunks=(16, 8), compression="gzip")
            f.create_dataset("label", data=label[lo:hi])
    with h5py.File(os.path.join(out, "shape-000.h5"), "w") as f:
        f.create_dataset("x", data=np.zeros((10, 8), np.float32))
    with h5py.File(os.path.join(out, "shape-001.h5"), "w") as f:
        f.create_dataset("x", data=np.zeros((10, 9), np.float32))
    with h5py.File(os.path.join(out, "cols-000.h5"), "w") as f:
        f.create_dataset("x", data=np.zeros((10, 8), np.float32))
        f.create_dataset("label", data=np.zeros(10, np.int32))
    with h5py.File(os.path.join(out, "cols-001.h5"), "w") as f:
        f.create_dataset("x", data=np.zeros((10, 8), np.float32))

    # Types rayd Data does not hold, lengths that differ, nothing at the root.
    with h5py.File(os.path.join(out, "bad.h5"), "w") as f:
        f.create_dataset("ok", data=np.zeros(4, np.float32))
        f.create_dataset("flags", data=np.array([True, False, True, True]))
        f.create_dataset("text", data=np.array([b"a", b"bb", b"c", b"d"]))
        f.create_dataset("u64", data=np.arange(4, dtype=np.uint64))
        f.create_dataset("half", data=np.zeros(4, np.float16))
        f.create_dataset("scalar", data=np.float32(1.5))
    with h5py.File(os.path.join(out, "ragged.h5"), "w") as f:
        f.create_dataset("long", data=np.zeros(10, np.float32))
        f.create_dataset("short", data=np.zeros(9, np.float32))
    with h5py.File(os.path.join(out, "groups_only.h5"), "w") as f:
        f.create_dataset("g/x", data=np.zeros(3, np.float32))

    # A larger compressed file for the processes and threads that read at once.
    img = rng.integers(0, 256, (20000, 64), dtype=np.uint8)
    cls = rng.integers(0, 1000, 20000, dtype=np.int64)
    with h5py.File(os.path.join(out, "big.h5"), "w") as f:
        f.create_dataset("img", data=img, chunks=(256, 64), compression="gzip")
        f.create_dataset("cls", data=cls, chunks=(1024,), compression="gzip", shuffle=True)
    raw(out, "img", img)
    raw(out, "cls", cls)


if __name__ == "__main__":
    main(sys.argv[1])
