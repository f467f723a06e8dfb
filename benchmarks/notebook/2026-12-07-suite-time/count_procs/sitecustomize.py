# Used by count_procs.sh (see there); a no-op unless $SUITE_PROC_LOG is set.
# Counts every Python process the tests start (argv at start; CPU at a clean exit) into $SUITE_PROC_LOG.
import os, sys, atexit, resource, json
_log = os.environ.get("SUITE_PROC_LOG")
if _log:
    _test = os.environ.get("PYTEST_CURRENT_TEST", "")
    def _write(kind, cpu=None):
        try:
            with open(_log, "a") as f:
                f.write(json.dumps({"kind": kind, "pid": os.getpid(), "ppid": os.getppid(), "argv": sys.argv[:8],
                                    "orig": list(getattr(sys, "orig_argv", []))[:12], "test": _test, "cpu": cpu}) + "\n")
        except Exception:
            pass
    _write("start")
    def _done():
        u = resource.getrusage(resource.RUSAGE_SELF)
        _write("end", round(u.ru_utime + u.ru_stime, 2))
    atexit.register(_done)
