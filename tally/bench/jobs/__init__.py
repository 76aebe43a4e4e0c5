"""Job programs of `tally-bench colocate --backend cuda|emulator` (catalog:
tally/bench/process_jobs.py): CUDA C++ sources compiled at run time, and
PyTorch scripts run as `python -m tally.bench.jobs.torch_serve|torch_train`."""
