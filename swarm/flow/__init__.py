"""The routing engine: pure code (no I/O, no clocks, no hivemind) shared by peers, sim and tests."""
