"""The `sim` device backend: a virtual clock and a kernel cost model (backend.py
has the whole story).

- backend.py: SimBackend, the DeviceBackend; streams, modules, events
- ops.py: what the streams execute, one class per operation kind
- device.py: the SM model (waves of thread blocks, priorities, PTB workers)
- loop.py: the discrete-event loop and the scheduler's clock on it
- memory.py: device memory that really holds bytes
- model.py: GPU presets and kernel costs
- objects.py: functions, modules, streams and events of the sim
- ptx.py: kernel entries and globals read from real PTX
- variants.py: the modeled sliced/PTB kernels the executor uses on the sim
"""
from tally.backends.sim.backend import SimBackend
from tally.backends.sim.objects import KernelEffect, SimFunction, sim_module_source

__all__ = ["KernelEffect", "SimBackend", "SimFunction", "sim_module_source"]
