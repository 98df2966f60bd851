"""Writes Fashion-MNIST's first N training images as an ImageFolder tree of JPEGs for rayd Data's
image benchmarks (bench/data/jpeg_pipeline.sh, bench/data/first_batch.sh): ROOT/<label>/<n>.jpg,
class folders 0..9, each image upscaled (bilinear) from 28x28 to SIZE x SIZE, grayscale, JPEG
quality 90, with PIL.

    /usr/bin/python3 make_image_folder.py ROOT [N=10000] [SIZE=64]
"""
import gzip
import os
import sys

import numpy as np
from PIL import Image

SRC = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def main():
    root = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 10000
    size = int(sys.argv[3]) if len(sys.argv) > 3 else 64
    images = read_idx(os.path.join(SRC, "train-images-idx3-ubyte.gz"))[:n]
    labels = read_idx(os.path.join(SRC, "train-labels-idx1-ubyte.gz"))[:n]
    for c in range(10):
        os.makedirs(os.path.join(root, str(c)), exist_ok=True)
    for i, (image, label) in enumerate(zip(images, labels)):
        img = Image.fromarray(image, mode="L").resize((size, size), Image.BILINEAR)
        img.save(os.path.join(root, str(label), f"{i:05d}.jpg"), quality=90)
    print(f"{len(images)} JPEGs of {size}x{size} in {root}", file=sys.stderr)


if __name__ == "__main__":
    main()
