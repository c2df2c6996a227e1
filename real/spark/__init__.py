"""run-real on Spark (`real.engine: spark`): a job as one barrier stage of Spark tasks and
independent trials as Spark tasks (`stage.py`, the driver's side), what each task runs
(`task.py`), and the files the tasks and the driver share (`files.py`)."""
