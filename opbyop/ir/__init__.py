"""StableHLO modules: parse, rewrite, split into single-op modules, sign, dedupe."""
