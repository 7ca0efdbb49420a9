"""A stage server: holds its blocks, runs forward and backward for microbatches, steps with replicas."""
