#!/usr/bin/python3
"""Writes the image fixtures of images_test.cc into a fresh folder, with the reference tools:
PIL for JPEG and PNG (and their decoded pixels, the expected values), Python's tarfile for
WebDataset shards.

    /usr/bin/python3 write_images.py OUT

OUT/expected.json says what each reader must return: rows in order, labels, keys, byte offsets
for error messages, and the names of raw pixel files (OUT/expected/*.u8, height x width x
channels, uint8) holding PIL's decoding (Image.open(f).convert("RGB" or "L")).
"""

import io
import json
import os
import sys
import tarfile

import numpy as np
from PIL import Image

H, W = 8, 12
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png")


def picture(seed, height=H, width=W):
    """Smooth colours with a little noise: JPEG keeps them close, PNG exactly."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    rgb = np.stack([x * 255 // max(width - 1, 1), y * 255 // max(height - 1, 1),
                    (x + y) * 255 // (width + height)], axis=-1).astype(np.int32)
    rgb += rng.integers(-8, 9, size=rgb.shape)
    return np.clip(rgb + seed * 7 % 40, 0, 255).astype(np.uint8)


def save(image, path, **kwargs):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    image.save(path, **kwargs)


def encode(image, fmt, **kwargs):
    out = io.BytesIO()
    image.save(out, format=fmt, **kwargs)
    return out.getvalue()


class Expected:
    def __init__(self, out):
        self.out = out
        self.count = 0
        os.makedirs(os.path.join(out, "expected"), exist_ok=True)

    def pixels(self, image):
        """Writes PIL's RGB and L decodings of `image`; returns their file names."""
        names = {}
        for mode in ("RGB", "L"):
            array = np.asarray(image.convert(mode))
            name = os.path.join(self.out, "expected", "%d.%s.u8" % (self.count, mode))
            array.tofile(name)
            names[mode] = name
        self.count += 1
        return names

    def raw(self, array):
        name = os.path.join(self.out, "expected", "%d.raw.u8" % self.count)
        self.count += 1
        np.ascontiguousarray(array, dtype=np.uint8).tofile(name)
        return name


def image_folder_rows(root):
    """torchvision.datasets.ImageFolder's rows (classes sorted; sorted(os.walk(...)), files
    sorted), leaving out names that start with '.' as rayd does."""
    classes = sorted(e.name for e in os.scandir(root) if e.is_dir() and not e.name.startswith("."))
    rows = []
    for label, name in enumerate(classes):
        for folder, _, files in sorted(os.walk(os.path.join(root, name), followlinks=True)):
            for f in sorted(files):
                if f.lower().endswith(IMAGE_EXTENSIONS) and not f.startswith("."):
                    rows.append((os.path.join(folder, f), label))
    return classes, rows


def write_folder(out, expected):
    """folder/: classes Zebra, bird, cat, dog (sorted by bytes: Zebra first), every kind of PNG
    PIL writes and JPEGs, a nested folder, files and folders that are ignored."""
    root = os.path.join(out, "folder")
    rgb = lambda seed: Image.fromarray(picture(seed))
    save(rgb(1), os.path.join(root, "dog", "d1.png"))
    save(rgb(2), os.path.join(root, "dog", "d2.jpg"), quality=95)
    save(rgb(16).convert("CMYK"), os.path.join(root, "dog", "d3.jpg"), quality=95)
    save(rgb(3).convert("L"), os.path.join(root, "cat", "c1.png"))
    save(rgb(4).convert("P", palette=Image.ADAPTIVE, colors=16), os.path.join(root, "cat", "c2.png"))
    rgba = rgb(5).convert("RGBA")
    rgba.putalpha(Image.fromarray(picture(6)[:, :, 0]))
    save(rgba, os.path.join(root, "cat", "aa", "z.png"))  # after cat's own files, as os.walk
    save(rgb(7), os.path.join(root, "cat", "a.png"))
    save(rgb(8).convert("LA"), os.path.join(root, "bird", "b2.png"))
    save(rgb(9).convert("L"), os.path.join(root, "bird", "b1.jpg"), quality=95)
    save(rgb(10), os.path.join(root, "Zebra", "z.JPEG"), quality=90)
    # A 1-bit PNG and a palette PNG with transparency.
    save(rgb(11).convert("1"), os.path.join(root, "Zebra", "one-bit.png"))
    p = rgb(12).convert("P", palette=Image.ADAPTIVE, colors=4)
    p.info["transparency"] = 0
    save(p, os.path.join(root, "Zebra", "pt.png"), transparency=0)
    # Ignored: not images, hidden, directly in the root.
    with open(os.path.join(root, "cat", "notes.txt"), "w") as f:
        f.write("not an image\n")
    save(rgb(13), os.path.join(root, ".hidden", "h.png"))
    save(rgb(14), os.path.join(root, "stray.png"))
    save(rgb(15), os.path.join(root, "dog", ".x.png"))

    classes, rows = image_folder_rows(root)
    return {
        "root": root,
        "classes": classes,
        "rows": [{"path": p, "label": l, "pixels": expected.pixels(Image.open(p)),
                  "jpeg": p.lower().endswith((".jpg", ".jpeg"))} for p, l in rows],
    }


def bilinear(image, out_h, out_w):
    """Pixel-centre bilinear resize (align_corners=False), in floating point."""
    in_h, in_w, _ = image.shape

    def taps(n_in, n_out):
        at = np.maximum((np.arange(n_out) + 0.5) * n_in / n_out - 0.5, 0.0)
        i0 = np.minimum(np.floor(at).astype(np.int64), n_in - 1)
        i1 = np.minimum(i0 + 1, n_in - 1)
        return i0, i1, np.where(i0 >= n_in - 1, 0.0, at - i0)

    y0, y1, fy = taps(in_h, out_h)
    x0, x1, fx = taps(in_w, out_w)
    img = image.astype(np.float64)
    top = img[y0][:, x0] * (1 - fx)[None, :, None] + img[y0][:, x1] * fx[None, :, None]
    bottom = img[y1][:, x0] * (1 - fx)[None, :, None] + img[y1][:, x1] * fx[None, :, None]
    return np.rint(top * (1 - fy)[:, None, None] + bottom * fy[:, None, None]).astype(np.uint8)


def write_mixed(out, expected):
    """mixed/a/: an 8 x 12 and a 4 x 6 image (sorted: big.png first)."""
    small = picture(20, 4, 6)
    big = picture(21)
    save(Image.fromarray(big), os.path.join(out, "mixed", "a", "big.png"))
    save(Image.fromarray(small), os.path.join(out, "mixed", "a", "small.png"))
    return {
        "root": os.path.join(out, "mixed"),
        "big": os.path.join(out, "mixed", "a", "big.png"),
        "small": os.path.join(out, "mixed", "a", "small.png"),
        "big_rgb": expected.raw(big),
        "small_resized_rgb": expected.raw(bilinear(small, H, W)),
    }


def write_corrupt(out):
    """corrupt/: a/ holds a JPEG cut short in its scan, a PNG whose pixel data is garbled, a GIF
    named .jpg and a good PNG; b/ a good JPEG."""
    root = os.path.join(out, "corrupt")
    jpeg = encode(Image.fromarray(picture(30)), "JPEG", quality=95)
    scan = jpeg.index(b"\xff\xda")
    png = bytearray(encode(Image.fromarray(picture(31)), "PNG"))
    idat = png.index(b"IDAT")
    for i in range(idat + 8, idat + 40):
        png[i] ^= 0x5A
    gif = encode(Image.fromarray(picture(32)), "GIF")
    files = {"a/bad.jpg": jpeg[:scan + (len(jpeg) - scan) // 2], "a/broken.png": bytes(png),
             "a/gif.jpg": gif,
             "a/good.png": encode(Image.fromarray(picture(33)), "PNG"),
             "b/good.jpg": encode(Image.fromarray(picture(34)), "JPEG", quality=95)}
    for name, data in files.items():
        os.makedirs(os.path.dirname(os.path.join(root, name)), exist_ok=True)
        with open(os.path.join(root, name), "wb") as f:
            f.write(data)
    return {"root": root, **{name: os.path.join(root, name) for name in files}}


def add(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = 1700000000
    tar.addfile(info, io.BytesIO(data))


def members(path):
    """Each member's name -> [header offset, the header before its data]."""
    with tarfile.open(path) as tar:
        return {m.name: [m.offset, m.offset_data - 512] for m in tar.getmembers()}


def write_shards(out, expected):
    """wds/: two shards of samples png + cls + json. Shard 0 is written as pax (Python's
    default; its long key needs a pax header), shard 1 as GNU (a long key needs an 'L' header)
    and it holds a directory, a metadata file and an extra .txt, all ignored."""
    samples = []
    os.makedirs(os.path.join(out, "wds"), exist_ok=True)
    keys = [["000000", "000001", "p" * 110 + "_000002"],
            ["long/" + "g" * 120 + "_000003", "000004"]]
    n = 0
    for shard, (fmt, shard_keys) in enumerate(zip((tarfile.PAX_FORMAT, tarfile.GNU_FORMAT), keys)):
        path = os.path.join(out, "wds", "shard-%06d.tar" % shard)
        with tarfile.open(path, "w", format=fmt) as tar:
            if shard == 1:
                d = tarfile.TarInfo("long")
                d.type = tarfile.DIRTYPE
                tar.addfile(d)
                add(tar, "__meta__", b"ignored")
            for key in shard_keys:
                image = Image.fromarray(picture(40 + n))
                cls = n * 3 % 10
                text = json.dumps({"i": n}).encode()
                add(tar, key + ".png", encode(image, "PNG"))
                add(tar, key + ".cls", (str(cls) + ("\n" if shard == 1 else "")).encode())
                add(tar, key + ".json", text)
                if key == "000004":
                    add(tar, key + ".txt", b"an extension the first sample lacks")
                samples.append({"key": key, "cls": cls, "json": text.decode(),
                                "png": expected.pixels(image)})
                n += 1
    jpg_path = os.path.join(out, "wds_jpg", "shard.tar")
    os.makedirs(os.path.dirname(jpg_path), exist_ok=True)
    jpg_samples = []
    with tarfile.open(jpg_path, "w") as tar:
        for i in range(3):
            image = Image.fromarray(picture(50 + i))
            data = encode(image, "JPEG", quality=95)
            add(tar, "s%d.jpg" % i, data)
            add(tar, "s%d.cls" % i, str(i).encode())
            jpg_samples.append({"jpg": expected.pixels(Image.open(io.BytesIO(data)))})
    return {"glob": os.path.join(out, "wds", "shard-*.tar"), "samples": samples,
            "jpg": jpg_path, "jpg_samples": jpg_samples}


def write_broken_shards(out):
    """A shard cut short inside a member, one whose sample 000001 lacks its .cls, one whose
    cls is not a number, and one holding a corrupt PNG."""
    root = os.path.join(out, "wds_broken")
    os.makedirs(root, exist_ok=True)
    whole = os.path.join(root, "whole.tar")
    with tarfile.open(whole, "w") as tar:
        for i in range(3):
            add(tar, "%06d.png" % i, encode(Image.fromarray(picture(60 + i)), "PNG"))
            add(tar, "%06d.cls" % i, b"1")
    cut_member = "000001.png"
    at = members(whole)[cut_member]
    with open(whole, "rb") as f:
        data = f.read()
    truncated = os.path.join(root, "truncated.tar")
    with open(truncated, "wb") as f:
        f.write(data[:at[1] + 512 + 100])  # 100 bytes into the member's data
    os.remove(whole)

    missing = os.path.join(root, "missing.tar")
    with tarfile.open(missing, "w") as tar:
        for i in range(4):
            add(tar, "%06d.png" % i, encode(Image.fromarray(picture(70 + i)), "PNG"))
            if i != 1:
                add(tar, "%06d.cls" % i, b"2")
    bad_cls = os.path.join(root, "badcls.tar")
    with tarfile.open(bad_cls, "w") as tar:
        for i in range(3):
            add(tar, "%06d.png" % i, encode(Image.fromarray(picture(80 + i)), "PNG"))
            add(tar, "%06d.cls" % i, b"x1" if i == 1 else b"4")
    bad_png = os.path.join(root, "badpng.tar")
    with tarfile.open(bad_png, "w") as tar:
        for i in range(3):
            png = encode(Image.fromarray(picture(90 + i)), "PNG")
            add(tar, "%06d.png" % i, png[:len(png) // 2] if i == 2 else png)
            add(tar, "%06d.cls" % i, b"5")
    return {"truncated": truncated, "truncated_member": cut_member,
            "truncated_header_at": at[1], "truncated_size": at[1] + 512 + 100,
            "missing": missing, "missing_first_header": members(missing)["000001.png"][0],
            "badcls": bad_cls, "badcls_header_at": members(bad_cls)["000001.cls"][1],
            "badpng": bad_png, "badpng_header_at": members(bad_png)["000002.png"][1]}


def main():
    out = sys.argv[1]
    expected = Expected(out)
    manifest = {
        "height": H, "width": W,
        "folder": write_folder(out, expected),
        "mixed": write_mixed(out, expected),
        "corrupt": write_corrupt(out),
        "wds": write_shards(out, expected),
        "wds_broken": write_broken_shards(out),
    }
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump(manifest, f, indent=1)


if __name__ == "__main__":
    main()
