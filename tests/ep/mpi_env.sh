# Sourced by the MPI tests: lets Open MPI run as root (CI runs as root) and oversubscribe the
# machine's cores; shared-memory transport without the CMA single-copy path, which containers
# often forbid.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_rmaps_base_oversubscribe=1
MPIRUN=(mpirun --oversubscribe --bind-to none)
