#!/usr/bin/env bash
# A single-node SLURM cluster on this host from Debian's packages, for `make test-slurm`
# (issue 29, item 5; docs/reliability.md, "SLURM"): munge, MariaDB + slurmdbd (submitit learns
# job states from `sacct`, so accounting is required), slurmctld and slurmd; no systemd, no cgroups.
#   scripts/slurm_cluster.sh install   # apt-get the packages (root)
#   scripts/slurm_cluster.sh start     # configure this host and start the daemons; exit 0 once
#                                      # `sinfo` shows the node idle, else 1 with the reason
#   scripts/slurm_cluster.sh stop      # stop the daemons this script started
set -euo pipefail
ACTION=${1:-start}
HOST=$(hostname -s)
CONF=/etc/slurm
STATE=/var/spool/slurmctld
LOGS=/var/log/slurm
PIDS=/run/pelab-slurm
PACKAGES="slurmctld slurmd slurm-client slurmdbd munge mariadb-server"

say() { echo "slurm_cluster: $*" >&2; }
fail() { say "$*"; exit 1; }

install() {
  [ "$(id -u)" = 0 ] || fail "needs root to install $PACKAGES"
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $PACKAGES
}

start() {
  [ "$(id -u)" = 0 ] || fail "needs root to start SLURM's daemons"
  for cmd in munged slurmctld slurmd slurmdbd sacctmgr mysqld_safe; do
    command -v "$cmd" >/dev/null || fail "$cmd not found: run '$0 install' (Debian: $PACKAGES)"
  done
  mkdir -p "$STATE" /var/spool/slurmd "$LOGS" "$PIDS" /run/munge /run/mysqld
  id slurm >/dev/null 2>&1 || useradd --system --no-create-home slurm
  chown slurm "$STATE" "$LOGS"; chown mysql /run/mysqld 2>/dev/null || true

  # munge: one key, the daemon as its user
  [ -s /etc/munge/munge.key ] || mungekey --create --force
  chown -R munge:munge /etc/munge /run/munge /var/lib/munge /var/log/munge 2>/dev/null || true
  chmod 0700 /etc/munge; chmod 0400 /etc/munge/munge.key
  pgrep -x munged >/dev/null || runuser -u munge -- munged --force
  munge -n | unmunge >/dev/null || fail "munge does not work (see /var/log/munge/munged.log)"

  # accounting: MariaDB and slurmdbd
  if ! mysqladmin ping >/dev/null 2>&1; then
    (mysqld_safe >"$LOGS/mysqld.log" 2>&1 &)
    for _ in $(seq 60); do mysqladmin ping >/dev/null 2>&1 && break; sleep 1; done
  fi
  mysqladmin ping >/dev/null 2>&1 || fail "MariaDB did not start ($LOGS/mysqld.log)"
  mysql -e "CREATE DATABASE IF NOT EXISTS slurm_acct_db;
            CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'pelab';
            GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost'; FLUSH PRIVILEGES;"
  cat >"$CONF/slurmdbd.conf" <<DBD
AuthType=auth/munge
DbdHost=localhost
SlurmUser=slurm
LogFile=$LOGS/slurmdbd.log
PidFile=$PIDS/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=pelab
StorageLoc=slurm_acct_db
DBD
  chown slurm "$CONF/slurmdbd.conf"; chmod 600 "$CONF/slurmdbd.conf"

  # slurm.conf for this host: its CPUs, its memory less 1 GiB
  local cpus mem
  cpus=$(nproc)
  mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 1024 ))
  cat >"$CONF/slurm.conf" <<SLURM
ClusterName=pelab
SlurmctldHost=$HOST
SlurmUser=slurm
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
ReturnToService=2
MpiDefault=none
StateSaveLocation=$STATE
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=$PIDS/slurmctld.pid
SlurmdPidFile=$PIDS/slurmd.pid
SlurmctldLogFile=$LOGS/slurmctld.log
SlurmdLogFile=$LOGS/slurmd.log
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MinJobAge=600
KillWait=30
NodeName=$HOST CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
SLURM

  pgrep -x slurmdbd >/dev/null || slurmdbd
  for _ in $(seq 30); do sacctmgr -n list cluster >/dev/null 2>&1 && break; sleep 1; done
  sacctmgr -n list cluster >/dev/null 2>&1 || fail "slurmdbd did not answer ($LOGS/slurmdbd.log)"
  sacctmgr -i add cluster pelab >/dev/null 2>&1 || true
  pgrep -x slurmctld >/dev/null || slurmctld
  pgrep -x slurmd >/dev/null || slurmd
  for _ in $(seq 60); do
    state=$(sinfo -h -n "$HOST" -o %T 2>/dev/null || true)
    case "$state" in idle*|mixed*|alloc*) say "up: node $HOST $state (partition debug)"; return 0;; esac
    [ "$state" = down ] || [ "$state" = drained ] && scontrol update nodename="$HOST" state=resume >/dev/null 2>&1 || true
    sleep 1
  done
  fail "the node did not come up (state: ${state:-none}; see $LOGS/slurmctld.log, $LOGS/slurmd.log)"
}

stop() {
  for pidfile in "$PIDS"/slurmd.pid "$PIDS"/slurmctld.pid "$PIDS"/slurmdbd.pid; do
    [ -s "$pidfile" ] && kill "$(cat "$pidfile")" 2>/dev/null || true
  done
}

"$ACTION"
