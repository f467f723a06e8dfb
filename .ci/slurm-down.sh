#!/usr/bin/env bash
# Undo what .ci/slurm-up.sh changed, and only that: it lists in $state/started the daemons it started
# (munged, slurmctld, slurmd), the slurm.conf it wrote (`conf`) and the /etc/hosts line it added
# (`hosts`). A cluster that was up before slurm-up.sh ran is not in the list and is left alone; the
# packages stay installed; the daemons' logs stay in /var/log/cardwise-slurm for a failed run's reader.
#
# `.ci/run` calls it on every exit (a trap), so the test run leaves no daemon behind. Never fatal.
set -uo pipefail

say() { echo "slurm-down: $*" >&2; }

state=${CARDWISE_SLURM_STATE:-/var/lib/cardwise-slurm}  # another place: the tests of this script
started=$state/started
if [ ! -f "$started" ]; then
  say "nothing to undo (slurm-up.sh started nothing here)"
  exit 0
fi
has() { grep -qx "$1" "$started"; }

# alive: the process exists and is not a zombie (one whose parent has not reaped it yet has stopped)
alive() { [ -e "/proc/$1" ] && ! grep -q ') Z ' "/proc/$1/stat" 2>/dev/null; }

# stop: SIGTERM the daemon named by its pid file (checking the pid is that program), SIGKILL after 30 s
stop() {
  local name=$1 pidfile=$2 pid
  pid=$(cat "$pidfile" 2>/dev/null) || pid=$(pgrep -xo "$name") || { say "$name: not running"; return; }
  if [ "$(cat "/proc/$pid/comm" 2>/dev/null)" != "$name" ]; then
    say "$name: pid $pid is not $name any more; not signalled"
    return
  fi
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq 60); do
    alive "$pid" || { say "$name (pid $pid) stopped"; return; }
    sleep 0.5
  done
  kill -KILL "$pid" 2>/dev/null && say "$name (pid $pid) killed after 30 s"
}

if has slurmctld && command -v squeue >/dev/null 2>&1; then  # the test cluster's jobs, before its daemons
  jobs=$(timeout 10 squeue -h -o %i 2>/dev/null)
  [ -n "$jobs" ] && timeout 30 scancel $jobs 2>/dev/null
fi
has slurmd && stop slurmd "$state/slurmd.pid"
has slurmctld && stop slurmctld "$state/slurmctld.pid"
has munged && stop munged /run/munge/munged.pid
if has conf && grep -q '^# cardwise test cluster' /etc/slurm/slurm.conf 2>/dev/null; then
  rm -f /etc/slurm/slurm.conf && say "removed /etc/slurm/slurm.conf"
fi
if has hosts; then
  # rewrite in place (not sed -i: /etc/hosts is often a bind mount that a rename cannot replace)
  kept=$(grep -v ' # cardwise test cluster$' /etc/hosts)
  printf '%s\n' "$kept" > /etc/hosts && say "removed the test cluster's /etc/hosts line"
fi
rm -rf "$state"
exit 0
