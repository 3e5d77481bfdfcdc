"""scripts/bench/profile_synth.py SRC OUT [--repeat N | --size MB] [--steps S]
[--rank R] - a device trace made from a real CPU torch.profiler trace (SRC,
export_chrome_trace), laid out as torch.profiler (Kineto) writes a CUDA
trace.

Each cpu_op launches one kernel: a cuda_runtime cudaLaunchKernel
(cudaMemcpyAsync for a copy) at the op's start, correlated with a kernel on
GPU 0 that starts a little later, after its stream's previous kernel, and
lasts 0.3 of the op: every 7th an NCCL all-reduce on stream 20, every 11th
a Memcpy, the rest compute kernels on stream 7. The whole CPU trace is
repeated N times end to end (ids renumbered), so OUT can be made as large as
a benchmark needs (--size MB picks N) while keeping the real trace's op mix
and timing.

The layout is Kineto's (checked against a real CUDA trace of torch 2.2):
the header with deviceProperties and distributedInfo (rank R); every CPU
event first (cpu_op, user_annotation, the source's fwdbwd flows); then the
GPU activity in launch order - per launch the kernel, its "ac2g" flow end,
the runtime call and its flow start - with a gpu_user_annotation per
ProfilerStep on stream 7; then the process/thread metadata and the
"Record Window End" instant; each event on several indented lines; kernel
and memcpy args as CUPTI fills them (grid, block, registers, occupancy,
bytes, bandwidth).

Steps: by default the source's ProfilerStep#s are repeated with it
(renumbered), so the step count grows with N; --steps S writes S
ProfilerSteps instead, each over N/S repetitions, as a profiler schedule
with `active=S` over a long step would (HTA's per-event step lookup is
linear in the steps). Times are whole microseconds from an epoch-sized
base: HTA rounds every event of a nanosecond trace inward to whole
microseconds (ts up, end down) before its analysis, which nprobe does not,
so the check compares the definitions on a trace where that rounding
changes nothing. Used by profile_hta.py (its --sizes benchmark) and
profile_msprof.py (docs/PERFORMANCE.md)."""
import argparse
import json
import sys

BASE_US = 1_700_000_000_000_000  # an epoch in microseconds, as real traces have


def load(src):
    with open(src) as f:
        doc = json.load(f)
    evs = doc["traceEvents"]
    cpu = [e for e in evs if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation")]
    flows = [e for e in evs if e.get("ph") in ("s", "f") and e.get("cat") == "fwdbwd"]
    meta = [e for e in evs if e.get("ph") == "M"]
    return cpu, flows, meta


def args_tail(args):
    """The args other than External id, as JSON members (leading ', ')."""
    rest = {k: v for k, v in args.items() if k != "External id"}
    return "".join(", %s: %s" % (json.dumps(k), json.dumps(v)) for k, v in rest.items())


class Synth:
    def __init__(self, src, repeat, steps, rank):
        self.cpu, self.flows, self.meta = load(src)
        self.repeat, self.steps, self.rank = repeat, steps, rank
        self.t0 = min(e["ts"] for e in self.cpu)
        t1 = max(e["ts"] + e["dur"] for e in self.cpu)
        self.period = round((t1 - self.t0) * 1.02) + 1
        self.src_steps = sorted({e["name"] for e in self.cpu if e["name"].startswith("ProfilerStep#")},
                                key=lambda n: int(n.split("#")[1]))
        self.ext_span = max([e.get("args", {}).get("External id", 0) for e in self.cpu] + [0]) + 1
        self.flow_span = max([int(e.get("id", 0)) for e in self.flows] + [0]) + 1
        self.tails = [args_tail(e.get("args", {})) for e in self.cpu]
        self.pid = self.cpu[0]["pid"]

    def ts(self, us, r):
        return BASE_US + int(round(us - self.t0)) + r * self.period

    def step_of_rep(self, r):
        return r * self.steps // self.repeat

    def step_bounds(self, k):
        """(first rep, end rep) of new step k."""
        a = next(r for r in range(self.repeat) if self.step_of_rep(r) == k)
        b = next((r for r in range(a, self.repeat) if self.step_of_rep(r) > k), self.repeat)
        return a, b

    @staticmethod
    def x(cat, name, pid, tid, ts, dur, args):
        return ('  {\n    "ph": "X", "cat": "%s", "name": %s, "pid": %s, "tid": %s,\n'
                '    "ts": %d, "dur": %d,\n    "args": {\n      %s\n    }\n  }'
                % (cat, json.dumps(name), json.dumps(pid), json.dumps(tid), ts, dur, args))

    def cpu_part(self, r):
        """Repetition r's CPU events (and fwdbwd flows) in the source's order."""
        out = []
        if self.steps and self.step_of_rep(r) != (self.step_of_rep(r - 1) if r else -1):
            k = self.step_of_rep(r)
            a, b = self.step_bounds(k)
            out.append(self.x("user_annotation", "ProfilerStep#%d" % k, self.pid, self.pid,
                              BASE_US + a * self.period, (b - a) * self.period - 1,
                              '"External id": %d' % (self.repeat * self.ext_span + k + 1)))
        for e, tail in zip(self.cpu, self.tails):
            name = e["name"]
            if name.startswith("ProfilerStep#"):
                if self.steps:
                    continue
                name = "ProfilerStep#%d" % (r * len(self.src_steps) + self.src_steps.index(name))
            ext = e.get("args", {}).get("External id", 0) + r * self.ext_span
            out.append(self.x(e["cat"], name, e["pid"], e["tid"], self.ts(e["ts"], r), round(e["dur"]),
                              '"External id": %d%s' % (ext, tail)))
        for e in self.flows:
            end = ', "bp": "e"' if e["ph"] == "f" else ""
            out.append('  {\n    "ph": "%s", "id": %d, "pid": %s, "tid": %s, "ts": %d,\n'
                       '    "cat": "fwdbwd", "name": "fwdbwd"%s\n  }'
                       % (e["ph"], int(e["id"]) + r * self.flow_span, json.dumps(e["pid"]),
                          json.dumps(e["tid"]), self.ts(e["ts"], r), end))
        return out

    def gpu_part(self, r, st):
        """Repetition r's GPU activity in launch order; st carries the
        correlation counter and each stream's end across repetitions."""
        out = []
        if self.steps and self.step_of_rep(r) != (self.step_of_rep(r - 1) if r else -1):
            k = self.step_of_rep(r)
            a, b = self.step_bounds(k)
            out.append(self.x("gpu_user_annotation", "ProfilerStep#%d" % k, 0, 7,
                              BASE_US + a * self.period + 3, (b - a) * self.period - 4,
                              '"External id": %d' % (self.repeat * self.ext_span + k + 1)))
        for i, e in enumerate(self.cpu):
            if e["cat"] != "cpu_op":
                continue
            ts = self.ts(e["ts"], r)
            ext = e.get("args", {}).get("External id", 0) + r * self.ext_span
            corr = st["corr"]
            st["corr"] += 1
            k = i % 77
            memcpy = False
            if i % 7 == 0:
                kname, stream = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*)", 20
            elif i % 11 == 0:
                kname, stream, memcpy = "Memcpy HtoD (Pageable -> Device)", 7, True
            else:
                kname, stream = "void at::native::kernel_%s<float>(int)" % e["name"].replace("::", "_"), 7
            start = max(ts + 3 + (k % 5), st.get(stream, 0))
            dur = max(round(e["dur"] * 0.3), 1)
            st[stream] = start + dur  # a stream runs its kernels one after another
            if memcpy:
                kargs = ('"External id": %d, "device": 0, "context": 1, "stream": %d, "correlation": %d, '
                         '"bytes": %d, "memory bandwidth (GB/s)": %.6f' % (ext, stream, corr, 4096 * (k + 1),
                                                                          4096 * (k + 1) / dur / 1e3))
                launch, cbid = "cudaMemcpyAsync", 41
            else:
                kargs = ('"External id": %d, "queued": 0, "device": 0, "context": 1, "stream": %d, '
                         '"correlation": %d, "registers per thread": %d, "shared memory": %d, '
                         '"blocks per SM": %.6f, "warps per SM": %.6f, "grid": [%d, 1, 1], '
                         '"block": [128, 1, 1], "est. achieved occupancy %%": %d'
                         % (ext, stream, corr, 32 + k % 64, 0 if k % 3 else 16384, 0.1 * (k + 1),
                            0.4 * (k + 1), 8 * (k + 1), 5 + k % 90))
                launch, cbid = "cudaLaunchKernel", 211
            out.append(self.x("gpu_memcpy" if memcpy else "kernel", kname, 0, stream, start, dur, kargs))
            out.append('  {\n    "ph": "f", "id": %d, "pid": 0, "tid": %d, "ts": %d,\n'
                       '    "cat": "ac2g", "name": "ac2g", "bp": "e"\n  }' % (corr, stream, start))
            out.append(self.x("cuda_runtime", launch, self.pid, e["tid"], ts, 1,
                              '"External id": %d, "cbid": %d, "correlation": %d' % (ext, cbid, corr)))
            out.append('  {\n    "ph": "s", "id": %d, "pid": %s, "tid": %s, "ts": %d,\n'
                       '    "cat": "ac2g", "name": "ac2g"\n  }' % (corr, json.dumps(self.pid), json.dumps(e["tid"]), ts))
        return out

    def tail_part(self):
        end = BASE_US + self.repeat * self.period
        out = []
        for e in self.meta:
            out.append('  {\n    "name": %s, "ph": "M", "ts": %d, "pid": %s, "tid": %s,\n    "args": %s\n  }'
                       % (json.dumps(e["name"]), BASE_US, json.dumps(e.get("pid", 0)),
                          json.dumps(e.get("tid", 0)), json.dumps(e.get("args", {}))))
        for name, tid, args in (("process_name", 0, {"name": "python"}),
                                ("process_labels", 0, {"labels": "CPU"}),):
            out.append('  {\n    "name": "%s", "ph": "M", "ts": %d, "pid": %s, "tid": %d,\n    "args": %s\n  }'
                       % (name, BASE_US, json.dumps(self.pid), tid, json.dumps(args)))
        for name, tid, args in (("process_name", 0, {"name": "python"}), ("process_labels", 0, {"labels": "GPU 0"}),
                                ("process_sort_index", 0, {"sort_index": 5000000}),
                                ("thread_name", 7, {"name": "stream 7 "}), ("thread_name", 20, {"name": "stream 20 "})):
            out.append('  {\n    "name": "%s", "ph": "M", "ts": %d, "pid": 0, "tid": %d,\n    "args": %s\n  }'
                       % (name, BASE_US, tid, json.dumps(args)))
        out.append('  {\n    "name": "Iteration Start: PyTorch Profiler", "ph": "i", "s": "g",\n'
                   '    "pid": "Traces", "tid": "Trace PyTorch Profiler", "ts": %d\n  }' % BASE_US)
        out.append('  {\n    "name": "Record Window End", "ph": "i", "s": "g",\n    "pid": "", "tid": "", "ts": %d\n  }'
                   % end)
        return out

    def write(self, f):
        f.write('{\n  "schemaVersion": 1,\n  "deviceProperties": [\n    {\n      "id": 0, "name": "synthetic", '
                '"totalGlobalMem": 85899345920,\n      "computeMajor": 9, "computeMinor": 0,\n'
                '      "numSms": 132\n    }\n  ],\n  "distributedInfo": {"backend": "nccl", "rank": %d, '
                '"world_size": 1, "pg_count": 1, "pg_config": [], "nccl_version": "2.21.5"},\n'
                '  "traceEvents": [\n' % self.rank)
        first = True
        parts = [lambda r: self.cpu_part(r)]
        st = {"corr": 1}
        parts.append(lambda r: self.gpu_part(r, st))
        for part in parts:
            for r in range(self.repeat):
                chunk = part(r)
                if chunk:
                    f.write(("" if first else ",\n") + ",\n".join(chunk))
                    first = False
        f.write(",\n" + ",\n".join(self.tail_part()))
        f.write('\n  ],\n  "traceName": "synthetic.pt.trace.json",\n  "displayTimeUnit": "ms"\n}\n')

    def rep_bytes(self):
        """Bytes one repetition adds (CPU and GPU parts)."""
        saved = self.repeat, self.steps
        self.repeat, self.steps = 1, 0
        n = sum(len(s) + 2 for s in self.cpu_part(0) + self.gpu_part(0, {"corr": 1}))
        self.repeat, self.steps = saved
        return n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--size", type=float, help="about this many MB (10^6 bytes): sets --repeat")
    ap.add_argument("--steps", type=int, default=0, help="this many ProfilerSteps (0: the source's, repeated)")
    ap.add_argument("--rank", type=int, default=0)
    a = ap.parse_args()
    s = Synth(a.src, a.repeat, a.steps, a.rank)
    if a.size:
        s.repeat = max(round(a.size * 1e6 / s.rep_bytes()), 1)
    if a.steps > s.repeat:
        sys.exit("profile_synth: --steps %d needs at least as many repetitions (%d)" % (a.steps, s.repeat))
    with open(a.out, "w") as f:
        s.write(f)
    print("profile_synth: %s: %d repetitions, %s ProfilerSteps" %
          (a.out, s.repeat, a.steps or s.repeat * len(s.src_steps)))


if __name__ == "__main__":
    main()
