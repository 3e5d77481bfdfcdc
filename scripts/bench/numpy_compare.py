"""numpy_compare.py BENCH_H5 CMP_H5 - the baseline for bench_compare.sh: read
every payload pair with h5py and compute, in float64 with numpy, the metrics
nprobe compare computes (msprobe's definitions: Cosine, EucDist, MaxAbsErr,
MaxRelativeErr, One Thousandth / Five Thousandths Err Ratio). Prints
"rows=N bytes=B seconds=T" on stdout."""
import sys
import time

import h5py
import numpy as np

EPS = np.finfo(np.float64).eps


def metrics(b, c):
    b = b.astype(np.float64).ravel()
    c = c.astype(np.float64).ravel()
    d = c - b
    zero = b == 0
    bb = np.where(zero, EPS, b)
    cc = np.where(zero, c + EPS, c)
    rel = np.abs((cc - bb) / bb)
    nb, nc = np.linalg.norm(b), np.linalg.norm(c)
    cos = float(np.dot(b, c) / (nb * nc)) if nb > 0 and nc > 0 else float("nan")
    return (cos, float(np.linalg.norm(d)), float(np.max(np.abs(d))), float(np.max(rel)),
            float(np.mean(rel < 0.001)), float(np.mean(rel < 0.005)))


def main():
    t0 = time.perf_counter()
    nbytes = rows = 0
    with h5py.File(sys.argv[1], "r") as fb, h5py.File(sys.argv[2], "r") as fc:
        names = [n.decode() for n in fb["entries"]["name"]]
        for n in names:
            b = fb["data"][n][()]
            c = fc["data"][n][()]
            metrics(b, c)
            nbytes += b.nbytes + c.nbytes
            rows += 1
    dt = time.perf_counter() - t0
    print(f"rows={rows} bytes={nbytes} seconds={dt:.4f}")


if __name__ == "__main__":
    main()
