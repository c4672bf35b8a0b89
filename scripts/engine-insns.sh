#!/bin/bash
# Instructions per unit of the engine's benches (crates/tcp/examples/engine_insns.rs), counted
# by callgrind inside the measured loop only: stable on a shared machine, unlike time.
#
#   scripts/engine-insns.sh [SCENARIO[:N[:ARG]]...]     (default: input bulk bulk_link rr timers)
#
# Prints one line per scenario: instructions, units, instructions per unit. The callgrind
# profiles stay in ${OUT:-/tmp/engine-insns}/SCENARIO.out (callgrind_annotate --inclusive=yes).
set -euo pipefail
cd "$(dirname "$0")/.."
: "${CARGO_TARGET_DIR:=target}"
OUT=${OUT:-/tmp/engine-insns}
mkdir -p "$OUT"
cargo build --release -p shallow-tcp --features test-util --example engine_insns -q
BIN=$CARGO_TARGET_DIR/release/examples/engine_insns
[ $# -eq 0 ] && set -- input bulk bulk_link rr timers:200
for spec in "$@"; do
  IFS=: read -r name n arg <<<"$spec"
  valgrind --tool=callgrind --collect-atstart=no --toggle-collect='engine_insns::measured_*' \
    --callgrind-out-file="$OUT/$name.out" "$BIN" "$name" ${n:-} ${arg:-} >"$OUT/$name.txt" 2>"$OUT/$name.err"
  ir=$(grep -E '^(summary|totals):' "$OUT/$name.out" | head -1 | awk '{print $2}')
  units=$(awk '/^units/ {print $2; exit}' "$OUT/$name.txt")
  what=$(sed -n 's/^units [0-9]* //p' "$OUT/$name.txt")
  awk -v n="$name" -v ir="$ir" -v u="$units" -v w="$what" \
    'BEGIN { printf "%-10s %14d Ir / %8d = %9.0f Ir per unit   %s\n", n, ir, u, ir / u, w }'
done
