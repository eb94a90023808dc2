"""The deployable output of a stored plan for one target (api/deploy.py TARGETS): the engine's
launch command (api/deploy_engines.py) or the Kubernetes manifests (api/deploy_k8s.py), after
refusing what the target cannot express (422: NotDeployableError).
"""

from __future__ import annotations

from api.deploy import (
    DISAGGREGATED_TARGETS,
    ENGINES,
    PRIORITY_TARGETS,
    TARGETS,
    DeployInputs,
    NotDeployableError,
    is_disaggregated,
    nodes_per_replica,
    replica_groups,
)
from api.deploy_engines import render_engine
from api.deploy_k8s import render_k8s


def render(inputs: DeployInputs, target: str) -> tuple[str, str]:
    """(body, media type) of the deployable output for `target` (one of TARGETS)."""
    if is_disaggregated(inputs.response) and target not in DISAGGREGATED_TARGETS:
        raise NotDeployableError(
            f"target {target!r} cannot express a disaggregated plan's prefill and decode pools here; "
            f"targets that can: {', '.join(DISAGGREGATED_TARGETS)}"
        )
    priority = [g.pool for g in replica_groups(inputs.response) if g.scheduling == "priority"]
    if priority and target not in PRIORITY_TARGETS:
        raise NotDeployableError(
            f"target {target!r} has no cited priority scheduling for the class plan's priority pool "
            f"{', '.join(p or '' for p in priority)}; targets that render it: {', '.join(PRIORITY_TARGETS)}"
        )
    if target == "k8s":
        spanning = [g for g in replica_groups(inputs.response) if nodes_per_replica(inputs, g) > 1]
        if spanning:
            g = spanning[0]
            raise NotDeployableError(
                f"a replica of tp {g.tp} x pp {g.pp} = {g.gpus_per_replica} {g.gpu} GPUs spans "
                f"{nodes_per_replica(inputs, g)} nodes; the k8s target renders one pod per replica (a multi-node "
                "replica needs a LeaderWorkerSet, not rendered); targets that render it: vllm, sglang, trt-llm"
            )
        return render_k8s(inputs), "application/yaml"
    if target in ENGINES:
        return render_engine(inputs, target), "text/plain"
    raise NotDeployableError(f"unknown target {target!r}; targets are {', '.join(TARGETS)}")
