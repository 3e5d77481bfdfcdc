"""scripts/bench/profile_synth.py SRC OUT [--repeat N] [--rank R] - a device
trace made from a real CPU torch.profiler trace (SRC, export_chrome_trace):
each cpu_op launches one kernel (a cuda_runtime cudaLaunchKernel at the op's
start, correlated with a kernel on GPU 0 that starts a little later, after
its stream's previous kernel, and lasts 0.3 of the op): every 7th an NCCL all-reduce on stream
20, every 11th a Memcpy, the rest compute kernels on stream 7. The whole
trace is repeated N times end to end (ProfilerStep#s renumbered), so OUT can
be made as large as a benchmark needs while keeping the real trace's op mix
and timing. Times are whole microseconds: HTA rounds every event of a
nanosecond trace inward to whole microseconds (ts up, end down) before its
analysis, which nprobe does not, so the check compares the definitions on a
trace where that rounding changes nothing. distributedInfo.rank is R. Used by profile_hta.py and the size
benchmark (docs/PERFORMANCE.md)."""
import argparse
import json


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--rank", type=int, default=0)
    a = ap.parse_args()
    with open(a.src) as f:
        doc = json.load(f)
    ev = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation")]
    t0 = min(e["ts"] for e in ev)
    t1 = max(e["ts"] + e["dur"] for e in ev)
    period = (t1 - t0) * 1.02
    steps = sorted({e["name"] for e in ev if e["name"].startswith("ProfilerStep#")})
    corr = 1
    free_at = {}
    with open(a.out, "w") as out:
        out.write('{"schemaVersion": 1, "distributedInfo": {"rank": %d, "world_size": 1}, '
                  '"deviceProperties": [{"id": 0, "name": "synthetic"}], "traceEvents": [\n' % a.rank)
        first = True
        for r in range(a.repeat):
            shift = r * period
            for i, e in enumerate(ev):
                x = dict(e)
                x["ts"] = float(round(e["ts"] - t0 + shift + 1000.0))
                name = e["name"]
                if name.startswith("ProfilerStep#"):
                    x["name"] = "ProfilerStep#%d" % (r * len(steps) + steps.index(name))
                x["args"] = dict(e.get("args", {}))
                recs = [x]
                if e["cat"] == "cpu_op":
                    k = i % 77
                    if i % 7 == 0:
                        kname, stream = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*)", 20
                    elif i % 11 == 0:
                        kname, stream = "Memcpy HtoD (Pageable -> Device)", 7
                    else:
                        kname, stream = "void at::native::kernel_%s<float>(int)" % name.replace("::", "_"), 7
                    launch = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel",
                              "pid": e["pid"], "tid": e["tid"], "ts": x["ts"], "dur": 1.0,
                              "args": {"correlation": corr, "External id": e["args"].get("External id", 0)}}
                    start = max(x["ts"] + 3.0 + (k % 5), free_at.get(stream, 0.0))
                    dur = float(max(round(e["dur"] * 0.3), 1))
                    free_at[stream] = start + dur  # a stream runs its kernels one after another
                    kern = {"ph": "X", "cat": "kernel" if "Memcpy" not in kname else "gpu_memcpy",
                            "name": kname, "pid": 0, "tid": stream, "ts": start, "dur": dur,
                            "args": {"device": 0, "stream": stream, "correlation": corr,
                                     "External id": e["args"].get("External id", 0)}}
                    recs += [launch, kern]
                    corr += 1
                for y in recs:
                    out.write(("" if first else ",\n") + json.dumps(y))
                    first = False
        out.write('\n], "traceName": "synthetic"}\n')


if __name__ == "__main__":
    main()
