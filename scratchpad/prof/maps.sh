pid=$1
grep -E "Threads" /proc/$pid/status
grep -E "^(Rss|Anonymous|Private_Dirty)" /proc/$pid/smaps_rollup
awk '/^[0-9a-f]+-[0-9a-f]+ /{name=$6; range=$1} /^Rss:/{ if ($2>2000) print $2" kB", range, name}' /proc/$pid/smaps | sort -rn | head -25
