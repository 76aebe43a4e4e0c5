"""`tally-bench gpu-check`: one prepared command that turns a borrowed GPU machine
into every GPU figure tally lacks, and its rehearsal on the CPU emulator.

plan.py lists the steps in order of value with their time budgets; steps_*.py
say what each step runs and which figures it reads back; runner.py runs them,
writing each step's result as soon as it ends; report.py writes the results
file; install.py is the rehearsal's offline install; cli.py the command line."""
