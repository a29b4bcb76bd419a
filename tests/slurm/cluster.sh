#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, for running jobs/slurm/ without a real cluster
# (the slurm tests use it). Everything it writes (slurm.conf, munge key and socket, daemon
# state, logs, pid files) stays in one state folder, build/slurm by default; nothing goes to
# /etc and no systemd is needed.
#
#   tests/slurm/cluster.sh [--dir DIR] start    install slurm-wlm and munge when missing, start
#                                               munged, slurmctld and slurmd, wait for the node
#   tests/slurm/cluster.sh [--dir DIR] stop     cancel the jobs, stop the daemons, delete DIR
#   tests/slurm/cluster.sh [--dir DIR] status   the daemons and sinfo
#   tests/slurm/cluster.sh [--dir DIR] env      the environment for sbatch & co.: SLURM_CONF,
#                                               and idle MPI ranks yielding their core
#
# After `eval "$(tests/slurm/cluster.sh env)"`, sbatch, squeue and scancel talk to this
# cluster. The node declares TRIAD_SLURM_CPUS CPUs (default 8, or the core count when
# larger), however many cores it has, so that 8-rank jobs fit on small machines.
# Ports: TRIAD_SLURM_PORT (slurmctld, default 16817) and the next one (slurmd); not Slurm's
# defaults, so a system Slurm on the machine is left alone.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
dir=${TRIAD_SLURM_DIR:-$root/build/slurm}
if [[ ${1:-} == --dir ]]; then
  dir=$2
  shift 2
fi
command=${1:-}
case $command in
  start | stop | status | env) ;;
  *)
    echo "usage: $0 [--dir DIR] start|stop|status|env" >&2
    exit 2
    ;;
esac
dir=$(realpath -m "$dir")
conf=$dir/slurm.conf
port=${TRIAD_SLURM_PORT:-16817}
cpus=${TRIAD_SLURM_CPUS:-$(($(nproc) > 8 ? $(nproc) : 8))}
host=$(hostname -s)
# A unix socket path has at most 107 bytes: a deep state folder puts munge's socket in /tmp.
socket=$dir/munge/munge.socket
if ((${#socket} > 100)); then
  socket=/tmp/triad-munge-$(printf '%s' "$dir" | cksum | cut -d' ' -f1)/munge.socket
fi
export SLURM_CONF=$conf

log() { echo "cluster.sh: $*"; }
die() {
  echo "cluster.sh: error: $*" >&2
  exit 1
}

# The daemon named $2 whose pid is in file $1, when it is running (a pid file left by a
# crash may name a dead process, or a pid since reused by another program).
running_pid() {
  local pid
  [[ -s $1 ]] || return 1
  pid=$(<"$1")
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  [[ -r /proc/$pid/comm && $(<"/proc/$pid/comm") == "$2" ]] || return 1
  # A killed daemon stays a zombie until its parent (often init) reaps it.
  [[ $(sed 's/^.*) //' "/proc/$pid/stat" 2>/dev/null) != Z* ]] || return 1
  echo "$pid"
}

# Stops process $1 (TERM, then KILL after 10 s); $2 names it in messages.
stop_pid() {
  local i
  kill -TERM "$1" 2>/dev/null || return 0
  for ((i = 0; i < 100; i++)); do
    [[ -d /proc/$1 && $(sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null) != Z* ]] || return 0
    sleep 0.1
  done
  log "$2 ($1) ignored SIGTERM; killing it"
  kill -KILL "$1" 2>/dev/null || true
}

# Stops the daemon named $2 whose pid is in file $1.
stop_daemon() {
  local pid
  if pid=$(running_pid "$1" "$2"); then stop_pid "$pid" "$2"; fi
  rm -f "$1"
}

# Daemons of this state folder that its pid files no longer name (the folder was deleted
# while they ran): they would hold the ports and the socket.
stop_strays() {
  local p cmd
  for p in /proc/[0-9]*; do
    cmd=$(tr '\0' ' ' 2>/dev/null <"$p/cmdline") || continue
    case $cmd in
      "slurmctld "*"-f $conf "* | "slurmd -f $conf "* | "munged "*"--socket=$socket "*)
        log "stopping a ${cmd%% *} (${p#/proc/}) left running for $dir"
        stop_pid "${p#/proc/}" "${cmd%% *}"
        ;;
    esac
  done
}

# Like scripts/setup-deps.sh: quiet, and apt's output only when it fails.
install_packages() {
  local p missing=() log_file
  for p in slurmctld slurmd slurm-client munge; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  ((${#missing[@]} == 0)) && return 0
  log "installing slurm-wlm and munge (missing: ${missing[*]})"
  log_file=$(mktemp)
  if ! { apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends slurm-wlm munge; } \
    >"$log_file" 2>&1; then
    cat "$log_file" >&2
    rm -f "$log_file"
    die "installing slurm-wlm and munge failed (apt output above)"
  fi
  rm -f "$log_file"
}

write_config() {
  mkdir -p "$dir/state" "$dir/spool" "$dir/log" "$(dirname "$socket")"
  cat >"$conf" <<EOF
# A one-node cluster written by tests/slurm/cluster.sh (state folder $dir).
ClusterName=triad-local
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire also delays the restart of a requeued job (default 120 s).
AuthInfo=socket=$socket,cred_expire=5
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
# No cgroups (containers often have none writable): processes are tracked by parentage.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
# Pending jobs are looked at every 2 s, not every 60 s (a requeued job's start waits for it).
SchedulerParameters=sched_interval=2
ReturnToService=2
# The node may declare more CPUs than the machine has.
SlurmdParameters=config_overrides
SlurmctldTimeout=10
SlurmdTimeout=10
MessageTimeout=10
InactiveLimit=0
KillWait=5
Waittime=0
# sbatch --wait polls after 2 s, 8 s, 32 s, ... unless MinJobAge is under 4 s; then every 2 s.
# (Finished jobs still stay visible for about a minute: slurmctld purges them once a minute.)
MinJobAge=3
MailProg=/bin/true
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=local Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
}

start_munge() {
  local i key=$dir/munge/munge.key
  rm -f "$socket" "$socket.lock" "$dir/munge/munged.pid"
  mkdir -p "$dir/munge"
  chmod 755 "$dir/munge"  # the socket is for every user; the key file is private
  if [[ ! -s $key ]]; then
    (umask 077 && head -c 1024 /dev/urandom >"$key")
  fi
  chmod 400 "$key"
  # --force: munged refuses some folder permissions (a world-writable /tmp parent, say)
  # that do not matter for a private test key.
  munged --force --key-file="$key" --socket="$socket" --pid-file="$dir/munge/munged.pid" \
    --log-file="$dir/log/munged.log" --seed-file="$dir/munge/munged.seed" 2>>"$dir/log/munged.log" ||
    die "munged did not start; $(tail -n 5 "$dir/log/munged.log")"
  for ((i = 0; i < 50; i++)); do
    [[ -S $socket ]] && running_pid "$dir/munge/munged.pid" munged >/dev/null && return 0
    sleep 0.1
  done
  die "munged did not start; $(tail -n 5 "$dir/log/munged.log")"
}

show_logs() {
  local f
  for f in "$dir"/log/*.log; do
    [[ -f $f ]] || continue
    echo "---- last lines of $f ----" >&2
    tail -n 20 "$f" >&2
  done
}

node_state() { sinfo -h -N -o '%T' 2>/dev/null | head -n 1; }

start() {
  [[ $(id -u) -eq 0 ]] || die "start needs root (slurmd runs as root, and apt-get installs Slurm)"
  install_packages
  if running_pid "$dir/slurmctld.pid" slurmctld >/dev/null && running_pid "$dir/slurmd.pid" slurmd >/dev/null &&
    running_pid "$dir/munge/munged.pid" munged >/dev/null; then
    case $(node_state) in
      idle* | alloc* | mix*)
        log "already running ($(node_state)); export SLURM_CONF=$conf"
        return 0
        ;;
    esac
  fi
  # Whatever a crash or an earlier start left behind goes first.
  stop_daemon "$dir/slurmd.pid" slurmd
  stop_daemon "$dir/slurmctld.pid" slurmctld
  stop_daemon "$dir/munge/munged.pid" munged
  stop_strays
  write_config
  start_munge
  # -c: a fresh controller state (no jobs or node states from an earlier, crashed run).
  slurmctld -c -f "$conf" 2>>"$dir/log/slurmctld.log" || {
    show_logs
    die "slurmctld did not start"
  }
  slurmd -f "$conf" -N "$host" 2>>"$dir/log/slurmd.log" || {
    show_logs
    die "slurmd did not start"
  }
  local i state=""
  for ((i = 0; i < 120; i++)); do
    state=$(node_state)
    [[ $state == idle* ]] && break
    sleep 0.5
  done
  if [[ $state != idle* ]]; then
    show_logs
    die "the node did not become idle within 60 s (state: '${state:-no answer}')"
  fi
  log "running: node $host, $cpus CPUs, idle; export SLURM_CONF=$conf"
}

stop() {
  local i
  if running_pid "$dir/slurmctld.pid" slurmctld >/dev/null; then
    # Cancel the jobs while the controller can still reach their steps, and let them end.
    scancel --quiet --partition=local 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do
      [[ -z $(squeue -h -o %i -t running,completing,pending,configuring 2>/dev/null) ]] && break
      sleep 0.2
    done
  fi
  stop_daemon "$dir/slurmd.pid" slurmd
  stop_daemon "$dir/slurmctld.pid" slurmctld
  stop_daemon "$dir/munge/munged.pid" munged
  stop_strays
  rm -rf "$dir"
  [[ $socket == "$dir"/* ]] || rm -rf "$(dirname "$socket")"
  log "stopped"
}

status() {
  local d pid f up=0
  for d in munged:munge/munged.pid slurmctld:slurmctld.pid slurmd:slurmd.pid; do
    f=$dir/${d#*:}
    if pid=$(running_pid "$f" "${d%%:*}"); then
      echo "${d%%:*}: running ($pid)"
      up=$((up + 1))
    else
      echo "${d%%:*}: not running"
    fi
  done
  if ((up == 3)); then
    sinfo -N -o '%N %T %c'
    squeue
  fi
  ((up == 3))
}

case $command in
  start) start ;;
  stop) stop ;;
  status) status ;;
  env)
    printf 'export SLURM_CONF=%q\n' "$conf"
    # Jobs of more ranks than cores look unoversubscribed to Open MPI (the node declares the
    # CPUs): idle ranks must yield the core instead of spinning.
    echo "export OMPI_MCA_mpi_yield_when_idle=1"
    ;;
esac
