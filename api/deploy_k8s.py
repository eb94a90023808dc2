"""Kubernetes manifests for a stored plan: a Deployment (vLLM) per replica group, its Service, and an
autoscaler on the engine's running-requests metric around the planned replica count.
"""

from __future__ import annotations

from typing import Any

import yaml

from api.deploy import (
    GPU_RESOURCE,
    PORT,
    VLLM_IMAGE,
    DeployInputs,
    NotDeployableError,
    ReplicaGroup,
    draft_model_notes,
    drafts_with_a_model,
    engine_cli,
    is_disaggregated,
    replica_groups,
)
from api.deploy_engines import classes_note, priority_note, vllm_argv, vllm_env
from api.schemas.classes import is_classes_plan

#: HPA ceiling as a multiple of the planned replicas: a policy default (room for traffic to double before
#: the autoscaler stops adding replicas), not physics; edit maxReplicas to the budget.
MAX_REPLICAS_FACTOR = 2
RUNNING_METRIC = "vllm:num_requests_running"


def k8s_name(inputs: DeployInputs, index: int | None = None) -> str:
    """A DNS-1035 label (Service names need one): hr-<model>-<plan id prefix>[-<configuration>]."""
    model = "".join(c if c.isalnum() else "-" for c in inputs.model["slug"].lower()).strip("-")
    suffix = f"-{inputs.plan_id[:8]}" + ("" if index is None else f"-{index + 1}")
    return f"hr-{model[: 63 - 3 - len(suffix)].rstrip('-')}{suffix}"


def is_headline(inputs: DeployInputs, group: ReplicaGroup) -> bool:
    """Whether `group` is the configuration the plan's justification describes (its `plan` block)."""
    plan = inputs.response["plan"]
    return (group.gpu, group.tp, group.weights, group.kv_cache, group.batch_limit, group.chunk_tokens) == (
        plan["gpu"],
        plan["tp"],
        plan["precision"]["weights"],
        plan["precision"]["kv_cache"],
        plan["batch_limit"],
        plan["chunk_tokens"],
    )


def running_target(inputs: DeployInputs, group: ReplicaGroup) -> float | None:
    """The HPA's target for the average of vllm:num_requests_running over a group's pods.

    Derivation: the plan runs each replica at ρ = λ_r / μ_sat, i.e. at the per-replica rate
    λ_r = ρ·μ_sat it found meets every SLO. By Little's law the mean number of requests a replica
    holds at that rate is L = λ_r · W, with W the mean time a request spends in service
    (justification.queueing.littles_law: L = occupancy, λ = arrival_rate_rps, W = time_in_service_s).
    The planned wait is ~0, so these requests are running, not waiting: vllm:num_requests_running
    averages L when traffic is as planned. L lies below the slots a replica has
    (min(batch_limit, KV-cache limit)), which it reaches only at saturation (ρ → 1). Holding the
    average at L keeps each replica at the planned ρ: when traffic grows by k the average grows by
    about k and the HPA scales the replicas by about k. Only the configuration the justification
    describes has its W recorded; another row of a mixed fleet gets None (fixed replicas)."""
    if group.role != "mixed" or group.batch_limit is None or not is_headline(inputs, group):
        return None  # a pool's requests are not the plan's Little's-law occupancy: fixed replicas
    queueing = (inputs.response.get("justification") or {}).get("queueing") or {}
    occupancy = (queueing.get("littles_law") or {}).get("occupancy")
    return None if occupancy is None or occupancy <= 0 else min(float(occupancy), float(group.batch_limit))


def vllm_image(inputs: DeployInputs, vendor: str) -> str:
    """The vLLM image: the table's release, or for a plan drafting with a separate model on NVIDIA the release
    engine_cli.json names for it (v0.11's V1 engine has no draft-model speculation)."""
    if vendor == "nvidia" and drafts_with_a_model(inputs):
        image: str = engine_cli()["vllm"]["draft_model"]["image"]
        return image
    return VLLM_IMAGE[vendor]


def deployment(inputs: DeployInputs, group: ReplicaGroup, index: int, app: str) -> dict[str, Any]:
    """A Deployment of `group.replicas` vLLM servers, each holding `tp × pp` GPUs of the GPU's vendor.
    Each replica is one pod on one node (`render` refuses a replica that spans nodes: it would want a
    LeaderWorkerSet)."""
    vendor = inputs.gpus[group.gpu]["vendor"]
    if vendor not in GPU_RESOURCE:
        raise NotDeployableError(f"no Kubernetes GPU resource known for vendor {vendor!r} (GPU {group.gpu!r})")
    name = k8s_name(inputs, index)
    argv = vllm_argv(inputs, group)
    labels = {"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": app}
    if group.role != "mixed":
        labels["app.kubernetes.io/component"] = group.role
    annotations = {"headroom/plan": inputs.plan_id}
    if group.pool is not None:  # annotations, not labels: a class name may not be a valid label value
        annotations |= {"headroom/pool": group.pool, "headroom/classes": class_priorities(group)}
    container: dict[str, Any] = {
        "name": "vllm",
        "image": vllm_image(inputs, vendor),
        "command": argv[:2],
        "args": argv[2:],
        "ports": [{"name": "http", "containerPort": PORT}],
        "resources": {"limits": {GPU_RESOURCE[vendor]: group.gpus_per_replica}},
        "readinessProbe": {"httpGet": {"path": "/health", "port": PORT}, "periodSeconds": 10},
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],  # NCCL between the tp workers
    }
    env: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in vllm_env(inputs, group).items()]
    if group.role != "mixed":  # NIXL's handshake: the decoder reaches the prefiller at its pod address
        env.append({"name": "VLLM_NIXL_SIDE_CHANNEL_HOST", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}})
    if env:
        container["env"] = env
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "spec": {
            "replicas": group.replicas,
            "selector": {"matchLabels": {"app.kubernetes.io/name": name}},
            "template": {
                "metadata": {"labels": dict(labels)},  # a copy: YAML would write an anchor for a shared dict
                "spec": {"containers": [container], "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]},
            },
        },
    }


def pool_service(inputs: DeployInputs, group: ReplicaGroup, index: int) -> dict[str, Any]:
    """A headless Service per pool of a disaggregated plan: the P/D router finds each pool's pods by its DNS
    name; clients call the router, so no Service spans both pools."""
    name = k8s_name(inputs, index)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "annotations": {"headroom/plan": inputs.plan_id, "headroom/role": group.role}},
        "spec": {
            "clusterIP": "None",
            "selector": {"app.kubernetes.io/name": name},
            "ports": [{"name": "http", "port": PORT, "targetPort": PORT, "protocol": "TCP"}],
        },
    }


def class_priorities(group: ReplicaGroup) -> str:
    """A class pool's classes and their priorities, `chat=0,summarise=1`."""
    return ",".join(f"{name}={value}" for name, value in group.classes)


def class_pool_service(inputs: DeployInputs, group: ReplicaGroup, index: int) -> dict[str, Any]:
    """A Service per pool of a class plan: clients send each class's requests to its pool's Service."""
    name = k8s_name(inputs, index)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": name,
            "annotations": {
                "headroom/plan": inputs.plan_id,
                "headroom/pool": group.pool or "",
                "headroom/classes": class_priorities(group),
            },
        },
        "spec": {
            "selector": {"app.kubernetes.io/name": name},
            "ports": [{"name": "http", "port": PORT, "targetPort": PORT, "protocol": "TCP"}],
        },
    }


def service(inputs: DeployInputs, app: str) -> dict[str, Any]:
    """One Service in front of every configuration's pods (the fleet serves one model)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": app, "annotations": {"headroom/plan": inputs.plan_id}},
        "spec": {
            "selector": {"app.kubernetes.io/part-of": app},
            "ports": [{"name": "http", "port": PORT, "targetPort": PORT, "protocol": "TCP"}],
        },
    }


def autoscaler(inputs: DeployInputs, group: ReplicaGroup, index: int, target: float) -> dict[str, Any]:
    """An autoscaling/v2 HPA on the Pods metric vllm:num_requests_running (served to the HPA by a
    custom-metrics adapter such as prometheus-adapter), target average `target` (see running_target)."""
    name = k8s_name(inputs, index)
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name, "annotations": {"headroom/plan": inputs.plan_id}},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "minReplicas": group.replicas,
            "maxReplicas": MAX_REPLICAS_FACTOR * group.replicas,
            "metrics": [
                {
                    "type": "Pods",
                    "pods": {
                        "metric": {"name": RUNNING_METRIC},
                        "target": {"type": "AverageValue", "averageValue": f"{max(1, round(target * 1000))}m"},
                    },
                }
            ],
        },
    }


def manifests(inputs: DeployInputs) -> list[dict[str, Any]]:
    """Deployment (+ HPA where the plan records W) per configuration, then the Service."""
    app = k8s_name(inputs)
    documents: list[dict[str, Any]] = []
    if is_classes_plan(inputs.response):  # no HPA: a pool's requests are not one Little's-law occupancy
        for index, group in enumerate(replica_groups(inputs.response)):
            documents += [deployment(inputs, group, index, app), class_pool_service(inputs, group, index)]
        return documents
    if is_disaggregated(inputs.response):
        for index, group in enumerate(replica_groups(inputs.response)):
            documents += [deployment(inputs, group, index, app), pool_service(inputs, group, index)]
        return documents
    for index, group in enumerate(replica_groups(inputs.response)):
        documents.append(deployment(inputs, group, index, app))
        target = running_target(inputs, group)
        if target is not None:
            documents.append(autoscaler(inputs, group, index, target))
    return [*documents, service(inputs, app)]


def render_k8s(inputs: DeployInputs) -> str:
    """The manifests as one multi-document YAML stream, headed by what produced it."""
    header = (
        f"# Headroom plan {inputs.plan_id}: vLLM on Kubernetes ({engine_cli()['vllm']['release']}).\n"
        f"# HPA target: mean requests running per replica at the planned rate (Little's law, L = lambda*W).\n"
    )
    if is_disaggregated(inputs.response):
        pd = engine_cli()["vllm"]["disaggregation"]
        header = (
            f"# Headroom plan {inputs.plan_id}: disaggregated vLLM on Kubernetes ({engine_cli()['vllm']['release']}), "
            f"a Deployment and a headless Service per pool.\n"
            f"# P/D flags as documented at {pd['source'].split(' ')[0]}; the image must carry "
            f"{pd['requires']}\n"
            f"# Clients call a prefill/decode router in front of the two Services ({pd['router_note']}); "
            f"no HPA: pool replicas are fixed as planned.\n"
        )
    if is_classes_plan(inputs.response):
        groups = replica_groups(inputs.response)
        header = (
            f"# Headroom plan {inputs.plan_id}: vLLM on Kubernetes ({engine_cli()['vllm']['release']}), "
            f"a Deployment and a Service per pool.\n{classes_note(inputs)}; no HPA: pool replicas are fixed as planned.\n"
        )
        notes = [note for note in (priority_note(g) for g in groups) if note is not None]
        if notes:
            source = engine_cli()["vllm"]["priority_scheduling"]["source"].split(" ")[0]
            header += f"# priority scheduling as documented at {source}\n" + "".join(f"{note}\n" for note in notes)
    header += "".join(f"{note}\n" for note in draft_model_notes(inputs, "vllm"))
    return header + yaml.safe_dump_all(manifests(inputs), sort_keys=False)
