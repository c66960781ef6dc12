"""Goodput under failures: a real PyTorch training job, killed on a seeded schedule, measured end to end
for every contender: ideal, torch.save, DCP save, DCP async_save, ckpt's store and ckpt's tiers.

    python -m ckpt.goodput [--quick] [--state-size 1GiB] [--world 4] [--nodes 2] [--steps N]
                           [--mtbf S | --failures N] [--mix crash=0.6,node=0.3,power=0.1]
                           [--interval STEPS] [--json FILE|-] [--plot FILE.png]

1. The ideal run (no checkpoints, no failures) gives the time every other run is measured by, and the
   step time. The MTBF is scaled so that the ideal run's time would see ``--failures`` failures.
2. Each contender is calibrated: a failure-free launch that saves at every step and waits for each
   save (its stall and background time), and launches that only resume (restart and load time; the
   tiers from memory and, after wiping it, from the persistent store).
3. ckpt-plan's model (``ckpt.plan``, include/ckpt/store/planner.hpp) turns those costs and the MTBF into the
   contender's optimum interval (``--interval`` fixes one for all) and its predicted waste.
4. The job runs to its last step under the seeded schedule of failures (the same for every
   contender; ``supervisor.py``), restarted after each as an elastic agent would.
5. Reported per contender: goodput (ideal time / time), the prediction, failures, steps recomputed,
   time blocked by saves, restart and load time per recovery, and whether the final parameters and
   optimizer state are bit-identical to the ideal run's.

The job and the contenders are in ``job.py``; the metrics, table and plot in ``report.py``.
"""
