"""`gtscale bench <name>`: one module per benchmark, each parsing its options for gtscale/bench/<name>.py."""
