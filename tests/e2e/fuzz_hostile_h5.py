#!/usr/bin/env python3
"""fuzz_hostile_h5.py - hostile dumps and checkpoints through every reader.

Real small dumps (statistics and tensor tasks) and a real checkpoint are made
by `nprobe train`; each case is one edit made with h5py (an array where a
single value belongs, a wrong type class, an empty dataspace, a huge or
negative numel, a payload whose shape disagrees with its row, a missing
table, a call tree with a cycle...). Every case goes through the commands
that read such a file: ls (all three views), show, compare (both sides) for
dumps; train --load and config_check pack --weights for checkpoints.

A run fails the test when it dies on a signal, prints a sanitizer report,
hangs, exits with anything but 0, 1 or 2, or exits non-zero without naming
the file it refused. A checkpoint whose model settings are valid but
enormous (n_layer, n_embd, vocab_size, channels of 2^31 - 1, products past
int32/int64, datasets that claim gigabytes the file does not hold) must be
refused (exit 2) naming the file and the attribute or dataset, quickly and
in little memory (peak RSS under HUGE_RSS_MB). Under NP_SANITIZED=1 (the ASan+UBSan pass) a
sample runs (sanitized_sample: about 200 of the 601), to keep the pass short.

  fuzz_hostile_h5.py            (NPROBE_BIN names the nprobe binary)
  fuzz_hostile_h5.py --list     print the case names and stop
"""
import concurrent.futures as cf
import os
import shutil
import subprocess
import sys
import tempfile

import h5py
import numpy as np

NPROBE = os.environ.get("NPROBE_BIN", "nprobe")
SANITIZED = os.environ.get("NP_SANITIZED") == "1"
TIMEOUT = 60 if SANITIZED else 20
SAN_MARKS = ("AddressSanitizer", "LeakSanitizer", "runtime error:", "UndefinedBehaviorSanitizer",
             "in a child process")


# Runs nprobe and prints its peak RSS (KiB) last on stderr: the children of
# this helper are only that one nprobe.
RSS_WRAP = r"""
import resource, subprocess, sys
rc = subprocess.run(sys.argv[1:]).returncode
sys.stderr.write("\nnp_fuzz_maxrss_kb %d\n" % resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
sys.exit(rc if rc >= 0 else 128 - rc)
"""


def run_rss(args, cwd):
    """(exit code or "hang", output, peak RSS in MiB) of nprobe args."""
    e = dict(os.environ)
    e["NPROBE_NO_ISOLATION"] = "1"
    try:
        p = subprocess.run([sys.executable, "-c", RSS_WRAP, NPROBE] + args, cwd=cwd, env=e,
                           stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        return "hang", "", 0
    out = p.stdout.decode("utf-8", "replace") + p.stderr.decode("utf-8", "replace")
    kb = [int(ln.split()[1]) for ln in out.splitlines() if ln.startswith("np_fuzz_maxrss_kb ")]
    return p.returncode, out, (kb[-1] if kb else 0) / 1024.0


def run(args, cwd, env=None):
    e = dict(os.environ)
    e["NPROBE_NO_ISOLATION"] = "1"  # a crash must show as a crash, not be isolated
    if env:
        e.update(env)
    try:
        p = subprocess.run([NPROBE] + args, cwd=cwd, env=e, stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=TIMEOUT)
        return p.returncode, p.stdout.decode("utf-8", "replace") + p.stderr.decode("utf-8", "replace")
    except subprocess.TimeoutExpired:
        return "hang", ""


def make_bases(root):
    """Real files from nprobe train: dump_stat.h5, dump_tensor.h5, ck.h5."""
    cfgs = {
        "stat": '{"task":"statistics","dump_path":"./d_stat","step":[0],"level":"mix"}',
        "tensor": '{"task":"tensor","dump_path":"./d_tensor","step":[0],"level":"mix"}',
    }
    for kind, text in cfgs.items():
        with open(os.path.join(root, kind + ".json"), "w") as f:
            f.write(text)
        rc, out = run(["train", "--model", "mlp", "--steps", "2", "--batch", "4", "--log-every", "100",
                       "--dump-config", kind + ".json"], root)
        if rc != 0:
            sys.exit("setup: nprobe train (%s dump) failed: %s" % (kind, out))
        shutil.copy(os.path.join(root, "d_" + kind, "step0", "rank0", "dump.h5"),
                    os.path.join(root, "base_" + kind + ".h5"))
    rc, out = run(["train", "--model", "mlp", "--steps", "2", "--stop-after", "1", "--batch", "4",
                   "--log-every", "100", "--save", "base_ck.h5"], root)
    if rc != 0:
        sys.exit("setup: nprobe train --save failed: " + out)
    for model, extra in (("gpt", ["--layers", "2", "--heads", "2", "--width", "16", "--context", "8"]),
                         ("cnn", [])):
        rc, out = run(["train", "--model", model, "--steps", "2", "--stop-after", "1", "--batch", "2",
                       "--log-every", "100", "--save", "base_ck_%s.h5" % model] + extra, root)
        if rc != 0:
            sys.exit("setup: nprobe train --model %s --save failed: %s" % (model, out))


# ---- edits -------------------------------------------------------------------

def attr_values():
    """(label, value) pairs written in place of an attribute; None deletes."""
    vlen = h5py.string_dtype()
    return [
        ("int_array", np.arange(3, dtype=np.int64)),
        ("int_array_big", np.arange(4096, dtype=np.int64)),
        ("int_2d", np.zeros((4, 4), dtype=np.int64)),
        ("one_elem_int", np.array([1], dtype=np.int64)),
        ("str_array", np.array([b"nprobe-dump"] * 50)),
        ("vlen_str_array", np.array(["nprobe-dump"] * 9, dtype=vlen)),
        ("vlen_str", np.array("nprobe-dump", dtype=vlen)),
        ("float", np.float64(1.5)),
        ("float16", np.float16(2.0)),
        ("int_scalar", np.int64(7)),
        ("negative", np.int64(-5)),
        ("huge", np.int64(2 ** 62)),
        ("uint64_max", np.uint64(2 ** 64 - 1)),
        ("str_scalar", np.bytes_(b"x")),
        ("long_str", np.bytes_(b"A" * 60000)),
        ("empty", h5py.Empty("i8")),
        ("empty_str", h5py.Empty("S4")),
        ("compound", np.array((1, 2.0), dtype=[("a", "i4"), ("b", "f8")])),
        ("bool", np.bool_(True)),
        ("deleted", None),
    ]


def set_attr(obj, name, value):
    if name in obj.attrs:
        del obj.attrs[name]
    if value is not None:
        obj.attrs[name] = value


DUMP_ATTRS = ["format", "format_version", "nprobe_version", "task", "level", "framework", "device",
              "precision", "step", "rank", "world_size", "complete", "loss_scale"]
CKPT_ATTRS = ["format", "format_version", "model", "hidden", "in_dim", "ln_eps", "step", "seed"]


def entries(f):
    return f["entries"][...]


def put_entries(f, rows):
    del f["entries"]
    f.create_dataset("entries", data=rows)


def data_row(rows):
    for i, r in enumerate(rows):
        if r["has_data"] == 1 and r["numel"] > 1:
            return i
    return 0


def row_edit(field, value, pick_data=True):
    def edit(f):
        rows = entries(f)
        k = data_row(rows) if pick_data else len(rows) - 1
        rows[k][field] = value
        put_entries(f, rows)
    return edit


def shape_edit(dim, value):
    def edit(f):
        rows = entries(f)
        k = data_row(rows)
        rows[k]["shape"][dim] = value
        put_entries(f, rows)
    return edit


def payload_edit(make):
    def edit(f):
        rows = entries(f)
        name = rows[data_row(rows)]["name"].decode()
        path = "data/" + name
        if path in f:
            del f[path]
        make(f, path)
    return edit


def calls_cycle(f):
    calls = f["calls"][...]
    if len(calls) >= 2:
        calls[0]["parent"] = calls[1]["call"]
        calls[1]["parent"] = calls[0]["call"]
    else:
        calls[0]["parent"] = calls[0]["call"]
    del f["calls"]
    f.create_dataset("calls", data=calls)


def calls_self_parent(f):
    calls = f["calls"][...]
    for c in calls:
        c["parent"] = c["call"]
    del f["calls"]
    f.create_dataset("calls", data=calls)


def delete(path):
    def edit(f):
        if path in f:
            del f[path]
    return edit


def replace_ds(path, data, **kw):
    def edit(f):
        if path in f:
            del f[path]
        f.create_dataset(path, data=data, **kw)
    return edit


def entries_missing_field(f):
    rows = entries(f)
    keep = [n for n in rows.dtype.names if n != "numel"]
    del f["entries"]
    f.create_dataset("entries", data=rows[keep])


def entries_2d(f):
    rows = entries(f)
    del f["entries"]
    n = len(rows) - len(rows) % 2
    f.create_dataset("entries", data=rows[:n].reshape(2, -1) if n else rows.reshape(1, -1))


def table_edits():
    vlen = h5py.string_dtype()
    e = [
        ("numel_neg", row_edit("numel", -1)),
        ("numel_zero", row_edit("numel", 0)),
        ("numel_huge", row_edit("numel", 2 ** 62)),
        ("numel_max", row_edit("numel", 2 ** 63 - 1)),
        ("numel_plus1", lambda f: row_edit("numel", int(entries(f)[data_row(entries(f))]["numel"]) + 1)(f)),
        ("ndim_neg", row_edit("ndim", -1)),
        ("ndim_9", row_edit("ndim", 9)),
        ("ndim_big", row_edit("ndim", 2 ** 30)),
        ("ndim_zero", row_edit("ndim", 0)),
        ("shape_neg", shape_edit(0, -1)),
        ("shape_huge", shape_edit(0, 2 ** 40)),
        ("shape_zero", shape_edit(0, 0)),
        ("shape_last_dim", shape_edit(7, 3)),
        ("has_data_0", row_edit("has_data", 0)),
        ("has_data_1_last", row_edit("has_data", 1, pick_data=False)),
        ("has_data_neg", row_edit("has_data", -1)),
        ("seq_neg", row_edit("seq", -1)),
        ("seq_huge", row_edit("seq", 2 ** 62)),
        ("name_unterminated", row_edit("name", b"A" * 256)),
        ("name_empty", row_edit("name", b"")),
        ("name_escape", row_edit("name", b"\x1b[31mred\x1b[0m.forward.output.0")),
        ("name_formula", row_edit("name", b"=HYPERLINK(\"x\").output.0")),
        ("call_unterminated", row_edit("call", b"B" * 256)),
        ("role_garbage", row_edit("role", b"\xff\xfe" * 8)),
        ("dtype_unknown", row_edit("dtype", b"complex128")),
        ("dtype_unterminated", row_edit("dtype", b"f" * 16)),
        ("stats_nan", row_edit("max", float("nan"))),
        ("nan_count_neg", row_edit("nan_count", -7)),
        ("del_entries", delete("entries")),
        ("del_calls", delete("calls")),
        ("del_data", delete("data")),
        ("entries_int", replace_ds("entries", np.arange(10))),
        ("entries_scalar", replace_ds("entries", np.int64(3))),
        ("entries_vlen", replace_ds("entries", np.array(["a", "b"], dtype=vlen))),
        ("entries_empty", lambda f: put_entries(f, entries(f)[:0])),
        ("entries_no_numel", entries_missing_field),
        ("entries_2d", entries_2d),
        ("calls_int", replace_ds("calls", np.arange(4))),
        ("calls_cycle", calls_cycle),
        ("calls_self_parent", calls_self_parent),
        ("data_is_dataset", lambda f: (delete("data")(f), f.create_dataset("data", data=np.arange(3)))),
        ("payload_missing", payload_edit(lambda f, p: None)),
        ("payload_str", payload_edit(lambda f, p: f.create_dataset(p, data=np.array([b"abc"] * 4)))),
        ("payload_vlen", payload_edit(lambda f, p: f.create_dataset(p, data=np.array(["a"] * 4, dtype=vlen)))),
        ("payload_short", payload_edit(lambda f, p: f.create_dataset(p, data=np.zeros(1, np.float32)))),
        ("payload_long", payload_edit(lambda f, p: f.create_dataset(p, data=np.zeros(100000, np.float32)))),
        ("payload_scalar", payload_edit(lambda f, p: f.create_dataset(p, data=np.float32(1)))),
        ("payload_empty", payload_edit(lambda f, p: f.create_dataset(p, data=np.zeros(0, np.float32)))),
        ("payload_null", payload_edit(lambda f, p: f.create_dataset(p, data=h5py.Empty("f4")))),
        ("payload_f16", payload_edit(lambda f, p: f.create_dataset(p, data=np.ones(16, np.float16)))),
        ("payload_int8", payload_edit(lambda f, p: f.create_dataset(p, data=np.ones(16, np.int8)))),
        ("payload_compound", payload_edit(lambda f, p: f.create_dataset(
            p, data=np.zeros(4, dtype=[("a", "i4"), ("b", "f8")])))),
        ("payload_4d", payload_edit(lambda f, p: f.create_dataset(p, data=np.zeros((1, 1, 1, 1), np.float32)))),
        ("payload_unallocated_huge", payload_edit(lambda f, p: f.create_dataset(
            p, shape=(2 ** 33,), dtype=np.float32, chunks=(1024,)))),
        ("payload_group", payload_edit(lambda f, p: f.create_group(p))),
        ("payload_dtype_attr_array", payload_edit(lambda f, p: (
            f.create_dataset(p, data=np.zeros(4, np.float32)),
            f[p].attrs.create("dtype", np.array([b"float32"] * 40))))),
    ]
    return e


def ckpt_edits():
    def param_edit(make):
        def edit(f):
            name = sorted(f["params"].keys())[0]
            p = "params/" + name
            del f[p]
            make(f, p)
        return edit

    e = [
        ("params_missing", param_edit(lambda f, p: None)),
        ("params_wrong_shape", param_edit(lambda f, p: f.create_dataset(p, data=np.zeros(3, np.float32)))),
        ("params_str", param_edit(lambda f, p: f.create_dataset(p, data=np.array([b"x"] * 3)))),
        ("params_vlen", param_edit(lambda f, p: f.create_dataset(p, data=np.array(["x"] * 3, dtype=h5py.string_dtype())))),
        ("params_scalar", param_edit(lambda f, p: f.create_dataset(p, data=np.float32(1)))),
        ("params_null", param_edit(lambda f, p: f.create_dataset(p, data=h5py.Empty("f4")))),
        ("params_compound", param_edit(lambda f, p: f.create_dataset(p, data=np.zeros(3, dtype=[("a", "i4")])))),
        ("params_9d", param_edit(lambda f, p: f.create_dataset(p, data=np.zeros((1,) * 9, np.float32)))),
        ("params_unallocated_huge", param_edit(lambda f, p: f.create_dataset(
            p, shape=(2 ** 33,), dtype=np.float32, chunks=(1024,)))),
        ("params_group", param_edit(lambda f, p: f.create_group(p))),
        ("params_dtype_attr_array", param_edit(lambda f, p: (
            f.create_dataset(p, data=np.zeros(3, np.float32)), f[p].attrs.create("dtype", np.arange(9))))),
        ("del_params", delete("params")),
        ("del_optim", delete("optim")),
        ("del_train", delete("train")),
        ("params_is_dataset", lambda f: (delete("params")(f), f.create_dataset("params", data=np.arange(3)))),
    ]
    for an in ("kind", "t"):
        for label, v in attr_values()[:8]:
            e.append(("optim_%s_%s" % (an, label), lambda f, an=an, v=v: set_attr(f["optim"], an, v)))
    for an in ("lr", "steps", "batch"):
        for label, v in attr_values()[:6]:
            e.append(("train_%s_%s" % (an, label),
                      lambda f, an=an, v=v: set_attr(f["train"], an, v) if "train" in f else None))
    return e


BIG = 2 ** 31 - 1
HUGE_RSS_MB = 400


def unstored(path, shape):
    """Replace dataset `path` by one of `shape` whose data the file does not
    hold (chunked, no chunk written: HDF5 reads it as zeros)."""
    def edit(f):
        del f[path]
        f.create_dataset(path, shape=shape, dtype=np.float32, chunks=(1,) * len(shape))
    return edit


def huge_edits():
    """(label, base, edit, the word the refusal must name): valid but
    enormous model settings, and shapes or data that disagree with them."""
    def attrs(**kv):
        return lambda f: [set_attr(f, k, np.int64(v)) for k, v in kv.items()]

    def both(*edits):
        return lambda f: [e(f) for e in edits]

    return [
        ("gpt_n_layer_2g", "ck_gpt", attrs(n_layer=BIG), "n_layer"),
        ("gpt_n_layer_3", "ck_gpt", attrs(n_layer=3), "n_layer"),
        ("gpt_n_embd_2g", "ck_gpt", attrs(n_embd=2 ** 31 - 2), "n_embd"),
        ("gpt_n_embd_2g_head1", "ck_gpt", attrs(n_embd=BIG, n_head=1), "n_embd"),
        ("gpt_n_embd_4x_overflow", "ck_gpt", attrs(n_embd=2 ** 30), "n_embd"),
        ("gpt_n_embd_32", "ck_gpt", attrs(n_embd=32), "n_embd"),
        ("gpt_vocab_2g", "ck_gpt", attrs(vocab_size=BIG), "vocab_size"),
        ("gpt_block_size_2g", "ck_gpt", attrs(block_size=BIG), "block_size"),
        ("gpt_vocab_2g_wte_unstored", "ck_gpt",
         both(attrs(vocab_size=BIG), unstored("params/wte.weight", (BIG, 16))), "wte.weight"),
        ("gpt_wpe_unstored", "ck_gpt", unstored("params/wpe.weight", (8, 16)), "wpe.weight"),
        ("gpt_all_2g", "ck_gpt", attrs(n_layer=BIG, n_embd=2 ** 31 - 2, vocab_size=BIG,
                                       block_size=BIG), "n_embd"),
        ("cnn_channels_2g", "ck_cnn", attrs(channels=BIG), "channels"),
        ("cnn_channels_2_30", "ck_cnn", attrs(channels=2 ** 30), "channels"),
        ("cnn_image_size_2g", "ck_cnn", attrs(image_size=2 ** 31 - 4), "channels"),
        ("cnn_n_classes_2g", "ck_cnn", attrs(n_classes=BIG), "n_classes"),
        ("mlp_hidden_2g", "ck", attrs(hidden=BIG), "hidden"),
        ("mlp_in_dim_2g", "ck", attrs(in_dim=BIG), "in_dim"),
        ("mlp_n_classes_2g", "ck", attrs(n_classes=BIG), "n_classes"),
        ("mlp_fc2_unstored_1g", "ck", unstored("params/fc2.weight", (2 ** 14, 2 ** 14)), "fc2.weight"),
        ("mlp_fc2_dims_overflow", "ck", unstored("params/fc2.weight", (2 ** 32, 2 ** 32, 2 ** 4)),
         "fc2.weight"),
    ]


def cases():
    """(name, kind, base, edit, diag) for every case; diag, for the root
    attribute cases, is the attribute's index plus the value's (the
    sanitized pass's sample, main())."""
    out = []
    for ai, an in enumerate(DUMP_ATTRS):
        for vi, (label, v) in enumerate(attr_values()):
            out.append(("stat.attr_%s.%s" % (an, label), "attr", "stat",
                        lambda f, an=an, v=v: set_attr(f, an, v), ai + vi))
    for base in ("stat", "tensor"):
        for label, edit in table_edits():
            out.append(("%s.%s" % (base, label), "dump", base, edit, None))
    for ai, an in enumerate(CKPT_ATTRS):
        for vi, (label, v) in enumerate(attr_values()):
            out.append(("ck.attr_%s.%s" % (an, label), "ckpt" if an == "format" else "ckpt_attr",
                        "ck", lambda f, an=an, v=v: set_attr(f, an, v), ai + vi))
    for label, edit in ckpt_edits():
        out.append(("ck.%s" % label, "ckpt", "ck", edit, None))
    for label, base, edit, word in huge_edits():
        out.append(("ck.huge_%s" % label, ("ckpt_huge", word), base, edit, None))
    return out


def sanitized_sample(all_cases):
    """The sanitized pass's cases: every second one, but of the root
    attribute cases (one reader per attribute type, the same malformed
    values for every attribute: 420 of the 601) one in four, on diagonals
    (attribute + value index = 0 mod 4): each attribute still meets five
    malformed values, each value three or four attributes of mixed types;
    the plain pass runs them all (CI time)."""
    return [c for i, c in enumerate(all_cases)
            if (c[4] % 4 == 0 if c[4] is not None else i % 2 == 0)]


# ---- one case ----------------------------------------------------------------

def commands(kind, fname, base, root):
    """The readers of a case's file: root attributes are read alike by every
    command, so an attribute case runs the two readers (ls, compare); a
    table or payload case runs every view."""
    train = ["train", "--model", "mlp", "--load", fname, "--steps", "2", "--batch", "4",
             "--log-every", "100"]
    if kind == "ckpt_attr":
        return [train]
    if isinstance(kind, tuple):  # ("ckpt_huge", word): the model comes from the file
        train[2] = {"ck": "mlp", "ck_gpt": "gpt", "ck_cnn": "cnn"}[base]
        return [train, ["config_check", "pack", "--no-python", "--weights", fname, "-o", fname + ".zip"]]
    if kind == "ckpt":
        return [train, ["config_check", "pack", "--no-python", "--weights", fname, "-o", fname + ".zip"]]
    cmp1 = ["compare", "-b", "base_%s.h5" % base, "-c", fname, "-o", fname + ".cmp1"]
    if kind == "attr":
        return [["ls", fname], cmp1]
    first = leaf_of(os.path.join(root, "base_%s.h5" % base))
    return [["ls", fname], ["ls", "--calls", fname], ["ls", "--tree", fname], ["show", fname, first], cmp1,
            ["compare", "-b", fname, "-c", "base_%s.h5" % base, "-o", fname + ".cmp2"]]


_leaf_cache = {}


def leaf_of(path):
    if path not in _leaf_cache:
        with h5py.File(path, "r") as f:
            rows = f["entries"][...]
            _leaf_cache[path] = rows[data_row(rows)]["name"].decode()
    return _leaf_cache[path]


def run_case(c, root):
    name, kind, base, edit = c[:4]
    fname = "case_%s.h5" % name.replace("/", "_")
    path = os.path.join(root, fname)
    shutil.copy(os.path.join(root, "base_%s.h5" % base), path)
    with h5py.File(path, "r+") as f:
        edit(f)
    bad = []
    for args in commands(kind, fname, base, root):
        what = "%s: nprobe %s" % (name, " ".join(args))
        if isinstance(kind, tuple):
            rc, out, rss = run_rss(args, root)
            if rc == 2 and kind[1] not in out:
                bad.append("%s: the refusal does not name %s:\n%s" % (what, kind[1], out[-1500:]))
            if rc != "hang" and rss > HUGE_RSS_MB:
                bad.append("%s: peak RSS %.0f MiB (at most %d)" % (what, rss, HUGE_RSS_MB))
            if rc in (0, 1):
                bad.append("%s: exit %d, expected a refusal (2)\n%s" % (what, rc, out[-1500:]))
        else:
            rc, out = run(args, root)
        if rc == "hang":
            bad.append("%s: no answer in %d s" % (what, TIMEOUT))
        elif rc < 0 or rc > 2:
            bad.append("%s: exit %d (signal or unexpected code)\n%s" % (what, rc, out[-3000:]))
        elif any(m in out for m in SAN_MARKS):
            bad.append("%s: sanitizer report or isolated crash\n%s" % (what, out[-3000:]))
        elif rc != 0 and fname not in out:
            bad.append("%s: exit %d without naming the file:\n%s" % (what, rc, out[-1500:]))
    for junk in os.listdir(root):
        if junk.startswith(fname):
            p = os.path.join(root, junk)
            shutil.rmtree(p) if os.path.isdir(p) else os.remove(p)
    return bad


def main():
    all_cases = cases()
    if "--list" in sys.argv:
        for c in all_cases:
            print(c[0])
        return 0
    pick = sanitized_sample(all_cases) if SANITIZED else all_cases
    only = os.environ.get("NP_FUZZ_ONLY")
    if only:
        pick = [c for c in all_cases if only in c[0]]
    root = tempfile.mkdtemp(prefix="np_fuzz_")
    try:
        make_bases(root)
        failures = []
        with cf.ThreadPoolExecutor(max_workers=2) as ex:
            for bad in ex.map(lambda c: run_case(c, root), pick):
                failures.extend(bad)
        for f in failures:
            print("FAIL:", f)
        print("%d cases (%d in all), %d failing runs" % (len(pick), len(all_cases), len(failures)))
        return 1 if failures else 0
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
