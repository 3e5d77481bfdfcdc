"""h5py_tables.py ROOT... - the baseline of bench_files.sh: read the /entries
and /calls tables of every ROOT/step*/rank*/dump.h5 with h5py, nothing else.
Each table is read with the file's own HDF5 type as the memory type (no
string or record conversion: the fastest way h5py offers), so the figure is
what reading the tables costs in Python at best. Prints the row count."""
import glob
import sys

import h5py
import numpy as np

rows = 0
for root in sys.argv[1:]:
    for path in sorted(glob.glob(root + "/step*/rank*/dump.h5")):
        with h5py.File(path, "r") as f:
            for name in ("entries", "calls"):
                ds = f[name]
                ft = ds.id.get_type()
                buf = np.empty(ds.shape, dtype=np.dtype((np.void, ft.get_size())))
                ds.id.read(h5py.h5s.ALL, h5py.h5s.ALL, buf, mtype=ft)
                rows += len(buf)
print(rows)
