"""The compiled engine of parameter servers (numba): its loop (`loop.py`), the calendar
(`calendar.py`), the network's links as processor-sharing queues (`net.py`, `queues.py`,
`budget.py`, `flows.py`), transfers (`transfers.py`), workers (`workers.py`, `steps.py`)
and synchronous rounds (`rounds.py`). Importing it compiles nothing."""
