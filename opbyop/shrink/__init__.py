"""The failing shape boundary: where an op starts failing, by dimension and element type.

result.py holds the records (light: the store reads them); search.py the Shrinker that compiles
variants (it imports MLIR)."""
