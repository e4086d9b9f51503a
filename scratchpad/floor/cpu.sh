#!/bin/bash
# cpu.sh <rounds> <stream 0|1>: the bare passthrough, the minimal Effect gateway (effect-floor.mjs)
# and the gateway (dist/) in alternated rounds; gateway-side CPU µs per request from /proc at 64
# connections (scratchpad/prof/prof.mjs). Run on a quiet machine: `npm run build` first, and
# `npm run bench -- --quick` once for bench/.build.
cd "$(dirname "$0")/../.."
for i in $(seq 1 "$1"); do
  for who in passthrough floor gateway; do
    case $who in
      passthrough) env PASS=1 node scratchpad/prof/prof.mjs chat "$2" 3 2>&1 | head -1 | sed "s/^/$who /" ;;
      floor) env FLOOR=1 node scratchpad/prof/prof.mjs chat "$2" 3 2>&1 | head -1 | sed "s/^/$who /" ;;
      gateway) node scratchpad/prof/prof.mjs chat "$2" 3 2>&1 | head -1 | sed "s/^/$who /" ;;
    esac
  done
done
