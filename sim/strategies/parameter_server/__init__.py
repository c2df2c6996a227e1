"""Parameter servers, composed of parts (STYLE.md rule 23): the server group
(`servers.py`) and the shards it deals variables to (`shards.py`), what one step moves
(`dataflow.py`), synchronous rounds (`sync.py`), asynchronous updates (`asynchronous.py`),
host aggregation (`hosts.py`, `asynchronous_hosts.py`), joined by `training.py`; and the
compiled engine beside them: `lockstep.py` prepares its arrays, `spans.py` runs
synchronous jobs in spans of steps, `kernel/` is its numba loop and handlers, and
`replica.py` times large jobs as copies of a part of them (bounded)."""
