"""Placements of plain tensors made from shards by the program (issue 26).

Between tensor-parallel styles the program computes on plain local tensors:
HF Llama's attention views the column-parallel q/k/v output (this rank's
heads) into heads, transposes it, rotates it, multiplies the heads' q and k
and so on to the row-parallel o_proj. dtensor.py knows a plain tensor as a
shard by its memory (a DTensor's local tensor, a parallel style's local
output) or as a pointwise op's output; here the other ops of such a chain
get rows too, from their sharded input's row and the shapes, when the op's
kind says where the sharded dimension goes:

  - a reshape (view, reshape, flatten, unflatten): the dimension of the
    output that starts at the same element count as the sharded one (the
    shard is a contiguous run of it); several (size-1 dimensions around
    it): the one a size argument of -1 marks (view(B, S, -1, D): the
    heads), else none;
  - a view keeping dimensions whole (transpose, permute, indexing, unsqueeze,
    expand, narrow, chunk): the output dimension with the sharded one's
    size and stride (the same memory), when exactly one has them (several,
    a size-1 shard beside an inserted dimension: the one at its own place);
  - elementwise ops with broadcasting: the sharded dimension right-aligned,
    the other operands of size 1 there (q * cos, the mask added to the
    scores); ops along a `dim` (softmax, cat): when that is another one;
    matmul: a batch dimension, or the rows of the first operand, the
    columns of the second (not the contracted one: that is a Partial).

A row says Shard(e) of the output's global shape (its local shape with
dimension e the global size), checked against the shard layout of this
rank's coordinate; a size argument of the op that says this rank's size
along e (repeat_kv's expand(B, kv_local, n_rep, S, D), its reshape) is
written as the global size, as one process passes it. The backward of such a call takes its rows from its
forward call's: the gradient of a Shard(d) leaf is Shard(d) of the same
global shape (recorded per call in the step's shard table). Anything else
(a reduction over the sharded dimension, an index tensor's gather, a shard
of several mesh dimensions) gets no row, as before: compare takes it as
whole on every rank."""
import torch

from . import dtensor as D

RESHAPE = frozenset(("view", "reshape", "flatten", "unflatten", "view_as", "reshape_as"))
KEEP = frozenset((
    "transpose", "permute", "t", "swapaxes", "swapdims", "movedim", "moveaxis", "__getitem__",
    "unsqueeze", "squeeze", "expand", "expand_as", "broadcast_to", "narrow", "select", "split",
    "chunk", "unbind", "tensor_split", "split_with_sizes", "unsafe_chunk", "unsafe_split"))
ALONG = frozenset(("softmax", "log_softmax", "softmin", "cat", "concat", "concatenate",
                   "cumsum", "cumprod", "logcumsumexp"))
ELEMENTWISE = D.POINTWISE | frozenset((
    "where", "masked_fill", "reciprocal", "log", "log1p", "sin", "cos", "erf", "sign",
    "maximum", "minimum", "multiply", "true_divide", "divide", "subtract", "float", "double",
    "__rtruediv__", "addcmul", "addcdiv", "lerp", "nan_to_num"))
MATMUL = frozenset(("matmul", "bmm", "__matmul__"))
_FWD = "\x1ffwd"     # the shard table's key of a forward call's rows (shared with _key's)


def _shard_item(row):
    """(mesh dimension, tensor dimension) of a row's only Shard, every other
    item Replicate(); "R" for a row of Replicate() only; None otherwise
    (a Partial, a shard over several mesh dimensions)."""
    items = D.parse_placements(row.placements)
    if any(kind == "P" for kind, _ in items):
        return None
    s = [(k, dim) for k, (kind, dim) in enumerate(items) if kind == "S"]
    if not s:
        return "R"
    return s[0] if len(s) == 1 else None


def _scalar(scalars, name):
    for k, v in scalars or ():
        if k == name:
            return int(v)
    return None


def _reshape_dim(shape, dim, out, op, scalars):
    """The output dimension holding a reshape's sharded dimension `dim`."""
    pre = 1
    for s in shape[:dim]:
        pre *= s
    cands, p = [], 1
    for e, s in enumerate(out):
        if p == pre:
            cands.append(e)
        p *= s
    if len(cands) == 1:
        return cands[0]
    if op in ("view", "reshape") and scalars and len(scalars) == len(out):
        marked = [e for e, (_, v) in enumerate(scalars) if v == -1.0]
        if len(marked) == 1 and marked[0] in cands:
            return marked[0]
    return None


def _view_dim(x, dim, o):
    """The output dimension of view o with x's dimension `dim` whole (its
    size and stride), when exactly one has them."""
    try:
        if o.untyped_storage().data_ptr() != x.untyped_storage().data_ptr():
            return None
    except (RuntimeError, NotImplementedError):
        return None
    cands = [e for e in range(o.dim()) if o.shape[e] == x.shape[dim] and
             o.stride(e) == x.stride(dim)]
    if len(cands) > 1 and dim in cands:
        return dim             # a size-1 shard beside an inserted size-1 dimension (k[:, :, None])
    return cands[0] if len(cands) == 1 else None


def _aligned(src, o, plain):
    """Elementwise with broadcasting: the output dimension of every sharded
    operand's dimension right-aligned, its size kept, the plain operands
    broadcast along it (size 1 or absent)."""
    es = {s[1] + o.dim() - s[0].dim() for s in src}
    if len(es) != 1:
        return None
    e = es.pop()
    if not 0 <= e < o.dim() or any(o.shape[e] != s[0].shape[s[1]] for s in src):
        return None
    for p in plain:
        pe = e - (o.dim() - p.dim())
        if pe >= 0 and p.shape[pe] != 1:
            return None
    return e


def _matmul_dim(src, o, order):
    """matmul: the sharded dimensions of its operands (order: each one's
    position, 0 or 1) map to one output dimension, none contracted."""
    es = set()
    for (x, dim), pos in zip(src, order):
        nd = x.dim()
        if nd < 2 or o.dim() < 2 or (pos == 0 and dim == nd - 1) or (pos == 1 and dim == nd - 2):
            return None
        es.add(dim + o.dim() - nd)
    return es.pop() if len(es) == 1 else None


def _out_dim(op, src, order, o, plain, scalars):
    """The output dimension of o that the sharded operands' dimension
    becomes, and how its global size follows ("reshape": scaled by the mesh
    dimension's size; "same": the input's), or (None, None)."""
    x, dim = src[0]
    if op in RESHAPE:
        return (_reshape_dim(tuple(x.shape), dim, tuple(o.shape), op, scalars)
                if len(src) == 1 else None), "reshape"
    if op in KEEP:
        return (_view_dim(x, dim, o) if len(src) == 1 else None), "same"
    if op in MATMUL:
        # a plain operand with batch dimensions may be a local piece not known
        return (None if any(p.dim() > 2 for p in plain) else
                _matmul_dim(src, o, order)), "same"
    if op in ALONG:
        along = _scalar(scalars, "dim")
        if along is not None and along % max(o.dim(), 1) == dim % max(x.dim(), 1):
            return None, None
        if plain or o.dim() != x.dim():
            return None, None
        return _aligned(src, o, ()), "same"
    if op in ELEMENTWISE:
        return _aligned(src, o, plain), "same"
    return None, None


def _row(mesh, row, k, dim, e, how, o, x):
    """The PlaceRow of output o: Shard(e) on mesh dimension k, checked
    against this rank's shard layout."""
    g = row.global_shape
    n = mesh.shape[k]
    go = [int(s) for s in o.shape]
    if how == "reshape":
        if g[dim] != n * x.shape[dim]:
            return None                    # an uneven shard: not a contiguous run of e
        go[e] *= n
    else:
        go[e] = g[dim]
    words = row.placements.split(",")
    words[k] = f"Shard({e})"
    text = ",".join(words)
    local, off = D.shard_layout(go, mesh.shape, mesh.coords, D.parse_placements(text))
    if local != tuple(o.shape) or (how == "same" and off[e] != row.offset[dim]):
        return None
    return D.PlaceRow(text, tuple(go), off, row.stage, row.micro_batch)


def forward(d, op, ins, in_rows, outs, taken, scalars):
    """Rows of the plain outputs (not in `taken`) of forward call `op` on
    inputs whose rows are in_rows {index: (mesh, row)}: [(index, (mesh,
    row))], each output remembered as a shard."""
    src, order, mesh, k, row0 = [], [], None, None, None
    plain = []
    pos = 0
    for i, t in enumerate(ins):
        if not isinstance(t, torch.Tensor):
            continue
        mr = in_rows.get(i)
        if mr is not None and not isinstance(mr, tuple):
            return ()                      # a DTensor: its op's outputs are DTensors
        item = _shard_item(mr[1]) if mr is not None else "R"
        if item is None:
            return ()
        if item == "R":
            if t.numel():          # an empty operand (a cache's first cat) broadcasts nothing
                plain.append(t)
        else:
            if mesh is not None and (mr[0] != mesh or item[0] != k):
                return ()
            mesh, k = mr[0], item[0]
            row0 = row0 or mr[1]
            src.append((t, item[1]))
            order.append(pos)
        pos += 1
    if not src:
        return ()
    found = []
    for j, o in enumerate(outs):
        if j in taken or not isinstance(o, torch.Tensor) or not o.numel():
            continue
        e, how = _out_dim(op, src, order, o, plain, scalars)
        if e is None:
            continue
        r = _row(mesh, row0, k, src[0][1], e, how, o, src[0][0])
        if r is not None:
            found.append((j, (mesh, r)))
            D._remember(d, o, mesh, r)
            _global_size(op, scalars, o, e, r)
    return found


SIZED = frozenset(("view", "reshape", "expand", "broadcast_to"))


def _global_size(op, scalars, o, e, row):
    """A size argument of a placed reshape or expand that says this rank's
    size along the sharded dimension (repeat_kv's expand(B, kv_local, n, S,
    D)) is written as the logical tensor's (what one process passes):
    scalars, the call's (name, value) list, changed in place before the
    call's rows are written."""
    if op not in SIZED or not isinstance(scalars, list) or len(scalars) != o.dim():
        return
    name, v = scalars[e]
    if v == float(o.shape[e]) and row.global_shape[e] != o.shape[e]:
        scalars[e] = (name, float(row.global_shape[e]))


def forward_name(call):
    """The forward call of backward call `call` (Functional.x.3.backward ->
    Functional.x.3.forward; Module.m.C.backward.2 -> Module.m.C.forward.2;
    a second backward pass's .N dropped), else None."""
    parts = call.split(".")
    if "backward" not in parts:
        return None
    i = parts.index("backward")
    parts[i] = "forward"
    if parts[0] != "Module":
        parts = parts[:i + 1]
    else:
        parts = parts[:i + 2]
    return ".".join(parts)


def record(d, call, places, role_in, role_out):
    """A forward call's rows of plain shards, for its backward (mirror)."""
    rows = {}
    for role, found, keys in places:
        if role not in (role_in, role_out):
            continue
        for i, mr in found:
            if isinstance(mr, tuple) and "Shard" in mr[1].placements and \
                    "Partial" not in mr[1].placements:
                k = keys[i] if keys else i
                rows[(role, str(k))] = mr
    if rows:
        d._shards[(_FWD, call)] = rows


def mirror(d, call, ts, taken, keys, role, fwd_role):
    """Rows of a backward call's plain leaves ts (not in `taken`) from its
    forward call's: the gradient of a Shard leaf is that leaf's layout."""
    fwd = forward_name(call)
    rows = d._shards.get((_FWD, fwd)) if fwd else None
    if not rows:
        return ()
    found = []
    for i, t in enumerate(ts):
        if i in taken or not isinstance(t, torch.Tensor) or not t.numel():
            continue
        k = keys[i] if keys else i
        mr = rows.get((fwd_role, str(k)))
        if mr is None:
            continue
        mesh, row = mr
        local, _ = D.shard_layout(row.global_shape, mesh.shape, mesh.coords,
                                  D.parse_placements(row.placements))
        if local == tuple(t.shape):
            found.append((i, mr))
            D._remember(d, t, mesh, row)
    return found
