"""What the store's results become for other tools: OpTest JSON, the ops perf CSV (tt-perf-report),
Model Explorer's node data and server, and the HTML report."""
