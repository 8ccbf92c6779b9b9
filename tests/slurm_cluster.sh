#!/usr/bin/env bash
# A private one-node SLURM cluster for the tests: slurmctld + slurmd (+ munged when none runs),
# everything under STATE_DIR (config, state, spool, logs, PIDs), nothing written to /etc/slurm.
#
#   bash tests/slurm_cluster.sh start STATE_DIR   # prints `export SLURM_CONF=...` lines (also in STATE_DIR/env)
#   bash tests/slurm_cluster.sh stop STATE_DIR    # cancels jobs, stops exactly the daemons start started
#   bash tests/slurm_cluster.sh status STATE_DIR
#
# Runs as root (CI does). Progress goes to stderr, so `eval "$(bash tests/slurm_cluster.sh start D)"`
# works. Overrides: SLURM_PARTITION (debug), SLURMCTLD_PORT (6817), SLURMD_PORT (6818),
# SLURM_START_TIMEOUT (90 s), SLURM_PROCTRACK (linuxproc; cgroup also kills processes that left
# the job's process tree, e.g. double-forked daemons, where the machine has cgroup v1 mounted).
# Two clusters at once would need different ports and node names: not supported.
set -euo pipefail

log() { echo "slurm_cluster: $*" >&2; }
die() {
    log "error: $*"
    exit 1
}

usage() { die "usage: $0 start|stop|status STATE_DIR"; }

[ $# -eq 2 ] || usage
action=$1
[ "$(id -u)" -eq 0 ] || die "must run as root (slurmd starts jobs as their users; munged runs as munge)"
mkdir -p "$2"
state=$(cd "$2" && pwd)
conf=$state/slurm.conf
pids=$state/pids
node=$(hostname -s)
partition=${SLURM_PARTITION:-debug}
ctld_port=${SLURMCTLD_PORT:-6817}
slurmd_port=${SLURMD_PORT:-6818}
timeout=${SLURM_START_TIMEOUT:-90}
proctrack=${SLURM_PROCTRACK:-linuxproc}
case $proctrack in linuxproc | cgroup) ;; *) die "SLURM_PROCTRACK must be linuxproc or cgroup" ;; esac
munge_socket=/run/munge/munge.socket.2 # the default: every munge client and slurm finds it
# Where slurm's tools look when SLURM_CONF is unset and /etc/slurm/slurm.conf is absent (a
# configless slurmd's cache). snakemake-executor-plugin-slurm-jobstep 0.6.1 drops every SLURM_*
# variable but the job's ids before its inner `srun`, SLURM_CONF included: this link is how
# that srun finds the cluster.
run_conf=/run/slurm/conf/slurm.conf

# A recorded PID is ours only while it still runs the binary we started (PIDs get reused).
alive() { # PID EXE
    local st
    [ -e "/proc/$1" ] || return 1
    st=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
    [ "$st" != Z ] || return 1
    [ "$(readlink "/proc/$1/exe" 2>/dev/null)" = "$2" ]
}

any_alive() {
    local name pid exe
    [ -f "$pids" ] || return 1
    while read -r name pid exe; do
        alive "$pid" "$exe" && return 0
    done <"$pids"
    return 1
}

# Start a daemon in the foreground mode (-D / -F) in its own session, detached from our stdio:
# $! is then the daemon itself, recorded before anything else can go wrong.
spawn() { # NAME LOGFILE CMD...
    local name=$1 out=$2
    shift 2
    setsid "$@" </dev/null >>"$out" 2>&1 &
    local pid=$! exe=""
    # the recorded binary is the daemon's own (setsid and setpriv exec it): wait for the exec
    for _ in $(seq 50); do
        exe=$(readlink "/proc/$pid/exe" 2>/dev/null || true)
        case $exe in */setsid | */setpriv | "") sleep 0.1 ;; *) break ;; esac
    done
    echo "$name $pid $exe" >>"$pids"
    log "started $name (pid $pid)"
}

tail_logs() {
    local f
    for f in "$state"/log/*; do
        [ -s "$f" ] || continue
        echo "----- last lines of $f" >&2
        tail -n 20 "$f" >&2
    done
}

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

install_if_missing() {
    if command -v slurmctld >/dev/null && command -v slurmd >/dev/null &&
        command -v munged >/dev/null && command -v sinfo >/dev/null; then
        return
    fi
    log "installing slurm-wlm and munge with apt-get (a minute or two)"
    # keep the packages' postinst scripts from starting system daemons we would not track
    local policy=/usr/sbin/policy-rc.d added=
    if [ ! -e $policy ]; then
        printf '#!/bin/sh\nexit 101\n' >$policy && chmod +x $policy && added=1
    fi
    export DEBIAN_FRONTEND=noninteractive
    local rc=0
    { apt-get update -qq && apt-get install -y -qq --no-install-recommends slurm-wlm slurm-client munge; } \
        >"$state/apt.log" 2>&1 || rc=$?
    [ -z "$added" ] || rm -f $policy
    [ $rc -eq 0 ] || {
        tail -n 20 "$state/apt.log" >&2
        die "apt-get install slurm-wlm munge failed (log: $state/apt.log)"
    }
}

write_conf() {
    local cpus total margin mem
    cpus=$(nproc)
    total=$(free -m | awk '/^Mem:/ {print $2}')
    # slurmd drains a node that has less memory than configured: leave a margin
    margin=$((total / 20 > 256 ? total / 20 : 256))
    mem=$((total - margin))
    mkdir -p "$state"/{state,spool,log,run}
    rm -f "$state"/log/*       # the tails shown on a failed start are this start's
    : >"$state/plugstack.conf" # no SPANK plugins from a site's /etc/slurm/plugstack.conf
    # read only with proctrack/cgroup (from slurm.conf's directory): the v1 hierarchies
    printf 'CgroupPlugin=cgroup/v1\nCgroupMountpoint=/sys/fs/cgroup\n' >"$state/cgroup.conf"
    cat >"$conf" <<EOF
# Written by tests/slurm_cluster.sh: a private one-node cluster, all state under $state.
ClusterName=slotbench
SlurmctldHost=$node
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$state/state
SlurmdSpoolDir=$state/spool
SlurmctldPidFile=$state/run/slurmctld.pid
SlurmdPidFile=$state/run/slurmd.pid
SlurmctldLogFile=$state/log/slurmctld.log
SlurmdLogFile=$state/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig=$state/plugstack.conf
# linuxproc: no cgroups needed (containers rarely delegate them); a job's processes are found
# through /proc as descendants of its slurmstepd, so a double-forked daemon escapes scancel
ProctrackType=proctrack/$proctrack
TaskPlugin=task/none
# no slurmdbd: squeue, not sacct, tells job states (snakemake: --slurm-status-command squeue)
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
# finished jobs stay visible to squeue this long (the slurm plugin wants >= 3 status intervals)
MinJobAge=600
# cores and memory are consumable: two 1-CPU jobs share the node; a job without --mem gets
# its CPUs' share of memory instead of the whole node
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=$((mem / cpus))
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
# scancel: SIGTERM, then SIGKILL after this many seconds
KillWait=5
InactiveLimit=0
MailProg=/bin/true
NodeName=$node CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=$partition Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
}

start_munged() {
    if munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; then
        log "using the munged already answering on $munge_socket (not ours: stop leaves it running)"
        return
    fi
    local key=/etc/munge/munge.key
    if [ ! -s $key ]; then
        log "creating $key"
        mkdir -p /etc/munge
        dd if=/dev/urandom of=$key bs=1024 count=1 status=none
    fi
    chown munge:munge /etc/munge $key
    chmod 0700 /etc/munge
    chmod 0400 $key
    mkdir -p /run/munge /var/lib/munge /var/log/munge
    chown munge:munge /run/munge /var/lib/munge /var/log/munge
    chmod 0755 /run/munge
    # -F logs to stderr, i.e. to the file root opened under STATE_DIR (which munge may not enter)
    spawn munged "$state/log/munged.log" \
        setpriv --reuid munge --regid munge --init-groups /usr/sbin/munged -F
    for _ in $(seq 100); do
        munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1 && return
        sleep 0.1
    done
    tail_logs
    die "munged does not answer on $munge_socket"
}

do_start() {
    if any_alive; then
        die "a cluster from $state is already running (see $pids); run: $0 stop $state"
    fi
    rm -f "$pids"
    local p
    for p in "$ctld_port" "$slurmd_port"; do
        ! port_in_use "$p" || die "port $p is in use (another slurmctld/slurmd?); set SLURMCTLD_PORT/SLURMD_PORT"
    done
    install_if_missing
    write_conf
    export SLURM_CONF=$conf
    # on any failure from here, stop what was started
    trap 'rc=$?; if [ $rc -ne 0 ]; then do_stop_daemons >&2 || true; fi' EXIT
    local t0=$SECONDS
    start_munged
    # -c: a clean start, no jobs or node state left from an earlier run of this STATE_DIR
    spawn slurmctld "$state/log/slurmctld.stderr" /usr/sbin/slurmctld -D -c -f "$conf"
    spawn slurmd "$state/log/slurmd.stderr" /usr/sbin/slurmd -D -f "$conf" -N "$node"
    local st="" name pid exe
    while [ $((SECONDS - t0)) -lt "$timeout" ]; do
        while read -r name pid exe; do
            alive "$pid" "$exe" || {
                tail_logs
                die "$name (pid $pid) exited during start"
            }
        done <"$pids"
        st=$(sinfo -h -N -n "$node" -o %T 2>/dev/null || true)
        [ "$st" != idle ] || break
        sleep 0.5
    done
    if [ "$st" != idle ]; then
        tail_logs
        sinfo -N -l >&2 2>&1 || true
        die "node $node not idle after ${timeout}s (state: ${st:-no answer from slurmctld})"
    fi
    link_run_conf
    trap - EXIT
    printf 'export SLURM_CONF=%q\nexport SLURM_PARTITION=%q\n' "$conf" "$partition" >"$state/env"
    log "node $node idle in partition $partition after $((SECONDS - t0))s; source $state/env"
    cat "$state/env"
}

link_run_conf() {
    if [ -e /etc/slurm/slurm.conf ]; then
        log "warning: /etc/slurm/slurm.conf exists: commands without SLURM_CONF (snakemake's inner srun) use it, not this cluster"
    elif [ -L $run_conf ] && [ ! -e $run_conf ]; then
        ln -sfn "$conf" $run_conf # dangling: a killed cluster's
    elif [ -e $run_conf ] && [ "$(readlink $run_conf)" != "$conf" ]; then
        log "warning: $run_conf is not ours: commands without SLURM_CONF (snakemake's inner srun) use it"
        return
    else
        mkdir -p "$(dirname $run_conf)"
        ln -sfn "$conf" $run_conf
    fi
}

unlink_run_conf() {
    [ "$(readlink $run_conf 2>/dev/null)" != "$conf" ] || rm -f $run_conf
}

# Kill the recorded daemons, slurmd first and munged last; SIGKILL what outlives 20 s.
do_stop_daemons() {
    [ -f "$pids" ] || return 0
    local name pid exe n i
    for n in slurmd slurmctld munged; do
        while read -r name pid exe; do
            [ "$name" = "$n" ] && alive "$pid" "$exe" && kill -TERM "$pid" 2>/dev/null || true
        done <"$pids"
        for i in $(seq 200); do
            local left=""
            while read -r name pid exe; do
                [ "$name" = "$n" ] && alive "$pid" "$exe" && left=$pid
            done <"$pids"
            [ -n "$left" ] || break
            [ "$i" -lt 200 ] && sleep 0.1 && continue
            log "$n (pid $left) ignores SIGTERM; SIGKILL"
            kill -KILL "$left" 2>/dev/null || true
        done
    done
    rm -f "$pids"
}

# PIDs of the slurmstepd processes of this cluster: those listening on a socket in our spool dir.
stepd_pids() {
    local inodes
    inodes=$(awk -v d="$state/spool/" 'index($8, d) == 1 {print $7}' /proc/net/unix 2>/dev/null | sort -u)
    [ -n "$inodes" ] || return 0
    local fd ino
    for fd in /proc/[0-9]*/fd/*; do
        ino=$(readlink "$fd" 2>/dev/null) || continue
        case $ino in socket:\[*\]) ino=${ino#socket:[} ino=${ino%]} ;; *) continue ;; esac
        grep -qx "$ino" <<<"$inodes" && echo "${fd#/proc/}" | cut -d/ -f1
    done | sort -u
}

# The given PIDs and all their descendants.
descendants() {
    ps -e -o pid= -o ppid= | awk -v roots="$*" '
        BEGIN { n = split(roots, r, " "); for (i = 1; i <= n; i++) keep[r[i]] = 1 }
        { parent[$1] = $2 }
        END {
            do { grew = 0; for (p in parent) if (!(p in keep) && (parent[p] in keep)) { keep[p] = 1; grew = 1 } } while (grew)
            for (p in keep) print p
        }'
}

do_stop() {
    if ! any_alive; then
        rm -f "$pids"
        unlink_run_conf
        log "no cluster running from $state"
        return 0
    fi
    export SLURM_CONF=$conf
    local jobs
    jobs=$(squeue -h -o %A 2>/dev/null || true)
    if [ -n "$jobs" ]; then
        log "cancelling jobs: $(echo $jobs)"
        # shellcheck disable=SC2086
        scancel $jobs 2>/dev/null || true
        # KillWait is 5 s
        for _ in $(seq 60); do
            [ -z "$(squeue -h -o %A 2>/dev/null)" ] && [ -z "$(stepd_pids)" ] && break
            sleep 0.5
        done
    fi
    local left
    left=$(stepd_pids)
    if [ -n "$left" ]; then
        # e.g. slurmd died: nothing delivers the cancel, so kill the steps' process trees
        left=$(descendants $left)
        log "job steps still running after scancel: $(echo $left); SIGKILL"
        # shellcheck disable=SC2086
        kill -KILL $left 2>/dev/null || true
    fi
    do_stop_daemons
    unlink_run_conf
    # proctrack/cgroup leaves its (empty) hierarchy behind
    find /sys/fs/cgroup/*/"slurm_$node" -depth -type d -exec rmdir {} + 2>/dev/null || true
    log "stopped"
}

case $action in
start) do_start ;;
stop) do_stop ;;
status)
    if any_alive; then
        cat "$pids"
        SLURM_CONF=$conf sinfo -N
    else
        echo "not running"
        exit 1
    fi
    ;;
*) usage ;;
esac
