"""link_steps.py SRC_ROOT OUT_ROOT STEPS RANKS - a dump root of STEPS x RANKS
step files for bench_files.sh, each a hard link to one of SRC_ROOT's step
files (in turn): thousands of files without their bytes on disk, so the
benchmark measures what each file costs to find, check, open and read."""
import glob
import os
import sys

src, out, steps, ranks = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
files = sorted(glob.glob(src + "/step*/rank*/dump.h5"))
k = 0
for s in range(steps):
    for r in range(ranks):
        d = f"{out}/step{s}/rank{r}"
        os.makedirs(d, exist_ok=True)
        os.link(files[k % len(files)], d + "/dump.h5")
        k += 1
