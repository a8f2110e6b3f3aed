"""One run engine for every front end: a RunPlan built from one AnalysisConfig, carried out in steps
(prepare -> ops -> whole models -> collect) by an Executor (the CLI's warm local worker, or the flow's
fan-out on Dask), its results handed to a ResultSink (the store, supplied by the package that may
import it)."""
