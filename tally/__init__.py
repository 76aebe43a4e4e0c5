"""tally: transparent GPU sharing for deep-learning clusters."""
__version__ = "0.1.0"
