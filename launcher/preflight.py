"""What this machine must have before a launch of a plan starts, checked before any record or process.

Host RAM and cores for CPU ranks (``launcher.host_fit``), what the plan's memory compromises
need (``launcher.compromises.checks``: packages, combinations, host RAM for offload) and the shared
memory its DataLoader workers need (``launcher.shm_check``: a container's 64 MB /dev/shm kills them). One check for
``advise launch`` (and ``--resume``), ``advise submit`` and the wizard's Launch screen, so that all
three refuse the same plans.
"""

from __future__ import annotations

from advisor.plan import Plan


def check_here(plan: Plan, *, force: bool = False, shm=None) -> str | None:
    """Refuse (``UserError``) what this machine cannot run; None when it can.

    ``shm``: the shared memory the DataLoader workers get (``launcher.shm_check.ShmSpace``); None reads /dev/shm.

    ``force`` (``--force``) lets through one thing only: CPU ranks whose estimated host RAM is more
    than is usable here; the return is then why the plan is forced (for ``Plan.forced``). Never
    forced: more processes than cores can serve, what the compromises need."""
    from launcher.accelerate_config import distributed_type
    from launcher.compromises.checks import check_compromises

    from launcher.shm_check import check_shm, shm_space

    distributed_type(plan)  # what Accelerate cannot launch (FSDP on CPU, --strategy single on 2 ranks): before the record
    check_compromises(plan)
    check_shm(plan, shm if shm is not None else shm_space())  # workers' batches in /dev/shm (never forced)
    if not plan.cpu:
        return None
    from launcher.host_fit import check_host_fit, host_need, max_processes

    if force and plan.processes_per_node <= max_processes():
        need = host_need(plan)
        if need.total_gib > need.usable_gib:
            return (f"the estimate says {need.model} needs ~{need.total_gib:.1f} GiB of host RAM for {need.ranks} "
                    f"CPU process(es), more than the {need.usable_gib:.1f} GiB usable here")
    check_host_fit(plan)
    return None
