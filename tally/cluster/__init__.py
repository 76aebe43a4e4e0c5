"""tally's cluster layer: one module per feature (limits, health, metrics, mobility, placement, k8s, planner)."""
