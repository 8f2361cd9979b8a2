"""Dataset preparation, offline: sources → featurize → structure → shards (`gtscale shard`)."""
