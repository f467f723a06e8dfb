#!/bin/bash
# cpusample.sh OUT: every 2 s, the machine's busy and idle jiffies (/proc/stat's cpu line), until killed
while true; do echo "$(date +%s.%N) $(head -1 /proc/stat)" >> "$1"; sleep 2; done
