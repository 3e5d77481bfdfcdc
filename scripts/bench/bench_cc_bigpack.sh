#!/usr/bin/env bash
# bench_cc_bigpack.sh - config_check compare of two packs whose
# hyperparameters.json holds KEYS keys (default 4,000,000: a 9.4 MB zip
# each, one key in 1000 differing), beside a Python baseline that only
# loads both members with json and compares the two dicts. Prints wall
# time and peak RSS of each (GNU time), REPS runs interleaved. With BASE
# (another nprobe binary, e.g. one built from an older commit) it runs
# interleaved beside NPROBE on the same packs, for a side-by-side ratio.
#   scripts/bench/bench_cc_bigpack.sh [NPROBE] [KEYS] [REPS] [FORMAT] [BASE]
set -euo pipefail
N=${1:-build/release/nprobe}
KEYS=${2:-4000000}
REPS=${3:-1}
FORMAT=${4:-xlsx}
BASE=${5:-}
PY=${NP_PYTHON:-$(dirname "$0")/../../.venv/bin/python}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$N" config_check pack --no-python -o "$tmp/base.zip" >/dev/null
"$PY" - "$tmp" "$KEYS" <<'PY'
import sys, zipfile
tmp, n = sys.argv[1], int(sys.argv[2])
for name, salt in (("a", 1), ("b", 3)):
    src = zipfile.ZipFile(tmp + "/base.zip")
    out = zipfile.ZipFile("%s/%s.zip" % (tmp, name), "w", zipfile.ZIP_DEFLATED)
    for it in src.infolist():
        if it.filename != "hyperparameters.json":
            out.writestr(it.filename, src.read(it.filename))
    body = ",".join('"k%07d":%d' % (i, (i * salt) % 7 if i % 1000 == 0 else 0) for i in range(n))
    out.writestr("hyperparameters.json", "{" + body + "}")
    out.close()
PY
cat > "$tmp/base.py" <<'PY'
import json, sys, zipfile
a = json.loads(zipfile.ZipFile(sys.argv[1]).read("hyperparameters.json"))
b = json.loads(zipfile.ZipFile(sys.argv[2]).read("hyperparameters.json"))
print(sum(1 for k in a.keys() | b.keys() if a.get(k) != b.get(k)), "differences")
PY
ls -l "$tmp/a.zip" "$tmp/b.zip" | awk '{print $5, $9}'
for r in $(seq "$REPS"); do
  for bin in "$N" $BASE; do
    rm -rf "$tmp/out"
    /usr/bin/time -f "$bin config_check compare ($FORMAT): %e s, peak %M KB" \
      "$bin" config_check compare "$tmp/a.zip" "$tmp/b.zip" -o "$tmp/out" --format "$FORMAT" >/dev/null || true
  done
  /usr/bin/time -f "python json.load of both + dict compare: %e s, peak %M KB" \
    "$PY" "$tmp/base.py" "$tmp/a.zip" "$tmp/b.zip" >/dev/null
done
