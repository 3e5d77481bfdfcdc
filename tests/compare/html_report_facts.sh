#!/usr/bin/env bash
# html_report_facts.sh - the reports say what the comparison found (issue 31),
# checked on real generated reports, the HTML page in headless Chromium:
# 1. tolerances panel at any width: a clean cnn pair, npu-sim bf16 against cpu
#    fp32 (so the panel has the bf16 row for gradients behind a non-smooth op,
#    with its long scope), laid out at 1280 and 500 px (check_html_layout.py:
#    no value squeezed into a narrow column, the panel at most 160 px a row;
#    before: a one-character column, the panel ~4,900 px tall at 500 px);
# 2. advice that matches the card: two runs from different seeds (their
#    parameters differ): the first culprit's input severity is above 1, so
#    the advice (HTML card, xlsx summary, json) must not say its inputs
#    "agree with the bench" (before: it always did);
# 3. a culprit named by the three-way rule (the gelu_tanh fault in bf16,
#    two steps): its card shows both sides' isolated errors, the xlsx
#    culprit block and the json give the same two numbers, and each equals
#    `nprobe replay` of that side's dump alone (the independent answer);
#    the worst output line says its verdict (the stdout summary and the
#    card's "verdict reason" are not empty: the row passes, and says so);
# 3b. a culprit the three-way rule names (layernorm_bwd_no_mean: its isolated
#    error above its budget and above 4 x the reference's; gelu_tanh's is
#    within its budget, named by its output): the same checks of both sides'
#    isolated errors in the card, xlsx and json, and the advice says so;
# 4. a culprit named by its isolated error alone against a reference that has
#    no recomputable data (dumped with data_mode ["output"]): the reason says
#    it rests on the budget alone, the reference's isolated error is N/A in
#    json, xlsx and the HTML card, the cmp's equals its own `nprobe replay`.
set -u
nprobe=${NPROBE_BIN:?NPROBE_BIN not set}
py=${NP_PYTHON:-/usr/bin/python3}
here=$(cd "$(dirname "$0")" && pwd)
command -v chromium >/dev/null || { echo "SKIP: chromium is not installed"; exit 77; }
"$py" -c 'import openpyxl' 2>/dev/null || { echo "SKIP: $py lacks openpyxl"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
fail=0

train() { # dir steps model-args...
  local d=$1 s=$2; shift 2
  printf '{"task": "tensor", "dump_path": "%s", "level": "L1", "step": [%s]}\n' \
    "$tmp/$d" "$(seq -s, 0 $((s - 1)))" > "$d.json"
  "$nprobe" train --steps "$s" --threads 1 "$@" --dump-config "$d.json" > "$d.log" 2>&1 \
    || { echo "FAIL: train $d: $*"; cat "$d.log"; exit 1; }
}
page() { ls "$1"/compare_report_*.html; }

# 1. the tolerances panel
train ref 1 --model cnn --seed 3 --device cpu --precision fp32
train npu 1 --model cnn --seed 3 --device npu-sim --precision bf16
"$nprobe" compare -b ref -c npu -o clean --format html,json -q; rc=$?
[ $rc = 0 ] || { echo "FAIL: clean cnn pair: exit $rc"; fail=1; }
grep -q "<small class=scope>gradients from Functional\.[a-z_0-9]*\.[0-9]*\.backward on" "$(page clean)" \
  || { echo "FAIL: no routed-gradient scope in the tolerances panel"; fail=1; }
"$py" "$here/check_html_layout.py" "$(page clean)" || fail=1

# 2. the advice of a culprit whose inputs already differ
gpt=(--model gpt --layers 1 --width 32 --context 16 --batch 2 --device cpu)
train s1 1 "${gpt[@]}" --seed 1
train s2 1 "${gpt[@]}" --seed 2
"$nprobe" compare -b s1 -c s2 -o seeds --format html,json,xlsx -q; rc=$?
[ $rc = 1 ] || { echo "FAIL: seeds pair: exit $rc, expected 1"; fail=1; }
"$py" "$here/check_html_layout.py" "$(page seeds)" --advice-not "agree with the bench" \
  --card-has "already differ from the bench" || fail=1
"$py" - seeds <<'PY' || fail=1
import glob, json, sys
import openpyxl
j = json.load(open(glob.glob(sys.argv[1] + "/*.json")[0]))
fc, advice = j["first_culprit"], j["summary"]["advice"]
bad = []
if not fc or not float(fc["input_severity"]) > 1:
    bad.append("the first culprit's input severity is not above 1: %r" % (fc,))
if "agree with the bench" in advice:
    bad.append("the json advice says the inputs agree: %r" % advice)
ws = openpyxl.load_workbook(glob.glob(sys.argv[1] + "/*.xlsx")[0])["summary"]
texts = [c.value for row in ws.iter_rows() for c in row if isinstance(c.value, str)]
if advice not in texts:
    bad.append("the xlsx summary does not give the json's advice")
for b in bad:
    print("FAIL: " + b)
print("seeds: first culprit %s, input severity %s" % (fc and fc["call"], fc and fc["input_severity"]))
sys.exit(1 if bad else 0)
PY

# 3. a culprit of the three-way rule: both sides' isolated errors (the
# default GPT, two steps: left to the plain pass)
if [ "${NP_SANITIZED:-0}" = 1 ]; then
  [ $fail -eq 0 ] && echo "html_report_facts: parts 1-2 passed (part 3 runs in the plain pass)"
  exit $fail
fi
gelu=(--model gpt --seed 3)
train ref3 2 "${gelu[@]}" --device cpu --precision fp32
train npu3 2 "${gelu[@]}" --device npu-sim --precision bf16 --fault gelu_tanh
"$nprobe" compare -b ref3 -c npu3 -o gelu --format html,json,xlsx > gelu.out 2> gelu.err; rc=$?
[ $rc = 1 ] || { echo "FAIL: gelu_tanh pair: exit $rc, expected 1"; cat gelu.err; fail=1; }
cat gelu.out
# the summary's worst output line ends in its verdict, not in ": "
grep -qE "worst output [^ ]+: [a-z]" gelu.out || { echo "FAIL: empty worst output line"; fail=1; }
"$nprobe" replay ref3 --step 0 -o rref --format json > /dev/null 2>&1
"$nprobe" replay npu3 --step 0 -o rnpu --format json > /dev/null 2>&1
"$py" "$here/check_html_layout.py" "$(page gelu)" --card-has "reference " \
  --card-has "passes: relative L2 error" || fail=1
both_sides() { # out rref rnpu page call-prefix [three-way]
"$py" - "$@" <<'PY'
import glob, json, math, re, sys
import openpyxl
out, rref, rnpu, page, want_call = sys.argv[1:6]
three_way = len(sys.argv) > 6
bad = []
js = sorted(glob.glob(out + "/*step0*.json"))
j = json.load(open(js[0]))
fc = j["first_culprit"]
call = fc["call"] if fc else None
if not call or not call.startswith(want_call):
    bad.append("first culprit %r, expected %s*" % (call, want_call))
    call = None
if call and three_way:  # the three-way rule's test (compare/report.c named_by_isolated)
    r, rr = fc["isolated_ratio"], fc["ref_isolated_ratio"]
    if not (isinstance(r, (int, float)) and isinstance(rr, (int, float)) and r > 1 and r > 4 * rr):
        bad.append("%s is not named by the three-way rule: isolated %r x its budget, reference %r" %
                   (call, r, rr))
    if "by more than the reference's same call" not in j["summary"]["advice"]:
        bad.append("the advice does not say the three-way rule's verdict: %r" % j["summary"]["advice"])


def replay_err(d, call):
    """The call's isolated error (u) in `nprobe replay`'s json of one side."""
    r = json.load(open(glob.glob(d + "/*.json")[0]))
    rows = [x for x in r["rows"] if x[r["headers"].index("Call")] == call]
    iso = [x[r["headers"].index("Isolated Error (u)")] for x in rows]
    iso = [v for v in iso if isinstance(v, (int, float))]
    return max(iso) if iso else float("nan")


if call:
    got = (fc["isolated_error_u"], fc["ref_isolated_error_u"])
    want = (replay_err(rnpu, call), replay_err(rref, call))
    print("%s: compare isolated %r, replay of each side alone %r" % (call, got, want))
    for g, w, side in zip(got, want, ("cmp", "bench")):
        if not (isinstance(g, (int, float)) and math.isclose(g, w, rel_tol=1e-9)):
            bad.append("%s isolated error %r, its own replay %r" % (side, g, w))
    ws = openpyxl.load_workbook(glob.glob(out + "/*step0*.xlsx")[0])["summary"]
    kv = {r[0].value: r[1].value for r in ws.iter_rows() if r[0].value and len(r) > 1}
    for k, w in (("isolated error (u)", got[0]), ("reference isolated error (u)", got[1])):
        if not (isinstance(kv.get(k), (int, float)) and math.isclose(kv[k], w, rel_tol=1e-9)):
            bad.append("xlsx summary %r = %r, json %r" % (k, kv.get(k), w))
    html = open(page, encoding="utf-8").read()
    m = re.search(r"<th>isolated error<td>under test ([^ ]+) u \(([^ ]+) x its budget\); "
                  r"reference ([^ ]+) u", html)
    if not m:
        bad.append("the HTML card has no isolated errors of both sides")
    else:
        for s, w in ((m.group(1), got[0]), (m.group(3), got[1])):
            if not math.isclose(float(s), w, rel_tol=1e-3):
                bad.append("HTML card says %s u, json %r" % (s, w))
    vr = re.search(r"<th>verdict reason<td>([^<]*)", html)
    if not vr or not vr.group(1).strip():
        bad.append("the HTML card's verdict reason is empty")
for b in bad:
    print("FAIL: " + b)
sys.exit(1 if bad else 0)
PY
}
both_sides gelu rref rnpu "$(page gelu)" Functional.gelu. || fail=1
# 3b. a culprit the three-way rule names (its isolated error above its budget
# and above 4 x the reference's same call's): layernorm_bwd_no_mean, whose
# backward kernel is wrong; the same checks of both sides' isolated errors
train ln5 2 "${gelu[@]}" --device npu-sim --precision bf16 --fault layernorm_bwd_no_mean
"$nprobe" compare -b ref3 -c ln5 -o ln --format html,json,xlsx -q; rc=$?
[ $rc = 1 ] || { echo "FAIL: layernorm_bwd_no_mean pair: exit $rc, expected 1"; fail=1; }
"$nprobe" replay ln5 --step 0 -o rln --format json > /dev/null 2>&1
both_sides ln rref rln "$(page ln)" Functional.layer_norm. three-way || fail=1

# 4. a culprit named by the isolated error alone, the reference without
# recomputable data: the same fault against a reference dumped with
# data_mode ["output"] (no call inputs: nothing of it can be replayed). The
# culprit rests on its own replay (its reason says "judged on its budget
# alone"), exit 1; its isolated error equals `nprobe replay` of the cmp alone;
# the reference's is N/A in the json (null), the xlsx summary (N/A) and the
# HTML card ("reference: not recomputed")
printf '{"task": "tensor", "dump_path": "%s", "level": "L1", "step": [0, 1], "tensor": {"data_mode": ["output"]}}\n' \
  "$tmp/refo" > refo.json
"$nprobe" train --steps 2 --threads 1 "${gelu[@]}" --device cpu --precision fp32 --dump-config refo.json \
  > refo.log 2>&1 || { echo "FAIL: train refo"; cat refo.log; fail=1; }
"$nprobe" compare -b refo -c npu3 -o alone --format html,json,xlsx -q; rc=$?
[ $rc = 1 ] || { echo "FAIL: output-only reference pair: exit $rc, expected 1"; fail=1; }
"$py" - alone rnpu "$(page alone)" <<'PY' || fail=1
import glob, html as H, json, math, re, sys
import openpyxl
out, rnpu, page = sys.argv[1:4]
bad = []
j = json.load(open(sorted(glob.glob(out + "/*step0*.json"))[0]))
fc = j["first_culprit"] or {}
call = fc.get("call") or ""
if not call.startswith("Functional.gelu."):
    bad.append("first culprit %r, expected Functional.gelu.*" % call)
if "judged on its budget alone" not in (fc.get("reason") or "") or \
        "the reference has no recomputable data" not in (fc.get("reason") or ""):
    bad.append("the reason does not say the verdict rests on the budget alone: %r" % fc.get("reason"))
if fc.get("ref_isolated_error_u") is not None or fc.get("ref_isolated_ratio") is not None:
    bad.append("json gives the reference an isolated error: %r" % fc)
r = json.load(open(glob.glob(rnpu + "/*.json")[0]))
h = r["headers"]
want = max((x[h.index("Isolated Error (u)")] for x in r["rows"] if x[h.index("Call")] == call and
            isinstance(x[h.index("Isolated Error (u)")], (int, float))), default=float("nan"))
got = fc.get("isolated_error_u")
if not (isinstance(got, (int, float)) and math.isclose(got, want, rel_tol=1e-9)):
    bad.append("isolated error %r, `nprobe replay` of the cmp alone %r" % (got, want))
ws = openpyxl.load_workbook(sorted(glob.glob(out + "/*step0*.xlsx"))[0])["summary"]
kv = {x[0].value: x[1].value for x in ws.iter_rows() if x[0].value and len(x) > 1}
if not (isinstance(kv.get("isolated error (u)"), (int, float)) and
        math.isclose(kv["isolated error (u)"], want, rel_tol=1e-9)):
    bad.append("xlsx isolated error (u) %r, replay %r" % (kv.get("isolated error (u)"), want))
if kv.get("reference isolated error (u)") != "N/A":
    bad.append("xlsx reference isolated error (u) %r, expected N/A" % kv.get("reference isolated error (u)"))
page_text = H.unescape(open(page, encoding="utf-8").read())
if not re.search(r"<th>isolated error<td>under test [^ ]+ u \([^ ]+ x its budget\); reference: not recomputed",
                 page_text):
    bad.append("the HTML card does not say the reference was not recomputed")
if "judged on its budget alone" not in page_text:
    bad.append("the HTML page does not give the culprit's reason")
for b in bad:
    print("FAIL: " + b)
print("alone: %s, isolated %r u, reference N/A" % (call, got))
sys.exit(1 if bad else 0)
PY
[ $fail -eq 0 ] && echo "html_report_facts: all passed" || echo "html_report_facts: FAILED"
exit $fail
