# Sourced by the MPI tests: lets Open MPI run as root (CI runs as root) and oversubscribe the
# machine's cores; shared-memory transport without the CMA single-copy path, which containers
# often forbid.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_rmaps_base_oversubscribe=1
MPIRUN=(mpirun --oversubscribe --bind-to none)

# run_failing_job BOUND LIMIT WHAT CMD...: runs CMD under `timeout BOUND` with its output in
# $WORK/out, and fails (returns 1, saying why) unless it exits non-zero within LIMIT seconds
# without being timed out. WHAT says why it must fail ("rank 2 was killed"). Needs $WORK.
run_failing_job() {
  local bound=$1 limit=$2 what=$3 start rc elapsed
  shift 3
  start=$(date +%s)
  timeout "$bound" "$@" >"$WORK/out" 2>&1
  rc=$?
  elapsed=$(($(date +%s) - start))
  echo "exit code $rc after ${elapsed}s"
  tail -5 "$WORK/out"
  if [[ $rc -eq 0 ]]; then echo "FAIL: the job succeeded although $what"; return 1; fi
  if [[ $rc -eq 124 || $elapsed -gt $limit ]]; then
    echo "FAIL: job took ${elapsed}s (limit ${limit}s)"; return 1
  fi
  echo "ended in ${elapsed}s with exit code $rc"
}

# no_doubled_rank_prefix: fails if a message in $WORK/out names its rank twice ("rank 0: rank 0:").
no_doubled_rank_prefix() {
  if grep -Eq "rank ([0-9]+): rank \1:" "$WORK/out"; then
    echo "FAIL: a message names its rank twice"; return 1
  fi
}
