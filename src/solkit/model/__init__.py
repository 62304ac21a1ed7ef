"""solkit.model: the SOL of every operator of a user's own model (fwd, fwd_bwd, train_step)."""
