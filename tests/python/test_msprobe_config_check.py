#!/usr/bin/env python3
"""tests/python/test_msprobe_config_check.py - `nprobe config_check compare`
on packs made by msprobe's own ConfigChecker (msprobe.core.config_check, live)
for an HF Llama (hf_models.py) whose weights differ only by the seed: two
processes, seeds 0 and 1, the same batch.

- weights: an error with as many differences as the two weight.json files
  have values that differ (read here with json; the norm weights start at 1
  under both seeds);
- env, pip, random, dataset: pass (the same environment, callsites, batch);
- libs, hyperparameters: said not compared (msprobe packs no such item);
- a pack against itself passes everything; an msprobe pack against an
  nprobe pack is refused with a message naming both.
Skips (77) when msprobe or transformers is not importable."""
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE)))
from nptest import check, finish, foreign_env  # noqa: E402

PACK = r'''
import os, sys, torch
sys.path.insert(0, sys.argv[1])
import hf_models
from msprobe.core.config_check import ConfigChecker
ConfigChecker.apply_patches()
model = hf_models.build("llama", seed=int(sys.argv[2]))
ConfigChecker(model=model, output_zip_path=os.path.abspath(sys.argv[3]))
model(**hf_models.batch("llama", seed=1)).loss.backward()
'''

NP_PACK = r'''
import sys, torch
from nprobe.torch import ConfigChecker
ConfigChecker(torch.nn.Linear(2, 2), output_zip_path=sys.argv[1])
'''


def items(nprobe, a, b, out):
    p = subprocess.run([nprobe, "config_check", "compare", a, b, "-o", out],
                       capture_output=True, text=True, timeout=120)
    res = {}
    for ln in p.stdout.splitlines():
        w = ln.split(None, 2)
        if len(w) >= 2 and w[1] in ("pass", "error", "warning"):
            res[w[0]] = (w[1], w[2] if len(w) > 2 else "")
    return p.returncode, res, p.stdout + p.stderr


def main():
    nprobe = os.environ["NPROBE_BIN"]
    for mod in ("msprobe", "transformers"):
        if importlib.util.find_spec(mod) is None:
            print("SKIP: %s is not importable (pip install mindstudio-probe transformers)" % mod)
            return 77
    with tempfile.TemporaryDirectory(prefix="np_msp_cc_") as tmp:
        script = os.path.join(tmp, "pack.py")
        with open(script, "w") as f:
            f.write(PACK)
        packs = [os.path.join(tmp, "seed%d.zip" % s) for s in (0, 1)]
        procs = [subprocess.Popen([sys.executable, script, HERE, str(s), packs[s]], cwd=tmp,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env=foreign_env())
                 for s in (0, 1)]
        for p in procs:
            out, err = p.communicate(timeout=300)
            check(p.returncode == 0, "msprobe ConfigChecker: exit %d\n%s" % (p.returncode,
                                                                              err[-2000:]))
        w = []
        for pk in packs:
            with zipfile.ZipFile(pk) as z:
                w.append(json.loads(z.read("weights/step0/rank0/weight.json")))
        # the values that differ, read here (norm weights start at 1 in both)
        n_values = sum(w[0][k][s] != w[1].get(k, {}).get(s) for k in w[0] for s in w[0][k])
        check(n_values > 40, "only %d weight statistics differ" % n_values)
        rc, res, out = items(nprobe, packs[0], packs[1], os.path.join(tmp, "o1"))
        print(out)
        check(rc == 1, "seeds 0 and 1: exit %d, want 1" % rc)
        check(res.get("weights", ("",))[0] == "error" and
              res["weights"][1].startswith("%d differences" % n_values),
              "weights: %s, want error with %d differences" % (res.get("weights"), n_values))
        for it in ("env", "pip", "random", "dataset"):
            check(res.get(it, ("",))[0] == "pass", "%s: %s, want pass" % (it, res.get(it)))
        for it in ("libs", "hyperparameters"):
            check("not compared" in res.get(it, ("", ""))[1], "%s: %s, want 'not compared'"
                  % (it, res.get(it)))
        # a venv that sees the system's site-packages (Debian 13's torch):
        # msprobe lists a package installed in both twice, the imported one
        # first; that one is compared, the shadowed one is not
        def with_pip(src, dst, extra):
            with zipfile.ZipFile(src) as zi, zipfile.ZipFile(dst, "w") as zo:
                for m in zi.infolist():
                    data = zi.read(m)
                    if m.filename == "pip":
                        data = extra.encode() + data
                    zo.writestr(m, data)
            return dst
        dup = [with_pip(packs[0], os.path.join(tmp, "dup%d.zip" % k),
                        "zz-shadowed=1.%d\nzz_shadowed=%s\n" % (k, v))
               for k, v in ((0, "9.0"), (1, "8.0"))]
        rc, res, out = items(nprobe, dup[0], dup[0], os.path.join(tmp, "o4"))
        check(rc == 0 and res.get("pip", ("",))[0] == "pass",
              "pip listing a package twice, against itself: exit %d\n%s" % (rc, out))
        d2 = with_pip(packs[0], os.path.join(tmp, "dup2.zip"), "zz-shadowed=1.0\nzz_shadowed=7.0\n")
        rc, res, out = items(nprobe, dup[0], d2, os.path.join(tmp, "o5"))
        check(rc == 0 and res.get("pip", ("",))[0] == "pass",
              "the same imported version, shadowed ones differ: exit %d\n%s" % (rc, out))
        rc, res, out = items(nprobe, dup[0], dup[1], os.path.join(tmp, "o6"))
        check(res.get("pip", ("",))[0] != "pass" and "1 difference" in res["pip"][1],
              "the imported versions differ (1.0, 1.1): %s\n%s" % (res.get("pip"), out))
        rc, res, out = items(nprobe, packs[0], packs[0], os.path.join(tmp, "o2"))
        check(rc == 0 and all(v[0] == "pass" for v in res.values()) and len(res) == 7,
              "a pack against itself: exit %d\n%s" % (rc, out))
        npk = os.path.join(tmp, "nprobe.zip")
        p = subprocess.run([sys.executable, "-c", NP_PACK, npk], capture_output=True, text=True,
                           timeout=300)
        check(p.returncode == 0, "nprobe pack: %s" % p.stderr[-2000:])
        rc, res, out = items(nprobe, packs[0], npk, os.path.join(tmp, "o3"))
        check(rc == 2 and "msprobe ConfigChecker pack compares only with another" in out and
              "nprobe.zip" in out, "msprobe against nprobe pack: exit %d\n%s" % (rc, out))
    return finish()


if __name__ == "__main__":
    sys.exit(main())
