"""The pure core: spec models, task model, cell identity, taxonomy, records, statistics.

Nothing in this package imports pytest or docker, and nothing here does I/O beyond
reading the files it is given.
"""
