"""test_calib_corpus.py NPROBE - issue 31's calibration corpus, the subset
gated in CI: clean pairs of HF transformers models nobody here wrote
(tests/python/hf_corpus.py: built from config, random weights) compare
clean. One decoder with biases (Qwen2: its key bias gets a gradient that
is rounding noise, so Adam parts the weights at step 1), one encoder
(BERT), one vision model (ViT); fp32 against CPU bf16 autocast and against
fp16 autocast with torch.amp.GradScaler; seed 1, initial weights, level
mix, 2 steps; tensor task (replay on, three-way) and statistics task (the
low-precision runs' statistics dumps against the fp32 tensor dump, which
compare reads on statistics). Every compare must exit 0 with "first
culprit: none" and no error row; the same tensor pairs held to float32's
level (--rtol 5e-6) must have error rows (the comparison saw the
differences the rules accept). The full sweep is scripts/tools/
calib_sweep.py (docs/COMPARE.md, "Calibration corpus"). Skipped in the
sanitized pass (NP_SANITIZED=1): its C paths are those of python.
identical_dumps and python.data_tolerance, and it would add ~15 s there.

Expectations per torch version (KNOWN): under torch older than 2.13 (a
bare Debian 13 without Python 3.11 runs Debian's torch 2.6, docs/TORCH.md)
the ViT fp16 tensor pair has a step-1 false alarm, "the weights parted
before this step": torch 2.6 draws the ViT's cls_token and position
embeddings (trunc_normal_) otherwise than 2.13 from the same seed, and in
that model one element of layer 1's o_proj bias gradient is rounding noise
whose sign flips in fp16, so Adam's first step parts the zero-initialised
bias beyond its level (docs/COMPARE.md, "ViT fp16 under torch 2.6"). The
rule of "Weights that parted on the noise of the step before" is made for
that case (checked on torch 2.13's ViT, where the key bias parts the same
way at lr 1e-2) but was not re-run under torch 2.6: there a failure is
still printed as known and not counted, and everywhere else it must be
clean."""
import os
import re
import subprocess
import sys
import tempfile
import warnings

warnings.filterwarnings("ignore")
if os.environ.get("NP_SANITIZED") == "1":   # before the imports (torch, transformers: ~7 s)
    print("SKIP: the corpus subset runs in the plain pass")
    sys.exit(77)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import hf_corpus
except ImportError as e:
    print("SKIP: %s" % e)
    sys.exit(77)

NPROBE = sys.argv[1]
ARCHS = ["qwen2", "bert", "vit"]


def _torch_before(major, minor):
    import torch
    v = re.match(r"(\d+)\.(\d+)", torch.__version__)
    return bool(v) and (int(v.group(1)), int(v.group(2))) < (major, minor)


# (arch, precision, task) -> why this torch may give a false alarm (issue 31)
KNOWN = {("vit", "fp16", "tensor"): "issue 31, step>=1: torch < 2.13 draws another ViT, whose o_proj bias "
                                    "parts at Adam's first step on a noise gradient element"} \
    if _torch_before(2, 13) else {}


def compare(b, c, tmp, *extra):
    out = os.path.join(tmp, "rep_%d" % compare.n)
    compare.n += 1
    p = subprocess.run([NPROBE, "compare", "-b", b, "-c", c, "-o", out, "--format", "json"]
                       + list(extra), capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


compare.n = 0


def main():
    fails = 0
    with tempfile.TemporaryDirectory() as tmp:
        for arch in ARCHS:
            d = lambda prec, task: os.path.join(tmp, "%s_%s_%s" % (arch, prec, task))
            hf_corpus.dump(arch, d("fp32", "tensor"), seed=1, prec="fp32", task="tensor")
            for prec in ("bf16", "fp16"):
                for task in ("tensor", "statistics"):
                    hf_corpus.dump(arch, d(prec, task), seed=1, prec=prec, task=task)
                    code, text = compare(d("fp32", "tensor"), d(prec, task), tmp)
                    m = re.search(r"(\d+) error", text)
                    ok = code == 0 and "first culprit: none" in text and bool(m) and m.group(1) == "0"
                    if task == "statistics":
                        ok = ok and "statistics mode" in text
                    known = KNOWN.get((arch, prec, task))
                    print("%s %s %s: exit %d, %s" % ("ok  " if ok else "KNOWN" if known else "FAIL", arch,
                                                     prec + " " + task, code, text.splitlines()[0] if text else ""))
                    if not ok and known:
                        print("  not counted: %s" % known)
                    elif not ok:
                        print(text)
                        fails += 1
                # the control: float32's level everywhere sees the differences
                code, text = compare(d("fp32", "tensor"), d(prec, "tensor"), tmp, "--rtol", "5e-6", "--no-replay")
                m = re.search(r"(\d+) error", text)
                if code != 1 or not m or int(m.group(1)) == 0:
                    print("FAIL %s %s tensor at --rtol 5e-6: exit %d, no error rows\n%s"
                          % (arch, prec, code, text))
                    fails += 1
    print("%d failure(s)" % fails)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
