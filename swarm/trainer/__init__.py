"""Training loops: the single-process baseline the swarm must equal, and the shared optimizer setup."""
