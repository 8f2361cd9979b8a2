"""The shard format alone: record schema, .npy and tar encoding, shard reading and checks, manifests.

Imported by `gtscale.prep` (which writes shards) and `gtscale.loader` (which reads them); imports
neither."""
