"""tests/nptest.py - what the Python test scripts share (one copy):
check() records a failure and goes on, run() runs nprobe, train_dump() runs
nprobe train with a dump config, finish() prints the count and gives the
exit status, edit_table() rewrites a table of an
HDF5 dump with h5py, h5_same() compares two HDF5 groups byte for byte,
step_ratios() and ratio_worst() measure a step's update ratios with torch
and hold the monitor's update_ratio records against them,
foreign_env() is the environment of a process that
loads no nprobe code (msprobe's own runs). A script imports it with
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    from nptest import check, run, finish"""
import os
import subprocess

NPROBE = os.environ.get("NPROBE_BIN", "nprobe")
failures = []


def foreign_env(env=None):
    """`env` (default os.environ) less the sanitizer runtimes pyrun.sh
    preloads in the sanitized pass: for a child that runs no nprobe C code
    (msprobe itself, the oracle), which they would only slow down (~25 %
    of its CPU with torch)."""
    env = dict(os.environ if env is None else env)
    env.pop("LD_PRELOAD", None)
    return env


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def run(args, cwd, text=True, env=None, fsize=None, timeout=300):
    """nprobe ARGS in cwd: (exit status, stdout, stderr), decoded unless text=False;
    env: variables added to the environment; fsize: a file size limit in bytes
    (ulimit -f); a run past `timeout` seconds is killed and reported as exit
    status -9."""
    def limit():
        import resource
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    try:
        p = subprocess.run([NPROBE] + args, cwd=cwd, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, timeout=timeout,
                           env=dict(os.environ, **(env or {})),
                           preexec_fn=limit if fsize is not None else None)
    except subprocess.TimeoutExpired:
        return -9, "" if text else b"", ("timed out after %d s" % timeout) if text else b"timed out"
    if text:
        return p.returncode, p.stdout.decode(), p.stderr.decode()
    return p.returncode, p.stdout, p.stderr



def train_dump(root, config, args, name="t.json"):
    """nprobe train ARGS in root, dumping as the JSON text `config` says
    (written to root/NAME): (exit status, stdout, stderr) as run() gives."""
    with open(os.path.join(root, name), "w") as f:
        f.write(config)
    return run(["train"] + args + ["--dump-config", name], root)

def finish():
    print("%d failed" % len(failures))
    return 1 if failures else 0


def edit_table(path, table, fn):
    """Replace dataset `table` ("entries", "calls") of the dump at path by
    fn(rows, h5file) (rows: the structured array, edited or filtered)."""
    import h5py
    with h5py.File(path, "r+") as f:
        rows = fn(f[table][...], f)
        del f[table]
        f.create_dataset(table, data=rows)


def h5_same(a, b, n=0):
    """Two h5py groups hold the same names and every dataset the same bytes
    (AssertionError naming the first that differs); the number of datasets
    compared (+ n). The shell tests' heredocs import it with PYTHONPATH set
    to tests/."""
    import h5py
    assert set(a) == set(b), (sorted(a), sorted(b))
    for k in a:
        if isinstance(a[k], h5py.Dataset):
            assert a[k][()].tobytes() == b[k][()].tobytes(), k
            n += 1
        else:
            n = h5_same(a[k], b[k], n)
    return n


def step_ratios(model, step):
    """step() (an optimizer's step) with the model's weights cloned around
    it: {parameter name: ||W_after - W_before|| / ||W_after||} in float64,
    torch's own measure of the update ratio."""
    import torch
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    step()
    return {n: float(torch.linalg.vector_norm((p.detach() - before[n]).double())
                     / torch.linalg.vector_norm(p.detach().double()))
            for n, p in model.named_parameters()}


def ratio_worst(path, want):
    """The update_ratio records of monitor file `path` against want[(step,
    name)] (step_ratios' figures): (the largest |difference| / the bound
    2^-24 (2 + 16 r) of docs/MONITOR.md, the records' count)."""
    import h5py
    worst, count = 0.0, 0
    with h5py.File(path, "r") as f:
        keys = [(a.decode(), b.decode()) for a, b in f["keys"][:]]
        for r in f["records"][:]:
            n, m = keys[r["key"]]
            if m == "update_ratio":
                w = want[(int(r["step"]), n)]
                worst = max(worst, abs(float(r["mean"]) - w) / (2.0 ** -24 * (2 + 16 * w)))
                count += 1
    return worst, count
