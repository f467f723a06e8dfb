"""Test script: rank 1 exits with status 3; the other ranks would wait ten minutes, then leave a
``survived-<rank>`` file: its absence shows that torchrun ended them (no clock involved)."""

import os
import sys
import time

rank = int(os.environ.get("RANK", "0"))
with open(os.path.join(os.environ["CARDWISE_RUN_DIR"], f"pid-{rank}"), "w") as f:
    f.write(str(os.getpid()))
if rank == int(os.environ.get("CRASH_RANK", "1")) or os.environ.get("WORLD_SIZE", "1") == "1":
    time.sleep(0.5)
    print(f"rank {rank}: crashing on purpose", file=sys.stderr, flush=True)
    sys.exit(3)
time.sleep(600)
with open(os.path.join(os.environ["CARDWISE_RUN_DIR"], f"survived-{rank}"), "w") as f:
    f.write("the launcher did not stop this rank")
