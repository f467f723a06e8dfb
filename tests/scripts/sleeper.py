"""Test script: every rank starts a grandchild, records both pids, then sleeps until killed."""

import os
import subprocess
import sys
import time

rank = os.environ.get("RANK", "0")
run_dir = os.environ["CARDWISE_RUN_DIR"]
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
with open(os.path.join(run_dir, f"pids-{rank}.tmp"), "w") as f:
    f.write(f"{os.getpid()} {child.pid}")
os.rename(os.path.join(run_dir, f"pids-{rank}.tmp"), os.path.join(run_dir, f"pids-{rank}"))
print(f"rank {rank} sleeping", flush=True)
time.sleep(300)
