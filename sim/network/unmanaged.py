"""Arrays without reference counts, for the compiled parameter-server engine.

numba counts references to every array it hands to a function, or slices into a view, with
an atomic increment and decrement on the array's memory record; in the engine's loop those
were most of its time. `unmanaged_all(t)` is the tuple `t` with each array in it without
that record (as an array made by `numba.carray` over its data is): handing it around and
slicing it counts nothing. It owns nothing either, so the array itself must stay alive for
as long as the unmanaged one is used: `sim/strategies/parameter_server/kernel/loop.py` keeps
every array it wraps.

Even so, each count is a call into the runtime that tests a null pointer. The network's
functions, which allocate nothing (`sim/strategies/parameter_server/kernel/queues.py`, most
of `sim/strategies/parameter_server/kernel/net.py`, `sim.network.flowkernel.fill`), are
compiled without the runtime (`bare`): they count nothing at all.

Every module with compiled functions imports this one first, which drops the compiled
code numba cached for any of them once one of their sources has changed
(`drop_stale_caches`).
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TypeVar

from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic


def _without_blas_probe() -> None:
    """numba's first compile or cache load imports `numba.np.arraymath`, which imports
    scipy.linalg (0.09 s here, a twentieth of a small run) only to choose BLAS or a loop
    for its inner products. No kernel here takes an inner product, so where scipy's BLAS
    is not loaded yet the probe is told it is absent; `np.dot` and `np.linalg`, should
    anything compile them, import scipy themselves when they do."""
    name = "scipy.linalg.cython_blas"
    if "numba.np.arraymath" in sys.modules or name in sys.modules:
        return
    sys.modules[name] = None  # type: ignore[assignment]  # importing it fails
    try:
        import numba.np.arraymath  # noqa: F401
    finally:
        del sys.modules[name]


_without_blas_probe()

#: the files of compiled functions: here, the flow network's kernel and the compiled
#: parameter-server engine
_SIM = Path(__file__).resolve().parent.parent
COMPILED_SOURCES = (
    _SIM / "network" / "unmanaged.py",
    _SIM / "network" / "flowkernel.py",
    *sorted((_SIM / "strategies" / "parameter_server" / "kernel").glob("*.py")),
)
#: beside numba's cache files, the digest of the sources they were compiled from
STAMP = "numba-sources.sha256"


def drop_stale_caches(sources: Iterable[Path]) -> bool:
    """numba keys a cached function by its own file alone (its time and size), not by
    the files of the functions compiled into it: a change to `queues.py` would leave
    the engine's loop, cached beside `loop.py`, running the old queues. So where the
    sources' digest differs from the one written beside their caches (`__pycache__/`,
    numba's place for them), the caches there are dropped and the digest written;
    returns whether any were. A folder that cannot be written is left alone (numba
    caches elsewhere then, and an install writes every file anew)."""
    sources = sorted(sources)
    digest = hashlib.sha256()
    for path in sources:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    hexdigest = digest.hexdigest()
    dropped = False
    for folder in sorted({path.parent / "__pycache__" for path in sources}):
        stamp = folder / STAMP
        try:
            if stamp.read_text() == hexdigest:
                continue
        except OSError:
            pass
        try:
            for cached in [*folder.glob("*.nbi"), *folder.glob("*.nbc")]:
                cached.unlink(missing_ok=True)
                dropped = True
            folder.mkdir(exist_ok=True)
            partial = folder / f"{STAMP}.{os.getpid()}"
            partial.write_text(hexdigest)
            partial.replace(stamp)
        except OSError:
            continue
    return dropped


drop_stale_caches(COMPILED_SOURCES)

F = TypeVar("F")
#: numba's option for a function compiled without its runtime, in a dict: the typing of
#: `njit` does not list it
_NO_RUNTIME: dict[str, Any] = {"_nrt": False}


def bare(function: F) -> F:
    """`function` compiled (cached on disk) without numba's runtime: it counts no
    references, and may neither allocate nor return a view."""
    return njit(cache=True, **_NO_RUNTIME)(function)  # type: ignore[no-any-return]


@bare
def stable_sort(rows, row, scratch, n, keys):  # type: ignore[no-untyped-def]
    """rows[row, :n] in order of keys[value], ties kept in their order: bottom-up merges
    through rows[scratch], allocating nothing."""
    src, dst = row, scratch
    width = 1
    while width < n:
        for lo in range(0, n, 2 * width):
            mid, hi = min(lo + width, n), min(lo + 2 * width, n)
            i, j = lo, mid
            for k in range(lo, hi):
                if i < mid and (j >= hi or keys[rows[src, i]] <= keys[rows[src, j]]):
                    rows[dst, k] = rows[src, i]
                    i += 1
                else:
                    rows[dst, k] = rows[src, j]
                    j += 1
        src, dst = dst, src
        width *= 2
    if src != row:
        for k in range(n):
            rows[row, k] = rows[src, k]


def _loose(context, builder, arr, value):  # type: ignore[no-untyped-def]
    """The array `value` of type `arr` with no memory record and no parent object."""
    source = context.make_array(arr)(context, builder, value=value)
    out = context.make_array(arr)(context, builder)
    out.meminfo = cgutils.get_null_value(source.meminfo.type)
    out.parent = cgutils.get_null_value(source.parent.type)
    out.nitems = source.nitems
    out.itemsize = source.itemsize
    out.data = source.data
    out.shape = source.shape
    out.strides = source.strides
    return out._getvalue()


@intrinsic
def unmanaged_all(typingctx, items):  # type: ignore[no-untyped-def]
    """The tuple `items` with each of its arrays unmanaged (anything else as it is)."""
    if not isinstance(items, types.BaseTuple):
        return None

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        values = []
        for i, ty in enumerate(items.types):
            value = builder.extract_value(args[0], i)
            if isinstance(ty, types.Array):
                values.append(_loose(context, builder, ty, value))
            else:  # a new reference, as the tuple returned owns its members
                context.nrt.incref(builder, ty, value)
                values.append(value)
        return context.make_tuple(builder, items, values)

    return items(items), codegen
