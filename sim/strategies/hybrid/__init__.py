"""A transformer's layout (`strategy.kind: hybrid`): tensor x pipeline x data, with
context and expert parallelism, interleaved chunks, micro-batches, ZeRO's stage 1 and
recomputation. What each device spends, part by part (`costs.py`), the pipeline's
schedule and its list scheduling (`schedule.py`), the event engine (`training.py`), and
the same model laid out once for every step (`engine.py`), its faster engine."""
