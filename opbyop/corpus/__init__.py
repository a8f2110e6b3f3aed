"""The single-op corpus: StableHLO ops x dtypes x shapes x forms, written as standalone modules,
run through the real pipeline, and the simulator's coverage of what the compiler emits for them."""
