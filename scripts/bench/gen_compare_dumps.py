"""gen_compare_dumps.py OUT_ROOT --tensors K --numel N [--task tensor|statistics]
[--seed S] [--noise X] - write one nprobe dump (format v1, docs/FORMAT.md)
for the compare benchmark: OUT_ROOT/step0/rank0/dump.h5 with K float32
leaves of N elements each (task tensor: payloads chunked as the probe writes
them, chunks of at most 1 MiB along the leading dimension), or K rows of
statistics only (task statistics). Two calls with different seeds/noise give
a bench and a cmp side whose tensors differ slightly. /entries and /calls
have the probe's record layout (C struct alignment, NUL-terminated strings:
common/format.c), so reading them costs what it costs on a real dump.
numpy + h5py."""
import argparse
import os
import zlib

import h5py
import numpy as np

NAME_LEN, SITE_LEN, ROLE_LEN, DTYPE_LEN, KIND_LEN, MAX_DIMS = 256, 128, 16, 16, 8, 8
ENTRY = np.dtype([
    ("seq", "<i8"), ("name", f"S{NAME_LEN}"), ("call", f"S{NAME_LEN}"),
    ("role", f"S{ROLE_LEN}"), ("dtype", f"S{DTYPE_LEN}"), ("ndim", "<i4"),
    ("shape", "<i8", (MAX_DIMS,)), ("numel", "<i8"),
    ("max", "<f8"), ("min", "<f8"), ("mean", "<f8"), ("norm", "<f8"),
    ("nan_count", "<i8"), ("posinf_count", "<i8"), ("neginf_count", "<i8"),
    ("crc32", "<u4"), ("has_data", "i1"), ("requires_grad", "i1"),
], align=True)
CALL = np.dtype([("seq", "<i8"), ("call", f"S{NAME_LEN}"), ("kind", f"S{KIND_LEN}"),
                 ("parent", f"S{NAME_LEN}"), ("callsite", f"S{SITE_LEN}")], align=True)


def h5_type(dt):
    """The HDF5 compound of dt with NUL-terminated strings, as the probe
    writes it (h5py would make them NUL-padded)."""
    src = h5py.h5t.py_create(dt)
    t = h5py.h5t.create(h5py.h5t.COMPOUND, dt.itemsize)
    for i in range(src.get_nmembers()):
        m = src.get_member_type(i)
        if m.get_class() == h5py.h5t.STRING:
            m = m.copy()
            m.set_strpad(h5py.h5t.STR_NULLTERM)
        t.insert(src.get_member_name(i), src.get_member_offset(i), m)
    return t


def write_table(f, name, arr):
    """A chunked, extendible 1-d table of the probe's layout."""
    t = h5_type(arr.dtype)
    space = h5py.h5s.create_simple((len(arr),), (h5py.h5s.UNLIMITED,))
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_chunk((64,))
    ds = h5py.h5d.create(f.id, name.encode(), t, space, dcpl=dcpl)
    ds.write(h5py.h5s.ALL, h5py.h5s.ALL, arr, mtype=t)


PER_CALL = (("input", "0"), ("input", "1"), ("output", "0"))


def parse_args(doc):
    """The options both generators take (gen_msprobe_dumps.py imports this)."""
    ap = argparse.ArgumentParser(description=doc)
    ap.add_argument("out")
    ap.add_argument("--tensors", type=int, default=300)
    ap.add_argument("--numel", type=int, default=1 << 20)
    ap.add_argument("--task", default="tensor")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--noise", type=float, default=0.0)
    return ap.parse_args()


def leaf_shape(numel):
    rows = max(1, numel // 1024)
    return (rows, numel // rows)


def leaves(a):
    """The leaves of a dump with options `a`, in order, the same for both
    formats: (call index, call, role, key, name, x, (max, min, mean, norm)),
    three per Functional.linear call; x is the float32 tensor (task tensor)
    or None (statistics only)."""
    base = np.random.default_rng(12345)
    noise = np.random.default_rng(a.seed)
    shape = leaf_shape(a.numel)
    for i in range(a.tensors):
        c = i // len(PER_CALL)
        role, key = PER_CALL[i % len(PER_CALL)]
        call = f"Functional.linear.{c}.forward"
        if a.task == "tensor":
            x = base.standard_normal(shape, dtype=np.float32)
            if a.noise:
                x = x * (1 + a.noise * noise.standard_normal(shape, dtype=np.float32))
            x64 = x.astype(np.float64)
            st = (float(x64.max()), float(x64.min()), float(x64.mean()),
                  float(np.sqrt(np.dot(x64.ravel(), x64.ravel()))))
        else:
            x = None
            m = float(base.standard_normal()) * (1 + a.noise * float(noise.standard_normal()))
            st = (abs(m) + 3, -abs(m) - 3, m, abs(m) * 30)
        yield c, call, role, key, f"{call}.{role}.{key}", x, st


def main():
    a = parse_args(__doc__)
    d = os.path.join(a.out, "step0", "rank0")
    os.makedirs(d, exist_ok=True)
    n_calls = (a.tensors + len(PER_CALL) - 1) // len(PER_CALL)
    entries = np.zeros(a.tensors, dtype=ENTRY)
    calls = np.zeros(n_calls, dtype=CALL)
    shape = leaf_shape(a.numel)
    chunk_rows = max(1, min(shape[0], (1 << 20) // (4 * shape[1])))
    with h5py.File(os.path.join(d, "dump.h5"), "w") as f:
        for k, v in dict(format="nprobe-dump", nprobe_version="0.1.0", task=a.task, level="L1",
                         framework="bench", device="bench", precision="fp32").items():
            f.attrs[k] = v
        for k, v in dict(format_version=1, step=0, rank=0, world_size=1, complete=1).items():
            f.attrs[k] = np.int64(v)
        data = f.create_group("data")
        for c in range(n_calls):
            calls[c] = (c, f"Functional.linear.{c}.forward".encode(), b"api", b"", b"")
        for i, (c, call, role, key, name, x, st) in enumerate(leaves(a)):
            e = entries[i]
            e["seq"], e["name"], e["call"] = c, name.encode(), call.encode()
            e["role"], e["dtype"], e["ndim"] = role.encode(), b"float32", 2
            e["shape"][:2] = shape
            e["numel"] = shape[0] * shape[1]
            e["max"], e["min"], e["mean"], e["norm"] = st
            if x is not None:
                e["crc32"] = zlib.crc32(x.tobytes()) & 0xFFFFFFFF
                e["has_data"] = 1
                ds = data.create_dataset(name, data=x, chunks=(chunk_rows, shape[1]))
                ds.attrs["dtype"] = "float32"
        write_table(f, "entries", entries)
        write_table(f, "calls", calls)


if __name__ == "__main__":
    main()
