"""How a pytest process runs its cells: the strategies (serial, pool, xdist), the cell pool, the look-ahead."""
