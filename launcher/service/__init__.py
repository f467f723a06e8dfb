"""The queue service: ``advise submit`` queues runs in the run store, ``advise serve`` runs them.

There is no server socket and no message channel: the SQLite run store (WAL) *is* the queue.
``submit`` writes a record (status ``queued``) plus ``submission.json`` in its run directory
(what to run and how: target, run options, devices and memory needed), ``cancel`` changes a
record's status, and the service polls the store, places queued runs on free devices
(``launcher.placement``) and executes each in a thread through ``launcher.runner.execute`` (OOM
retry, signals, process-group cleanup all come from there).

Ownership. A run belongs to the service when its run directory holds ``submission.json``;
records of foreground ``advise launch`` runs never do, and the service leaves them alone.

One service per home: ``home/service.lock`` is held with ``flock`` for the service's life (the
kernel drops it when the process dies, even by SIGKILL; the descriptor is close-on-exec, so
runs never inherit it). A second ``advise serve`` exits 2 naming the holder's pid.

Process identity. Every process of a service run carries ``CARDWISE_SERVICE_HOME=<home>``
and ``CARDWISE_RUN_DIR=<run dir>`` in its environment (ranks and their children inherit them),
so the service finds a run's processes whatever session torchrun put them in, and a reused pid
is never mistaken for a run (its environment differs). A recorded ``pgid`` is signalled only
when its leader is verified the same way, or, if its environment cannot be read, was created
within seconds of the run's last attempt (the process start time).

Crash policy (SIGKILL of the service, reboot, OOM killer). Runs are not stopped at the moment
the service dies: its children live on (re-parented) until the service starts again. The first
thing a starting service does, holding the lock and before it places anything, is *reconcile*:

- every process of this home's service runs still alive is stopped (SIGTERM, then SIGKILL after
  ``grace_s``) and waited for: a run is never executed by two process trees at once;
- a record still ``running`` is requeued at the front of the queue (it keeps its submission
  time), or marked ``failed`` with the reason once the service has started it ``max_starts``
  times (a run that keeps coming back while the service dies is not retried forever);
- ``queued`` records stay queued; terminal records only lose stale pids.

Adopting live runs instead was rejected: the new service is not their parent, so it could not
learn their exit status, and "succeeded" must mean what the launcher saw. Under systemd
(``docs/cardwise.service``) the unit's cgroup is killed when the service dies, so orphans end at
once; reconcile covers the other ways of running it.

Graceful stop (SIGTERM, Ctrl-C): the service takes no new work, moves each running run back to
``queued`` (a restart runs it again from its newest good checkpoint: see ``Service._resume_point``),
asks its ranks to stop at the next step boundary with a checkpoint of that step
(``launcher.graceful_stop``; within ``--grace``, else SIGTERM/SIGKILL through the launcher and the
older checkpoint is used) and exits 0. A second signal skips the grace.
``service_attempts`` counts every start, graceful stops included; the ``max_starts`` limit is
applied only when reconcile finds a run interrupted by a crash. When a requeued run starts again its previous files
(``attempt-*/``, ``metrics.jsonl``) move to ``interrupted-<n>/`` in its run directory; its record keeps
the earlier starts' attempts (``Attempt.start``, ``last_step``; ``RunRecord.current_attempt`` is the newest
of this start), so ``advise runs``/``show`` describe every execution (issue 40).

Safety: local use only (no listener); the home, run directories and lock are owner-only (the
service runs with umask 077); commands are argv lists rebuilt from the validated plan and
submission, never shell strings.
"""

# The package's public names, as ``launcher.service`` had them when it was one module.
from launcher.service.lock import LOCK_NAME, ServiceLock, service_pid
from launcher.service.loop import DEFAULT_POLL_S, ActiveRun, Service, gpu_ids_from_env, log
from launcher.service.reconcile import (DEFAULT_GRACE_S, DEFAULT_MAX_STARTS, ENV_SERVICE_HOME, ReconcileReport, cancel,
                                        reconcile, run_processes)
from launcher.service.submission import (SUBMISSION_NAME, Submission, is_service_run, load_submission,
                                         memory_need_gib, submission_path, submit)

__all__ = ["LOCK_NAME", "ServiceLock", "service_pid", "DEFAULT_POLL_S", "ActiveRun", "Service", "gpu_ids_from_env",
           "log", "DEFAULT_GRACE_S", "DEFAULT_MAX_STARTS", "ENV_SERVICE_HOME", "ReconcileReport", "cancel",
           "reconcile", "run_processes", "SUBMISSION_NAME", "Submission", "is_service_run", "load_submission",
           "memory_need_gib", "submission_path", "submit"]
