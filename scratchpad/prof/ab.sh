#!/bin/bash
# ab.sh <rounds> <protocol> <stream> : alternates DIST=/tmp/distA and /tmp/distB, prints CPU µs/req each
for i in $(seq 1 $1); do for v in A B; do echo -n "$v "; DIST=$PWD/node_modules/.ab/dist$v node scratchpad/prof/prof.mjs $2 $3 3 2>&1 | head -1 | sed 's/.*req\/s/req\/s/'; done; done
