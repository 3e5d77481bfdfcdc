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
too large, the second one too small), counts exchanged consistently."""
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
    def __init__(self):
        super().__init__()
        self.router = torch.nn.Linear(8, E, bias=False)
        self.experts = torch.nn.ModuleDict({str(e): Expert() for e in range(E)})

    def forward(self, x, group=None, bug=False):
        probs = torch.softmax(self.router(x), dim=-1)
        gate, top = torch.max(probs, dim=-1)
        order = torch.argsort(top, stable=True)
        counts = torch.bincount(top, minlength=E)
        xs = x[order]
        if group is None:
            ys = torch.cat([self.experts[str(e)](c) for e, c in
                            enumerate(torch.split(xs, counts.tolist()))])
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


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.moe = MoE()
        self.out = torch.nn.Linear(8, 4)

    def forward(self, x, group=None, bug=False):
        return self.out(self.moe(x, group, bug))


def model(held=(0, 1)):
    """The model with the same weights everywhere; only the experts in
    `held` kept (expert parallel: rank e keeps experts.e)."""
    torch.manual_seed(7)
    m = Net()
    for k in list(m.moe.experts.keys()):
        if int(k) not in held:
            del m.moe.experts[k]
    return m


def batch():
    g = torch.Generator().manual_seed(8)
    return torch.randn(12, 8, generator=g)


def run(m, d, x, group=None, bug=False):
    """One SGD step on rows x, dumped; under EP the router's and the output
    layer's gradients summed over the group (the program's own reduction)."""
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        d.start(m)
        m(x, group, bug).pow(2).sum().backward()
        if group is not None:
            for name, p in m.named_parameters():
                if ".experts." not in name:
                    dist.all_reduce(p.grad, group=group)
        d.stop()
        opt.step()
        opt.zero_grad()
        d.step()
        d.close()
    return [str(x.message) for x in w if "nprobe" in str(x.message)]
