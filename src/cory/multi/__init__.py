"""Several agents: who sees whose answer, how rewards mix, who plays which role."""
