"""graphc: static-graph compiler."""
