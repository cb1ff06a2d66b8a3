#!/bin/bash
# usage: ./run.sh NAME "SPIN -D FLAGS" [ltl-name|-]
# builds in $MODEL_BUILD/NAME, runs pan (exhaustive, safety), prints the summary (exit 1 on an
# error); trail in $MODEL_BUILD/NAME. PAN_EXTRA adds pan options, e.g. PAN_EXTRA=-i for the
# shortest counterexample (iterative search)
name=$1; defs=$2; claim=${3:--}
here=$(cd "$(dirname "$0")" && pwd)
d=${MODEL_BUILD:-$(dirname "$(mktemp -u)")/bridge-model}/$name; rm -rf "$d"; mkdir -p "$d"; cp "$here/bridge.pml" "$d/"; cd "$d" || exit 1
echo "$defs" > defs
spin $defs -a bridge.pml >/dev/null || exit 1
if [ "$claim" = "-" ]; then
  gcc -O2 -DSAFETY -DCOLLAPSE -DNOCLAIM -o pan pan.c 2>/dev/null || exit 1
  ./pan -m100000 -w26 $PAN_EXTRA > pan.out 2>&1
else
  gcc -O2 -DSAFETY -DCOLLAPSE -o pan pan.c 2>/dev/null || exit 1
  ./pan -m100000 -w26 $PAN_EXTRA -N "$claim" > pan.out 2>&1
fi
printf '%-14s %-60s claim=%-6s ' "$name" "$defs" "$claim"
awk '/errors:/{e=$NF} /states, stored/{s=$1} /elapsed time/{t=$4} /violated/{v=$0} END{printf "errors=%s states=%s time=%ss %s\n", e, s, t, v}' pan.out
grep -q "errors: 0" pan.out  # the exit status: 0 only when the search found no error
