"""lowp_stats_check.py DUMP_H5 mxfp8|hif8 - every Functional.linear call of a
runtime dump of precision mxfp8 or hif8 (tensor task): its kwargs
lowp_{x,w}_{underflow,saturation,mse,scale_min,scale_max} equal this
script's float64 recomputation from the dumped input and weight, and its
output equals the float64 product of the quantized operands plus the bias.
The quantizers are written here independently of common/lowp.c: MxFP8's
elements clamped to +-448 (MX saturates) then through torch's
float8_e4m3fn cast (torch 2.13's cast saturates by itself, older ones such
as Debian 13's 2.6 give NaN on an overflow: the clamp makes both the same),
HiF8's by a nearest-value search over the 256 codes decoded from the
paper's field table (ties away from zero)."""
import sys

import h5py
import numpy as np
import torch

path, fmt = sys.argv[1], sys.argv[2]


def hif8_values():
    vals = []
    for c in range(128):
        b = format(c, "07b")
        for prefix, D in (("11", 4), ("10", 3), ("01", 2), ("001", 1), ("0001", 0)):
            if b.startswith(prefix):
                rest = b[len(prefix):]
                e = 0
                if D:
                    mag = int("1" + rest[1:D], 2)
                    e = -mag if rest[0] == "1" else mag
                m = rest[D:]
                v = (1 + (int(m, 2) / 2 ** len(m) if m else 0)) * 2.0 ** e
                if not (e == 15 and m == "1"):
                    vals.append(v)
                break
        else:
            M = int(b[4:], 2)
            vals.append(0.0 if M == 0 else 2.0 ** (M - 23))
    return np.array(sorted(set(vals)))


HV = hif8_values()


def hif8_round(v):  # saturating, ties away from zero
    a = np.minimum(np.abs(v), HV[-1])
    i = np.clip(np.searchsorted(HV, a, side="right") - 1, 0, len(HV) - 2)
    lo, hi = HV[i], HV[i + 1]
    r = np.where(a - lo < hi - a, lo, hi)
    r = np.where(a >= HV[-1], HV[-1], r)
    return np.sign(v) * r


def quantize(x):
    """x (rows, K) float64 of float32 values -> (q, underflow %, saturation %, mse, smin, smax)"""
    if fmt == "mxfp8":
        R, K = x.shape
        q = np.empty_like(x)
        sat = 0
        scales = []
        for k0 in range(0, K, 32):
            blk = x[:, k0:k0 + 32]
            amax = np.abs(blk).max(axis=1)
            e = np.where(amax > 0, np.floor(np.log2(np.where(amax > 0, amax, 1))) - 8, -127)
            e = np.clip(e, -127, 127)
            scales += list(e[amax > 0])
            v = blk / 2.0 ** e[:, None]
            sat += int((np.abs(v) > 448).sum())
            f8 = torch.from_numpy(np.clip(v, -448, 448).astype(np.float32)).to(torch.float8_e4m3fn).to(torch.float64).numpy()
            q[:, k0:k0 + 32] = (f8 * 2.0 ** e[:, None]).astype(np.float32)
    else:
        amax = np.abs(x).max()
        e = np.clip(np.floor(np.log2(amax)) - 3, -127, 127)
        scales = [e]
        v = x / 2.0 ** e
        sat = int((np.abs(v) > HV[-1]).sum())
        q = (hif8_round(v) * 2.0 ** e).astype(np.float32)
    q = q.astype(np.float64)
    n = x.size
    under = 100.0 * ((x != 0) & (q == 0)).sum() / n
    return q, under, 100.0 * sat / n, ((q - x) ** 2).sum() / n, min(scales), max(scales)


fails = 0
ncalls = 0
with h5py.File(path, "r") as f:
    ent = f["entries"][:]
    kw = {}
    for r in ent:
        name = r["name"].decode()
        if ".kwargs.lowp_" in name:
            kw[name] = r["max"]
    data = f["data"]
    calls = sorted({n.rsplit(".kwargs.", 1)[0] for n in kw if n.startswith("Functional.linear.") and ".forward" in n})
    for call in calls:
        ncalls += 1
        x = data[call + ".input.0"][...].astype(np.float64)
        w = data[call + ".input.1"][...].astype(np.float64)
        b = data[call + ".input.2"][...].astype(np.float64) if call + ".input.2" in data else 0.0
        y = data[call + ".output.0"][...].astype(np.float64)
        K = w.shape[1]
        xq, *sx = quantize(x.reshape(-1, K))
        wq, *sw = quantize(w)
        for tag, s in (("x", sx), ("w", sw)):
            for key, want in zip(("underflow", "saturation", "mse", "scale_min", "scale_max"), s):
                got = kw.get(f"{call}.kwargs.lowp_{tag}_{key}")
                ok = got is not None and abs(got - want) <= 1e-9 * abs(want) + 1e-300
                if not ok:
                    fails += 1
                    print(f"FAIL {call} lowp_{tag}_{key}: dump {got}, float64 {want}")
        want_y = xq @ wq.T + b
        err = np.abs(y.reshape(want_y.shape) - want_y).max() / (np.abs(xq) @ np.abs(wq).T + np.abs(b)).max()
        if err > 1e-6:
            fails += 1
            print(f"FAIL {call}: output differs from the quantized product by {err:.3g}")
print(f"{fmt}: {ncalls} linear calls, {len(kw)} statistics checked, {fails} failures")
sys.exit(1 if fails or ncalls == 0 else 0)
