"""The golden reference: XLA:CPU on the original StableHLO op, deterministic inputs, comparison."""
