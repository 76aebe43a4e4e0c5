"""The PTX emulator behind the `emulator` device backend (tally/backends/emulator.py).

Python lowers each kernel of the PTX IR to a compact program (lowering.py,
with one lowerer per instruction family in lower_*.py) that the C++
interpreter in csrc/src/emulator/ runs with the GIL released: per-warp
execution of 32 lanes over a pre-decoded instruction array. module.py loads
modules (globals, lazy lowering), streams.py runs streams and events.
"""
