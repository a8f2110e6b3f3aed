"""Prefect tasks: thin wrappers around the opbyop library (and storage/)."""
