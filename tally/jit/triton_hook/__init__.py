"""The folder tally-run puts on a job's PYTHONPATH so that Triton can import
tally_triton_cache (named in TRITON_CACHE_MANAGER); see that module."""
