"""The rank, world size and local rank a launcher gave this process, from its variables.

The launchers' variables (torchrun's, Open MPI's, PMI's, SLURM's) are read
innermost launcher first; a malformed value, or values that cannot describe
this process (a world size above 1 with no rank, a rank with no world size),
is a :class:`~asynctrace.ConfigurationError` naming the variable.
"""

from __future__ import annotations

from collections.abc import Mapping

from ._config_checks import int_text
from ._errors import ConfigurationError

__all__ = [
    "LAUNCHER_VARS",
    "LOCAL_RANK_VARS",
    "MAX_WORLD_SIZE",
    "env_local_rank",
    "env_local_rank_var",
    "env_rank",
]

# Innermost launcher first: a launcher started inside another's allocation (mpirun in
# an sbatch script, torchrun under srun) inherits the outer one's variables, which
# describe the outer step (SLURM_PROCID=0 for every process mpirun starts).
LAUNCHER_VARS = (
    ("RANK", "WORLD_SIZE"),  # torchrun, accelerate, deepspeed, most launchers
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),  # Open MPI's mpirun
    ("PMI_RANK", "PMI_SIZE"),  # MPICH, Intel MPI (Hydra); srun --mpi=pmi2 agrees with SLURM's
    ("SLURM_PROCID", "SLURM_NTASKS"),  # srun
)
"""(rank variable, world size variable) of each launcher, in the order they are read."""

LOCAL_RANK_VARS = (
    "LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "MPI_LOCALRANKID",  # MPICH, Intel MPI (Hydra)
    "SLURM_LOCALID",
)
"""The variables of the rank within the node, in the order they are read."""

MAX_WORLD_SIZE = 2**31 - 1
"""The largest world size accepted (an MPI rank is a C ``int``)."""


_DIGITS = 18
"""At most this many digits are read from a variable (so ``int()`` never meets its limit)."""


def _env_int(environ: Mapping[str, str], name: str) -> int | None:
    """The integer in variable *name* (``None``: unset or empty).

    Raises:
        ConfigurationError: the value is not an integer of at most 18 digits;
            naming the variable and the value (shortened).
    """
    raw = environ.get(name, "").strip()
    if not raw:
        return None
    number = int_text(raw)
    if number is not None and len(raw.lstrip("+-")) <= _DIGITS:
        return number
    raise ConfigurationError(
        f"{name}: {_shorten(raw)} is not accepted; accepted: an integer of at most "
        f"{_DIGITS} digits (as launchers set it)"
    )


def _shorten(raw: str, limit: int = 40) -> str:
    """*raw* as repr, cut to *limit* characters with its length said when longer."""
    if len(raw) <= limit:
        return repr(raw)
    return f"{raw[:limit]!r}... ({len(raw)} characters)"


def env_rank(
    environ: Mapping[str, str], rank: int | None = None, world_size: int | None = None
) -> tuple[int, int]:
    """The rank and world size a launcher gave this process, where not given here.

    The launchers of :data:`LAUNCHER_VARS` are read in order, innermost
    first (``RANK``, Open MPI, PMI, SLURM: ``mpirun`` in an ``sbatch`` script
    sees the batch step's ``SLURM_PROCID=0`` too): the first whose rank
    variable is set gives the rank and the world size (its own world size
    variable; a rank above 0 without one is an error, rather than a world of
    one rank). A *rank* given here takes the world size from the first world
    size variable set. With no rank given or set: rank 0 of 1, and a world
    size above 1 (given here or from a variable) is an error (every process
    would be rank 0). A world size is at most :data:`MAX_WORLD_SIZE`.

    Raises:
        ConfigurationError: a malformed value, a rank with no world size, a
            world size above 1 with no rank, or a rank from the environment
            not below the *world_size* given; naming the variable.

    Example:
        >>> env_rank({"SLURM_PROCID": "3", "SLURM_NTASKS": "4"})
        (3, 4)
        >>> env_rank({}, rank=None, world_size=None)
        (0, 1)
    """
    source: tuple[str, str] | None = None
    rank_unknown = False  # neither given nor set: rank 0, of a world of one
    given = isinstance(rank, int) and not isinstance(rank, bool)  # passed in code
    if rank is None:
        for rank_var, size_var in LAUNCHER_VARS:
            found = _env_int(environ, rank_var)
            if found is not None:
                if not 0 <= found < MAX_WORLD_SIZE:
                    raise ConfigurationError(
                        f"{rank_var}: {found} is not accepted; accepted: an integer from 0 "
                        f"to {MAX_WORLD_SIZE - 1}"
                    )
                rank, source = found, (rank_var, size_var)
                break
        else:
            if (
                isinstance(world_size, int)
                and not isinstance(world_size, bool)
                and 1 < world_size <= MAX_WORLD_SIZE
            ):
                raise _no_rank("init_worker(world_size)", world_size)
            rank, rank_unknown = 0, True
        if (
            source is not None
            and isinstance(world_size, int)
            and not isinstance(world_size, bool)
            and 1 <= world_size <= rank
        ):
            raise ConfigurationError(
                f"{source[0]}: {rank} is not accepted with init_worker(world_size="
                f"{world_size}); accepted: a rank from 0 to {world_size - 1} in "
                f"{source[0]}, or init_worker() without world_size (then read from "
                f"{source[1]})"
            )
    if world_size is None:
        size_vars = [source[1]] if source else [size for _, size in LAUNCHER_VARS]
        for size_var in size_vars:
            world_size = _env_int(environ, size_var)
            if world_size is not None:
                if not 1 <= world_size <= MAX_WORLD_SIZE:
                    raise ConfigurationError(
                        f"{size_var}: {world_size} is not accepted; accepted: an integer "
                        f"from 1 to {MAX_WORLD_SIZE} (as launchers set it)"
                    )
                if rank_unknown and world_size > 1:
                    raise _no_rank(size_var, world_size)
                if given and not 0 <= rank < world_size:
                    raise _size_var_contradicts(size_var, world_size, rank)
                if isinstance(rank, int) and not 0 <= rank < world_size:
                    raise ConfigurationError(
                        f"{size_var}: {world_size} is not accepted with rank {rank}; "
                        "accepted: an integer above the rank (as launchers set it)"
                    )
                break
        if world_size is None:
            if source is not None and rank > 0:
                raise ConfigurationError(
                    f"{source[1]}: missing while {source[0]}={rank} is set; accepted: the "
                    f"world size in {source[1]} (as launchers set it), or init_worker("
                    "world_size=...)"
                )
            if given and rank > 0:
                looked_for = ", ".join(s for _, s in LAUNCHER_VARS)
                raise ConfigurationError(
                    f"world_size: missing with init_worker(rank={rank}) (none of "
                    f"{looked_for} is set), so rank {rank} would be of a world of one; "
                    f"accepted: init_worker(config, rank={rank}, world_size=N), N the "
                    "number of processes (as multiprocessing's or mp.spawn's nprocs)"
                )
            world_size = 1
    return rank, world_size


def _size_var_contradicts(size_var: str, world_size: int, rank: int) -> ConfigurationError:
    """The error of a world size variable too small for the rank passed in code: the
    variable describes the launcher that started the job (a one-task ``sbatch`` has
    ``SLURM_NTASKS=1``), not the processes this one was started among."""
    return ConfigurationError(
        f"{size_var}: {world_size} (set by the launcher that started this job) is not "
        f"accepted with init_worker(rank={rank}): it counts no rank {rank}; accepted: "
        f"init_worker(config, rank={rank}, world_size=N), N the number of processes this "
        f"one was started among (as multiprocessing's or mp.spawn's nprocs)"
    )


def _no_rank(size_var: str, world_size: int) -> ConfigurationError:
    """The error of a world size above 1 (from *size_var*, or given in code) that no
    rank goes with."""
    looked_for = ", ".join(r for r, _ in LAUNCHER_VARS)
    if size_var.startswith("init_worker("):  # given in code
        rank_var, unset = "RANK", "no world_size (or 1)"
    else:
        rank_var = next(r for r, s in LAUNCHER_VARS if s == size_var)
        unset = f"{size_var} unset or 1"
    return ConfigurationError(
        f"{size_var}: {world_size} is not accepted without a rank (none of {looked_for} "
        f"is set): every process would be rank 0 of {world_size}; accepted: "
        f"init_worker(rank=...) (a process started by multiprocessing or mp.spawn gets "
        f"its rank from its parent), or {rank_var} set before init_worker(), or "
        f"{unset}"
    )


def env_local_rank_var(environ: Mapping[str, str]) -> tuple[str, int] | None:
    """The variable this process's rank within its node comes from, and its value.

    ``None``: unknown. See :func:`env_local_rank`.

    Raises:
        ConfigurationError: a malformed value; naming the variable.

    Example:
        >>> env_local_rank_var({"SLURM_LOCALID": "1", "LOCAL_RANK": "-1"})
        ('SLURM_LOCALID', 1)
    """
    for name in LOCAL_RANK_VARS:
        value = _env_int(environ, name)
        if value is None or value == -1:
            continue
        if not 0 <= value < MAX_WORLD_SIZE:
            raise ConfigurationError(
                f"{name}: {value} is not accepted; accepted: an integer from 0 to "
                f"{MAX_WORLD_SIZE - 1} (or -1: none)"
            )
        return name, value
    return None


def env_local_rank(environ: Mapping[str, str]) -> int | None:
    """This process's rank within its node, from :data:`LOCAL_RANK_VARS` (``None``: unknown).

    The variables are read innermost launcher first, as in :func:`env_rank`.
    ``-1``, which some launchers set outside a distributed run, means unknown.

    Raises:
        ConfigurationError: a malformed value; naming the variable.

    Example:
        >>> env_local_rank({"SLURM_LOCALID": "1"}), env_local_rank({"LOCAL_RANK": "-1"})
        (1, None)
    """
    found = env_local_rank_var(environ)
    return None if found is None else found[1]
