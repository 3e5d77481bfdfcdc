"""monitor_full_disk.py DIR CONFIG_DIR - the package's monitor on a full file
system (tests/cli/test_full_disk.sh fills DIR's file system first): the
training goes on to its last step, the monitor says once, by a
RuntimeWarning naming its file and "No space left on device", that it
stops recording, and its file stays readable up to its last finished step
(h5py in SWMR mode, and `nprobe monitor`). Exit status: 0 when all holds."""
import json
import os
import subprocess
import sys
import warnings

import h5py
import torch

from nprobe.torch import TrainerMon

d, cfg_dir = sys.argv[1], sys.argv[2]
STEPS = 1500
cfg = os.path.join(cfg_dir, "mon_pkg.json")   # the config outside the full file system
with open(cfg, "w") as f:
    json.dump({"task": "monitor", "dump_path": d, "monitor": {}}, f)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
mon = TrainerMon(cfg)
mon.set_monitor(model, opt)
done = 0
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    for s in range(STEPS):
        loss = torch.nn.functional.mse_loss(model(torch.randn(4, 16)), torch.randn(4, 8))
        loss.backward()
        opt.step()
        opt.zero_grad()
        done += 1
    mon.stop()
msgs = [str(w.message) for w in seen
        if issubclass(w.category, RuntimeWarning) and "nprobe monitor" in str(w.message)]
path = os.path.join(d, "monitor_rank0.h5")
fail = []
if done != STEPS:
    fail.append(f"the training stopped at step {done}")
if len(msgs) != 1 or "No space left on device" not in msgs[0] or path not in msgs[0]:
    fail.append(f"expected one warning naming {path} and 'No space left on device': {msgs}")
with h5py.File(path, "r", swmr=True) as f:
    st = f["steps"][()]
    n_rec, n_key = len(f["records"]), len(f["keys"])
if not (1 <= len(st) < STEPS and st["records"][-1] <= n_rec and st["keys"][-1] <= n_key and
        (st["step"] == range(len(st))).all()):
    fail.append(f"the file's steps: {len(st)} (records {n_rec}, keys {n_key})")
r = subprocess.run([os.environ["NPROBE_BIN"], "monitor", d, "--format", "json"],
                   capture_output=True, text=True)
if r.returncode not in (0, 1) or json.loads(r.stdout or "{}").get("steps") != len(st):
    fail.append(f"nprobe monitor: exit {r.returncode}: {r.stdout[:300]} {r.stderr[:300]}")
for x in fail:
    print("FAIL:", x)
if not fail:
    print(f"package monitor on a full disk: {STEPS} steps trained, {len(st)} kept, one warning")
sys.exit(1 if fail else 0)
