"""test_torch_config_check.py - nprobe.torch.ConfigChecker: two PyTorch runs
that differ only in torch.manual_seed give packs whose diff fails exactly
`random` and `weights`; two runs with the same seed pass everything. The
packs are read back by `nprobe config_check compare` (json) and by Python's
zipfile (weights SHA-256 against hashlib over the tensor's float32 bytes)."""
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import zipfile

FAILS = []


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print("FAIL:", what)


RUN = r'''
import sys, torch
sys.path.insert(0, sys.argv[1])
from nprobe.torch import ConfigChecker
ConfigChecker.apply_patches()
torch.manual_seed(int(sys.argv[2]))
import torch_models
model = torch_models.CNN()
data = [(torch.arange(64.0).view(1, 1, 8, 8) / 64 + i, torch.tensor([i])) for i in range(3)]
ConfigChecker(model, output_zip_path=sys.argv[3], dataloader=data,
              hyperparameters={"lr": 0.1, "batch": 1})
'''


def items(nprobe, a, b, out):
    p = subprocess.run([nprobe, "config_check", "compare", a, b, "-o", out],
                       capture_output=True, text=True)
    res = {}
    for ln in p.stdout.splitlines():
        w = ln.split()
        if len(w) >= 2 and w[1] in ("pass", "error", "warning"):
            res[w[0]] = w[1]
    return p.returncode, res, p.stdout


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    nprobe = os.environ["NPROBE_BIN"]
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "run.py")
        with open(script, "w") as f:
            f.write(RUN)
        for name, seed in (("a", 1), ("b", 2), ("c", 1)):
            p = subprocess.run([sys.executable, script, here, str(seed), f"{tmp}/{name}.zip"],
                               capture_output=True, text=True, cwd=tmp)
            check(p.returncode == 0, f"pack {name}: exit {p.returncode} {p.stderr[-2000:]}")
        code, res, out = items(nprobe, f"{tmp}/a.zip", f"{tmp}/b.zip", f"{tmp}/ab")
        print(out)
        check(code == 1, f"different seeds: exit {code}, want 1")
        failing = sorted(k for k, v in res.items() if v != "pass")
        check(failing == ["random", "weights"], f"failing items {failing}, want random, weights")
        check(len(res) == 7, f"seven items in the summary: {res}")
        code, res, out = items(nprobe, f"{tmp}/a.zip", f"{tmp}/c.zip", f"{tmp}/ac")
        check(code == 0 and all(v == "pass" for v in res.values()),
              f"same seed: every item passes ({code}, {res})")
        z = zipfile.ZipFile(f"{tmp}/a.zip")
        rnd = json.loads(z.read("random.json"))
        check(rnd.get("torch.manual_seed[0]") == "1" and
              rnd.get("torch.manual_seed[0].callsite", "").startswith("run.py:"),
              f"the seeding call and its callsite: {rnd}")
        w = json.loads(z.read("weights.json"))["params"]
        sys.path.insert(0, here)
        import torch
        torch.manual_seed(1)
        import torch_models
        ref = torch_models.CNN().state_dict()["conv1.weight"]
        want = hashlib.sha256(ref.contiguous().numpy().tobytes()).hexdigest()
        check(w.get("conv1.weight", {}).get("sha256") == want, "weights SHA-256 of conv1.weight")
        libs = json.loads(z.read("libs.json"))
        check(libs.get("torch") == torch.__version__, "torch version in libs.json")
        ds = json.loads(z.read("dataset.json"))
        check(len(ds.get("batches", {})) == 2, f"two batch hashes: {ds}")
        check("pip.txt" in z.namelist(), "pip.txt in the pack")
    print(f"{len(FAILS)} failed")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
