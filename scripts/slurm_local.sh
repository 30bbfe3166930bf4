#!/bin/bash
# A real single-node SLURM cluster on this machine (root only), for testing generated sbatch scripts.
#
#   scripts/slurm_local.sh install DIR install slurm-wlm + munge with apt-get if missing (root; the only action
#                                      that changes the system: .ci/run does it, the tests never do)
#   scripts/slurm_local.sh start DIR   write DIR/slurm.conf, start munged, slurmctld and slurmd, wait until the
#                                      node is idle; prints 'export SLURM_CONF=DIR/slurm.conf' (client commands
#                                      need it). Exits 3 when SLURM is not installed.
#   scripts/slurm_local.sh stop DIR    stop the daemons started from DIR
#
# The node offers SLURM_FAKE_GPUS (default 8) GPUs that are only /dev/null stand-ins, so GPU scripts are accepted
# and scheduled unchanged; what they would run on real GPUs is tested with a stand-in interpreter.
# Everything (config, munge key/socket, state, spool, logs) lives under DIR, nothing is written to /etc, so
# several clusters can be tried side by side and 'rm -rf DIR' undoes it. Ports default to 6817/6818 and can be
# moved with SLURMCTLD_PORT / SLURMD_PORT.
set -euo pipefail

usage() { echo "usage: $0 install|start|stop|status DIR" >&2; exit 2; }
[ $# -eq 2 ] || usage
ACTION=$1
DIR=$(mkdir -p "$2" && cd "$2" && pwd)
CONF=$DIR/slurm.conf
export SLURM_CONF=$CONF

log() { echo "[slurm_local] $*" >&2; }

installed() {
  command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null
}

install_packages() {
  installed && return
  [ "$(id -u)" = 0 ] || { log "slurm is not installed and installing it needs root"; exit 3; }
  command -v apt-get >/dev/null || { log "slurm is not installed and apt-get is not available"; exit 3; }
  log "installing slurm-wlm and munge with apt-get"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >"$DIR/apt.log" 2>&1
  apt-get install -y -q --no-install-recommends slurm-wlm munge >>"$DIR/apt.log" 2>&1 \
    || { log "apt-get install failed, see $DIR/apt.log"; exit 3; }
}

write_config() {
  local host cpus mem_mb
  FAKE_GPUS=${SLURM_FAKE_GPUS:-8}
  host=$(hostname -s)
  cpus=$(nproc --all)
  # Leave 5% of memory unaccounted: slurmd refuses a node whose RealMemory exceeds what it measures.
  mem_mb=$(awk '/MemTotal/ {printf "%d", $2 / 1024 * 0.95}' /proc/meminfo)
  mkdir -p "$DIR/state" "$DIR/spool" "$DIR/munge"
  cat >"$CONF" <<EOF
ClusterName=distlab-local
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
SlurmctldPort=${SLURMCTLD_PORT:-6817}
SlurmdPort=${SLURMD_PORT:-6818}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$DIR/munge/munge.socket
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/slurmctld.log
SlurmdLogFile=$DIR/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
SwitchType=switch/none
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
# $FAKE_GPUS stand-in GPUs (see gres.conf): scripts with --gres=gpu:N are scheduled as on a GPU node
GresTypes=gpu
JobCompType=jobcomp/none
JobRequeue=1
ReturnToService=2
# Keep finished jobs visible to 'scontrol show job' for 10 minutes (no slurmdbd, so no sacct).
MinJobAge=600
KillWait=5
# A test cluster should react at once: run the scheduler every second, not every minute.
SchedulerParameters=batch_sched_delay=0,sched_interval=1,bf_interval=1
NodeName=$host CPUs=$cpus RealMemory=$mem_mb Gres=gpu:$FAKE_GPUS State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
  # slurmd counts one GPU per device file: copies of /dev/null stand in for /dev/nvidia* (plain files where
  # mknod is not allowed; slurmd then logs "not a valid character device" and counts them anyway)
  mkdir -p "$DIR/fake_gpus"
  for i in $(seq 0 $((FAKE_GPUS - 1))); do
    [ -e "$DIR/fake_gpus/nvidia$i" ] || mknod "$DIR/fake_gpus/nvidia$i" c 1 3 2>/dev/null || : >"$DIR/fake_gpus/nvidia$i"
  done
  echo "AutoDetect=off
Name=gpu File=$DIR/fake_gpus/nvidia[0-$((FAKE_GPUS - 1))]" >"$DIR/gres.conf"
}

start_munge() {
  if [ ! -s "$DIR/munge/munge.key" ]; then
    dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none
  fi
  chmod 700 "$DIR/munge"
  chmod 400 "$DIR/munge/munge.key"
  munged --force --key-file="$DIR/munge/munge.key" --socket="$DIR/munge/munge.socket" \
    --pid-file="$DIR/munge/munged.pid" --log-file="$DIR/munge/munged.log" --seed-file="$DIR/munge/munged.seed"
}

wait_idle() {
  local host state i
  host=$(hostname -s)
  for i in $(seq 1 120); do
    state=$(sinfo -h -N -n "$host" -o '%T' 2>/dev/null || true)
    if [ "$state" = idle ]; then return 0; fi
    sleep 0.5
  done
  log "node never became idle (last state: '${state:-none}'); logs in $DIR"
  tail -n 20 "$DIR/slurmctld.log" "$DIR/slurmd.log" >&2 || true
  return 1
}

stop_daemons() {
  # TERM all daemons at once (each takes 1-2 s to exit), then wait; KILL whatever is left after 10 s.
  local pids="" f pid i
  for f in "$DIR/slurmd.pid" "$DIR/slurmctld.pid" "$DIR/munge/munged.pid"; do
    [ -s "$f" ] || continue
    pid=$(cat "$f")
    if kill -0 "$pid" 2>/dev/null; then kill "$pid"; pids="$pids $pid"; fi
    rm -f "$f"
  done
  for i in $(seq 1 100); do
    local alive=""
    for pid in $pids; do kill -0 "$pid" 2>/dev/null && alive="$alive $pid"; done
    pids=$alive
    [ -z "$pids" ] && return 0
    sleep 0.1
  done
  for pid in $pids; do kill -9 "$pid" 2>/dev/null || true; done
}

case "$ACTION" in
  install)
    install_packages
    ;;
  start)
    [ "$(id -u)" = 0 ] || { log "a local cluster needs root (slurmd runs jobs as their users)"; exit 3; }
    installed || { log "slurm is not installed; install it with: $0 install DIR (or apt-get install slurm-wlm munge)"; exit 3; }
    write_config
    start_munge
    slurmctld -i -f "$CONF"
    slurmd -f "$CONF"
    wait_idle
    echo "export SLURM_CONF=$CONF"
    ;;
  stop)
    stop_daemons
    ;;
  status)
    sinfo -N -l
    ;;
  *) usage ;;
esac
