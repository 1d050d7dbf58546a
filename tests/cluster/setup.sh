#!/usr/bin/env bash
# A real single-node Slurm (slurmctld, slurmd, munge from Debian's packages) and a local
# sshd, for the cluster tests (tests/e2e/cluster.rs): workers started through `srun`
# and through `ssh localhost`. Needs root (or sudo) and apt; safe to run again (it only
# starts what is not running). SlurmUser=root is fine on a single node. The node has
# no GPU: the tests run CPU workers (Triton's interpreter, fake workers).
#
# Afterwards `srun -n1 true` works, and `ssh -o BatchMode=yes localhost true` works for
# the user who ran this (a key in ~/.ssh/kernel_lsp_ci, authorized for localhost).
set -euo pipefail
sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
need=()
command -v slurmctld >/dev/null 2>&1 || need+=(slurm-wlm)
command -v munged >/dev/null 2>&1 || need+=(munge)
[ -x /usr/sbin/sshd ] || need+=(openssh-server)
command -v ssh >/dev/null 2>&1 || need+=(openssh-client)
if [ ${#need[@]} -gt 0 ]; then
  echo "cluster setup: apt-get install ${need[*]}" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# munge: a key and the daemon.
if [ ! -s /etc/munge/munge.key ]; then
  $sudo sh -c 'dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null'
  $sudo chown munge:munge /etc/munge/munge.key
  $sudo chmod 400 /etc/munge/munge.key
fi
$sudo mkdir -p /run/munge /var/log/munge /var/lib/munge
$sudo chown munge:munge /run/munge /var/log/munge /var/lib/munge
if ! pgrep -x munged >/dev/null; then
  $sudo runuser -u munge -- /usr/sbin/munged
fi

# Slurm: one node, this host, all its CPUs; no cgroups (containers often lack them).
host=$(hostname -s)
cpus=$(nproc)
mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 / 2 ))
conf=/etc/slurm/slurm.conf
want=$(cat <<CONF
ClusterName=kernel-lsp-ci
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SlurmctldLogFile=/var/log/slurmctld.log
SlurmdLogFile=/var/log/slurmd.log
NodeName=$host CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=ci Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
)
if [ "$(cat "$conf" 2>/dev/null)" != "$want" ]; then
  $sudo mkdir -p /etc/slurm
  printf '%s\n' "$want" | $sudo tee "$conf" >/dev/null
  $sudo pkill -x slurmctld 2>/dev/null || true
  $sudo pkill -x slurmd 2>/dev/null || true
  sleep 1
fi
$sudo mkdir -p /var/spool/slurmctld /var/spool/slurmd
pgrep -x slurmctld >/dev/null || $sudo /usr/sbin/slurmctld
pgrep -x slurmd >/dev/null || $sudo /usr/sbin/slurmd
for _ in $(seq 60); do
  if sinfo -h -o %t 2>/dev/null | grep -qE '^(idle|mix|alloc)'; then break; fi
  $sudo scontrol update nodename="$host" state=resume >/dev/null 2>&1 || true
  sleep 1
done
sinfo -h -o '%P %t %D %c' >&2
timeout 60 srun -n1 --quiet true

# sshd on localhost with a key for this user.
$sudo mkdir -p /run/sshd
[ -e /etc/ssh/ssh_host_ed25519_key ] || $sudo ssh-keygen -A >/dev/null
if ! pgrep -x sshd >/dev/null; then
  $sudo /usr/sbin/sshd
fi
mkdir -p ~/.ssh; chmod 700 ~/.ssh
[ -e ~/.ssh/kernel_lsp_ci ] || ssh-keygen -q -t ed25519 -N '' -f ~/.ssh/kernel_lsp_ci
grep -qf ~/.ssh/kernel_lsp_ci.pub ~/.ssh/authorized_keys 2>/dev/null || cat ~/.ssh/kernel_lsp_ci.pub >> ~/.ssh/authorized_keys
chmod 600 ~/.ssh/authorized_keys
timeout 30 ssh -i ~/.ssh/kernel_lsp_ci -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null localhost true
echo "cluster setup: slurm and sshd ready on $host" >&2
