"""Placement of best-effort jobs next to online jobs, as MuxFlow's global manager
does it: a profile per job (profile.py), pairs measured on tally's sim backend
(pairs.py), a speed predictor trained on them (predictor.py) and a scheduler that
matches jobs to GPUs by maximum-weight bipartite matching (matching.py). The jobs
the benchmark and tests use are in catalog.py. Needs the `cluster` extra
(scikit-learn, scipy)."""
