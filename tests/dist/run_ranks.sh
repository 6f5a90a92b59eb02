#!/usr/bin/env bash
# Starts a command as N ranks of one job and fails if any rank fails.
#   run_ranks.sh mpi N cmd...    under mpirun (as root and oversubscribed where needed, as in CI)
#   run_ranks.sh gloo N cmd...   N processes with EMBER_RANK/EMBER_WORLD_SIZE/EMBER_MASTER_* set
# Each rank runs single-threaded (EMBER_NUM_THREADS=1), so N ranks fit on N cores.
set -euo pipefail
backend="$1"
ranks="$2"
shift 2
export EMBER_NUM_THREADS=1 OMP_NUM_THREADS=1
if [ "$backend" = mpi ]; then
  # OpenMPI refuses root without these, and busy-polls unless told to yield when cores are shared.
  exec mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$ranks" \
    --mca mpi_yield_when_idle 1 --mca btl self,vader -x EMBER_NUM_THREADS -x OMP_NUM_THREADS "$@"
fi
# A free port for rank 0's store.
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
pids=()
for ((rank = 0; rank < ranks; rank++)); do
  EMBER_RANK=$rank EMBER_WORLD_SIZE=$ranks EMBER_MASTER_ADDR=127.0.0.1 EMBER_MASTER_PORT=$port "$@" &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do
  wait "$pid" || status=1
done
exit $status
