"""Live routing: the flow protocol's tables turned into next-hop choices for each microbatch."""
