"""DTensor leaves for the PrecisionDebugger (issue 26).

A DTensor (torch.distributed.tensor: tensor parallel, FSDP2) has no data of
its own: it wraps this rank's shard (`_local_tensor`) and says how the shard
lies in the logical tensor (its placements over a device mesh). The debugger
dumps the shard, read as it is (no collective, no copy), and a placement row
for it: the placements in DTensor's words ("Shard(0),Replicate()"), the
logical (global) shape and where this shard starts in it, so that compare
can rebuild the logical tensor from the ranks' shards.

The shard's offset is worked out here from the placements, the mesh shape
and this rank's mesh coordinate, by the rule DTensor shards with (a
dimension split over k ranks as torch.chunk splits it: pieces of
ceil(n / k), the last ones shorter or empty; several mesh dimensions
sharding one tensor dimension split it left to right). A _StridedShard
(FSDP2 over a dimension tensor parallel shards: the tp split made first)
is worked out by its own rule (strided_layout) and written as Shard(d)
with the offset where this rank's rows lie, when they are one contiguous
run (FSDP2 x TP's are); a layout whose rows interleave, or that these rules
do not describe, gets no placement row; the leaf is still dumped, and
counted in the debugger's summary["unplaced"].

Nothing here imports torch.distributed: the DTensor class is looked up in
sys.modules at start() (refresh), and the debugger looks at its leaves
for DTensors only while torch.distributed is initialised
(distributed.on): a one-process program (transformers imports DTensor)
pays nothing.
"""
import ctypes
import itertools
import sys
import warnings

import torch

from .. import _lib
from . import pipeline

_MESH_MAX = 4          # the format's mesh dimensions at most (NP_FMT_MESH_MAX)
_dtensor_cls = None
_act_cls = None
_WRAPPED = ()       # the classes localize() looks for (refresh())


def refresh():
    """Look up DTensor and funcol's AsyncCollectiveTensor (at each start()
    under torch.distributed: imported by then, or not used)."""
    global _dtensor_cls, _act_cls, _WRAPPED
    m = sys.modules.get("torch.distributed.tensor")
    _dtensor_cls = getattr(m, "DTensor", None) if m is not None else None
    m = sys.modules.get("torch.distributed._functional_collectives")
    _act_cls = getattr(m, "AsyncCollectiveTensor", None) if m is not None else None
    _WRAPPED = tuple(c for c in (_dtensor_cls, _act_cls) if c is not None)


def dtensor_class():
    """torch's DTensor class (refresh()), else None."""
    return _dtensor_cls


def local(t):
    """The tensor whose memory holds `t`'s values on this rank: a DTensor's
    shard (`_local_tensor`, no collective), a pending functional collective
    waited for (its result is needed by the program anyway), else `t`."""
    if _dtensor_cls is not None and isinstance(t, _dtensor_cls):
        t = t._local_tensor
    if _act_cls is not None and isinstance(t, _act_cls):
        t = t.trigger_wait()
    return t


# ---- placements ---------------------------------------------------------------

def placement_words(p):
    """One placement in the format's (DTensor's) words: "Shard(d)",
    "Replicate()", "Partial(sum)", "Partial(avg)"; None for a layout the
    format cannot say (Partial(max), a norm's partial, ...). A _StridedShard
    is "Shard(d)" too: its offset is worked out by strided_layout, and the
    row is written only when this rank's piece is contiguous."""
    name = type(p).__name__
    if name in ("Shard", "_StridedShard"):
        return f"Shard({int(p.dim)})"
    if name == "Replicate":
        return "Replicate()"
    if name in ("Partial", "_Partial", "MaskPartial"):     # not _NormPartial (a p-norm)
        op = getattr(p, "reduce_op", "sum")
        op = str(getattr(op, "name", op)).lower()      # an enum in some versions
        if op in ("sum", "avg"):                       # the format knows sums and means
            return f"Partial({op})"
        return None
    return None


def parse_placements(words):
    """[("S", d) | ("R", None) | ("P", op)] from "Shard(0),Replicate()"."""
    out = []
    for w in words.split(","):
        w = w.strip()
        if w.startswith("Shard(") and w.endswith(")"):
            out.append(("S", int(w[6:-1])))
        elif w == "Replicate()":
            out.append(("R", None))
        elif w.startswith("Partial(") and w.endswith(")"):
            out.append(("P", w[8:-1]))
        else:
            raise ValueError(f"placement {w!r}: not Shard(d), Replicate() or Partial(op)")
    return out


def shard_layout(global_shape, mesh_shape, coords, placements):
    """(local_shape, offset) of this rank's shard of a logical tensor of
    `global_shape` placed by `placements` (parse_placements' items, one per
    mesh dimension) on a mesh of `mesh_shape` at coordinate `coords`.
    A dimension of n split over k ranks gives pieces of ceil(n / k) in rank
    order, the last ones shorter or empty (torch.chunk); a second split of
    the same dimension splits this rank's piece again. An empty piece
    starts at the dimension's end (its offset is n), as DTensor says."""
    if not (len(mesh_shape) == len(coords) == len(placements)):
        raise ValueError(f"mesh shape {tuple(mesh_shape)}, coordinate {tuple(coords)} and "
                         f"{len(placements)} placement(s) disagree")
    shape = [int(s) for s in global_shape]
    offset = [0] * len(shape)
    for k, c, (kind, dim) in zip(mesh_shape, coords, placements):
        if kind != "S":
            continue
        if dim < 0:
            dim += len(shape)
        if not 0 <= dim < len(shape):
            raise ValueError(f"Shard({dim}) of a {len(shape)}-dimensional tensor")
        n = shape[dim]
        piece = -(-n // k) if k > 0 else n
        start = min(c * piece, n)
        size = max(0, min(n, start + piece) - start)
        offset[dim] += start
        shape[dim] = size
    for d, s in enumerate(shape):
        if s == 0 and int(global_shape[d]) > 0:
            offset[d] = int(global_shape[d])
    return tuple(shape), tuple(offset)


def _chunk(idx, k, c):
    """Piece c of index range `idx` cut in k as torch.chunk cuts (pieces of
    ceil(n / k), the last ones shorter or empty)."""
    n = len(idx)
    piece = -(-n // k) if k > 0 else n
    return idx[min(c * piece, n):min((c + 1) * piece, n)]


_strided_cache = {}


def strided_layout(global_shape, mesh_shape, coords, items):
    """(local_shape, offset) of this rank's shard under placements with a
    _StridedShard, items one per mesh dimension: ("S", d, None) Shard(d),
    ("S", d, sf) _StridedShard(d, split_factor=sf), ("R"/"P", None, None).
    DTensor's rule, left to right: Shard(d) takes piece c of k of the
    indices of d held so far; _StridedShard(d, sf) cuts them in sf pieces,
    each in k, and takes piece c of every one, concatenated (FSDP2 over a
    dimension tensor parallel shards: the tp split is made first). None when
    the indices held are not one contiguous run (an interleaved shard: no
    offset says where it lies)."""
    key = (tuple(global_shape), tuple(mesh_shape), tuple(coords), tuple(items))
    hit = _strided_cache.get(key)
    if hit is not None or key in _strided_cache:
        return hit
    idx = [range(int(n)) for n in global_shape]
    for k, c, (kind, d, sf) in zip(mesh_shape, coords, items):
        if kind != "S":
            continue
        if sf is None:
            idx[d] = _chunk(idx[d], k, c)
        else:
            held = []
            for j in range(sf):
                held.extend(_chunk(_chunk(idx[d], sf, j), k, c))
            idx[d] = held
    shape, offset = [], []
    res = None
    for d, ix in enumerate(idx):
        ix = list(ix)
        if ix and ix != list(range(ix[0], ix[0] + len(ix))):
            break
        shape.append(len(ix))
        offset.append(ix[0] if ix else int(global_shape[d]))
    else:
        res = (tuple(shape), tuple(offset))
    if len(_strided_cache) < 4096:
        _strided_cache[key] = res
    return res


class Mesh:
    """A device mesh as the format holds it: dimension names, shape and
    this rank's coordinate; `ranks`, the global rank at each coordinate
    (nested lists), where known."""
    __slots__ = ("names", "shape", "coords", "ranks")

    def __init__(self, names, shape, coords, ranks=None):
        self.names, self.shape, self.coords = tuple(names), tuple(shape), tuple(coords)
        self.ranks = ranks

    def __eq__(self, o):
        return isinstance(o, Mesh) and (self.names, self.shape, self.coords) == \
            (o.names, o.shape, o.coords)

    def __hash__(self):
        return hash((self.names, self.shape, self.coords))

    def group_dim(self, group):
        """(mesh dimension, this rank's position) of a process group given
        by its global ranks in order: the dimension along which exactly
        those ranks lie with this rank's other coordinates; None if none
        (group_dims restricted to one dimension)."""
        g = self.group_dims(group)
        if g is None or len(g[0]) != 1:
            return None
        return g[0][0], g[1]

    def group_dims(self, group):
        """(mesh dimensions, this rank's position) of a process group given
        by its global ranks in order: the fewest dimensions whose grid at
        this rank's other coordinates, the earlier dimension outer, holds
        exactly those ranks (a data-parallel group flattened over (dp, ep));
        None if none."""
        if self.ranks is None:
            return None
        n = len(self.shape)
        for size in range(1, n + 1):
            for dims in itertools.combinations(range(n), size):
                line = []
                for idx in itertools.product(*(range(self.shape[k]) for k in dims)):
                    c = list(self.coords)
                    for k, i in zip(dims, idx):
                        c[k] = i
                    r = self.ranks
                    for x in c:
                        r = r[x]
                    line.append(r)
                if line == list(group):
                    pos = 0
                    for k in dims:
                        pos = pos * self.shape[k] + self.coords[k]
                    return dims, pos
        return None

    def __repr__(self):
        return f"Mesh({self.names}, {self.shape}, {self.coords})"


def _mesh_of(dm):
    """Mesh of a DeviceMesh (dimensions without names named dim0, dim1, ...);
    None when this rank is not in it."""
    coords = dm.get_coordinate()
    if coords is None:
        return None
    names = dm.mesh_dim_names or tuple(f"dim{i}" for i in range(dm.ndim))
    return Mesh(names, tuple(int(s) for s in dm.mesh.shape), tuple(int(c) for c in coords),
                dm.mesh.tolist())


def root_mesh(dm):
    """The mesh a DTensor's placements are written against: the root of
    `dm` (a sub-mesh, `mesh["tp"]`, is a slice of one) where its dimensions
    are found there by name, else `dm` itself."""
    try:
        if hasattr(dm, "_get_root_mesh"):
            root = dm._get_root_mesh()
        else:
            # torch 2.6: the meshes' registry maps each sub-mesh to its root,
            # keyed by value (a mesh made alone equals an earlier slice of the
            # same ranks and name): this very mesh's entry, by identity
            from torch.distributed.device_mesh import _mesh_resources
            root = next((r for c, r in _mesh_resources.child_to_root_mapping.items()
                         if c is dm), dm)
    except Exception:  # noqa: BLE001 - a torch without root meshes
        root = dm
    if root is not dm and root.mesh_dim_names and dm.mesh_dim_names and \
            all(n in root.mesh_dim_names for n in dm.mesh_dim_names):
        return root
    return dm


class PlaceRow:
    """One /placements row of a DTensor leaf (np_place_rec)."""
    __slots__ = ("placements", "global_shape", "offset", "stage", "micro_batch")

    def __init__(self, placements, global_shape, offset, stage=-1, micro_batch=-1):
        self.placements, self.global_shape, self.offset = placements, global_shape, offset
        self.stage, self.micro_batch = stage, micro_batch

    def __repr__(self):
        return (f"PlaceRow({self.placements!r}, global {self.global_shape}, offset "
                f"{self.offset}, stage {self.stage}, micro_batch {self.micro_batch})")


_row_cache = {}      # (id(mesh), placements, shape, local shape) -> (mesh, (Mesh, row))


def place_row(t):
    """(Mesh, PlaceRow) of DTensor `t` against its root mesh, or (None, reason)
    when it has no row (this rank outside its mesh, an interleaved shard, a
    mesh of more dimensions than the format holds). Reads only t's
    metadata; remembered per mesh, placements and shapes (DeviceMesh's
    coordinate and root cost ~2 ms a leaf in torch 2.13: a third of a TP
    step's dump cost before)."""
    dm = t.device_mesh
    try:
        key = (id(dm), tuple(t.placements), tuple(t.shape), tuple(t._local_tensor.shape))
        hit = _row_cache.get(key)
    except TypeError:          # an unhashable placement
        key = hit = None
    if hit is not None and hit[0] is dm:
        return hit[1]
    res = _place_row(t, dm)
    if key is not None:
        if len(_row_cache) > 4096:
            _row_cache.clear()
        _row_cache[key] = (dm, res)      # the mesh kept alive: its id names it
    return res


def _place_row(t, dm):
    root = root_mesh(dm)
    mesh = _mesh_of(root)
    if mesh is None:
        return None, "this rank is not in the DTensor's mesh"
    if len(mesh.shape) > _MESH_MAX:
        return None, f"a mesh of {len(mesh.shape)} dimensions (the format holds {_MESH_MAX})"
    words = ["Replicate()"] * len(mesh.shape)
    items = [("R", None, None)] * len(mesh.shape)
    strided = False
    names = dm.mesh_dim_names if root is not dm else None
    for i, p in enumerate(t.placements):
        w = placement_words(p)
        if w is None:
            return None, f"placement {p!r} is not Shard, Replicate or Partial(sum)"
        k = mesh.names.index(names[i]) if names else i
        words[k] = w
        if type(p).__name__ == "_StridedShard":
            strided = True
            items[k] = ("S", int(p.dim) % t.dim(), int(p.split_factor))
        elif w.startswith("Shard"):
            items[k] = ("S", int(p.dim) % t.dim(), None)
    text = ",".join(words)
    gshape = tuple(int(s) for s in t.shape)
    if strided:
        lay = strided_layout(gshape, mesh.shape, mesh.coords, items)
        if lay is None:
            return None, (f"placements {tuple(t.placements)} interleave this rank's rows "
                          "(no contiguous shard)")
        local_shape, offset = lay
    else:
        local_shape, offset = shard_layout(gshape, mesh.shape, mesh.coords,
                                           parse_placements(text))
    lt = t._local_tensor
    if tuple(lt.shape) != local_shape:
        return None, (f"its shard {tuple(lt.shape)} is not the {local_shape} of {text} "
                      f"on mesh {mesh.shape} at {mesh.coords} (uneven or padded layout)")
    return mesh, PlaceRow(text, gshape, offset)


def localize(ts):
    """ts with every DTensor or pending functional collective replaced by
    local(t), and [(index, DTensor)] of the DTensors among them (ts itself
    and None when there is none: the common case)."""
    found = None
    w = _WRAPPED
    if not w:
        return ts, None
    for i, t in enumerate(ts):
        if not isinstance(t, w):
            continue
        if found is None:
            found = ([], list(ts))
        if isinstance(t, _dtensor_cls):
            found[0].append((i, t))
        found[1][i] = local(t)
    if found is None:
        return ts, None
    return found[1], found[0]


def module_class_name(mod):
    """The class name a module's rows carry: FSDP2's fully_shard makes a
    class FSDP<Name> (FSDPModule and the module's own class) for every
    sharded module; its rows keep the module's own name, as one process
    names them (Module.up.Linear, not Module.up.FSDPLinear)."""
    cls = type(mod)
    m = sys.modules.get("torch.distributed.fsdp")
    fsdp = getattr(m, "FSDPModule", None) if m is not None else None
    if fsdp is not None and isinstance(mod, fsdp):
        for base in cls.__mro__[1:]:
            if base is not fsdp and not issubclass(base, fsdp) and issubclass(base,
                                                                              torch.nn.Module):
                return base.__name__
    return cls.__name__


# ---- the debugger's side ------------------------------------------------------

class _PlaceRec(ctypes.Structure):
    """np_place_rec (nprobe/format.h)."""
    _fields_ = [("name", ctypes.c_char * 256), ("placements", ctypes.c_char * 96),
                ("global_ndim", ctypes.c_int32), ("global_shape", ctypes.c_int64 * 8),
                ("offset", ctypes.c_int64 * 8), ("stage", ctypes.c_int32),
                ("micro_batch", ctypes.c_int32)]


_set_mesh = _place = None
if hasattr(_lib._L, "np_probe_place"):
    _set_mesh = _lib._sig("np_probe_set_mesh", ctypes.c_int, ctypes.c_void_p, ctypes.c_int,
                          ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_int64),
                          ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(_lib.Error))
    _place = _lib._sig("np_probe_place", ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p,
                       ctypes.c_int, ctypes.c_char_p, ctypes.POINTER(_PlaceRec),
                       ctypes.POINTER(_lib.Error))


def model_mesh(models):
    """The Mesh of the first DTensor parameter of `models` (its root mesh),
    None without one."""
    c = _dtensor_cls
    if c is None:
        return None
    for m in models:
        for p in m.parameters():
            if isinstance(p, c):
                return _mesh_of(root_mesh(p.device_mesh))
    return None


def set_mesh(d, world_size):
    """Before a step begins: the mesh of the model's DTensors to the probe
    (root attributes mesh_dims/mesh_shape/mesh_coords, format version 2),
    once; a mesh the probe refuses (not covering the world) is warned once
    and the dump goes on without placements. Without DTensors but with
    data_parallel (DDP, or a program's own all-reduce), a 1-D mesh of that
    name over the world (not for DDP on a subgroup: no mesh, a warning). A
    pipeline without DTensors: (pp,) over its group when that is the world;
    pipelines replicated over data_parallel, (dp, pp) or (pp, dp)
    (pp_dp_mesh); else no mesh and a warning."""
    if d._mesh is not None or _set_mesh is None:
        return
    mesh = model_mesh(d._models)
    sched = pipeline.schedule()
    if mesh is None and getattr(d, "_user_mesh", None) is not None:
        mesh = user_mesh(d, world_size)
        if mesh is False:
            d._mesh = False
            return
    if mesh is None and sched is not None and sched.ranks == list(range(world_size)):
        # a pipeline without DTensors: its stages' ranks are the mesh
        mesh = Mesh(("pp",), (len(sched.ranks),), (sched.coord,), list(sched.ranks))
    elif mesh is None and sched is not None and d._dp is not None and \
            pp_dp_mesh(d, sched.ranks, world_size) is not None:
        # pipelines replicated for data parallel (no DTensors): the world is
        # the pipeline groups side by side, dp across them
        mesh = pp_dp_mesh(d, sched.ranks, world_size)
    elif mesh is None and sched is not None:
        # a pipeline on a subgroup without a device mesh: the other ranks
        # are a dimension the program knows, not the probe
        import warnings
        warnings.warn(f"nprobe: the pipeline group {sched.ranks} is not the world "
                      f"({world_size} ranks) and the model has no DTensors: no device mesh "
                      f"is written (the micro-batches are not assembled; each rank's dump "
                      f"compares on its own)", stacklevel=4)
        d._mesh = False
        return
    if mesh is None and d._dp is not None and world_size > 1 and len(dp_names(d)) == 1:
        import torch.distributed as dist
        sub = ddp_ranks(d)
        if sub is not None and sub != list(range(world_size)):
            # DDP on a subgroup: its ranks' batches are not the world's
            # shards (the other ranks are another dimension the program
            # knows, not the probe): no mesh, each rank's dump on its own
            import warnings
            warnings.warn(f"nprobe: data_parallel={d._dp!r}: DistributedDataParallel's "
                          f"process group {sub} is not the world ({world_size} ranks): no "
                          f"device mesh is written; each rank's dump compares on its own "
                          f"(against one process on that rank's batch)", stacklevel=4)
            d._mesh = False
            return
        rank = dist.get_rank()
        mesh = Mesh(dp_names(d), (world_size,), (rank,), list(range(world_size)))
    if mesh is None and d._dp is not None and len(dp_names(d)) > 1 and world_size > 1:
        import warnings
        warnings.warn(f"nprobe: data_parallel={d._dp!r} names several mesh dimensions but the "
                      f"model has no DTensors and no device_mesh was given: no device mesh is "
                      f"written; each rank's dump compares on its own", stacklevel=4)
        d._mesh = False
        return
    if mesh is None:
        return
    d._mesh = mesh
    if d._dp is not None:
        if all(n in mesh.names for n in dp_names(d)):
            d._dp_k = tuple(mesh.names.index(n) for n in dp_names(d))
            d._dp_div = dp_divisor(d, dp_size(d))
            ep = d._ep_dim or dp_names(d)[-1]
            d._ep_k = mesh.names.index(ep) if ep in mesh.names else None
        else:
            import warnings
            warnings.warn(f"nprobe: data_parallel={d._dp!r} is not a dimension of the device "
                          f"mesh {mesh.names}: activations are written as replicated",
                          stacklevel=4)
    names, shape, coords = list(mesh.names), list(mesh.shape), list(mesh.coords)
    if sched is not None and MB not in names:
        # a pipeline's micro-batches: the last dimension, in time (mb_over)
        d._mb, d._mb_div = sched.n_mb, float(sched.div)
        d._mb_sizes = sched.sizes
        gd = mesh.group_dim(sched.ranks)
        d._pp_k = gd[0] if gd is not None else None
        names, shape, coords = names + [MB], shape + [sched.n_mb], coords + [0]
    n = len(shape)
    names = (ctypes.c_char_p * n)(*[x.encode() for x in names])
    shape = (ctypes.c_int64 * n)(*shape)
    coords = (ctypes.c_int64 * n)(*coords)
    if _set_mesh(d._p, n, names, shape, coords, d._eref):
        err = str(d._err.exception())
        _lib.Error.__init__(d._err)
        d._mesh = False
        d._dp_k, d._dp_div, d._ep_k = None, 1.0, None
        d._mb, d._mb_div = None, 1.0
        _no_row(d, f"the device mesh {mesh.names} {mesh.shape} (world size {world_size}) "
                   f"was refused: {err}")


def user_mesh(d, world_size):
    """The Mesh of PrecisionDebugger(device_mesh=...) (its root mesh); False,
    with a warning, when it does not cover the world or a
    DistributedDataParallel module's group is not its data_parallel line."""
    import warnings
    mesh = _mesh_of(root_mesh(d._user_mesh))
    if mesh is None:
        warnings.warn("nprobe: device_mesh does not hold this rank: no device mesh is written",
                      stacklevel=5)
        return False
    n = 1
    for x in mesh.shape:
        n *= x
    sub = ddp_ranks(d)
    gd = mesh.group_dim(sub) if sub is not None else None
    why = None
    if n != world_size:
        why = f"covers {n} ranks, not the world's {world_size}"
    elif sub is not None and (gd is None or (mesh.names[gd[0]],) != dp_names(d)):
        why = (f"DistributedDataParallel's process group {sub} is not its "
               f"data_parallel={d._dp!r} line")
    if why:
        warnings.warn(f"nprobe: device_mesh {mesh.names} {mesh.shape} {why}: no device mesh "
                      f"is written; each rank's dump compares on its own", stacklevel=5)
        return False
    return mesh


def pp_dp_mesh(d, ranks, world_size):
    """The mesh of a data-parallel run of pipelines without DTensors
    (PrecisionDebugger(data_parallel=NAME)) from this rank's pipeline group
    `ranks`: the world tiled by equal groups of P ranks, either contiguous
    (mesh (NAME, pp), dp the slower dimension) or strided by world / P
    (mesh (pp, NAME)); None otherwise, or when a DistributedDataParallel
    module's group is not this rank's line across the pipelines."""
    import torch.distributed as dist
    p, rank = len(ranks), dist.get_rank()
    if p < 2 or world_size % p or world_size == p or len(dp_names(d)) != 1:
        return None
    n, stride = world_size // p, ranks[1] - ranks[0]
    if ranks != [ranks[0] + i * stride for i in range(p)]:
        return None
    if stride == 1 and ranks[0] % p == 0:
        names, shape = (dp_names(d)[0], "pp"), (n, p)
        coords = (rank // p, rank % p)
        line = [c * p + rank % p for c in range(n)]
    elif stride == n and ranks[0] < n:
        names, shape = ("pp", dp_names(d)[0]), (p, n)
        coords = (rank // n, rank % n)
        line = [rank // n * n + c for c in range(n)]
    else:
        return None
    sub = ddp_ranks(d)
    if sub is not None and sub != line:
        return None
    nested = [[i * shape[1] + j for j in range(shape[1])] for i in range(shape[0])]
    return Mesh(names, shape, coords, nested)


def ddp_ranks(d):
    """The global ranks of the process group of the DistributedDataParallel
    module among the debugger's models, None without one."""
    ddp = getattr(sys.modules.get("torch.nn.parallel"), "DistributedDataParallel", None)
    if ddp is None:
        return None
    for model in d._models:
        for mod in model.modules():
            if isinstance(mod, ddp):
                try:
                    import torch.distributed as dist
                    return list(dist.get_process_group_ranks(mod.process_group))
                except Exception:  # noqa: BLE001 - another torch's DDP internals
                    return None
    return None


def dp_names(d):
    """PrecisionDebugger(data_parallel=...) as a tuple of mesh dimension
    names (one name, or several whose ranks all see their own batches:
    (dp, ep), the earlier outer in the batch)."""
    return (d._dp,) if isinstance(d._dp, str) else tuple(d._dp or ())


def dp_size(d, dims=None):
    """The ranks along the data-parallel dimensions (`dims`: those mesh
    indices, else all of them)."""
    n = 1
    for k in d._dp_k if dims is None else dims:
        n *= d._mesh.shape[k]
    return n


def dp_coord(d, dims=None):
    """This rank's place along the data-parallel dimensions, the earlier
    dimension outer (DTensor's order of Shard(0) on several dimensions)."""
    c = 0
    for k in d._dp_k if dims is None else dims:
        c = c * d._mesh.shape[k] + d._mesh.coords[k]
    return c


def dp_divisor(d, size):
    """What the data-parallel reduction divides the ranks' summed gradients
    by: data_parallel_reduce ("avg": the dp size, "sum": 1, a number), else
    read from the model: FSDP2's gradient divide factor (None: the dp size,
    its default average), DDP (the average), else 1 (a program's own sum)."""
    r = d._dp_reduce
    if r == "avg":
        return float(size)
    if r == "sum":
        return 1.0
    if r is not None:
        return float(r)
    m = sys.modules.get("torch.distributed.fsdp")
    fsdp = getattr(m, "FSDPModule", None) if m is not None else None
    ddp = getattr(sys.modules.get("torch.nn.parallel"), "DistributedDataParallel", None)
    for model in d._models:
        for mod in model.modules():
            if ddp is not None and isinstance(mod, ddp):
                return float(size)
            if fsdp is not None and isinstance(mod, fsdp):
                try:
                    group = mod._get_fsdp_state()._fsdp_param_group
                except Exception:  # noqa: BLE001 - another torch's FSDP2 internals
                    group = None
                if group is not None:
                    f = getattr(group, "gradient_divide_factor", None)
                    return float(size) if f is None else float(f)
    return 1.0


def _no_row(d, what):
    """A DTensor leaf dumped without a placement row: counted in
    summary["unplaced"], warned once."""
    d._unplaced += 1
    if d._unplaced == 1:
        import warnings
        warnings.warn(f"nprobe: {what}; the shard is dumped without a placement row (the "
                      "count is summary['unplaced'])", stacklevel=4)


# ops whose output shard is the op of the input shard (elementwise, one
# tensor operand, or several on the same layout): a plain local tensor they
# make from a placed one lies as that one does
POINTWISE = frozenset((
    "gelu", "relu", "relu6", "silu", "sigmoid", "tanh", "softplus", "leaky_relu", "elu",
    "selu", "celu", "mish", "hardtanh", "hardswish", "hardsigmoid", "logsigmoid", "dropout",
    "neg", "exp", "abs", "sqrt", "rsqrt", "square", "clamp", "float", "half", "bfloat16",
    "to", "type_as", "contiguous", "clone", "detach",
    "add", "sub", "mul", "div", "__add__", "__radd__", "__sub__", "__rsub__", "__mul__",
    "__rmul__", "__truediv__", "__neg__", "pow", "__pow__"))


def _key(t):
    try:
        return (t.data_ptr(), tuple(t.shape), tuple(t.stride()), t.dtype)
    except RuntimeError:
        return None


def _known(d, t):
    """(mesh, row) of a plain tensor that is a placed DTensor's shard (the
    same memory, shape and strides: to_local() of it, a parallel style's
    local output) or was made from one by a pointwise op, else None."""
    if not d._shards or t is None or t.numel() == 0:
        return None
    hit = d._shards.get(_key(t))
    return hit[:2] if hit is not None else None


def _remember(d, t, mesh, row):
    """t (a placed leaf's shard) is known by its memory until the step ends
    (kept alive: no later tensor of the step takes its address). Not a
    Partial(sum) piece: DTensor reduces those before the program sees them
    as plain tensors (an all-reduce, whose input rows say Partial), so a
    plain tensor holding one is the program taking a piece for the whole
    (a row-parallel output not reduced, a gradient used unreduced): it is
    dumped as whole, and compare names the call that took it."""
    if t is not None and t.numel() and "Partial" not in row.placements:
        k = _key(t)
        if k is not None:
            d._shards[k] = (mesh, row, t)


def _plain(d, call, ts, found, keys, role, out, pointwise_from=None):
    """Rows of the plain tensors among ts known as shards (_known); for the
    outputs of a pointwise op, the rows of its placed inputs."""
    have = {i for i, _ in found} if found else set()
    for i, t in enumerate(ts):
        if t is None or i in have or not isinstance(t, torch.Tensor):
            continue
        mr = _known(d, t)
        if mr is None and pointwise_from and tuple(t.shape) == pointwise_from[0]:
            mr = pointwise_from[1]
            _remember(d, t, *mr)
        if mr is not None:
            out.append((role, [(i, mr)], keys))


def localize_call(d, call, ins, params, outs, in_keys, out_keys, role_in, role_par, role_out,
                  scalars=()):
    """A call's leaves with DTensors and pending collectives as the tensors
    holding this rank's values, and the placement rows to write after the
    call's rows ((role, [(i, DTensor or (mesh, row))], keys)...): the
    DTensors', those of plain tensors known as shards (_known), and those
    of plain tensors an op made from shards (derive.py: views into heads,
    transposes, broadcasts, matmuls; a backward's from its forward's)."""
    ins, fi = localize(ins)
    outs, fo = localize(outs)
    fp = None
    if params:
        pl, fp = localize([t for _, t in params])
        if fp:
            keys = [k for k, _ in params]
            params = list(zip(keys, pl))
            fp = (role_par, fp, keys)
    places = []
    if fi:
        places.append((role_in, fi, in_keys))
    if fp:
        places.append(fp)
    if fo:
        places.append((role_out, fo, out_keys))
    if d._shards or fi or fo:
        _plain(d, call, ins, fi, in_keys, role_in, places)
        src = None
        parts = call.split(".")
        if parts[0] != "Module" and len(parts) > 2 and parts[1] in POINTWISE:
            rows = [mr for role, f, _ in places if role == role_in for _, mr in f]
            rows = [r if isinstance(r, tuple) else None for r in rows]
            shapes = {tuple(t.shape) for t in ins if isinstance(t, torch.Tensor) and t.dim()}
            if rows and all(r is not None for r in rows) and len(shapes) == 1 and \
                    len({(r[0], r[1].placements, r[1].offset) for r in rows}) == 1 and \
                    "Partial" not in rows[0][1].placements:
                src = (shapes.pop(), rows[0])
        _plain(d, call, outs, fo, out_keys, role_out, places, src)
        _derived(d, call, parts, ins, outs, in_keys, out_keys, role_in, role_out, places,
                 scalars)
    ep = expert_call(d, call) if d._dp_k is not None and d._mesh and \
        not call.startswith("Distributed.") else False
    if ep is None:
        if d._shards or ".backward" not in call:
            routing_rows(d, call, call.split("."), ins, outs, in_keys, out_keys, role_in,
                         role_out, places)
        dp_rows(d, call, ins, outs, in_keys, out_keys, role_in, role_out, places)
    elif ep and expert_rows(d, ep):
        dp_rows(d, call, ins, outs, in_keys, out_keys, role_in, role_out, places,
                expert_rows(d, ep))
    if d._mesh and pipeline._active and not call.startswith("Distributed."):
        # (a collective's rows are its own: distributed._place_leaves)
        if pipeline.current()[0] >= 0:
            chunk_rows(d, ins, outs, params, in_keys, out_keys, role_in, role_par, role_out,
                       places)
            if d._mb:
                mb_context(d, call, ins, places, role_in)
    return ins, params, outs, places or None


def _derived(d, call, parts, ins, outs, in_keys, out_keys, role_in, role_out, places,
             scalars):
    """derive.py's rows for the plain leaves no other rule placed: a forward
    op's outputs from its sharded inputs, a backward's leaves from its
    forward call's rows; then a forward call's rows kept for its backward."""
    if not d._shards:
        return
    have = {(role, i) for role, f, _ in places for i, _ in f}
    if ".backward" in call:
        for ts, keys, role, fwd_role in ((ins, in_keys, role_in, role_out),
                                         (outs, out_keys, role_out, role_in)):
            taken = {i for r, i in have if r == role}
            f = derive.mirror(d, call, ts, taken, keys, role, fwd_role)
            if f:
                places.append((role, f, keys))
        return
    if parts[0] != "Module" and len(parts) > 2:
        in_rows = {i: mr for role, f, _ in places if role == role_in for i, mr in f}
        if in_rows:
            taken = {i for r, i in have if r == role_out}
            f = derive.forward(d, parts[1], ins, in_rows, outs, taken, scalars)
            if f:
                places.append((role_out, f, out_keys))
    derive.record(d, call, places, role_in, role_out)


def chunk_rows(d, ins, outs, params, in_keys, out_keys, role_in, role_par, role_out, places):
    """In a pipeline stage's chunk (pipeline.current()), every tensor leaf
    has a row, so that its stage and micro-batch are written (place()): a
    leaf placed by nothing else is whole (Replicate() on every mesh
    dimension)."""
    have = {(role, i) for role, f, _ in places for i, _ in f}
    mesh = d._mesh
    text = ",".join(["Replicate()"] * len(mesh.shape))
    groups = ((role_in, ins, in_keys), (role_out, outs, out_keys))
    if params:
        groups += ((role_par, [t for _, t in params], [k for k, _ in params]),)
    for role, ts, keys in groups:
        found = []
        for i, t in enumerate(ts):
            if (role, i) in have or not isinstance(t, torch.Tensor):
                continue
            g = tuple(int(x) for x in t.shape)
            found.append((i, (mesh, PlaceRow(text, g, (0,) * len(g)))))
        if found:
            places.append((role, found, keys))


# ---- a pipeline's micro-batches: the mesh's last dimension "mb" ----------------

MB = "mb"      # its name (nprobe/format.h NP_FMT_MESH_MB)


def _global_dim0(t, row):
    """The first dimension of leaf t's logical tensor (its row's global
    shape where it has one), None for a scalar."""
    g = row[1].global_shape if isinstance(row, tuple) else tuple(t.shape)
    return int(g[0]) if g else None


def mb_context(d, call, ins, places, role_in):
    """What mb_over needs of a call in a chunk: the micro-batch size (the
    first dimension of the step's first forward call's first tensor input
    that is not a parameter, as dp_rows takes the local batch) and, for a
    reduction to a scalar of a batched input (a mean loss), its kind."""
    if ".backward" in call:
        return
    rows = {i: t for role, f, _ in places if role == role_in for i, t in f}
    dims = []
    for i, t in enumerate(ins):
        if isinstance(t, torch.Tensor) and t.dim() and not isinstance(t, torch.nn.Parameter):
            dims.append(_global_dim0(t, rows.get(i)))
    if d._mb_batch is None:
        if not dims:
            return
        d._mb_batch = dims[0]
    red = _dp_reduction(d, call.split("."))
    n = dp_size(d) if d._dp_k is not None else 1
    if red and (d._mb_batch in dims or
                any(x in dims or n * x in dims for x in d._mb_sizes or ())):
        d._mb_red[call] = red


def _mb_piece(d, row, g0, m):
    """Where the rows of micro-batch m lie when a leaf's first dimension g0
    (its row's global one) is that micro-batch's: (the rows before them, the
    whole batch's rows), None when g0 is not a micro-batch's. Micro-batch m
    lies after the earlier ones (tensor_split's sizes where M does not
    divide the batch, else equal); under data parallel (the row Shard(0) on
    dp already, at c x b) dp rank c's M micro-batches are the c-th piece of
    the dp ranks' batches (DTensor's order: dp splits the batch, mb each dp
    rank's piece), every dp rank's batch taken as this rank's: a rank does
    not know the others' (compare derives their offsets from the pieces'
    rows where they differ: docs/COMPARE.md "Sharded layouts")."""
    n, c = 1, 0
    words = row.placements.split(",")
    if d._dp_k is not None and all(words[k] == "Shard(0)" for k in d._dp_k):
        n, c = dp_size(d), dp_coord(d)
    sizes = d._mb_sizes or pipeline.chunk_sizes(d._mb)
    if not sizes or not 0 <= m < len(sizes):
        if g0 != d._mb_batch:
            return None
        sizes = [g0 // n] * d._mb
    if g0 != n * sizes[m]:
        return None
    whole = sum(sizes)
    return c * (whole - sizes[m]) + sum(sizes[:m]), n * whole


def mb_over(d, call, role, row, m):
    """Row `row` of a leaf of micro-batch m (-1: outside the micro-batches)
    with its item on the mb dimension, as dp_rows says it of a data-parallel
    rank's batch: a tensor whose first dimension is the micro-batch's rows
    Shard(0) of the whole batch (_mb_piece: after the earlier micro-batches'
    rows, under data parallel within dp rank c's piece); a reduction of one
    to a scalar Partial(avg) (a mean: the loss) or Partial(sum); in the
    backward, the gradient of anything else Partial(sum) (each
    micro-batch's loss adds its share; the scalar gradient arriving at a
    mean loss too: 1 each, 1 / M unscaled), of a summed loss replicated;
    parameters, their accumulated gradients and the leaves outside the
    micro-batches Replicate(). The gradients are those of each micro-batch's
    loss: under pipelining's scale_grads (a mean loss) M times the whole
    batch's, which the step's dp_grad_scale carries (debugger._begin)."""
    g, off = list(row.global_shape), list(row.offset)
    bw = ".backward" in call
    piece = _mb_piece(d, row, g[0], m) if g and m >= 0 else None
    if m < 0 or role in (_lib.ROLE_PARAMETERS, _lib.ROLE_PARAMETERS_GRAD):
        item = "Replicate()"
    elif piece is not None:
        item = "Shard(0)"
        off[0] += piece[0]
        g[0] = piece[1]
    elif bw:
        item = "Replicate()" if not g and role == _lib.ROLE_INPUT and d._mb_div == 1.0 \
            else "Partial(sum)"
    elif not g and role == _lib.ROLE_OUTPUT and call in d._mb_red:
        item = "Partial(avg)" if d._mb_red[call] == "A" else "Partial(sum)"
    else:
        item = "Replicate()"
    return PlaceRow(row.placements + "," + item, tuple(g), tuple(off), row.stage,
                    row.micro_batch)


# ---- expert parallel: each rank its own experts -------------------------------

def _count(v, least):
    return isinstance(v, int) and not isinstance(v, bool) and v >= least


def experts_arg(experts):
    """PrecisionDebugger(experts=...): ({container path: the global index of
    its first expert on this rank}, {container path: the experts of one
    process, or None: the container's here times the expert-parallel
    size}). A path alone: first 0 (the names carry the global index
    already); a value (first, total) where the ranks hold unequal numbers
    of experts. ({}, {}) without."""
    if not experts:
        return {}, {}
    if isinstance(experts, str):
        experts = {experts: 0}
    out, totals = {}, {}
    for path, v in dict(experts).items():
        first, total = v if isinstance(v, tuple) and len(v) == 2 else (v, None)
        if not isinstance(path, str) or not path or not _count(first, 0) or \
                not (total is None or _count(total, first + 1)):
            raise ValueError(f"PrecisionDebugger(experts=...): {path!r}: {v!r}: expected "
                             "{module path of the experts' container: the global index of its "
                             "first expert on this rank (an int >= 0), or (that index, the "
                             "experts of all ranks)}")
        out[path.rstrip(".")] = first
        totals[path.rstrip(".")] = total
    return out, totals


def expert_path(experts, path):
    """Module path `path` with its expert's local index made global
    (experts.0 on a rank whose first expert is 2: experts.2)."""
    for prefix, first in experts.items():
        if path.startswith(prefix + "."):
            rest = path[len(prefix) + 1:].split(".", 1)
            if rest[0].isdigit():
                rest[0] = str(int(rest[0]) + first)
                return prefix + "." + ".".join(rest)
    return path



def expert_top(experts, path):
    """(container path, global index) when `path` (made global) is an
    expert itself (`moe.experts.1`), else None."""
    for prefix in experts:
        rest = path[len(prefix) + 1:] if path.startswith(prefix + ".") else ""
        if rest.isdigit():
            return prefix, int(rest)
    return None


def _count_api(mod, args):
    """{API: its calls} of one run of expert `mod` on 0 rows of its
    arguments, nothing captured (the debugger's count-only mode)."""
    from . import debugger
    tls = debugger._tls
    saved = tls.count
    tls.depth += 1
    try:
        with torch.no_grad():
            empty = [a[:0] if isinstance(a, torch.Tensor) and a.dim() else a for a in args]
            tls.count = {}          # from here: the expert's calls, counted only
            mod(*empty)
        return tls.count
    finally:
        tls.depth -= 1
        tls.count = saved


def hook_expert(d, mod, prefix, g, total):
    """Number the API calls inside expert g as one process running experts
    0 .. total-1 in order does, and those after the experts as following
    all of them (docs/TORCH.md "Expert parallel"): on entering the expert,
    each API's counter is set to its count before the experts (`base`)
    plus g times the calls of that API one expert makes (counted once, by
    running the expert on 0 rows, nothing captured: identical experts make
    the same calls); on leaving it, to base plus `total` times them. A
    rank's next expert of the same layer (the counters where the last one
    left them) keeps the layer's base. `total()`: the experts of one
    process (experts_total). The expert's input rows are kept for its
    calls' rows (expert_rows)."""
    from . import debugger

    def live():
        return debugger._current is d and not debugger._tls.depth and d._sel \
            and debugger._tls.count is None

    def pre(m, args):
        if not live():
            return
        st = d._ep_state.setdefault(prefix, {})
        if "k" not in st:
            try:
                st["k"] = _count_api(m, args)
            except Exception as e:  # noqa: BLE001 - an expert that refuses 0 rows
                warnings.warn(f"nprobe: expert {prefix}.{g}: its API calls are not numbered as "
                              f"one process numbers them (running it on 0 rows: "
                              f"{type(e).__name__}: {e})", stacklevel=2)
                st["k"] = {}
        k, c = st["k"], d._counts
        x = args[0] if args and isinstance(args[0], torch.Tensor) and args[0].dim() else None
        d._ep_rows[f"{prefix}.{g}"] = int(x.shape[0]) if x is not None else None
        with d._lock:
            after = st.get("after")
            if after is None or any(c.get(a, 0) != after.get(a) for a in k):
                st["base"] = {a: c.get(a, 0) for a in k}
            for a, n in k.items():
                c[a] = st["base"][a] + g * n

    def post(m, args, out):
        st = d._ep_state.get(prefix)
        if not live() or not st or "base" not in st:
            return
        with d._lock:
            for a, n in st["k"].items():
                d._counts[a] = st["base"][a] + total() * n
            st["after"] = {a: d._counts[a] for a in st["k"]}
        expert_output(d, out)

    mod.register_forward_pre_hook(pre)
    mod.register_forward_hook(post)


def experts_total(d, prefix, container):
    """The experts of one process: PrecisionDebugger(experts={prefix:
    (first, total)})'s total, else the container's here times the size of
    the expert-parallel dimension of the mesh (d._ep_k), without one the
    world's (every rank as many experts)."""
    given = d._experts_total.get(prefix)
    if given is not None:
        return given
    n = len(container) if hasattr(container, "__len__") else 1
    if d._mesh and d._ep_k is not None:
        return n * d._mesh.shape[d._ep_k]
    try:
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized():
            return n * dist.get_world_size()
    except Exception:  # noqa: BLE001 - no process group: this process's experts
        pass
    return n


def expert_call(d, call):
    """The expert (its global path, `moe.experts.2`) whose call `call` is
    (a Module row of a module under an experts container, or an API call
    inside one), else None: its leaves are whole on this rank, the only
    one of its expert-parallel group holding that expert; under data
    parallel across the groups too (expert_rows), the tokens of each
    group's ranks."""
    if not d._experts:
        return None
    base, bw = call.rsplit(".", 1)[0], call.endswith(".backward")
    if call.startswith("Module."):
        name = call[7:]
    elif bw:        # an API call's backward: its forward's (made inside an expert)
        return d._ep_calls.get(base)
    elif d._mstack:
        name = d._mstack[-1][7:]
    else:
        return None
    for p in d._experts:
        if name.startswith(p + "."):
            top = p + "." + name[len(p) + 1:].split(".", 1)[0]
            if not call.startswith("Module."):
                d._ep_calls[base] = top
            return top
    return None


def expert_dims(d):
    """The data-parallel dimensions of the mesh other than the
    expert-parallel one (data_parallel=("dp", "ep"): dp), along which an
    expert's replicas see their own groups' tokens."""
    if d._dp_k is None:
        return ()
    return tuple(k for k in d._dp_k if k != d._ep_k)


def expert_rows(d, expert):
    """(dimensions, rows) that dp_rows takes for a call of `expert` when
    its replicas across expert-parallel groups see their own tokens: its
    tokens here Shard(0) along expert_dims (their offsets known to compare
    from the pieces' row counts: docs/COMPARE.md "Sharded layouts"), its
    parameters' gradients Partial(sum); None when the expert is held once
    (no such dimension, or its rows unknown)."""
    dims = expert_dims(d)
    rows = d._ep_rows.get(expert)
    return (dims, rows) if dims and rows is not None else None


# ops whose integer output is a position in this rank's own tensor (the
# routing's sort of its tokens by expert): Local() on the data-parallel
# dimension, no piece of the one process's (which sorts the whole batch);
# and the tensors gathered by such positions (x[order])
LOCAL_INDEX = frozenset(("argsort", "sort", "msort", "nonzero", "argwhere"))
GATHERS = frozenset(("__getitem__", "index_select", "gather", "take", "take_along_dim"))
# counts of this rank's rows (tokens per expert): the ranks' sum is the
# whole batch's (Partial(sum))
COUNTS = frozenset(("bincount", "histc", "count_nonzero"))
# ops that cut or join rows: of rank-local tokens (a dispatch's, grouped by
# expert on a rank of several), rank-local tokens again
ROWS = frozenset(("narrow", "split", "split_with_sizes", "tensor_split", "chunk", "unbind",
                  "cat", "concat", "concatenate", "contiguous", "clone"))


def _local_row(d, t):
    mesh = d._mesh
    words = ["Replicate()"] * len(mesh.shape)
    for k in d._dp_k:
        words[k] = "Local()"
    g = tuple(int(s) for s in t.shape)
    return mesh, PlaceRow(",".join(words), g, (0,) * len(g))


def routing_rows(d, call, parts, ins, outs, in_keys, out_keys, role_in, role_out, places):
    """Under data parallel: rows of a routing's rank-local tensors (Local())
    and counts (Partial(sum)), and of what is gathered by a local index."""
    op = parts[1] if len(parts) > 2 else ""
    have = {(role, i) for role, f, _ in places for i, _ in f}
    local_in = []
    for i, t in enumerate(ins):
        if (role_in, i) in have or not isinstance(t, torch.Tensor):
            continue
        mr = _local_known(d, t)
        if mr is not None:
            places.append((role_in, [(i, mr)], in_keys))
            local_in.append(i)
    if op in GATHERS and local_in and ".backward" not in call:
        # the positions a gather takes from rank-local tokens are this
        # rank's own too (a permutation that groups them by expert)
        pos = [(i, _local_row(d, t)) for i, t in enumerate(ins)
               if i not in local_in and (role_in, i) not in have and
               isinstance(t, torch.Tensor) and t.dim() and not t.is_floating_point()]
        if pos:
            places.append((role_in, pos, in_keys))
            local_in += [i for i, _ in pos]
    # a backward's gradients for the forward's Local() inputs are in the
    # same rank-local order (index_copy's source: the tokens sorted here)
    base, bw = call.rsplit(".", 1)[0], call.endswith(".backward")
    def key(keys, i):       # an argument's position in the call (keys: the dumped ones')
        return str(keys[i]) if keys else str(i)
    if not bw:
        were = {key(ks, i) for role, f, ks in places if role == role_in for i, mr in f
                if isinstance(mr, tuple) and "Local()" in mr[1].placements}
        if were:
            d._local_calls[base] = frozenset(were)
    # and the gradients arriving at its Local() outputs ("o" + key)
    was = d._local_calls.get(base, ()) if bw else ()
    back = {j for j in range(len(outs)) if key(out_keys, j) in was}
    back_in = {i for i in range(len(ins)) if "o" + key(in_keys, i) in was}
    if back or back_in:     # not the batch's rows (dp_rows took them so): Local()
        places[:] = [(role, [(i, mr) for i, mr in f if not (role == role_out and i in back or
                                                              role == role_in and i in back_in)],
                      ks) for role, f, ks in places]
        found = [(i, _local_row(d, t)) for i, t in enumerate(ins)
                 if i in back_in and isinstance(t, torch.Tensor) and t.dim()]
        if found:
            places.append((role_in, found, in_keys))
    found = []
    for j, o in enumerate(outs):
        if j in back and isinstance(o, torch.Tensor) and o.dim():
            found.append((j, _local_row(d, o)))
        elif (role_out, j) in have or not isinstance(o, torch.Tensor) or not o.dim():
            continue
        elif op in COUNTS and ".backward" not in call:
            found.append((j, dp_row(d, o, "P")))
        elif (op in LOCAL_INDEX and not o.is_floating_point()) or \
                ((op in GATHERS or op in ROWS) and local_in and ".backward" not in call):
            mr = _local_row(d, o)
            found.append((j, mr))
            _remember_local(d, o, mr)
    if found:
        places.append((role_out, found, out_keys))
        if not bw:
            d._local_calls[base] = d._local_calls.get(base, frozenset()) | \
                {"o" + key(out_keys, j) for j, _ in found}


def expert_output(d, out):
    """An expert's output under data parallel: its tokens in this rank's
    own order (as the dispatch delivered them), Local() to the calls that
    take it outside the expert (expert parallel's combine)."""
    if d._mesh and d._dp_k is not None:
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor) and t.dim():
                _remember_local(d, t, _local_row(d, t))


def _remember_local(d, t, mr):
    k = _key(t)
    if k is not None:
        d._shards[("\x1flocal",) + k] = (mr, t)


def _local_known(d, t):
    if not d._shards or t.numel() == 0:
        return None
    k = _key(t)
    hit = d._shards.get(("\x1flocal",) + k) if k is not None else None
    return hit[0] if hit is not None else None


# ---- data parallel: each rank of the dp dimension has its own batch ----------

# the reductions of a batch to a scalar: a sum of the ranks' sums, a mean of
# their means (a loss function's default reduction="mean"; its "sum" a sum)
DP_REDUCTIONS = {"sum": "P", "nansum": "P", "mean": "A", "nanmean": "A"}
DP_LOSSES = frozenset((
    "cross_entropy", "nll_loss", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss",
    "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div", "poisson_nll_loss",
    "gaussian_nll_loss", "soft_margin_loss", "multilabel_soft_margin_loss",
    "multilabel_margin_loss", "multi_margin_loss", "hinge_embedding_loss",
    "margin_ranking_loss", "cosine_embedding_loss", "triplet_margin_loss", "ctc_loss"))


def _dp_reduction(d, parts):
    """"P" (a sum) or "A" (a mean) when call `parts` reduces the batch to a
    scalar, else None."""
    if len(parts) < 3:
        return None
    k = DP_REDUCTIONS.get(parts[1])
    if k is None and parts[1] in DP_LOSSES:
        r = d._dp_red.get(f"{parts[0]}.{parts[1]}.{parts[2]}", "mean")
        k = "P" if r == "sum" else "A" if r == "mean" else None
    return k


def dp_batch_now(d):
    """The local batch's rows of the calls running now: under micro-batches
    of unequal sizes (pipeline.Schedule.sizes) the running micro-batch's,
    else the step's (d._dp_batch: its first forward call's)."""
    s, b = d._mb_sizes or (pipeline.chunk_sizes(d._mb) if d._mb else None), d._dp_batch
    if s and b is not None:
        m = pipeline.current()[1]
        if 0 <= m < len(s):
            return s[m]
    return b


def dp_row(d, t, kind, dims=None):
    """(mesh, PlaceRow) of plain tensor t along the data-parallel mesh
    dimension (PrecisionDebugger(data_parallel=NAME)): "S" this rank's rows
    of the batch (Shard(0), every rank's local batch the same size), "P" a
    Partial(sum) (a gradient of a replicated tensor: the ranks' sum is the
    whole batch's), "A" a Partial(avg) (a mean over the rank's rows: the
    ranks' mean is the whole batch's); the mesh's other dimensions
    Replicate(). `dims`: the data-parallel dimensions meant (an expert's:
    expert_dims), else all of them; on several, Shard(0) on each (the
    earlier outer) or the Partial on each."""
    mesh = d._mesh
    dims = d._dp_k if dims is None else dims
    words = ["Replicate()"] * len(mesh.shape)
    g = [int(s) for s in t.shape]
    for k in dims:
        if kind == "S":
            words[k] = "Shard(0)"
            g[0] *= mesh.shape[k]
        else:
            words[k] = "Partial(avg)" if kind == "A" else "Partial(sum)"
    text = ",".join(words)
    _, off = shard_layout(g, mesh.shape, mesh.coords, parse_placements(text))
    return mesh, PlaceRow(text, tuple(g), tuple(off))


def dp_rows(d, call, ins, outs, in_keys, out_keys, role_in, role_out, places, expert=None):
    """Rows of a call's plain leaves (not placed otherwise) when the dp
    ranks see different batches. The local batch size B is the first
    dimension of the step's first forward call's first tensor input (not a
    parameter). Forward: a tensor whose first dimension is B is Shard(0) of
    the batch; a sum to a scalar of one is Partial(sum), a mean (a loss
    function's default) Partial(avg); others (parameters, what is made from
    them) are replicated (no row). Backward: the gradients are those of
    each rank's loss, scaled by the divisor of the dp reduction (d._dp_div,
    the step's root attribute dp_grad_scale carries it, apart from
    loss_scale: compare divides it out); unscaled, a
    gradient whose first dimension is B is Shard(0), the gradient of a
    replicated tensor Partial(sum). The scalar gradient arriving at a
    reduction (of the loss: 1 on each rank) is replicated under a summing
    reduction, Partial(sum) under a dividing one (1 / divisor each,
    unscaled). `expert`: (its data-parallel dimensions, its rows) for a
    call of an expert (expert_rows): its batch is its tokens."""
    bw = ".backward" in call
    have = {(role, i) for role, f, _ in places for i, _ in f}
    if expert is None and d._dp_batch is None:
        if bw:
            return
        for t in ins:
            if isinstance(t, torch.Tensor) and t.dim() and \
                    not isinstance(t, torch.nn.Parameter):
                d._dp_batch = int(t.shape[0])
                break
        else:
            return
    dims, b = expert if expert is not None else (None, dp_batch_now(d))
    parts = call.split(".")
    red = _dp_reduction(d, parts)
    batched_in = False
    # a backward's gradients of its forward's parameters are the ranks'
    # partial sums whatever their first dimension (an expert's weight of
    # as many rows as its tokens)
    base = call.rsplit(".", 1)[0]
    if not bw:
        pk = {str(in_keys[i]) if in_keys else str(i) for i, t in enumerate(ins)
              if isinstance(t, torch.nn.Parameter)}
        if pk:
            d._param_ins[base] = pk
    grads = d._param_ins.get(base, ()) if bw else ()
    for role, ts, keys in ((role_in, ins, in_keys), (role_out, outs, out_keys)):
        found = []
        for i, t in enumerate(ts):
            if (role, i) in have or not isinstance(t, torch.Tensor) or \
                    isinstance(t, torch.nn.Parameter):
                continue
            if t.dim() and t.shape[0] == b and not \
                    (role == role_out and (str(keys[i]) if keys else str(i)) in grads):
                kind = "S"
                batched_in = batched_in or role == role_in
            elif bw:
                if red and role == role_in and t.dim() == 0 and d._dp_div == 1.0:
                    continue
                kind = "P"
            elif red and role == role_out and t.dim() == 0 and batched_in:
                kind = red
            else:
                continue
            found.append((i, dp_row(d, t, kind, dims)))
        if found:
            places.append((role, found, keys))


def dp_over(d, call, role, t, row):
    """A tensor-parallel row (a DTensor's, or a shard's known by its
    memory) when the dp ranks see different batches: its Replicate() on the
    data-parallel dimension says what dp_rows says of a plain tensor: a
    tensor whose first dimension is the local batch is Shard(0) of the
    ranks' batches there, the gradient of anything else (a parameter's)
    Partial(sum), but the scalar gradient arriving at a loss under a
    summing reduction (1 on every rank, as dp_rows leaves it); a parameter
    and what is made from it stay replicated."""
    ks = d._dp_k
    words = row.placements.split(",")
    if any(words[k] != "Replicate()" for k in ks) or role == _lib.ROLE_PARAMETERS or \
            isinstance(t, torch.nn.Parameter):
        return row
    g, off = list(row.global_shape), list(row.offset)
    if g and g[0] == dp_batch_now(d) and role != _lib.ROLE_PARAMETERS_GRAD:
        n, c = dp_size(d), dp_coord(d)
        for k in ks:
            words[k] = "Shard(0)"
        off[0] += c * g[0]
        g[0] *= n
    elif ".backward" in call or role == _lib.ROLE_PARAMETERS_GRAD:
        if not g and role == _lib.ROLE_INPUT and d._dp_div == 1.0 and \
                _dp_reduction(d, call.split(".")):
            return row      # the scalar gradient arriving at a summed loss: 1 on each rank
        for k in ks:
            words[k] = "Partial(sum)"
    else:
        return row
    return PlaceRow(",".join(words), tuple(g), tuple(off), row.stage, row.micro_batch)


def place(d, call, role, key, t):
    """The placement row of leaf `call`.`role`.`key` (already dumped as its
    shard): `t` a DTensor, or (mesh, PlaceRow) of a plain shard. Never raises
    into the program."""
    if isinstance(t, tuple):
        mesh, row = t
    else:
        try:
            mesh, row = place_row(t)
            if mesh is not None:
                _remember(d, t._local_tensor, mesh, row)
        except Exception as e:  # noqa: BLE001 - the dump must not fail the program
            mesh, row = None, f"{type(e).__name__}: {e}"
    if mesh is None:
        _no_row(d, f"{call}: {row}")
        return
    if not d._mesh:
        _no_row(d, f"{call}: no device mesh was set when the step began (a model without "
                   "DTensor parameters)")
        return
    if d._mesh != mesh:
        _no_row(d, f"{call}: a DTensor on mesh {mesh.names} {mesh.shape}, the dump's is "
                   f"{d._mesh.names} {d._mesh.shape}")
        return
    if d._dp_k is not None and d._dp_batch is not None and not call.startswith("Distributed."):
        row = dp_over(d, call, role, t, row)
    if d._mb:
        row = mb_over(d, call, role, row, pipeline.current()[1])
    d._placed.append((call, role, key, row))
    if _place is None:
        return
    r = _PlaceRec()
    r.placements = row.placements.encode()
    r.global_ndim = len(row.global_shape)
    r.global_shape[:len(row.global_shape)] = row.global_shape
    r.offset[:len(row.offset)] = row.offset
    r.stage, r.micro_batch = row.stage, row.micro_batch
    if r.stage < 0:
        # a pipeline stage's chunk (pipeline.py): its stage and micro-batch;
        # parameters and their (accumulated) gradients are the whole batch's;
        # outside a chunk (the gradients written at stop()) the stage this
        # debugger saw last
        st, mb = pipeline.current()
        if st >= 0:
            d._pp_stage = st
        r.stage = st if st >= 0 else getattr(d, "_pp_stage", -1)
        # a collective whose leaves are no piece of a micro-batch's tensor
        # (FSDP2's parameter all-gathers: not each micro-batch's alike, the
        # schedule keeps some gathered) stays its own call, not a replica of
        # the other micro-batches' calls
        own = call.startswith("Distributed.") and row.placements.endswith("Replicate()")
        if role not in (_lib.ROLE_PARAMETERS, _lib.ROLE_PARAMETERS_GRAD) and not own:
            r.micro_batch = mb
    if _place(d._p, call.encode(), role, key.encode(), ctypes.byref(r), d._eref):
        d._note_error()


def collective_rows(d, dname, ranks, op, ins, outs, local=False):
    """Placement rows of a collective's leaves on the dump's mesh, when its
    group is one mesh dimension: [(role, index, (mesh, PlaceRow))]. What a
    rank sends is its piece of a logical tensor: Partial(sum) for a sum
    reduction (the logical tensor is what the all-reduce or reduce-scatter
    makes), Partial(avg) for an average, else Shard(0) of the ranks' inputs
    concatenated in group order (all-gather: its output). What arrives is
    Replicate() (all-reduce, all-gather, broadcast) or Shard(0) of the
    reduced tensor
    (reduce-scatter); all_to_all_single's pieces are Shard(0) of the
    concatenation. Point-to-point calls get none, but under data parallel
    (a pipeline's stages replicated over dp) the tensors a stage sends are
    its dp rank's batch: Shard(0) on dp as dp_rows says of activations (not
    replicas of the other dp ranks'). `local`: an all_to_all_single with
    split sizes (expert parallel's dispatch: each rank's tokens sorted by
    its own routing, pieces of uneven sizes no rank knows the others' of)
    is Local() on the group's dimension (compare leaves it out)."""
    mesh = d._mesh
    if not mesh or not ranks:
        return []
    if dname == "batch_isend_irecv":
        if d._dp_k is None or d._dp_batch is None:
            return []
        # a send outside the chunks: any micro-batch's rows (unequal sizes)
        rows = set(d._mb_sizes or ()) | pipeline.seen_rows() | {d._dp_batch}
        return [(_lib.ROLE_INPUT, i, dp_row(d, t, "S")) for i, t in enumerate(ins)
                if t.dim() and t.shape[0] in rows]
    gd = mesh.group_dims(ranks)
    if gd is None:
        return []
    ks, pos = gd
    n = len(ranks)
    rows = []
    # the mesh's other dimensions: the group's line at each of their
    # coordinates runs the collective on its own tensors (FSDP2's dp
    # all-gather of each tp shard): the leaf's logical tensor is those
    # stacked along dimension 0 (Shard(0)), each line's checked on its own;
    # but not a pipeline's stages (compare keeps each stage's leaves apart)
    others = [j for j in range(len(mesh.shape)) if j not in ks and mesh.shape[j] > 1 and
              j != d._pp_k]

    def row(role, i, t, kind):
        nd = t.dim()
        words = ["Replicate()"] * len(mesh.shape)
        gshape = list(t.shape)
        if kind == "local":
            for k in ks:
                words[k] = "Local()"
            rows.append((role, i, (mesh, PlaceRow(",".join(words), tuple(gshape),
                                                  (0,) * nd))))
            return
        if (kind == "cat" or others) and nd == 0:
            return
        for k in ks:
            if kind == "cat":
                words[k] = "Shard(0)"
            elif kind in ("sum", "avg"):
                words[k] = f"Partial({kind})"
        if kind == "cat":
            gshape[0] *= n
        for j in others:
            words[j] = "Shard(0)"
            gshape[0] *= mesh.shape[j]
        text = ",".join(words)
        _, off = shard_layout(gshape, mesh.shape, mesh.coords, parse_placements(text))
        rows.append((role, i, (mesh, PlaceRow(text, tuple(gshape), tuple(off)))))

    red = {"all_reduce", "reduce_scatter_tensor"}
    if local and dname == "all_to_all_single":
        for role, ts in ((_lib.ROLE_INPUT, ins), (_lib.ROLE_OUTPUT, outs)):
            for i, t in enumerate(ts):
                row(role, i, t, "local")
        return rows
    for i, t in enumerate(ins):
        if dname in red and op in (0.0, 1.0):      # sum, avg
            row(_lib.ROLE_INPUT, i, t, "sum" if op == 0.0 else "avg")
        elif dname in ("all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor",
                       "all_to_all_single", "broadcast"):
            row(_lib.ROLE_INPUT, i, t, "cat")
    for i, t in enumerate(outs):
        if dname in ("all_reduce", "all_gather_into_tensor", "broadcast"):
            row(_lib.ROLE_OUTPUT, i, t, "rep")
        elif dname in ("reduce_scatter_tensor", "all_to_all_single"):
            row(_lib.ROLE_OUTPUT, i, t, "cat")
    return rows


def emit_places(d, call, roles):
    """Placement rows of one call: roles = ((role, [(index, DTensor or
    (mesh, row))], keys)...)."""
    for role, found, keys in roles:
        if not found:
            continue
        for i, t in found:
            k = keys[i] if keys else i
            place(d, call, role, k if isinstance(k, str) else str(k), t)


from . import derive  # noqa: E402 - after this module's names, which it reads
