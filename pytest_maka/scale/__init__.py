"""Scale: many cells at once per pytest process (--maka-concurrency), with or without xdist."""
