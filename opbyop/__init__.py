"""opbyop: op-by-op bring-up analysis for ML compilers targeting Tenstorrent chips.

The library is importable without Prefect; flows/ and tasks/ build on it, storage/ reads its records.
"""

__version__ = "0.1.0"
