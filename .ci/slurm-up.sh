#!/usr/bin/env bash
# A one-machine Slurm cluster for the tests (tests/test_slurm.py): munge, slurmctld and slurmd on
# this host, CPU-only, one partition `debug` with this machine's CPUs, no accounting database.
#
# Idempotent and never fatal: a cluster that already answers (`sinfo`) is left alone; without root
# or apt the script says why in one line and exits 0, and the Slurm tests skip with that reason
# (they re-check `sinfo` themselves). Debian 12 ships Slurm 22.05 (slurmctld, slurmd, slurm-client).
#
# Accounting: without slurmdbd, `sacct` answers "accounting storage is disabled", so the cluster
# keeps finished jobs in slurmctld's memory for an hour (MinJobAge) and cardwise reads their final
# state with `scontrol show job` (launcher/slurm_jobs.py, docs/service.md "Slurm").
#
# What it changes is listed in $state/started (one item a line: the daemons it started, the config and
# the /etc/hosts line it wrote), and .ci/slurm-down.sh undoes exactly those; the packages stay installed.
# Only `.ci/run` calls these two; the tests use the cluster only with CARDWISE_SLURM_TESTS=1.
set -uo pipefail

say() { echo "slurm-up: $*" >&2; }

if command -v sinfo >/dev/null 2>&1 && timeout 10 sinfo -h -o '%t' 2>/dev/null | grep -qE '^(idle|mix|alloc)'; then
  say "a cluster answers already: $(sinfo -h -o '%P %D node(s) %c CPUs %t' | head -n 1)"
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  say "not root: cannot install or start Slurm here (the Slurm tests skip)"
  exit 0
fi
if ! command -v slurmctld >/dev/null 2>&1 || ! command -v slurmd >/dev/null 2>&1 || ! command -v munged >/dev/null 2>&1 \
   || ! command -v sbatch >/dev/null 2>&1; then
  if ! command -v apt-get >/dev/null 2>&1; then
    say "no apt-get: install munge, slurmctld, slurmd and slurm-client yourself (the Slurm tests skip)"
    exit 0
  fi
  pkgs="munge slurmctld slurmd slurm-client"
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y -q --no-install-recommends $pkgs >/tmp/cardwise-slurm-apt.log 2>&1; then
    apt-get update -q >>/tmp/cardwise-slurm-apt.log 2>&1
    if ! apt-get install -y -q --no-install-recommends $pkgs >>/tmp/cardwise-slurm-apt.log 2>&1; then
      say "apt-get install $pkgs failed (see /tmp/cardwise-slurm-apt.log; the Slurm tests skip)"
      exit 0
    fi
  fi
fi

host=$(hostname -s)
state=${CARDWISE_SLURM_STATE:-/var/lib/cardwise-slurm}  # CARDWISE_SLURM_STATE: another place (slurm-down.sh reads the same)
started=$state/started
mkdir -p "$state"
# slurmctld, slurmd and the jobs' rendezvous (`scontrol show hostnames`) all resolve this name
if ! getent hosts "$host" >/dev/null 2>&1; then
  echo "127.0.0.1 $host # cardwise test cluster" >> /etc/hosts
  echo "hosts" >> "$started"
fi
conf=/etc/slurm/slurm.conf
mkdir -p /etc/slurm "$state/ctld" "$state/d" /var/log/cardwise-slurm
if [ -f "$conf" ] && ! grep -q '^# cardwise test cluster' "$conf"; then
  say "$conf exists and is not the test cluster's: not touching it (the Slurm tests skip unless it answers)"
  exit 0
fi
cpus=$(slurmd -C 2>/dev/null | sed -n 's/.* CPUs=\([0-9]*\).*/\1/p')
cpus=${cpus:-$(nproc)}
[ -f "$conf" ] || echo "conf" >> "$started"
cat > "$conf" <<EOF
# cardwise test cluster (.ci/slurm-up.sh): one CPU-only node, no accounting database
ClusterName=cardwise
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$state/ctld
SlurmdSpoolDir=$state/d
SlurmctldPidFile=$state/slurmctld.pid
SlurmdPidFile=$state/slurmd.pid
SlurmctldLogFile=/var/log/cardwise-slurm/slurmctld.log
SlurmdLogFile=/var/log/cardwise-slurm/slurmd.log
# no cgroups in a container: track processes by parentage, no task binding
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
# finished jobs stay visible to squeue/scontrol for an hour: the final state without slurmdbd
MinJobAge=3600
# SIGTERM to SIGKILL at a time limit or scancel (default 30 s): the tests' jobs stop in seconds
KillWait=5
ReturnToService=2
SlurmdTimeout=60
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=01:00:00 State=UP
EOF

if ! pgrep -x munged >/dev/null; then
  mkdir -p /run/munge && chown munge:munge /run/munge 2>/dev/null
  runuser -u munge -- /usr/sbin/munged 2>/dev/null || /usr/sbin/munged --force 2>/dev/null \
    || { say "munged did not start (the Slurm tests skip)"; exit 0; }
  echo "munged" >> "$started"
fi
if ! pgrep -x slurmctld >/dev/null; then
  slurmctld || { say "slurmctld did not start: /var/log/cardwise-slurm/slurmctld.log"; exit 0; }
  echo "slurmctld" >> "$started"
fi
if ! pgrep -x slurmd >/dev/null; then
  slurmd || { say "slurmd did not start: /var/log/cardwise-slurm/slurmd.log"; exit 0; }
  echo "slurmd" >> "$started"
fi
for _ in $(seq 60); do
  st=$(sinfo -h -n "$host" -o '%t' 2>/dev/null | head -n 1)
  case "$st" in
    idle|mix|alloc) say "up: Slurm $(sinfo -V | awk '{print $2}'), node $host, $cpus CPUs, partition debug"; exit 0 ;;
    down*|drain*) scontrol update nodename="$host" state=resume >/dev/null 2>&1 ;;
  esac
  sleep 0.5
done
say "the node did not become idle in 30 s (state '${st:-?}'; logs in /var/log/cardwise-slurm): the Slurm tests skip"
exit 0
