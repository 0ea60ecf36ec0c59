"""Cells on a Dask distributed cluster (--maka-cluster); imports Dask only when a cluster is named."""
