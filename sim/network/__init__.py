"""The network, behind one narrow interface (STYLE.md rule 4): where every endpoint sits
and which links a message crosses (`topology.py`), the analytical and flow-level back ends
(`backends.py`, max-min fair sharing with its compiled fill in `flowkernel.py`), the
collectives as straight-line code over them (`collectives.py`), and the arrays without
reference counts the compiled kernels share (`unmanaged.py`)."""
