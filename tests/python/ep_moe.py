"""tests/python/ep_moe.py - a top-1 mixture of 2 experts under expert
parallel on 2 gloo ranks (rank e holds experts.e, each rank its half of a
12-row batch), and the same model on one process, for test_torch_dtensor.py.

The routing is written as expert-parallel code is (torchtitan's MoE in
small): the router's top-1 expert per token, the tokens sorted by expert
(argsort, stable), the counts per expert (bincount); under EP the counts
are exchanged (all_to_all_single) and the sorted tokens dispatched to their
experts' ranks and combined back by torch.distributed.nn.functional's
differentiable all_to_all_single; one process splits the sorted tokens by
the counts and runs both experts. The loss is a sum; the router's and the
output layer's gradients are summed over the ranks by the program (a
summing data-parallel reduction), the experts' are their own.

    m = ep_moe.model(held=(0, 1))          # one process; ep: held=(rank,)
    ep_moe.run(m, d, x, group=None, bug=False) -> nprobe warnings

bug: rank 1 sends one token for expert 1 as expert 0's (its first split one
too large, the second one too small), counts exchanged consistently.

Unequal experts per rank (model(held, n_experts=3): rank 0 experts 0 and 1,
rank 1 expert 2; the ModuleDict keys the global indices): each rank sends
its tokens' counts per expert to the experts' ranks (as torchtitan does),
sends rank r the tokens of r's experts and groups what it receives by
expert (the tokens of expert j from every rank, in rank order: the one
process's order), runs its experts one after the other and puts their
outputs back in the received order; bug there: rank 1 counts one token of
expert 2 as expert 1's. dp x ep (4 ranks, mesh (dp, ep)): `group` the EP
group, `dp_group` the ranks holding the same experts, the experts'
gradients summed over it, the others' over the world."""
import warnings

import torch
import torch.distributed as dist

E = 2


class Expert(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = torch.nn.Linear(8, 16)
        self.w2 = torch.nn.Linear(16, 8)

    def forward(self, x):
        return self.w2(torch.nn.functional.gelu(self.w1(x)))


class MoE(torch.nn.Module):
    def __init__(self, n_experts=E):
        super().__init__()
        self.router = torch.nn.Linear(8, n_experts, bias=False)
        self.experts = torch.nn.ModuleDict({str(e): Expert() for e in range(n_experts)})
        self.n = n_experts
        self.per = None      # experts per rank under expert parallel (model())

    def forward(self, x, group=None, bug=False):
        probs = torch.softmax(self.router(x), dim=-1)
        gate, top = torch.max(probs, dim=-1)
        order = torch.argsort(top, stable=True)
        counts = torch.bincount(top, minlength=self.n)
        xs = x[order]
        if group is None:
            ys = torch.cat([self.experts[str(e)](c) for e, c in
                            enumerate(torch.split(xs, counts.tolist()))])
        elif self.n != dist.get_world_size(group):
            ys = self.dispatch(xs, counts, group, bug)
        else:
            from torch.distributed.nn.functional import all_to_all_single
            send = counts + torch.tensor([1, -1]) if bug else counts
            recv = torch.empty_like(send)
            dist.all_to_all_single(recv, send, group=group)
            xr = all_to_all_single(torch.empty(sum(recv.tolist()), x.shape[1]), xs,
                                   recv.tolist(), send.tolist(), group=group)
            (expert,) = self.experts.values()
            yr = expert(xr)
            ys = all_to_all_single(torch.empty(xs.shape), yr, send.tolist(), recv.tolist(),
                                   group=group)
        # back to the rows' order: row order[i] is sorted row i
        y = torch.zeros_like(ys).index_copy(0, order, ys)
        return y * gate[:, None]

    def dispatch(self, xs, counts, group, bug):
        """Tokens xs sorted by expert to the experts' ranks (rank r holds
        experts first[r] .. first[r + 1] - 1, the held ones here), through
        them, and back."""
        from torch.distributed.nn.functional import all_to_all_single
        n = dist.get_world_size(group)
        held = sorted(int(k) for k in self.experts.keys())
        per = self.per                                 # experts per rank
        if bug and dist.get_rank(group) == n - 1:
            counts = counts + torch.tensor([0] * (self.n - 2) + [1, -1])
        recv = torch.empty(n * len(held), dtype=counts.dtype)
        dist.all_to_all_single(recv, counts, [len(held)] * n, per, group=group)
        c, rc = counts.tolist(), recv.tolist()
        at = [sum(per[:r]) for r in range(n)]
        send = [sum(c[at[r]:at[r] + per[r]]) for r in range(n)]
        got = [sum(rc[r * len(held):(r + 1) * len(held)]) for r in range(n)]
        xr = all_to_all_single(torch.empty(sum(got), xs.shape[1]), xs, got, send, group=group)
        # the received rows grouped by expert: expert j's from every rank
        # (index_select, narrow, concatenate and back by index_select: API
        # calls the one process does not make, so its calls keep their
        # numbers: docs/TORCH.md "Expert parallel")
        starts = [sum(got[:r]) for r in range(n)]
        perm = []
        for j in range(len(held)):
            for r in range(n):
                a = starts[r] + sum(rc[r * len(held):r * len(held) + j])
                perm += range(a, a + rc[r * len(held) + j])
        inv = [0] * len(perm)
        for i, p in enumerate(perm):
            inv[p] = i
        xg = xr.index_select(0, torch.tensor(perm, dtype=torch.long))
        by = [sum(rc[r * len(held) + j] for r in range(n)) for j in range(len(held))]
        yg = torch.concatenate([self.experts[str(e)](xg.narrow(0, sum(by[:j]), by[j]))
                                for j, e in enumerate(held)])
        yr = yg.index_select(0, torch.tensor(inv, dtype=torch.long))
        return all_to_all_single(torch.empty(xs.shape), yr, send, got, group=group)


class Net(torch.nn.Module):
    def __init__(self, n_experts=E):
        super().__init__()
        self.moe = MoE(n_experts)
        self.out = torch.nn.Linear(8, 4)

    def forward(self, x, group=None, bug=False):
        return self.out(self.moe(x, group, bug))


def model(held=(0, 1), n_experts=E, per=None):
    """The model with the same weights everywhere; only the experts in
    `held` kept (expert parallel: rank e keeps experts.e; `per`: the
    experts of each rank where unequal, rank r the next per[r])."""
    torch.manual_seed(7)
    m = Net(n_experts)
    m.moe.per = per
    for k in list(m.moe.experts.keys()):
        if int(k) not in held:
            del m.moe.experts[k]
    return m


def batch(rows=12):
    g = torch.Generator().manual_seed(8)
    return torch.randn(rows, 8, generator=g)


def run(m, d, x, group=None, bug=False, dp_group=None, step_in=False, lr_bug=False):
    """One SGD step on rows x, dumped; under EP the router's and the output
    layer's gradients summed over the world, the experts' over dp_group
    (the program's own reduction). step_in: the optimizer's step inside
    the dumped region (its calls dumped: SGD's Tensor.add_ per parameter);
    lr_bug: the experts held here updated at 1.5 x the learning rate (one
    group per parameter)."""
    if lr_bug:
        opt = torch.optim.SGD([{"params": [p], "lr": 0.15 if ".experts." in n else 0.1}
                               for n, p in m.named_parameters()], lr=0.1)
    else:
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        d.start(m)
        m(x, group, bug).pow(2).sum().backward()
        if group is not None:
            for name, p in m.named_parameters():
                if ".experts." not in name:
                    dist.all_reduce(p.grad, group=group if dp_group is None else None)
                elif dp_group is not None:
                    dist.all_reduce(p.grad, group=dp_group)
        if step_in:
            opt.step()
        d.stop()
        if not step_in:
            opt.step()
        opt.zero_grad()
        d.step()
        d.close()
    return [str(x.message) for x in w if "nprobe" in str(x.message)]
