"""The batch optimizers (L-BFGS, preconditioned CG), their vector algebra, feature
standardization, and the batch phase that runs them over every worker's shard."""
