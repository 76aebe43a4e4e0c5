"""The GPU partition planner behind `tally-plan`: how many GPUs a fleet of
inference services needs, cut into MIG instances or tally SM shares, and
which service runs in each part.

Files, in the order a plan flows through them:
- gpus.py, layouts.py: GPU types, NVIDIA's MIG profiles and placement rules,
  SM shares; every legal layout enumerated from the rules.
- profiles.py, services.py, files.py, errors.py: the input (profile tables,
  services) and its errors.
- problem.py: the numbers every algorithm shares (throughput per service and
  partition size within the SLO, layouts as part counts).
- colgen.py, patterns.py: column generation, the LP lower bounds.
- part_counts.py, optimizer.py: the integer master (HiGHS) and the optimizer.
- greedy.py, baselines.py: MIG-serving's greedy, whole GPUs, all-smallest.
- result.py, deployment.py, formats.py, plan.py: results, deployments and
  their outputs (table, JSON, mig-parted, tally-run lines).
- reconfigure.py, reconfigure_steps.py: moving a deployment to new SLOs.
"""
