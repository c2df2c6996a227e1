"""`trainscale plan`: which cluster, strategy and batch of a plan's options reach its target
fastest, cheapest or with the least energy, with intervals earned from validation.

Above the simulator (it asks `sim` for predictions and never imports `real`): the plan
file is read by `space`, candidates are picked and simulated by `search`, judged by
`evaluate`, ranked by `rank`, and written by `write`; `cli` is the command.
"""
