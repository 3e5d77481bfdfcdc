"""test_torch_fsdp_tp.py - FSDP2 x tensor parallel on a 2 x 2 mesh (dp, tp)
of 4 gloo processes under the PrecisionDebugger (issue 26), against one
process:

- the 3-module MLP of test_torch_dtensor.py, parallelize_module on
  mesh["tp"] (up ColwiseParallel, down RowwiseParallel) then fully_shard on
  mesh["dp"] with a bf16 MixedPrecisionPolicy (parameters gathered in
  bf16, gradients reduced in fp32), the same batch on every rank; one step,
  task tensor, level mix;
- the parameters FSDP2 shards over a dimension tensor parallel already
  shards (up.weight, up.bias: _StridedShard(0) on dp, Shard(0) on tp) get
  placement rows whose offsets place each rank's shard in DTensor's own
  full_tensor() (checked on every rank), none is left unplaced;
- FSDP2's all-gather (on the dp line at each tp coordinate) names its
  group by `mesh_dim` (the same on every rank) and stacks the tp lines;
- `nprobe compare` of the one-process fp32 run against the 4 ranks
  assembled exits 0 with no culprit (bf16 against fp32: the bf16 level);
- torchtitan's data parallel: each dp rank on its half of the batch
  (PrecisionDebugger(data_parallel="dp")), a mean loss, FSDP2's default
  average: the tensor-parallel rows get Shard(0) over dp for the batch,
  Partial(sum) for the parameters' gradients, the loss Partial(avg),
  dp_grad_scale 2 (loss_scale 1); compare against one process on the whole batch exits 0;
- a pipeline over tensor parallel (mesh (pp, tp), 1F1B, 2 micro-batches,
  level mix): compare of the run's directory against one process on the
  whole batch pairs both stages and exits 0; rank 3's column shard of
  layers.2's weight 1 % off is named at Functional.linear.2.forward with
  rank 3 (pp=1, tp=1);
- an HF Llama (tests/python/hf_tp.py) under transformers' TP plan on
  mesh["tp"] and FSDP2 on mesh["dp"], bf16 autocast: compare against one
  fp32 process exits 0;
- DistributedDataParallel on a subgroup (ranks {0, 1}, {2, 3}) with
  data_parallel="dp", and a plain pipeline on each (no DTensors): one
  warning naming the group, no mesh written;
- an odd batch over dp x pp (9 rows: dp ranks of 5 and 4 rows, unequal
  micro-batches, GPipe, a summed loss): against one process on the 9 rows
  clean, every one-process leaf paired; a fault in rank 3's micro-batch 1
  named with its rank, stage and micro-batch; the same 9 rows through 4
  stages (the middle ones learn the sizes as they receive them): clean.
- expert parallel on EP groups of 2 inside the 4 ranks (mesh (dp, ep),
  data_parallel=("dp", "ep"), ep_moe.py): an expert's replicas Shard(0)
  over dp with unequal token counts; against one process on the 24 rows
  clean at mix and L0, every one-process leaf paired but the Local() ones
  and one process's own calls; rank 3's wrong split named at
  Module.moe.MoE.forward.0 with rank 3 (dp=1, ep=1).
The FSDP2 and the 1F1B parts (every pipeline here but the GPipe ones on
subgroups and the odd batch) are skipped, said, where the torch at hand
cannot run them (test_torch_dtensor's probes: torch 2.6). Run through
pyrun.sh; prints its count of checks, exits 1 on any failed check. KEEP=DIR
keeps the dumps."""
import inspect
import json
import os
import shutil
import sys
import tempfile

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_torch_dtensor as T  # noqa: E402
from test_torch_dtensor import (  # noqa: E402
    FAILS, batch, check, check_dumped, compare, fork_ranks, fsdp2_probe, model, pp1f1b_probe,
    pp_batch, pp_loss, pp_model, read, run, run_pp, single_pp, single_runs, write_configs)

WORLD = 4


def dppp_labels():
    """The dp x pp runs (1F1B: none where 1F1B does not run here): "dppp"
    (FSDP2) only where FSDP2 runs on CPU."""
    if T.PP1F1B_ERR:
        return ()
    return (() if T.FSDP2_ERR else ("dppp",)) + ("dppp_plain", "bug_dppp_plain")


def pp_tp4_labels():
    """The PP x TP runs (1F1B): none where 1F1B does not run here."""
    return () if T.PP1F1B_ERR else ("pp_tp4", "bug_pp_tp4")


def odd_err():
    """Why the odd batch's pipelines (unequal micro-batches, a summed loss,
    scale_grads off) cannot run with the torch at hand, or None: torch 2.6's
    schedules take no scale_grads, and its stages refuse micro-batches of
    unequal sizes (PipeliningShapeError: python.torch_dtensor's uneq)."""
    from torch.distributed.pipelining import ScheduleGPipe
    if "scale_grads" in inspect.signature(ScheduleGPipe).parameters:
        return None
    return (f"torch {torch.__version__}'s ScheduleGPipe takes no scale_grads and its "
            "stages refuse micro-batches of unequal sizes")


def check_strided(rank, m, fails):
    """Each DTensor parameter's placement row against full_tensor()."""
    from nprobe.torch import dtensor as D
    strided = 0
    for name, p in m.named_parameters():
        whole = p.full_tensor()
        mesh, row = D.place_row(p)
        strided += any(type(x).__name__ == "_StridedShard" for x in p.placements)
        if mesh is None:
            fails.append(f"rank {rank}: {name} {p.placements}: no row ({row})")
            continue
        lt = p.to_local()
        sl = tuple(slice(o, o + n) for o, n in zip(row.offset, lt.shape))
        if row.global_shape != tuple(whole.shape) or not torch.equal(whole[sl], lt):
            fails.append(f"rank {rank}: {name} {p.placements}: {row} does not place the "
                         f"local {tuple(lt.shape)} in full_tensor()")
    if not strided:
        fails.append(f"rank {rank}: no _StridedShard parameter (FSDP2 over TP's Shard(0))")
    return strided


def rank_main(rank, tmp):
    from nprobe.torch import PrecisionDebugger
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   parallelize_module)
    import datetime
    import faulthandler
    faulthandler.dump_traceback_later(300, exit=True)    # a hung rank fails the test
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{tmp}/store", rank=rank,
                            world_size=WORLD, timeout=datetime.timedelta(seconds=240))
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    mp_policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)

    def fsdp_tp_model():
        m = model()
        parallelize_module(m, mesh["tp"], {"up": ColwiseParallel(), "down": RowwiseParallel()})
        for sub in (m.up, m.down, m):
            fully_shard(sub, mesh=mesh["dp"], mp_policy=mp_policy)
        return m
    out = {"fails": []}
    if T.FSDP2_ERR is None:
        m = fsdp_tp_model()
        out["strided"] = check_strided(rank, m, out["fails"])
        d = PrecisionDebugger(f"{tmp}/fsdp_tp.json")
        out["warnings"] = run(m, d)
        out["summary"] = d.summary
        # torchtitan's data parallel: each dp rank its half of the batch
        # (both tp ranks of a dp rank the same), a mean loss, FSDP2's
        # default average
        m = fsdp_tp_model()
        dp = rank // 2
        d = PrecisionDebugger(f"{tmp}/fsdp_tp_dp.json", data_parallel="dp")
        out["dp_warnings"] = run(m, d, x=batch()[3 * dp:3 * dp + 3], mean=True)
        out["dp_summary"] = d.summary
    # an HF Llama under transformers' TP plan on mesh["tp"] and FSDP2 on
    # mesh["dp"] (each decoder layer, then the model), one SGD step in bf16
    # autocast (the same batch on every rank; test_torch_dtensor.py names
    # the wrong plan on 2 ranks)
    if T.FSDP2_ERR is None and T.HF_ERR is None:
        import hf_tp
        for label in ("hf_fsdp_tp",):
            m = hf_tp.parallelize(hf_tp.model(), mesh["tp"])
            for layer in m.model.layers:
                fully_shard(layer, mesh=mesh["dp"])
            fully_shard(m, mesh=mesh["dp"])
            d = PrecisionDebugger(f"{tmp}/{label}.json")
            out[label] = {"warnings": hf_tp.run(m, d, bf16=True), "summary": d.summary}
    # a pipeline over tensor parallel (torchtitan's (pp, tp) mesh): stage s
    # (ranks 2s, 2s + 1) holds layers 2s (column-parallel) and 2s + 1
    # (row-parallel), 1F1B, 2 micro-batches; the bug: rank 3's column shard
    # of layers.2's weight 1 % off
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B
    pmesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("pp", "tp"))
    s = rank // 2
    for label in pp_tp4_labels():
        m = pp_model(s)
        parallelize_module(m, pmesh["tp"], {f"layers.{2 * s}": ColwiseParallel(),
                                            f"layers.{2 * s + 1}": RowwiseParallel()})
        if label == "bug_pp_tp4" and rank == 3:
            with torch.no_grad():
                m.layers[str(2 * s)].weight.to_local().mul_(1.01)
        stage = PipelineStage(m, s, 2, torch.device("cpu"), group=pmesh["pp"].get_group())
        sched = Schedule1F1B(stage, n_microbatches=2, loss_fn=pp_loss)
        out[label] = run_pp(s, m, PrecisionDebugger(f"{tmp}/{label}.json"), sched)
    # data parallel over a pipeline's micro-batches (torchtitan's (pp, dp)
    # mesh): stage s on ranks 2s, 2s + 1, each dp rank its half of the batch
    # (2 micro-batches of one row), 1F1B. FSDP2 on dp; then the same
    # without DTensors (pipelines on the pp subgroups, the program's own
    # average of the gradients over dp); the bug: rank 3's layers.2 output
    # 1 % off in micro-batch 1 only
    from nprobe.torch import pipeline
    dmesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("pp", "dp"))
    x, t = pp_batch()
    x, t = x[2 * (rank % 2):2 * (rank % 2) + 2], t[2 * (rank % 2):2 * (rank % 2) + 2]
    for label in dppp_labels():
        m = pp_model(s)
        if label == "dppp":
            for sub in list(m.layers.values()) + [m]:
                fully_shard(sub, mesh=dmesh["dp"])
        if label.startswith("bug") and rank == 3:
            m.layers["2"].register_forward_hook(
                lambda mod, a, y: y * 1.01 if pipeline.current()[1] == 1 else y)
        stage = PipelineStage(m, s, 2, torch.device("cpu"), group=dmesh["pp"].get_group())
        sched = Schedule1F1B(stage, n_microbatches=2, loss_fn=pp_loss)
        kw = {} if label == "dppp" else {"data_parallel_reduce": "avg"}
        d = PrecisionDebugger(f"{tmp}/{label}.json", data_parallel="dp", **kw)
        dp_group = None if label == "dppp" else dmesh["dp"].get_group()
        out[label] = run_pp(s, m, d, sched, batch=(x, t), dp_group=dp_group)
    # an odd batch over dp x pp: 9 rows, dp rank c its tensor_split share
    # (5, 4 rows), 2 micro-batches each (3 + 2, 2 + 2), GPipe, a summed
    # loss; the bug: rank 3's layers.2 output 1 % off in micro-batch 1 only
    from torch.distributed.pipelining import ScheduleGPipe
    x, t = (v.tensor_split(2)[rank % 2] for v in odd_batch())
    for label in () if odd_err() else ("dppp_odd", "bug_dppp_odd"):
        m = pp_model(s)
        if label.startswith("bug") and rank == 3:
            m.layers["2"].register_forward_hook(
                lambda mod, a, y: y * 1.01 if pipeline.current()[1] == 1 else y)
        stage = rows_stage(m, s, dmesh["pp"].get_group(), x.shape[0])
        sched = ScheduleGPipe(stage, n_microbatches=2, loss_fn=sum_loss, scale_grads=False)
        d = PrecisionDebugger(f"{tmp}/{label}.json", data_parallel="dp",
                              data_parallel_reduce="sum")
        out[label] = run_pp(s, m, d, sched, batch=(x, t))
    # the odd batch through 4 stages (one layer each, the world the pipeline):
    # the middle stages are given neither the batch nor the target, and see
    # the micro-batches' sizes (5 and 4 rows) only as they receive them
    x, t = odd_batch()
    m = pp_model()
    for k in list(m.layers.keys()):
        if int(k) != rank:
            del m.layers[k]
    if not odd_err():
        stage = rows_stage(m, rank, None, x.shape[0], n_stages=WORLD)
        sched = ScheduleGPipe(stage, n_microbatches=2, loss_fn=sum_loss, scale_grads=False)
        out["pp4_odd"] = run_pp(min(rank, 1), m, PrecisionDebugger(f"{tmp}/pp4_odd.json"),
                                sched, batch=(x, t if rank == WORLD - 1 else None))
    # expert parallel on EP groups of 2 ({0, 1}, {2, 3}: mesh (dp, ep)),
    # data parallel across them: rank r rows 6r .. 6r + 5 of 24, rank (c, e)
    # holds experts.e, the experts' gradients summed over dp, the others'
    # over the world; the bug: rank 3's dispatch with a wrong split
    import ep_moe
    emesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "ep"))
    for label in ("dpep", "dpep_l0", "bug_dpep"):
        d = PrecisionDebugger(f"{tmp}/{label}.json", data_parallel=("dp", "ep"),
                              data_parallel_reduce="sum", experts="moe.experts",
                              device_mesh=emesh)
        w = ep_moe.run(ep_moe.model(held=(rank % 2,)), d, ep_moe.batch(24)[6 * rank:6 * rank + 6],
                       group=emesh["ep"].get_group(), bug=label.startswith("bug") and rank == 3,
                       dp_group=emesh["dp"].get_group())
        out[label] = {"warnings": w, "summary": d.summary}
    # several data_parallel dimensions without a device mesh: a warning
    d = PrecisionDebugger(f"{tmp}/dpep_nomesh.json", data_parallel=("dp", "ep"),
                          data_parallel_reduce="sum", experts="moe.experts")
    out["dpep_nomesh"] = ep_moe.run(ep_moe.model(held=(rank % 2,)), d,
                                    ep_moe.batch(24)[6 * rank:6 * rank + 6],
                                    group=emesh["ep"].get_group(),
                                    dp_group=emesh["dp"].get_group())
    # DDP on a subgroup (ranks {0, 1} and {2, 3}, each pair its halves of
    # the batch) under data_parallel: not the world's dp, so no mesh
    from torch.nn.parallel import DistributedDataParallel
    groups = [dist.new_group([0, 1]), dist.new_group([2, 3])]
    # two plain pipelines (no DTensors) on the same subgroups: no mesh
    m = pp_model(rank % 2)
    stage = PipelineStage(m, rank % 2, 2, torch.device("cpu"), group=groups[rank // 2])
    sched = ScheduleGPipe(stage, n_microbatches=2, loss_fn=pp_loss)
    out["pp_sub"] = run_pp(rank % 2, m, PrecisionDebugger(f"{tmp}/pp_sub.json"), sched)
    m = DistributedDataParallel(model(), process_group=groups[rank // 2])
    d = PrecisionDebugger(f"{tmp}/ddp_sub.json", data_parallel="dp")
    out["ddp_sub"] = {"warnings": run(m, d, x=batch()[3 * (rank % 2):3 * (rank % 2) + 3],
                                      mean=True), "summary": d.summary}
    # the same DDP on a subgroup, the ranks' layout given (device_mesh: dp
    # the DDP groups, rep across them: ranks 0 and 2 the same half)
    rmesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("rep", "dp"))
    m = DistributedDataParallel(model(), process_group=groups[rank // 2])
    d = PrecisionDebugger(f"{tmp}/ddp_sub_mesh.json", data_parallel="dp", device_mesh=rmesh)
    out["ddp_sub_mesh"] = {"warnings": run(m, d, x=batch()[3 * (rank % 2):3 * (rank % 2) + 3],
                                           mean=True), "summary": d.summary}
    # the package's monitor of the collectives (cc_distribution: monitor_cc.py)
    import monitor_cc
    out["cc"] = monitor_cc.rank_part(rank, tmp, mesh["tp"],
                                     mesh["dp"] if T.FSDP2_ERR is None else None)
    with open(f"{tmp}/rank{rank}.json", "w") as f:
        json.dump(out, f)
    dist.destroy_process_group()


def odd_batch():
    g = torch.Generator().manual_seed(7)
    return torch.randn(9, 8, generator=g), torch.randn(9, 8, generator=g)


def sum_loss(y, t):
    return torch.nn.functional.mse_loss(y, t, reduction="sum")


def rows_stage(m, s, group, rows, n_stages=2):
    """Stage s of n_stages for a batch of `rows` rows in 2
    micro-batches of tensor_split's sizes (unequal when rows is odd):
    torch 2.13's PipelineStage receives every micro-batch into buffers of
    micro-batch 0's shape (a smaller one fails at the loss), so this one
    sizes its receive buffers (activations, gradients) per micro-batch."""
    from torch.distributed.pipelining import PipelineStage

    class RowsStage(PipelineStage):
        sizes = [len(c) for c in torch.arange(rows).tensor_split(2)]

        def _sized(self, infos, mb):
            for info in infos:
                b = getattr(info, "buffer", None)
                if isinstance(b, torch.Tensor) and b.dim() and b.shape[0] != self.sizes[mb]:
                    info.buffer = b.new_empty((self.sizes[mb],) + tuple(b.shape[1:]))

        def get_fwd_recv_ops(self, fwd_chunk_id):
            self._sized(self.args_recv_info[fwd_chunk_id], fwd_chunk_id)
            return super().get_fwd_recv_ops(fwd_chunk_id)

        def get_bwd_recv_ops(self, bwd_chunk_id):
            if self.has_backward and not self.is_last:
                self._sized(self.grad_recv_info[bwd_chunk_id], bwd_chunk_id)
            return super().get_bwd_recv_ops(bwd_chunk_id)
    return RowsStage(m, s, n_stages, torch.device("cpu"), group=group)


def single_odd(tmp):
    """The odd batch's reference: one process, the 9 rows at once."""
    from nprobe.torch import PrecisionDebugger
    d = PrecisionDebugger(f"{tmp}/single_odd.json")
    m = pp_model()
    x, t = odd_batch()
    d.start(m)
    sum_loss(m(x), t).backward()
    d.stop()
    d.step()
    d.close()


def check_dppp_odd(tmp):
    """dp x pp on an odd batch (9 rows: dp rank 0 5 rows in micro-batches of
    3 and 2, dp rank 1 4 rows in 2 and 2) against one process on the whole
    batch: each rank writes its micro-batches' rows as it knows them (dp
    rank 1 cannot know that dp rank 0's batch is a row longer: its rows at
    6 of 8, not 7 of 9); compare derives the offsets from the pieces' row
    counts: both stages paired and clean, every one-process leaf paired and
    passing; rank 3's micro-batch 1 named with its rank, stage and
    micro-batch."""
    for r in range(WORLD):
        with open(f"{tmp}/rank{r}.json") as f:
            res = json.load(f)
        for label in ("dppp_odd", "bug_dppp_odd", "pp4_odd"):
            check_dumped(f"{label} rank {r}", res[label]["warnings"], res[label]["summary"])
    leaf = "Module.layers.2.Linear.forward.1.output.0"
    for r, want in ((2, ("Replicate(),Shard(0),Shard(0)", (10, 8), (3, 0))),
                    (3, ("Replicate(),Shard(0),Shard(0)", (8, 8), (6, 0)))):
        _c, _d, place, attrs = read(f"{tmp}/dump_dppp_odd/step0/rank{r}/dump.h5")
        check(place.get(leaf) == want and attrs.get("dp_grad_scale", 1.0) == 1.0,
              f"dppp_odd rank {r}: {leaf} {place.get(leaf)} != {want}, dp_grad_scale "
              f"{attrs.get('dp_grad_scale')} (a summed loss, summed gradients)")
    out = compare(tmp, "dppp_odd", bench="single_odd")
    check("compared 2 step/rank pairs" in out and "mesh pp=2, dp=2, mb=2" in out,
          f"compare one process vs dppp_odd: both stages, the mesh: {out[:400]!r}")
    _c, whole, _p, _a = read(f"{tmp}/dump_single_odd/step0/rank0/dump.h5")
    rc, _first, text, _err = T.compare_files(f"{tmp}/dump_single_odd", f"{tmp}/dump_dppp_odd",
                                             f"{tmp}/rep_dppp_odd_csv")
    paired = T.pp_paired(f"{tmp}/rep_dppp_odd_csv")
    check(rc == 0 and set(whole) <= paired,
          f"dppp_odd: every one-process leaf ({len(whole)}) paired and passing: missing "
          f"{sorted(set(whole) - paired)[:6]} {text[-400:]!r}")
    # 4 stages: the middle ones (ranks 1, 2) place micro-batch 1 from the
    # rows they received (5 + 4), their micro-batch 0 as if both had 5
    _c, _d, place, _a = read(f"{tmp}/dump_pp4_odd/step0/rank1/dump.h5")
    leaf = "Module.layers.1.Linear.forward.{}.output.0"
    check([place.get(leaf.format(k)) for k in (0, 1)] ==
          [("Replicate(),Shard(0)", (10, 8), (0, 0)), ("Replicate(),Shard(0)", (9, 8), (5, 0))],
          f"pp4_odd rank 1: {[place.get(leaf.format(k)) for k in (0, 1)]}")
    rc, _first, text, _err = T.compare_files(f"{tmp}/dump_single_odd", f"{tmp}/dump_pp4_odd",
                                             f"{tmp}/rep_pp4_odd_csv")
    paired = T.pp_paired(f"{tmp}/rep_pp4_odd_csv")
    check(rc == 0 and "compared 4 step/rank pairs" in text and set(whole) <= paired,
          f"pp4_odd: 4 stages, every one-process leaf ({len(whole)}) paired and passing: "
          f"missing {sorted(set(whole) - paired)[:6]} {text[-400:]!r}")
    out = compare(tmp, "bug_dppp_odd", bench="single_odd",
                  want="Module.layers.2.Linear.forward.0")
    check("rank 3 (pp=1, dp=1, mb=1)" in out and "mb=0)" not in out.split("first culprit:")[-1],
          f"compare one process vs bug_dppp_odd: rank 3's micro-batch 1 alone named: "
          f"{out[-900:]!r}")


def check_dpep(tmp):
    """dp x ep (2 EP groups of 2) against one process on the 24 rows: an
    expert's replicas (ranks 0 and 2 hold experts.0) Shard(0) over dp, each
    its group's tokens (their counts unequal: compare derives the offsets
    from the pieces' rows); clean at mix and L0, every one-process leaf
    paired but the Local() ones and one process's own calls; rank 3's
    wrong split named with rank 3 (dp=1, ep=1)."""
    import ep_moe
    from nprobe.torch import PrecisionDebugger
    for label in ("single_dpep", "single_dpep_l0"):
        check(not ep_moe.run(ep_moe.model(), PrecisionDebugger(f"{tmp}/{label}.json"),
                             ep_moe.batch(24)), f"one process ({label}): no warning")
    for r in range(WORLD):
        with open(f"{tmp}/rank{r}.json") as f:
            res = json.load(f)
        for label in ("dpep", "dpep_l0", "bug_dpep"):
            check_dumped(f"{label} rank {r}", res[label]["warnings"], res[label]["summary"])
        w = res["dpep_nomesh"]
        check(len(w) == 1 and "names several mesh dimensions" in w[0] and "device_mesh" in w[0],
              f"dpep_nomesh rank {r}: one warning asking for device_mesh: {w}")
    # expert 0's input: ranks 0 and 2's tokens (dp 0's and dp 1's), as many
    # as one process's expert 0 gets
    leaf = "Module.moe.experts.0.Expert.forward.0.input.0"
    rows = []
    for r in (0, 2):
        _c, data, place, _a = read(f"{tmp}/dump_dpep/step0/rank{r}/dump.h5")
        p = place.get(leaf, ("",))
        check(p[0] == "Shard(0),Replicate()", f"dpep rank {r}: {leaf} {p}")
        rows.append(data[leaf].shape[0] if leaf in data else -1)
    _c, data, _p, _a = read(f"{tmp}/dump_single_dpep/step0/rank0/dump.h5")
    check(sum(rows) == data[leaf].shape[0],
          f"dpep: expert 0's tokens {rows} on ranks 0, 2, one process's {data[leaf].shape}")
    for label, bench in (("dpep", "single_dpep"), ("dpep_l0", "single_dpep_l0")):
        out = compare(tmp, label, bench=bench)
        check("mesh dp=2, ep=2" in out and "held only by other ranks of the step" in out,
              f"{label}: the 4 ranks assembled, experts.1 merged: {out[-600:]!r}")
        rc, n, missing = T.ep_unpaired(tmp, label, bench, WORLD)
        check(rc == 0 and not missing, f"{label}: every one-process leaf ({n}) paired and "
              f"passing but the Local() ones and one process's own calls: missing {missing[:6]}")
    out = compare(tmp, "bug_dpep", bench="single_dpep_l0", want="Module.moe.MoE.forward.0")
    first = out.split("first culprit:")[-1].splitlines()[0] if "first culprit:" in out else ""
    check("rank 3 (dp=1, ep=1)" in first and "rank 0" not in first,
          f"bug_dpep: rank 3 alone named: {first[:300]!r}")


class Wrap(torch.nn.Module):
    """One process's model named as DistributedDataParallel's (`module.`)."""
    def __init__(self, m):
        super().__init__()
        self.module = m

    def forward(self, x):
        return self.module(x)


def check_dppp(tmp):
    """dp x pp against one process on the whole batch: the mesh (pp, dp, mb)
    (without DTensors: read from the pipeline groups and data_parallel),
    the micro-batches' rows at dp rank c's offsets (c x 2 + m), both stages
    paired and clean; the bug named at its rank, stage and micro-batch; a
    stage whose earlier stage's files are gone: a note naming it, its
    modules compared, exit 0."""
    for r in range(WORLD):
        with open(f"{tmp}/rank{r}.json") as f:
            res = json.load(f)
        for label in dppp_labels():
            check_dumped(f"{label} rank {r}", res[label]["warnings"], res[label]["summary"])
    _c, _d, place, attrs = read(f"{tmp}/dump_dppp_plain/step0/rank3/dump.h5")
    leaf = "Module.layers.2.Linear.forward.1.output.0"    # micro-batch 1 of dp rank 1
    check(place.get(leaf) == ("Replicate(),Shard(0),Shard(0)", (4, 8), (3, 0)) and
          attrs.get("dp_grad_scale") == 4.0,
          f"dppp_plain rank 3: {leaf} {place.get(leaf)}, dp_grad_scale "
          f"{attrs.get('dp_grad_scale')} (dp 2 x 2 micro-batches)")
    for label, want in (("dppp", None), ("dppp_plain", None),
                        ("bug_dppp_plain", "Module.layers.2.Linear.forward.0")):
        if label not in dppp_labels():
            continue
        out = compare(tmp, label, bench="single_pp", want=want)
        check("compared 2 step/rank pairs" in out and "mesh pp=2, dp=2, mb=2" in out and
              (want is None or "rank 3 (pp=1, dp=1, mb=1)" in out),
              f"compare one process vs {label}: both stages, the mesh, rank 3 mb 1 named: "
              f"{out[:400]!r}")
    # stage 0's files gone: stage 1 alone, its API calls left out (they
    # cannot be numbered as one process numbers them), its modules clean
    shutil.copytree(f"{tmp}/dump_dppp_plain", f"{tmp}/dump_dppp_half")
    for r in (0, 1):
        shutil.rmtree(f"{tmp}/dump_dppp_half/step0/rank{r}")
    out = compare(tmp, "dppp_half", bench="single_pp")
    check("stage 0 has no file beside this one (no file for rank(s) 0, 1)" in out and
          "step 0 rank 2 (tensor mode)" in out and "0 error" in out,
          f"compare one process vs stage 1 alone: the missing stage named: {out[:600]!r}")


def check_fsdp_tp(tmp):
    """The FSDP2 x TP runs (fsdp_tp, fsdp_tp_dp) against one process."""
    for r in range(WORLD):
        with open(f"{tmp}/rank{r}.json") as f:
            res = json.load(f)
        check_dumped(f"fsdp_tp rank {r}", res["warnings"], res["summary"])
    # FSDP2's all-gather runs on the dp line at each tp coordinate: its
    # group is written as its mesh dimension (dp: 0), the same on every
    # rank, and its leaves stack the tp lines (Shard(0) on tp)
    key = "Distributed.all_gather_into_tensor.0.forward"
    for r in range(WORLD):
        _calls, data, place, _ = read(f"{tmp}/dump_fsdp_tp/step0/rank{r}/dump.h5")
        check(data.get(f"{key}.kwargs.mesh_dim") == 0 and f"{key}.kwargs.ranks.0" not in data,
              f"fsdp_tp rank {r}: {key} names its group by mesh_dim 0 "
              f"({data.get(f'{key}.kwargs.mesh_dim')})")
        check(place.get(f"{key}.input.0", ("",))[0] == "Shard(0),Shard(0)",
              f"fsdp_tp rank {r}: {key}'s input row {place.get(f'{key}.input.0')}")
    compare(tmp, "fsdp_tp")
    # each dp rank on its half of the batch, FSDP2's average: the batch
    # Shard(0) on dp beside the tensor-parallel placements, the loss
    # Partial(avg), the gradients under dp_grad_scale 2 (loss_scale 1)
    for r in range(WORLD):
        with open(f"{tmp}/rank{r}.json") as f:
            res = json.load(f)
        check_dumped(f"fsdp_tp_dp rank {r}", res["dp_warnings"], res["dp_summary"])
    _c, _d, place, attrs = read(f"{tmp}/dump_fsdp_tp_dp/step0/rank3/dump.h5")
    check(attrs.get("dp_grad_scale") == 2.0 and attrs.get("loss_scale") == 1.0,
          f"fsdp_tp_dp: dp_grad_scale {attrs.get('dp_grad_scale')}, "
          f"loss_scale {attrs.get('loss_scale')}")
    for leaf, want in (("Functional.linear.0.forward.input.0",
                        ("Shard(0),Replicate()", (6, 8), (3, 0))),
                       ("Functional.linear.0.forward.output.0",
                        ("Shard(0),Shard(1)", (6, 16), (3, 8))),
                       ("Tensor.mean.0.forward.output.0",
                        ("Partial(avg),Replicate()", (), ())),
                       ("Module.down.Linear.parameters_grad.weight",
                        ("Partial(sum),Shard(1)", (4, 16), (0, 8)))):
        check(place.get(leaf) == want, f"fsdp_tp_dp rank 3: {leaf} {place.get(leaf)} "
              f"!= {want}")
    compare(tmp, "fsdp_tp_dp", bench="single_mean")


def check_hf(tmp):
    """The HF Llama under FSDP2 x TP (bf16 autocast) against one fp32
    process: clean."""
    if T.FSDP2_ERR or T.HF_ERR:
        return
    import hf_tp
    from nprobe.torch import PrecisionDebugger
    check(not hf_tp.run(hf_tp.model(), PrecisionDebugger(f"{tmp}/single_hf.json")),
          "one process (HF Llama): no warning")
    for r in range(WORLD):
        with open(f"{tmp}/rank{r}.json") as f:
            res = json.load(f)
        check_dumped(f"hf_fsdp_tp rank {r}", res["hf_fsdp_tp"]["warnings"],
                     res["hf_fsdp_tp"]["summary"])
    out = compare(tmp, "hf_fsdp_tp", bench="single_hf")
    check("mesh dp=2, tp=2" in out, f"hf_fsdp_tp: the 4 ranks assembled ({out[:300]!r})")


def main():
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        write_configs(tmp, ("fsdp_tp", "single", "fsdp_tp_dp", "single_mean", "pp_tp4",
                            "bug_pp_tp4", "single_pp", "ddp_sub", "pp_sub", "dppp",
                            "dppp_plain", "bug_dppp_plain", "ddp_sub_mesh", "single_wrap",
                            "dppp_odd", "bug_dppp_odd", "single_odd", "pp4_odd",
                            "hf_fsdp_tp", "single_hf", "dpep", "dpep_l0", "bug_dpep",
                            "single_dpep", "single_dpep_l0", "dpep_nomesh"))
        fsdp2_probe(tmp)
        pp1f1b_probe(tmp, "the 1F1B parts (the pp_tp4, bug_pp_tp4, dppp, dppp_plain and "
                     "bug_dppp_plain runs and their checks)")
        T.hf_probe()
        import monitor_cc
        monitor_cc.configs(tmp)
        fork_ranks(rank_main, tmp, WORLD)
        single_runs(tmp)
        for r in range(WORLD):
            with open(f"{tmp}/rank{r}.json") as f:
                res = json.load(f)
            for fail in res["fails"]:
                check(False, fail)
        cc = [json.load(open(f"{tmp}/rank{r}.json"))["cc"] for r in range(WORLD)]
        for fail in monitor_cc.check(tmp, WORLD, cc, os.environ["NPROBE_BIN"]) + \
                monitor_cc.check_config(tmp):
            check(False, fail)
        if T.FSDP2_ERR is None:
            check_fsdp_tp(tmp)
        check_hf(tmp)
        # PP x TP against one process on the whole batch: a pair a stage
        # (mesh pp, tp, mb), clean; the wrong shard named with its rank
        single_pp(tmp)
        for r in range(WORLD):
            with open(f"{tmp}/rank{r}.json") as f:
                res = json.load(f)
            for label in pp_tp4_labels():
                check_dumped(f"{label} rank {r}", res[label]["warnings"], res[label]["summary"])
        for label, want in (("pp_tp4", None), ("bug_pp_tp4", "Functional.linear.2.forward")):
            if label not in pp_tp4_labels():
                continue
            out = compare(tmp, label, bench="single_pp", want=want)
            check("compared 2 step/rank pairs" in out and "mesh pp=2, tp=2, mb=2" in out and
                  (want is None or "rank 3 (pp=1, tp=1, mb=0)" in out),
                  f"compare one process vs {label}: both stages, the mesh, rank 3 named: "
                  f"{out[:400]!r}")
        if T.PP1F1B_ERR is None:
            check_dppp(tmp)
        if odd_err():
            print(f"SKIP: the odd batch's runs (dppp_odd, bug_dppp_odd, pp4_odd and their "
                  f"checks): {odd_err()}")
        else:
            single_odd(tmp)
            check_dppp_odd(tmp)
        check_dpep(tmp)
        # DDP and plain pipelines on subgroups: one warning, no mesh (each
        # rank on its own)
        for r in range(WORLD):
            with open(f"{tmp}/rank{r}.json") as f:
                res = json.load(f)
            sub = [0, 1] if r < 2 else [2, 3]
            for label, want in (("ddp_sub", f"process group {sub} is not the world (4 ranks)"),
                                ("pp_sub", f"pipeline group {sub} is not the world (4 ranks)")):
                w = res[label]["warnings"]
                _c, _d, _p, attrs = read(f"{tmp}/dump_{label}/step0/rank{r}/dump.h5")
                check(len(w) == 1 and want in w[0] and "mesh_dims" not in attrs,
                      f"{label} rank {r}: one warning, no mesh: {w} {attrs.get('mesh_dims')}")
        # DDP on a subgroup with device_mesh: assembled over dp, the rep
        # replicas checked; against one process (the module under a wrapper
        # named as DDP's) on the whole batch: clean
        from nprobe.torch import PrecisionDebugger
        for r in range(WORLD):
            with open(f"{tmp}/rank{r}.json") as f:
                res = json.load(f)
            check_dumped(f"ddp_sub_mesh rank {r}", res["ddp_sub_mesh"]["warnings"],
                         res["ddp_sub_mesh"]["summary"])
        check(not run(Wrap(model()), PrecisionDebugger(f"{tmp}/single_wrap.json"), mean=True),
              "one process (wrapped, mean loss): no warning")
        out = compare(tmp, "ddp_sub_mesh", bench="single_wrap")
        check("mesh rep=2, dp=2" in out, f"ddp_sub_mesh: the mesh given: {out[:300]!r}")
        if os.environ.get("KEEP"):
            shutil.copytree(tmp, os.environ["KEEP"], dirs_exist_ok=True)
    print(f"{T.CHECKS} checks, {len(FAILS)} failed")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
