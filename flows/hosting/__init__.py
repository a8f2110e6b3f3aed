"""What hosts the flows: the Prefect server, the Dask cluster, `opbyop serve`, and the processes tied to a CLI run."""
