#!/usr/bin/env bash
# `ember train mnist|gpt --ddp` as 2 real ranks: on MPI and on Gloo the global batch's losses equal
# one process's (the ranks split each batch); --zero too, and its checkpoint (the optimizer state
# gathered from the shards) resumes in a plain run; --compile too (a compiled step replays the
# all-reduces); a rank killed (Gloo) or stopped (MPI) makes the
# other exit within the timeout with an error naming the rank and the collective.
set -euo pipefail
ember="$1"
data="$2"
run_ranks="$3"
shakespeare="$4"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
common=(--epochs 1 --batch-size 64 --shift 0 --optimizer adamw --data "$data" --json)
field() { python3 -c "import json, sys; print(json.loads(open(sys.argv[1]).read().splitlines()[-1])[sys.argv[2]])" "$@"; }
close() {  # relative difference below 1e-5
  python3 -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(abs(a - b) > 1e-5 * abs(b))" "$1" "$2" ||
    { echo "$3: $1 against $2"; exit 1; }
}

EMBER_NUM_THREADS=1 "$ember" train mnist "${common[@]}" > "$tmp/single.txt"
"$run_ranks" mpi 2 "$ember" train mnist "${common[@]}" --ddp --bucket-mb 0.01 > "$tmp/mpi.txt"
"$run_ranks" gloo 2 "$ember" train mnist "${common[@]}" --ddp --zero > "$tmp/gloo.txt"
[ "$(wc -l < "$tmp/mpi.txt")" -eq "$(wc -l < "$tmp/single.txt")" ] || { echo "rank 1 printed too:"; cat "$tmp/mpi.txt"; exit 1; }
single=$(field "$tmp/single.txt" final_loss)
close "$(field "$tmp/mpi.txt" final_loss)" "$single" "mpi final loss"
close "$(field "$tmp/gloo.txt" final_loss)" "$single" "gloo --zero final loss"
[ "$(field "$tmp/mpi.txt" ranks)" = 2 ] && [ "$(field "$tmp/mpi.txt" backend)" = mpi ]
[ "$(field "$tmp/mpi.txt" buckets)" -gt 1 ]
[ "$(field "$tmp/gloo.txt" zero)" = True ]
python3 -c "import sys; sys.exit(not 0 < int(sys.argv[1]) < 400000)" "$(field "$tmp/gloo.txt" optimizer_state_bytes_per_rank)"

# --ddp --compile: the collectives are primitives, so the compiled step records the buckets'
# all-reduces (and ZeRO's all-gather) and replays them in order; the losses are one process's.
"$run_ranks" mpi 2 "$ember" train mnist "${common[@]}" --ddp --compile --bucket-mb 0.01 > "$tmp/mpi_compiled.txt"
"$run_ranks" gloo 2 "$ember" train mnist "${common[@]}" --ddp --compile --zero > "$tmp/gloo_compiled.txt"
close "$(field "$tmp/mpi_compiled.txt" final_loss)" "$single" "mpi --compile final loss"
close "$(field "$tmp/gloo_compiled.txt" final_loss)" "$single" "gloo --zero --compile final loss"
[ "$(field "$tmp/mpi_compiled.txt" compiles)" = 2 ] || { echo "expected 2 traces:"; cat "$tmp/mpi_compiled.txt"; exit 1; }

# A --zero checkpoint after 1 of 2 epochs, resumed by one plain process, ends where 2 plain epochs do.
two=(--epochs 2 --batch-size 64 --shift 0 --data "$data" --json)
EMBER_NUM_THREADS=1 "$ember" train mnist "${two[@]}" > "$tmp/plain2.txt"
"$run_ranks" gloo 2 "$ember" train mnist "${two[@]}" --ddp --zero --stop-after 1 --save "$tmp/zero.safetensors" > /dev/null
EMBER_NUM_THREADS=1 "$ember" train mnist "${two[@]}" --resume "$tmp/zero.safetensors" > "$tmp/resumed.txt"
close "$(field "$tmp/resumed.txt" final_loss)" "$(field "$tmp/plain2.txt" final_loss)" "resumed --zero checkpoint"

# The GPT: 2 ranks (MPI; Gloo with --zero) give one process's losses; a --zero checkpoint taken
# halfway resumes in one plain process to the end of an uninterrupted plain run.
gpt=(--layers 1 --dim 32 --heads 2 --context 32 --batch-size 8 --steps 20 --warmup 2 --eval-every 10
     --eval-batches 2 --sample 10 --data "$shakespeare" --json)
EMBER_NUM_THREADS=1 "$ember" train gpt "${gpt[@]}" > "$tmp/gpt.txt"
"$run_ranks" mpi 2 "$ember" train gpt "${gpt[@]}" --ddp --bucket-mb 0.01 > "$tmp/gpt_mpi.txt"
"$run_ranks" gloo 2 "$ember" train gpt "${gpt[@]}" --ddp --zero --stop-after 10 --save "$tmp/gpt.safetensors" \
  > /dev/null
EMBER_NUM_THREADS=1 "$ember" train gpt "${gpt[@]}" --resume "$tmp/gpt.safetensors" > "$tmp/gpt_resumed.txt"
close "$(field "$tmp/gpt_mpi.txt" final_loss)" "$(field "$tmp/gpt.txt" final_loss)" "gpt mpi final loss"
close "$(field "$tmp/gpt_mpi.txt" val_loss)" "$(field "$tmp/gpt.txt" val_loss)" "gpt mpi val loss"
close "$(field "$tmp/gpt_resumed.txt" final_loss)" "$(field "$tmp/gpt.txt" final_loss)" "gpt resumed --zero checkpoint"
# 50 steps of the GPT compiled on 2 ranks, against one process (eager).
gpt50=(--layers 1 --dim 32 --heads 2 --context 32 --batch-size 8 --steps 50 --warmup 2 --eval-every 25
       --eval-batches 2 --sample 10 --data "$shakespeare" --json)
"$run_ranks" mpi 2 "$ember" train gpt "${gpt50[@]}" --ddp --compile --bucket-mb 0.01 > "$tmp/gpt_mpi_compiled.txt"
"$run_ranks" gloo 2 "$ember" train gpt "${gpt50[@]}" --ddp --compile > "$tmp/gpt_gloo_compiled.txt"
EMBER_NUM_THREADS=1 "$ember" train gpt "${gpt50[@]}" > "$tmp/gpt50.txt"
for run in gpt_mpi_compiled gpt_gloo_compiled; do
  close "$(field "$tmp/$run.txt" final_loss)" "$(field "$tmp/gpt50.txt" final_loss)" "$run final loss"
  close "$(field "$tmp/$run.txt" val_loss)" "$(field "$tmp/gpt50.txt" val_loss)" "$run val loss"
done
[ "$(field "$tmp/gpt_mpi.txt" buckets)" -gt 1 ]

# Errors.
if "$ember" train mnist --data "$data" --zero > /dev/null 2> "$tmp/err.txt"; then exit 1; fi
grep -q "\-\-zero needs \-\-ddp" "$tmp/err.txt"
if "$ember" train mnist --data "$data" --ddp > /dev/null 2> "$tmp/err.txt"; then exit 1; fi
grep -q "needs EMBER_RANK and EMBER_WORLD_SIZE" "$tmp/err.txt"
if "$ember" train gpt "${gpt[@]}" --zero > /dev/null 2> "$tmp/err.txt"; then exit 1; fi
grep -q "\-\-zero needs \-\-ddp" "$tmp/err.txt"

# Gloo: rank 1 killed mid-training; rank 0 must stop with an error naming rank 1 and the collective.
# The run is far longer than the checks: an epoch of this MNIST takes about 0.2 s, so 20 could end
# around the time rank 1 is killed or stopped; a rank that failed to stop fails within a minute or two.
long=(--epochs 200 --data "$data" --ddp)
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export EMBER_WORLD_SIZE=2 EMBER_MASTER_ADDR=127.0.0.1 EMBER_MASTER_PORT=$port EMBER_DIST_TIMEOUT=10 EMBER_NUM_THREADS=1
EMBER_RANK=0 "$ember" train mnist "${long[@]}" > /dev/null 2> "$tmp/rank0.txt" &
rank0=$!
EMBER_RANK=1 "$ember" train mnist "${long[@]}" > /dev/null 2>&1 &
rank1=$!
sleep 4
kill -KILL $rank1
start=$(date +%s)
if wait $rank0; then echo "rank 0 went on after rank 1 died"; exit 1; fi
elapsed=$(($(date +%s) - start))
unset EMBER_WORLD_SIZE EMBER_MASTER_ADDR EMBER_MASTER_PORT
grep -q "rank 1 did not reach it" "$tmp/rank0.txt" || { cat "$tmp/rank0.txt"; exit 1; }
grep -qE "all_reduce #[0-9]+" "$tmp/rank0.txt" || { cat "$tmp/rank0.txt"; exit 1; }
[ "$elapsed" -le 25 ] || { echo "rank 0 took ${elapsed}s to stop"; exit 1; }

# MPI: rank 1 stopped (a hang, not a crash); rank 0 times out, names it, and mpirun ends the job.
"$run_ranks" mpi 2 "$ember" train mnist "${long[@]}" > /dev/null 2> "$tmp/mpi_err.txt" &
job=$!
sleep 4
for pid in $(pgrep -f "train mnist --epochs 200" || true); do
  if tr '\0' '\n' < "/proc/$pid/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1"; then kill -STOP "$pid"; fi
done
start=$(date +%s)
if wait $job; then echo "the MPI job went on with rank 1 stopped"; exit 1; fi
elapsed=$(($(date +%s) - start))
grep -q "did not complete within 10 s on rank 0 of 2 (mpi): rank 1 did not reach it" "$tmp/mpi_err.txt" ||
  { cat "$tmp/mpi_err.txt"; exit 1; }
[ "$elapsed" -le 40 ] || { echo "the MPI job took ${elapsed}s to stop"; exit 1; }
echo "ddp checks passed"
