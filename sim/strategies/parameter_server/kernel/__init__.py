"""The compiled engine of parameter servers (numba): its loop (`loop.py`), the calendar
(`calendar.py`), the network's links as processor-sharing queues (`net.py`, `queues.py`,
`budget.py`, `flows.py`), transfers (`transfers.py`), workers (`workers.py`, `steps.py`),
synchronous rounds (`rounds.py`) and what a host does inside with host aggregation
(`hosts.py`). Importing it compiles nothing."""
