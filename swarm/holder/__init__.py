"""A data holder: feeds microbatches into the ring, computes the loss, ends iterations."""
