#!/usr/bin/env bash
# A one-node Slurm cluster whose node and controller address is 127.0.0.1 (slurmctld + slurmd, munge for
# authentication), for developing and testing `biaslab audit --executor slurm` on one machine. Debian's packages:
# apt-get install slurm-wlm munge. The daemons talk to each other over 127.0.0.1, but they listen on every address
# (ports 6817 and 6818): Slurm 22.05 has no setting that binds its listening sockets to one address that we found, so
# run this only where those ports are not reachable from other machines (a container, a firewalled host). Every
# request still needs a munge credential made with this machine's key.
#
#   bash scripts/slurm-one-node.sh start     # writes /etc/slurm/slurm.conf (once), starts munged, slurmctld, slurmd
#   bash scripts/slurm-one-node.sh stop
#   bash scripts/slurm-one-node.sh status    # sinfo
#
# Needs root (the daemons run as root: SlurmUser=root). Accounting goes to a text file (no slurmdbd), so `sacct`
# answers from that file. Cgroups are not used (containers often lack them): processes are tracked by
# proctrack/linuxproc, and a job's memory is not limited.
set -euo pipefail
action="${1:-start}"
conf=/etc/slurm/slurm.conf
state=/var/spool/slurm-one-node

write_conf() {
    local host cpus mem
    host="$(hostname -s)"
    cpus="$(nproc)"
    mem="$(awk '/MemTotal/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)"
    mkdir -p "$state/ctld" "$state/d" /var/log/slurm /run/slurm
    cat > "$conf" <<CONF
# written by biaslab's scripts/slurm-one-node.sh: one node on 127.0.0.1
ClusterName=biaslab
SlurmctldHost=${host}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=${state}/ctld
SlurmdSpoolDir=${state}/d
SlurmctldPidFile=/run/slurm/slurmctld.pid
SlurmdPidFile=/run/slurm/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=/var/log/slurm/jobcomp.log
MinJobAge=300
KillWait=5
InactiveLimit=0
NodeName=${host} NodeAddr=127.0.0.1 CPUs=${cpus} RealMemory=${mem} State=UNKNOWN
PartitionName=debug Nodes=${host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
}

case "$action" in
start)
    [ -f "$conf" ] || write_conf
    mkdir -p /run/munge /run/slurm /var/log/slurm "$state/ctld" "$state/d"
    chown munge:munge /run/munge 2>/dev/null || true
    [ -f /etc/munge/munge.key ] || /usr/sbin/mungekey --create 2>/dev/null || \
        dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null
    chown munge:munge /etc/munge/munge.key 2>/dev/null || true
    chmod 400 /etc/munge/munge.key
    pgrep -x munged >/dev/null || su -s /bin/sh munge -c /usr/sbin/munged 2>/dev/null || /usr/sbin/munged --force
    pgrep -x slurmctld >/dev/null || /usr/sbin/slurmctld
    pgrep -x slurmd >/dev/null || /usr/sbin/slurmd
    for _ in $(seq 1 30); do   # the node comes up within a few seconds
        if sinfo -h -o %T 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; then sinfo; exit 0; fi
        scontrol update nodename="$(hostname -s)" state=resume >/dev/null 2>&1 || true
        sleep 1
    done
    echo "slurm-one-node: the node did not come up; see /var/log/slurm/" >&2
    sinfo >&2 || true
    exit 1
    ;;
stop)   # by the pid files the configuration names, never by process name (another user's slurmd is left alone)
    for daemon in slurmd slurmctld; do
        pid_file=/run/slurm/${daemon}.pid
        if [ -s "$pid_file" ] && kill -0 "$(cat "$pid_file")" 2>/dev/null; then
            kill "$(cat "$pid_file")"
        fi
    done
    ;;
status)
    sinfo
    ;;
*)
    echo "usage: $0 start|stop|status" >&2
    exit 2
    ;;
esac
