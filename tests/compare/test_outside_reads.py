#!/usr/bin/env python3
"""test_outside_reads.py - reading a dump or a checkpoint never reads
another file (issue 13, hostile input).

HDF5 can make a dataset read other files: an external link, a soft link
(which can lead to one), external raw storage (H5Pset_external), a virtual
dataset. A dump edited with h5py so that a payload, /entries or /data is
one of those, and a checkpoint whose /params dataset is, must be refused
naming the file and saying it lies outside (compare: an error row or exit
2; train --load and config_check pack --weights: exit 2); before, the
external payload was read (its bytes only failed the crc32) and replay
recomputed a culprit from them. msprobe: a .pt in dump_tensor_data/ that is
a symlink out of the dump's folder is an error row naming it; a symlink
inside the folder is read as before; a FIFO as a .pt, construct.json, a
checkpoint or a --mapping file is refused at once (the readers waited
forever for a writer).
"""
import glob
import os
import shutil
import sys
import tempfile

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from nptest import check, finish, run, train_dump  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(os.environ.get("NP_SOURCE_DIR", os.path.join(HERE, "..", "..")),
                   "tests", "fixtures", "msprobe", "tensor_fp32")
OUTSIDE = "lies outside the file"


def compare_rows(root, b, c, out):
    rc, so, se = run(["compare", "-b", b, "-c", c, "-o", out, "--format", "csv"], root)
    rep = glob.glob(os.path.join(root, out, "*.csv"))
    text = open(rep[0]).read() if rep else ""
    return rc, so + se, text


def payload_names(path, k):
    """k payloads of more than one element (h5py ignores external storage
    for a scalar dataset)."""
    with h5py.File(path, "r") as f:
        return sorted(n for n in f["data"].keys() if f["data"][n].size > 1)[:k]


def hdf5_cases(root):
    rc, so, se = train_dump(root, '{"task":"tensor","dump_path":"./d","step":[0],"level":"mix"}',
                            ["--model", "mlp", "--steps", "2", "--stop-after", "1", "--batch",
                             "4", "--log-every", "100", "--save", "ck.h5"])
    if rc != 0:
        check(False, "setup: train exit %d %s" % (rc, se))
        return
    src = os.path.join(root, "d", "step0", "rank0", "dump.h5")
    secret = os.path.join(root, "outside.bin")
    with open(secret, "wb") as f:
        f.write(b"outside the dump " * 4096)
    other = os.path.join(root, "other.h5")
    shutil.copy(src, other)
    p_ext, p_link, p_soft, p_vds = payload_names(src, 4)

    c = os.path.join(root, "c.h5")
    shutil.copy(src, c)
    with h5py.File(c, "r+") as f:
        g = f["data"]
        ds = g[p_ext]
        shape, dt = ds.shape, ds.dtype
        del g[p_ext]
        g.create_dataset(p_ext, shape=shape, dtype=dt, external=[(secret, 0, h5py.h5f.UNLIMITED)])
        del g[p_link]
        g[p_link] = h5py.ExternalLink(other, "/data/" + p_link)
        del g[p_soft]
        g[p_soft] = h5py.SoftLink("/data/" + p_vds)
        ds = g[p_vds]
        shape, dt = ds.shape, ds.dtype
        del g[p_vds]
        lay = h5py.VirtualLayout(shape=shape, dtype=dt)
        lay[...] = h5py.VirtualSource(other, "/data/" + p_vds, shape=shape)
        g.create_virtual_dataset(p_vds, lay)
    rc, out, text = compare_rows(root, src, c, "o_pay")
    check(rc == 1, "payloads outside: exit %d, want 1\n%s" % (rc, out[-600:]))
    lines = {l.split(",")[0]: l for l in text.splitlines()[1:]}
    for leaf in (p_ext, p_link, p_soft, p_vds):
        row = lines.get(leaf, "")
        check(",error," in row and OUTSIDE in row,
              "payload %s outside the file: row %r" % (leaf, row[-300:]))

    # /entries an external link, /data an external link: the whole file refused
    for case, table in (("entries", "entries"), ("data", "data")):
        c = os.path.join(root, "c_%s.h5" % case)
        shutil.copy(src, c)
        with h5py.File(c, "r+") as f:
            del f[table]
            f[table] = h5py.ExternalLink(other, "/" + table)
        rc, out, text = compare_rows(root, src, c, "o_" + case)
        if case == "entries":
            check(rc == 2 and OUTSIDE in out and "c_entries.h5" in out,
                  "/entries outside: exit %d\n%s" % (rc, out[-600:]))
        else:
            with h5py.File(src, "r") as f:
                no_payload = int((f["entries"]["has_data"] == 0).sum())
            n_pass = text.count(",pass,")
            check(rc == 1 and OUTSIDE in text and n_pass <= no_payload,
                  "/data outside: exit %d, %d rows pass (%d have no payload)\n%s"
                  % (rc, n_pass, no_payload, out[-600:]))

    # a checkpoint whose first parameter is an external link / external storage
    for case in ("link", "storage"):
        ck = os.path.join(root, "ck_%s.h5" % case)
        shutil.copy(os.path.join(root, "ck.h5"), ck)
        with h5py.File(ck, "r+") as f:
            name = sorted(f["params"].keys())[0]
            ds = f["params"][name]
            shape, dt, attrs = ds.shape, ds.dtype, dict(ds.attrs)
            del f["params"][name]
            if case == "link":
                f["params"][name] = h5py.ExternalLink(os.path.join(root, "ck.h5"),
                                                      "/params/" + name)
            else:
                nd = f["params"].create_dataset(name, shape=shape, dtype=dt,
                                                external=[(secret, 0, h5py.h5f.UNLIMITED)])
                for k, v in attrs.items():
                    nd.attrs[k] = v
        rc, so, se = run(["train", "--model", "mlp", "--steps", "2", "--batch", "4", "--load",
                          ck], root)
        check(rc == 2 and OUTSIDE in se and os.path.basename(ck) in se,
              "train --load of a checkpoint with an outside %s: exit %d %r" % (case, rc, se[-400:]))
        rc, so, se = run(["config_check", "pack", "--no-python", "--weights", ck, "-o",
                          "w_%s.zip" % case], root)
        check(rc == 2 and "outside" in se and os.path.basename(ck) in se,
              "pack --weights of a checkpoint with an outside %s: exit %d %r" % (case, rc, se[-400:]))


def fifo_checkpoint(root):
    """A FIFO given as a checkpoint or as compare's --mapping: refused at
    once (HDF5 and jansson opened it and waited forever for a writer)."""
    fifo = os.path.join(root, "ck_fifo.h5")
    os.mkfifo(fifo)
    dump = os.path.join(root, "d", "step0", "rank0", "dump.h5")
    for args in (["train", "--model", "mlp", "--steps", "2", "--load", fifo],
                 ["config_check", "pack", "--no-python", "--weights", fifo, "-o", "w_fifo.zip"],
                 ["compare", "-b", dump, "-c", dump, "-o", "o_map", "--mapping", fifo]):
        rc, so, se = run(args, root, timeout=60)
        check(rc == 2 and "not a regular file" in se and "ck_fifo.h5" in se,
              "%s of a FIFO: exit %d %r" % (" ".join(args[:2]), rc, se[-300:]))


def msprobe_cases(root):
    base, cmp = os.path.join(root, "msb"), os.path.join(root, "msc")
    shutil.copytree(FIX, base)
    shutil.copytree(FIX, cmp)
    data = glob.glob(os.path.join(cmp, "step0", "*", "dump_tensor_data"))[0]
    pts = sorted(os.listdir(data))
    out_pt, in_pt = pts[0], pts[1]
    # out: a symlink to the same bytes outside the dump's folder
    os.makedirs(os.path.join(root, "elsewhere"))
    moved = os.path.join(root, "elsewhere", out_pt)
    shutil.move(os.path.join(data, out_pt), moved)
    os.symlink(moved, os.path.join(data, out_pt))
    # in: a symlink to a copy inside dump_tensor_data/ (read as before)
    shutil.move(os.path.join(data, in_pt), os.path.join(data, "copy_" + in_pt))
    os.symlink("copy_" + in_pt, os.path.join(data, in_pt))
    rc, out, text = compare_rows(root, base, cmp, "o_msp")
    lines = {l.split(",")[0]: l for l in text.splitlines()[1:]}
    row = lines.get(out_pt[:-3], "")
    check(rc == 1 and ",error," in row and "leads outside the dump" in row,
          "msprobe .pt symlinked outside: exit %d, row %r\n%s" % (rc, row[-300:], out[-400:]))
    row = lines.get(in_pt[:-3], "")
    check(",pass," in row, "msprobe .pt symlinked inside the folder: row %r" % row[-300:])

    # a FIFO as a .pt or as construct.json: refused at once (the reader
    # waited forever for a writer)
    fifo_pt = pts[2]
    os.remove(os.path.join(data, fifo_pt))
    os.mkfifo(os.path.join(data, fifo_pt))
    rc, so, se = run(["compare", "-b", base, "-c", cmp, "-o", "o_fifo", "--format", "csv"], root,
                     timeout=60)
    rep = glob.glob(os.path.join(root, "o_fifo", "*.csv"))
    text = open(rep[0]).read() if rep else ""
    row = {l.split(",")[0]: l for l in text.splitlines()[1:]}.get(fifo_pt[:-3], "")
    check(rc == 1 and ",error," in row and "not a regular file" in row,
          "a FIFO .pt: exit %d, row %r %s" % (rc, row[-300:], se[-300:]))
    os.remove(os.path.join(data, fifo_pt))
    shutil.copy(os.path.join(FIX, os.path.relpath(data, cmp), fifo_pt), data)
    cj = os.path.join(os.path.dirname(data), "construct.json")
    os.remove(cj)
    os.mkfifo(cj)
    rc, so, se = run(["compare", "-b", base, "-c", cmp, "-o", "o_fifo2", "--format", "csv"], root,
                     timeout=60)
    check(rc in (0, 1), "a FIFO construct.json (read as absent): exit %d %r" % (rc, se[-400:]))


def main():
    root = tempfile.mkdtemp(prefix="np_outside_")
    try:
        hdf5_cases(root)
        fifo_checkpoint(root)
        msprobe_cases(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
