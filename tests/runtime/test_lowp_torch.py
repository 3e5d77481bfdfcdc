"""nprobe's float8 E4M3/E5M2 rounding (common/lowp.c, through the
lowp_cast helper) against torch's casts to float8_e4m3fn / float8_e5m2:
every code's value, the midpoints between neighbours and a hair either side,
random float32 values over the whole range and beyond (overflow to NaN /
inf), subnormals, zeros of both signs. Codes must be equal, NaN codes only
NaN-equal (torch's NaN payload is its own). torch 2.13's E4M3 cast
saturates (an overflow and an infinity give +-448, which OCP allows); older
releases (Debian 13's torch 2.6) give NaN instead: the mode is read off
torch's own cast of 1e4. Its E5M2 cast does not saturate (inf). nprobe is
asked for the same mode as the torch at hand."""
import subprocess
import sys

import torch

helper = sys.argv[1]
fails = 0
e4m3_sat = "0" if torch.isnan(torch.tensor([1e4]).to(torch.float8_e4m3fn).to(torch.float32)).item() else "1"
for name, dt, sat in (("e4m3", torch.float8_e4m3fn, e4m3_sat), ("e5m2", torch.float8_e5m2, "0")):
    codes = torch.arange(256, dtype=torch.uint8)
    vals = codes.view(dt).to(torch.float64)
    fin = vals[torch.isfinite(vals)].unique()
    mids = (fin[1:] + fin[:-1]) / 2
    span = fin[1:] - fin[:-1]
    g = torch.Generator().manual_seed(5)
    rnd = (torch.rand(200000, generator=g, dtype=torch.float64) - 0.5) * torch.exp2(
        torch.rand(200000, generator=g, dtype=torch.float64) * 40 - 24)
    x = torch.cat([fin, mids, mids - span * 2**-12, mids + span * 2**-12, rnd,
                   torch.tensor([0.0, -0.0, 1e30, -1e30, float("inf"), float("-inf"), float("nan")],
                                dtype=torch.float64)]).to(torch.float32)
    want = x.to(dt).view(torch.uint8)
    out = subprocess.run([helper, name, sat], input=x.numpy().tobytes(), capture_output=True, check=True).stdout
    got = torch.frombuffer(bytearray(out), dtype=torch.uint8)
    assert got.numel() == x.numel(), (name, got.numel(), x.numel())
    gnan = torch.isnan(got.view(dt).to(torch.float32))
    wnan = torch.isnan(want.view(dt).to(torch.float32))
    bad = ((got != want) & ~(gnan & wnan)) | (gnan != wnan)
    n = int(bad.sum())
    print(f"{name}: {x.numel()} values, {n} codes differ from torch")
    for i in torch.nonzero(bad).flatten()[:5].tolist():
        print(f"  {x[i].item()!r}: nprobe 0x{int(got[i]):02x}, torch 0x{int(want[i]):02x}")
    fails += n
sys.exit(1 if fails else 0)
