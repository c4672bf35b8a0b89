#!/bin/bash
# Records the emulator's outputs that a change of shape must leave bit-identical (the JSON
# report and the pcap of 12 `shallow bench` configurations, and `shallow lab all --quick
# --json`), with their SHA-256 in OUTDIR/SUMS.
#
#   scripts/bit-identity.sh BIN OUTDIR
#
# Record with the binary of the commit before the change, again with the one after, and
# compare: diff <(cut -d' ' -f1 BEFORE/SUMS) <(cut -d' ' -f1 AFTER/SUMS). About 1 minute and
# 2.5 GB of pcaps on a 2-core machine.
set -euo pipefail
BIN=$1
OUT=$2
mkdir -p "$OUT"
run() {
  name=$1
  shift
  "$BIN" bench --json --pcap "$OUT/$name.pcap" --duration 2s "$@" >"$OUT/$name.json" 2>"$OUT/$name.err"
}
run stream_loss --link "rate=100mbit,delay=10ms,loss=1%" &
run corrupt --link "rate=1gbit,delay=5ms,corrupt=0.1%" --flows 2
wait
run dup_reorder --link "rate=500mbit,delay=5ms,dup=0.5%,reorder=2%,reorder_delay=1ms" &
run fq --qdisc fq:maxrate=200mbit --flows 3 --link "rate=1gbit,delay=2ms"
wait
run tbf --qdisc tbf:rate=100mbit,burst=30000,limit=100000 --link "rate=1gbit,delay=2ms" &
run rr --test TCP_RR --req-size 100 --resp-size 2000 --link "rate=1gbit,delay=1ms"
wait
run maerts --test TCP_MAERTS --link "rate=1gbit,delay=5ms,loss=0.1%" &
run epoll --writer epoll --flows 2 --link "rate=1gbit,delay=5ms"
wait
run lowat_tsooff --sysctl net.ipv4.tcp_notsent_lowat=131072 --link "rate=10gbit,delay=100us" --tso-off &
run bulk --test BULK --bytes 8m --flows 2 --link "rate=1gbit,delay=3ms,loss=0.5%" --qdisc pfifo:limit=50
wait
run ipv6 --ipv6 --link "rate=1gbit,delay=2ms,loss=0.2%" --flows 2 &
run autocork --msg-size 128 --nodelay --link "rate=1gbit,delay=1ms"
wait
"$BIN" lab all --quick --json >"$OUT/lab.json" 2>"$OUT/lab.err"
(cd "$OUT" && sha256sum ./*.json ./*.pcap) >"$OUT/SUMS"
