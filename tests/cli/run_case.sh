#!/usr/bin/env bash
# run_case.sh NPROBE CASEDIR - one CLI golden case.
# CASEDIR holds:
#   args      one argument per line (may be empty); "@TMP@" becomes a scratch dir
#   exit      the expected exit code
#   stderr    (optional) fragments, one per line, that must all appear in stderr
#   stdout    (optional) fragments that must all appear in stdout
#   no_stdout / no_stderr (optional, empty files) the stream must be empty
#   env       (optional) VAR=value lines set in the command's environment
set -u
nprobe=$1
case_dir=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
args=()
if [ -s "$case_dir/args" ]; then
  while IFS= read -r line || [ -n "$line" ]; do
    args+=("${line//@TMP@/$tmp}")
  done < "$case_dir/args"
fi
envs=()
if [ -s "$case_dir/env" ]; then
  while IFS= read -r line || [ -n "$line" ]; do envs+=("$line"); done < "$case_dir/env"
fi
(cd "$tmp" && env "${envs[@]}" "$nprobe" "${args[@]}" >"$tmp/.out" 2>"$tmp/.err" </dev/null)
code=$?
want=$(cat "$case_dir/exit")
fail=0
if [ "$code" != "$want" ]; then
  echo "exit code: got $code, want $want"; fail=1
fi
for stream in stdout stderr; do
  f=$tmp/.out; [ $stream = stderr ] && f=$tmp/.err
  if [ -f "$case_dir/$stream" ]; then
    while IFS= read -r frag || [ -n "$frag" ]; do
      [ -z "$frag" ] && continue
      if ! grep -qF -- "$frag" "$f"; then
        echo "$stream lacks: $frag"; fail=1
      fi
    done < "$case_dir/$stream"
  fi
  if [ -f "$case_dir/no_$stream" ] && [ -s "$f" ]; then
    echo "$stream should be empty"; fail=1
  fi
done
if [ $fail -ne 0 ]; then
  echo "--- args: ${args[*]}"; echo "--- stdout:"; head -c 4000 "$tmp/.out"; echo "--- stderr:"; head -c 4000 "$tmp/.err"
fi
exit $fail
