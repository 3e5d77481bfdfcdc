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
sharding one tensor dimension split it left to right). A layout this rule
does not describe (_StridedShard: FSDP2 over a TP-sharded dimension, whose
rows are interleaved) gets no placement row; the leaf is still dumped, and
counted in the debugger's summary["skipped_kinds"]["placement"].

Nothing here is imported by torch: the DTensor class is looked up in
sys.modules, so a program that never imports torch.distributed.tensor pays
one dictionary look-up per leaf batch.
"""
import sys

import torch

_MESH_MAX = 4          # the format's mesh dimensions at most (NP_FMT_MESH_MAX)
_dtensor_cls = None
_act_cls = None


def dtensor_class():
    """torch's DTensor class once torch.distributed.tensor is imported, else None."""
    global _dtensor_cls
    if _dtensor_cls is None:
        m = sys.modules.get("torch.distributed.tensor")
        _dtensor_cls = getattr(m, "DTensor", None) if m is not None else None
    return _dtensor_cls


def _async_class():
    """funcol's AsyncCollectiveTensor (a functional collective's result not
    waited for yet) once imported, else None."""
    global _act_cls
    if _act_cls is None:
        m = sys.modules.get("torch.distributed._functional_collectives")
        _act_cls = getattr(m, "AsyncCollectiveTensor", None) if m is not None else None
    return _act_cls


def active():
    """True once DTensor or the functional collectives are loaded: then the
    leaves are looked at for wrappers (localize)."""
    return dtensor_class() is not None or _async_class() is not None


def is_wrapped(t):
    """A tensor whose data lies in another one: a DTensor or a functional
    collective's pending result."""
    c = dtensor_class()
    if c is not None and isinstance(t, c):
        return True
    a = _async_class()
    return a is not None and isinstance(t, a)


def local(t):
    """The tensor whose memory holds `t`'s values on this rank: a DTensor's
    shard (`_local_tensor`, no collective), a pending functional collective
    waited for (its result is needed by the program anyway), else `t`."""
    c = dtensor_class()
    if c is not None and isinstance(t, c):
        t = t._local_tensor
    a = _async_class()
    if a is not None and isinstance(t, a):
        t = t.trigger_wait()
    return t


# ---- placements ---------------------------------------------------------------

def placement_words(p):
    """One placement in the format's (DTensor's) words: "Shard(d)",
    "Replicate()", "Partial(sum)"; None for a layout without a contiguous
    shard (_StridedShard) or one not known."""
    name = type(p).__name__
    if name == "Shard":
        return f"Shard({int(p.dim)})"
    if name == "Replicate":
        return "Replicate()"
    if name in ("Partial", "_Partial", "_NormPartial", "MaskPartial"):
        op = getattr(p, "reduce_op", "sum")
        op = getattr(op, "name", op)       # an enum in some versions
        return f"Partial({str(op).lower()})"
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


class Mesh:
    """A device mesh as the format holds it: dimension names, shape and
    this rank's coordinate."""
    __slots__ = ("names", "shape", "coords")

    def __init__(self, names, shape, coords):
        self.names, self.shape, self.coords = tuple(names), tuple(shape), tuple(coords)

    def __eq__(self, o):
        return isinstance(o, Mesh) and (self.names, self.shape, self.coords) == \
            (o.names, o.shape, o.coords)

    def __repr__(self):
        return f"Mesh({self.names}, {self.shape}, {self.coords})"


def _mesh_of(dm):
    """Mesh of a DeviceMesh (dimensions without names named dim0, dim1, ...);
    None when this rank is not in it."""
    coords = dm.get_coordinate()
    if coords is None:
        return None
    names = dm.mesh_dim_names or tuple(f"dim{i}" for i in range(dm.ndim))
    return Mesh(names, tuple(int(s) for s in dm.mesh.shape), tuple(int(c) for c in coords))


def root_mesh(dm):
    """The mesh a DTensor's placements are written against: the root of
    `dm` (a sub-mesh, `mesh["tp"]`, is a slice of one) where its dimensions
    are found there by name, else `dm` itself."""
    try:
        root = dm._get_root_mesh()
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


def place_row(t):
    """(Mesh, PlaceRow) of DTensor `t` against its root mesh, or (None, reason)
    when it has no row (this rank outside its mesh, a strided shard, a mesh
    of more dimensions than the format holds). Reads only t's metadata."""
    dm = t.device_mesh
    root = root_mesh(dm)
    mesh = _mesh_of(root)
    if mesh is None:
        return None, "this rank is not in the DTensor's mesh"
    if len(mesh.shape) > _MESH_MAX:
        return None, f"a mesh of {len(mesh.shape)} dimensions (the format holds {_MESH_MAX})"
    words = ["Replicate()"] * len(mesh.shape)
    names = dm.mesh_dim_names if root is not dm else None
    for i, p in enumerate(t.placements):
        w = placement_words(p)
        if w is None:
            return None, f"placement {p!r} has no contiguous shard"
        words[mesh.names.index(names[i]) if names else i] = w
    text = ",".join(words)
    gshape = tuple(int(s) for s in t.shape)
    local_shape, offset = shard_layout(gshape, mesh.shape, mesh.coords,
                                       parse_placements(text))
    lt = t._local_tensor
    if tuple(lt.shape) != local_shape:
        return None, (f"its shard {tuple(lt.shape)} is not the {local_shape} of {text} "
                      f"on mesh {mesh.shape} at {mesh.coords} (uneven or padded layout)")
    return mesh, PlaceRow(text, gshape, offset)


def localize(ts):
    """ts with every wrapped tensor (is_wrapped) replaced by local(t), and
    [(index, DTensor)] of the DTensors among them (None for ts as it was:
    the common case, nothing wrapped)."""
    found = None
    c = dtensor_class()
    a = _async_class()
    for i, t in enumerate(ts):
        if t is None or (c is None or not isinstance(t, c)) and (a is None or not isinstance(t, a)):
            continue
        if found is None:
            found = ([], list(ts))
        if c is not None and isinstance(t, c):
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

def _no_row(d, what):
    """A DTensor leaf dumped without a placement row: counted under
    summary["skipped_kinds"]["placement"], warned once."""
    n = d._skipped.get("placement", 0)
    d._skipped["placement"] = n + 1
    if n == 0:
        import warnings
        warnings.warn(f"nprobe: {what}; the shard is dumped without a placement row (the "
                      "count is summary['skipped_kinds']['placement'])", stacklevel=4)


def place(d, call, role, key, t):
    """The placement row of DTensor leaf `call`.`role`.`key` (already dumped
    as its shard). Never raises into the program."""
    try:
        mesh, row = place_row(t)
    except Exception as e:  # noqa: BLE001 - the dump must not fail the program
        mesh, row = None, f"{type(e).__name__}: {e}"
    if mesh is None:
        _no_row(d, f"{call}: {row}")
        return
    if d._mesh is None:
        d._mesh = mesh
    elif d._mesh != mesh:
        _no_row(d, f"{call}: a DTensor on mesh {mesh.names} {mesh.shape}, the dump's is "
                   f"{d._mesh.names} {d._mesh.shape}")
        return
    d._placed.append((call, role, key, row))


def emit_places(d, call, roles):
    """Placement rows of one call: roles = ((role, [(index, DTensor)], keys)...)."""
    for role, found, keys in roles:
        if not found:
            continue
        for i, t in found:
            k = keys[i] if keys else i
            place(d, call, role, k if isinstance(k, str) else str(k), t)
