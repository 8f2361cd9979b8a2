"""The training loader: shards → split by rank and worker → shuffle → bucketed, collated `Batch`es."""
