"""What a run leaves on disk and how it is read back: the run directory's layout and its resume record
(:mod:`~envengineer.store.rundir`), tolerant readers of a partial run (:mod:`~envengineer.store.records`),
generator config files (:mod:`~envengineer.store.configs`) and the frozen benchmark sets
(:mod:`~envengineer.store.benchmarks`)."""
