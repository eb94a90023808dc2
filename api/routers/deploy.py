"""`GET /v1/plans/{plan_id}/deploy?target=vllm|sglang|trt-llm|k8s` (deploy_plan): a stored plan as
the engine's launch command(s) or as Kubernetes manifests. The rendering is pure
(api/deploy_render.py); this reads the plan and the catalog records it names."""

# No `from __future__ import annotations`: FastAPI reads the handler's annotations at runtime.

from typing import Annotated, Literal

from fastapi import APIRouter, Query, Response

from api.deploy import DeployInputs, draft_model_request, slugs_needed
from api.deploy_render import render
from api.deps import CatalogDep, PlansDep, ReaderDep
from api.problems import problem_responses
from catalog.plans import Plans
from catalog.repository import Catalog
from planner.errors import PlannerInputError

router = APIRouter(tags=["plans"])

Target = Literal["vllm", "sglang", "trt-llm", "k8s"]


def deploy_inputs(plan_id: str, plans: Plans, catalog: Catalog) -> DeployInputs:
    """The stored plan and the current catalog records of its model, its draft model (if it drafts with one),
    GPUs and quantization schemes."""
    stored = plans.get(plan_id)
    gpus, schemes = slugs_needed(stored.response)
    draft = draft_model_request(stored.request, stored.response)
    return DeployInputs(
        plan_id=stored.id,
        response=stored.response,
        model=catalog.get_model(stored.request["model"]),
        quantizations={slug: catalog.get_quantization(slug) for slug in sorted(schemes)},
        gpus={slug: catalog.get_gpu(slug) for slug in sorted(gpus)},
        draft_model=None if draft is None else catalog.get_model(draft),
    )


@router.get(
    "/plans/{plan_id}/deploy",
    name="deploy_plan",
    summary="A stored plan as engine launch commands or Kubernetes manifests",
    response_class=Response,
    responses={
        200: {
            "description": "A shell script (engines) or a multi-document YAML stream (k8s).",
            "content": {"text/plain": {"schema": {"type": "string"}}, "application/yaml": {"schema": {"type": "string"}}},
        },
        **problem_responses(401, 404, 422),
    },
)
def deploy_plan(
    plan_id: str,
    plans: PlansDep,
    catalog: CatalogDep,
    _reader: ReaderDep,
    target: Annotated[
        Target | None,
        Query(
            description="vllm, sglang or trt-llm: the launch command per configuration; k8s: manifests. Omitted: the "
            "engine the plan was priced on (plan.engine); a 422 when the plan names none."
        ),
    ] = None,
) -> Response:
    """Renders the stored plan with every planned knob on the engine's documented flag (tp, pipeline
    parallel 1, batch limit, chunked-prefill budget or its off switch, weights and KV-cache precision,
    the memory fraction the plan's KV budget assumed, served model name, port): one command per
    configuration of a mixed fleet. `k8s`: a Deployment per configuration (vLLM, GPUs as
    nvidia.com/gpu or amd.com/gpu), a Service, and an autoscaling/v2 HPA on vllm:num_requests_running
    whose target is the mean number of requests in service per replica at the planned rate (Little's
    law). A disaggregated plan renders each pool (prefill, decode) with the engine's P/D flags: vLLM's
    `--kv-transfer-config` (NixlConnector, kv_producer / kv_consumer), SGLang's `--disaggregation-mode`
    and `--disaggregation-transfer-backend`, the router in front of them as a comment; k8s a Deployment
    and a headless Service per pool. A class plan (`classes`) renders each pool of its chosen
    arrangement (k8s: a Deployment and a Service per pool, no HPA); a shared priority pool gets vLLM's
    `--scheduling-policy priority`, and the script says the `priority` each class's requests carry
    (the class's own: 0 is served first). A plan drafting with a catalog model (constraints.pin.draft_model)
    renders vLLM's `draft_model` speculative config (with the release it needs), SGLang's STANDALONE
    algorithm and TensorRT-LLM's DraftTarget, each with the draft's checkpoint. 404 for an unknown plan; 422
    for an unknown target, a model or draft model
    without `checkpoint`, a quantization the engine has no name for, a disaggregated plan for trt-llm,
    or a class plan's priority pool for sglang or trt-llm (the 422 names the targets that render it)."""
    inputs = deploy_inputs(plan_id, plans, catalog)
    chosen = target or inputs.response.get("plan", {}).get("engine")
    if chosen is None:  # a plan priced on no engine has no default target
        raise PlannerInputError(
            "target: this plan was priced on no engine (plan.engine is null): name one (vllm, sglang, trt-llm or k8s)",
            field="target",
        )
    body, media_type = render(inputs, chosen)
    return Response(content=body, media_type=media_type)
