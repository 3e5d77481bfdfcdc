"""tests/profile/gen_traces.py OUTDIR [STEPS] - real torch.profiler traces
of a small MLP trained with AdamW (CPU activity, record_shapes):
  OUTDIR/a.json      clean model, export_chrome_trace
  OUTDIR/a2/         the same model again, tensorboard_trace_handler (a folder)
  OUTDIR/b.json.gz   the model with a slow GELU (one F.gelu call per row in a
                     Python loop: the same op, rows-times the calls), gzip
Each profiles STEPS (3) active steps after one warmup step."""
import gzip
import os
import shutil
import sys

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler


class SlowGELU(torch.nn.Module):
    def forward(self, x):
        return torch.stack([F.gelu(r) for r in x.unbind(0)])


def model(slow):
    torch.manual_seed(0)
    act = SlowGELU() if slow else torch.nn.GELU()
    return torch.nn.Sequential(torch.nn.Linear(64, 256), act, torch.nn.Linear(256, 64))


def run(m, steps, on_ready):
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    x = torch.randn(128, 64, generator=torch.Generator().manual_seed(1))
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True,
                 schedule=schedule(wait=0, warmup=1, active=steps), on_trace_ready=on_ready) as p:
        for _ in range(steps + 1):
            loss = m(x).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            p.step()


def main():
    out = sys.argv[1]
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    torch.set_num_threads(1)
    os.makedirs(out, exist_ok=True)
    run(model(False), steps, lambda p: p.export_chrome_trace(os.path.join(out, "a.json")))
    run(model(False), steps, tensorboard_trace_handler(os.path.join(out, "a2")))
    tmp = os.path.join(out, "b_plain.json")
    run(model(True), steps, lambda p: p.export_chrome_trace(tmp))
    with open(tmp, "rb") as f, gzip.open(os.path.join(out, "b.json.gz"), "wb") as g:
        shutil.copyfileobj(f, g)
    os.unlink(tmp)


if __name__ == "__main__":
    main()
