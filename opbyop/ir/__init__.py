"""StableHLO modules: parse, normalise, split into single-op modules, sign, dedupe."""
