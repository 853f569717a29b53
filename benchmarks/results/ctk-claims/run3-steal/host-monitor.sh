#!/usr/bin/env bash
# every 5 s: time, steal%, busy%, nprocs, python procs, top 3 cpu consumers
prev=($(head -1 /proc/stat))
while true; do
  sleep 5
  cur=($(head -1 /proc/stat))
  tot=0; for i in 1 2 3 4 5 6 7 8; do tot=$((tot + cur[i] - prev[i])); done
  idle=$((cur[4]-prev[4] + cur[5]-prev[5])); steal=$((cur[8]-prev[8]))
  np=$(ps -e --no-headers | wc -l); py=$(pgrep -c python)
  top=$(ps -eo pcpu,etimes,comm --sort=-pcpu --no-headers | head -3 | awk '{printf "%s:%s(%ss) ", $3,$1,$2}')
  echo "$(date +%T) steal=$((100*steal/tot))% busy=$((100*(tot-idle-steal)/tot))% procs=$np py=$py $top"
  prev=("${cur[@]}")
done
