#!/usr/bin/env python3
"""Writes Fashion-MNIST out as per-node image folders (PNG), with a chosen
label skew, so that each node of a cluster can be started with only its own
directory:

    OUT/<node>/train/<class>/<n>.png
    OUT/<node>/test/<class>/<n>.png

With --skew s, a sample of class k goes to node (k mod nodes) with
probability s and to a node drawn uniformly otherwise: 0 is IID, 1 gives each
node only its own classes. Only the Python standard library is used (PNG is
written with zlib). The class folder names are the ones
configs/own-data.toml lists in data.classes.

    python3 scripts/fashion-mnist-folders.py /tmp/edge-data --nodes a b c --skew 0.8
"""

import argparse
import gzip
import os
import random
import struct
import sys
import zlib

CLASSES = ["T-shirt-top", "Trouser", "Pullover", "Dress", "Coat",
           "Sandal", "Shirt", "Sneaker", "Bag", "Ankle-boot"]


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    magic, = struct.unpack(">I", data[:4])
    dims = magic & 0xFF
    shape = struct.unpack(">" + "I" * dims, data[4:4 + 4 * dims])
    return shape, data[4 + 4 * dims:]


def find(src, base):
    for name in (base + ".gz", base):
        path = os.path.join(src, name)
        if os.path.exists(path):
            return path
    sys.exit(f"fashion-mnist-folders: no {base}[.gz] in {src}")


def png(width, height, pixels):
    """An 8-bit grey PNG of `pixels` (bytes, row by row)."""
    def chunk(kind, body):
        return (struct.pack(">I", len(body)) + kind + body
                + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF))
    rows = b"".join(b"\x00" + pixels[y * width:(y + 1) * width] for y in range(height))
    return (b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows, 6)) + chunk(b"IEND", b""))


def split(src, prefix, out, nodes, skew, limit, rng, part):
    (n, h, w), images = read_idx(find(src, prefix + "-images-idx3-ubyte"))
    (m,), labels = read_idx(find(src, prefix + "-labels-idx1-ubyte"))
    if n != m:
        sys.exit(f"fashion-mnist-folders: {n} images but {m} labels in {src}")
    counts = {node: 0 for node in nodes}
    for i in range(n):
        label = labels[i]
        node = (nodes[label % len(nodes)] if rng.random() < skew
                else nodes[rng.randrange(len(nodes))])
        if limit and counts[node] >= limit:
            continue
        folder = os.path.join(out, node, part, CLASSES[label])
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f"{i}.png"), "wb") as f:
            f.write(png(w, h, images[i * h * w:(i + 1) * h * w]))
        counts[node] += 1
    return counts


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", help="directory to write the node folders into")
    p.add_argument("--nodes", nargs="+", default=["a", "b", "c"])
    p.add_argument("--skew", type=float, default=0.8,
                   help="share of each class on its own node (0: IID, 1: disjoint)")
    p.add_argument("--train", type=int, default=0,
                   help="training images per node at most (0: all that fall to it)")
    p.add_argument("--test", type=int, default=0, help="test images per node at most")
    p.add_argument("--source", default="/usr/share/datasets/fashion-mnist",
                   help="Fashion-MNIST's IDX files")
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    if not 0 <= a.skew <= 1:
        sys.exit("fashion-mnist-folders: --skew must be in [0, 1]")
    rng = random.Random(a.seed)
    train = split(a.source, "train", a.out, a.nodes, a.skew, a.train, rng, "train")
    test = split(a.source, "t10k", a.out, a.nodes, a.skew, a.test, rng, "test")
    for node in a.nodes:
        print(f"{os.path.join(a.out, node)}: {train[node]} training and {test[node]} test images")


if __name__ == "__main__":
    main()
