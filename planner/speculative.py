"""Speculative decoding: the draft methods, their default acceptance rates, the step model that
verifies k drafted tokens per sequence, where speculation stops paying, and accepted-length draws.

The step-time formula is planner/step_model.py's (`StepModel.verify_step_s`); this module builds
its `Speculation` from a method and the target's architecture and answers the questions a plan
asks of it. Acceptance is modelled per token with one rate α, independent across positions
(Leviathan, Kalman & Matias, ICML 2023, §3.1): a step accepts n of k drafted tokens with
P(n) = α^n (1 − α) for n < k and α^k for n = k, and emits n + 1 tokens (the target's own token
after the last accepted one), so E[n + 1] = (1 − α^(k+1)) / (1 − α).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np

from planner.errors import PlannerInputError
from planner.memory import replica_kv_bytes_per_token, usable_memory_bytes, weight_bytes
from planner.performance import attention_flops_per_context_token
from planner.specs import Efficiency, GpuSpec, ModelSpec, Precision
from planner.step_model import Speculation, StepModel
from planner.workload import TASKS, Task

MethodName = Literal["eagle", "mtp", "medusa", "draft_model"]

#: Draft lengths the search offers: 1–5. EAGLE's and SGLang's default chain depth is 5
#: (`speculative_num_steps`, SGLang docs "Speculative Decoding"); with α ≤ 0.85 a sixth token adds
#: α^6 ≤ 0.38 tokens per step for a sixth of the verify compute, past the point any published
#: configuration goes.
DRAFT_TOKENS: tuple[int, ...] = (1, 2, 3, 4, 5)

#: Draft lengths the plan's search offers as candidates of their own. Each length adds a variant of
#: every group, so each multiplies the candidates the search enumerates, bounds and may predict:
#: with three lengths a plan's CPU time rose 2.2x at p50 on bench/plan_latency.py's 24 requests
#: (docs/plan-benchmark.md), with two it is kept near the issue's 1.5x. k 5 is the longest chain
#: any engine's default runs (EAGLE's and SGLang's depth 5) and the best wherever the verify step is
#: a weight read (low batch, where TPOT binds); k 2 (E 2.44 at α 0.8) keeps most of the gain with
#: a crossover batch ~1.4x as far out (Llama 3.1 8B on H100 at a 160-token context: 259 against 182 at k 5, tests/planner/test_plan_speculative.py), for plans
#: whose replicas run near the crossover. A pinned length (`pin.draft_tokens`) replaces them.
SEARCH_DRAFT_TOKENS: tuple[int, ...] = (2, 5)

#: Largest batch the crossover search looks at (beyond any batch limit of the grid, 4,096).
MAX_CROSSOVER_BATCH = 1 << 20


@dataclass(frozen=True, slots=True, kw_only=True)
class MethodDefault:
    """A draft method's default per-token acceptance rate for chat traffic, with where it comes from."""

    method: MethodName
    acceptance_rate: float
    source: str


#: Chat (MT-bench-like) defaults. A request may give its own rate; these are never fitted to Headroom's
#: own predictions. Later draft positions are accepted less often than the first, so one α per method
#: is the geometric approximation docs/speculative-decoding.md compares against published speedups.
METHOD_DEFAULTS: dict[str, MethodDefault] = {
    "eagle": MethodDefault(
        method="eagle",
        acceptance_rate=0.8,
        source="Li et al., EAGLE (ICML 2024, arXiv 2401.15077), §1: feature-level drafting reaches ≈0.8 draft accuracy",
    ),
    "medusa": MethodDefault(
        method="medusa",
        acceptance_rate=0.6,
        source="Li et al., EAGLE (arXiv 2401.15077), §1: Medusa's heads ≈0.6 accuracy (Cai et al., arXiv 2401.10774)",
    ),
    "mtp": MethodDefault(
        method="mtp",
        acceptance_rate=0.85,
        source="DeepSeek-AI, DeepSeek-V3 Technical Report (arXiv 2412.19437), §5.4.3: second-token acceptance 85–90 %",
    ),
}


def acceptance_rate_from_length(acceptance_length: float, draft_tokens: int) -> float:
    """The per-token α of a chain of k drafted tokens whose mean tokens per step is τ: the root in
    [0, 1) of (1 − α^(k+1)) / (1 − α) = τ (`tokens_per_step` inverted; it rises from 1 at α = 0
    towards k + 1, so the root is unique for 1 ≤ τ < k + 1; bisection to 1e-12)."""
    if draft_tokens < 1 or not 1.0 <= acceptance_length < draft_tokens + 1:
        raise PlannerInputError(f"need k >= 1 and 1 <= τ < k + 1, got k {draft_tokens}, τ {acceptance_length}")
    low, high = 0.0, 1.0
    while high - low > 1e-12:
        middle = (low + high) / 2.0
        low, high = (middle, high) if tokens_per_step(middle, draft_tokens) < acceptance_length else (low, middle)
    return (low + high) / 2.0


@dataclass(frozen=True, slots=True, kw_only=True)
class PublishedAcceptance:
    """A method's mean accepted length τ on one task's benchmark as a paper reports it, at draft length k."""

    method: MethodName
    task: Task
    benchmark: str
    acceptance_length: float  # τ: tokens per target step, the target's own token included
    draft_tokens: int  # k: the longest draft the reported configuration runs
    source: str

    @property
    def acceptance_rate(self) -> float:
        """α with (1 − α^(k+1)) / (1 − α) = τ: the chain's per-token rate giving the paper's τ."""
        return acceptance_rate_from_length(self.acceptance_length, self.draft_tokens)


#: EAGLE-3 (Li et al., arXiv 2503.01840) Table 1, temperature 0, the LLaMA-Instruct 3.1 8B row —
#: the target with the most widely deployed published EAGLE-3 head — as transcribed (with the
#: table's other rows) in a public research note read through this project's code search ("RS-4
#: 投机解码的负收益、失效条件与真实基准数据", 2026-08-22, §4.1, citing arxiv.org/html/2503.01840;
#: its repository is not named by the search): not checked against the paper itself. The paper drafts a tree; k = 8 is the EAGLE repository's
#: default depth (SafeAILab/EAGLE, eagle/model/ea_model.py `from_pretrained(depth=7)`, "the maximum
#: draft length − 1", commit cb7e084), the shortest draft consistent with the table (its Vicuna 13B
#: HumanEval τ 7.54 exceeds the k + 1 = 7 of the evaluation script's depth 5). A tree's τ over a
#: chain's formula gives an α above what a chain of the same method reaches (the tree tries several
#: candidates per position), so these defaults are optimistic for the chains Headroom plans.
_EAGLE3_TABLE1 = "Li et al., EAGLE-3 (arXiv 2503.01840), Table 1, T = 0, LLaMA-Instruct 3.1 8B"
#: DeepSeek-V3 Technical Report (arXiv 2412.19437) §5.4.3: the second token's acceptance "ranges
#: between 85% and 90% across various generation topics" with one MTP module (k = 1, τ = 1 + α):
#: the same 0.85 (the range's low end) for every task.
_DEEPSEEK_V3 = (
    "DeepSeek-AI, DeepSeek-V3 Technical Report (arXiv 2412.19437), §5.4.3: second-token acceptance 85–90 % across topics"
)
#: Spec-Bench's leaderboard (Xia et al., ACL Findings 2024, arXiv 2401.07851; hemingkx/Spec-Bench Leaderboard.md at
#: commit 09244ff, "Leaderboard on A100", Vicuna-7B-v1.3, greedy decoding, fp16, batch 1): per method, the mean
#: accepted tokens per step over its six tasks τ̄, the overall speedup S (the mean of the six task speedups) and the
#: speedup s_t on each task Headroom names (multi-turn conversation = MT-bench → chat, CNN/DM summarization,
#: GSM8K math; its translation, QA and RAG columns have no Headroom task, and code and instruction no column).
_SPEC_BENCH = "Spec-Bench leaderboard (arXiv 2401.07851; hemingkx/Spec-Bench Leaderboard.md at 09244ff), A100, Vicuna-7B-v1.3, greedy, batch 1"
SPEC_BENCH_COLUMNS: tuple[tuple[Task, str], ...] = (
    ("chat", "Multi-turn Conversation"),
    ("summarization", "Summarization"),
    ("math", "Mathematical Reasoning"),
)
#: method → (τ̄, S, k, the speedups on SPEC_BENCH_COLUMNS in order). k: Medusa runs Spec-Bench's 4 heads
#: (evaluation/inference_medusa.py `num_heads = 4`: at most 4 drafted tokens a step); SpS is transformers' assisted
#: generation (model/sps/decoding.py), whose draft starts at `num_assistant_tokens` 5 and moves ±1–2 with acceptance:
#: 5 is taken. EAGLE's row is the derivation's check (tests/planner/test_speculative_tasks.py), not a default.
SPEC_BENCH_SPEEDUPS: dict[str, tuple[float, float, int, tuple[float, ...]]] = {
    "eagle": (3.61, 2.29, 5, (2.67, 2.23, 2.67)),
    "medusa": (2.32, 1.78, 4, (2.05, 1.57, 2.05)),
    "draft_model": (2.28, 1.49, 5, (1.66, 1.62, 1.47)),
}


def spec_bench_task_length(method: str, task: Task) -> float:
    """τ_t = τ̄ · s_t / S: a task's mean accepted length from Spec-Bench's mean over its tasks and the task's speedup.

    At batch 1 a step of a 7B model reads its 13.5 GB of weights whatever the task, and a method's drafting and
    verification cost per step is the same on every task, so its speedup over plain decoding is τ times one
    task-independent ratio of step times: s_t / S = τ_t / τ̄ (the KV reads a longer context adds, 0.5 MB a token
    against 13.5 GB, change both steps alike). Rounded to 0.01 (the leaderboard's precision)."""
    mean_length, overall, _k, speedups = SPEC_BENCH_SPEEDUPS[method]
    index = [t for t, _ in SPEC_BENCH_COLUMNS].index(task)
    return round(mean_length * speedups[index] / overall, 2)  # τ̄ · s_t / S


def _spec_bench_rows(method: MethodName) -> tuple[PublishedAcceptance, ...]:
    k = SPEC_BENCH_SPEEDUPS[method][2]
    return tuple(
        PublishedAcceptance(
            method=method,
            task=task,
            benchmark=f"Spec-Bench {column}",
            acceptance_length=spec_bench_task_length(method, task),
            draft_tokens=k,
            source=f"{_SPEC_BENCH}: τ = mean accepted tokens {SPEC_BENCH_SPEEDUPS[method][0]:g} × the task's speedup over "
            f"the overall {SPEC_BENCH_SPEEDUPS[method][1]:g}×",
        )
        for task, column in SPEC_BENCH_COLUMNS
    )


PUBLISHED_ACCEPTANCE: tuple[PublishedAcceptance, ...] = (
    *_spec_bench_rows("medusa"),
    PublishedAcceptance(
        method="eagle", task="chat", benchmark="MT-bench", acceptance_length=6.13, draft_tokens=8, source=_EAGLE3_TABLE1
    ),
    PublishedAcceptance(
        method="eagle", task="code", benchmark="HumanEval", acceptance_length=6.74, draft_tokens=8, source=_EAGLE3_TABLE1
    ),
    PublishedAcceptance(
        method="eagle", task="math", benchmark="GSM8K", acceptance_length=6.23, draft_tokens=8, source=_EAGLE3_TABLE1
    ),
    PublishedAcceptance(
        method="eagle", task="instruction", benchmark="Alpaca", acceptance_length=6.70, draft_tokens=8, source=_EAGLE3_TABLE1
    ),
    PublishedAcceptance(
        method="eagle", task="summarization", benchmark="CNN/DM", acceptance_length=5.34, draft_tokens=8, source=_EAGLE3_TABLE1
    ),
    *(
        PublishedAcceptance(
            method="mtp", task=task, benchmark="generation topics", acceptance_length=1.85, draft_tokens=1, source=_DEEPSEEK_V3
        )
        for task in TASKS
    ),
)


def default_acceptance(method: str, task: Task | None) -> MethodDefault:
    """The default α of `method` for traffic of `task`: the published per-task figure converted to a
    chain's α where PUBLISHED_ACCEPTANCE has one (EAGLE: EAGLE-3's table; Medusa: Spec-Bench's chat, math and
    summarization), else the method's chat default (METHOD_DEFAULTS). A separate draft model's is
    `draft_model_acceptance`'s."""
    found = next((p for p in PUBLISHED_ACCEPTANCE if p.method == method and p.task == task), None)
    if task is None or found is None:
        return METHOD_DEFAULTS[method]
    return MethodDefault(
        method=found.method,
        acceptance_rate=found.acceptance_rate,
        source=f"{found.source}: {found.benchmark} τ {found.acceptance_length:g} at k {found.draft_tokens} "
        f"→ α {found.acceptance_rate:.3f} by τ = (1 − α^(k+1))/(1 − α)",
    )


#: Models published with multi-token-prediction modules (DeepSeek-V3 §2.2 ships one MTP module).
MTP_MODELS: frozenset[str] = frozenset({"deepseek-v3"})


def tokens_per_step(acceptance_rate: float, draft_tokens: int) -> float:
    """E = (1 − α^(k+1)) / (1 − α), Leviathan et al. 2023 eq. 1 (`Speculation.tokens_per_step`)."""
    if draft_tokens < 1 or not 0.0 <= acceptance_rate < 1.0:
        raise PlannerInputError(f"need k >= 1 and 0 <= α < 1, got k {draft_tokens}, α {acceptance_rate}")
    return (1.0 - acceptance_rate ** (draft_tokens + 1)) / (1.0 - acceptance_rate)  # Σ_{j=0..k} α^j


def accepted_length_pmf(acceptance_rate: float, draft_tokens: int) -> np.ndarray:
    """P(n accepted) for n = 0..k: α^n (1 − α) below k, α^k at k (the truncated geometric)."""
    alpha, k = acceptance_rate, draft_tokens
    n = np.arange(k + 1, dtype=float)
    pmf = alpha**n * (1.0 - alpha)  # geometric below k
    pmf[k] = alpha**k  # every drafted token accepted
    return pmf


def draw_emitted_tokens(rng: np.random.Generator, acceptance_rate: float, draft_tokens: int, size: int) -> np.ndarray:
    """Tokens emitted per sequence in `size` steps: n + 1 with n ~ the truncated geometric."""
    if acceptance_rate <= 0.0:
        return np.ones(size, dtype=np.int64)
    # geometric failures before the first rejection, capped at k: P(n) = α^n (1 − α), n < k
    failures = rng.geometric(1.0 - acceptance_rate, size=size) - 1
    return np.minimum(failures, draft_tokens).astype(np.int64) + 1


def _layer_params(model: ModelSpec) -> float:
    """Active parameters of one decoder layer: the active parameters less input and output embeddings."""
    return max(model.params_active - 2.0 * model.vocab_size * model.hidden_size, 0.0) / model.layers  # (N − 2·V·h) / L


def head_speculation(
    model: ModelSpec, precision: Precision, tp: int, *, method: MethodName, draft_tokens: int, acceptance_rate: float
) -> Speculation:
    """A draft head's per-pass cost, from the target's architecture.

    EAGLE (Li et al. 2024, §4.1): one decoder layer and an FC layer of 2h × h on top of the target's
    features, reusing its LM head (V × h), run once per drafted token. MTP (DeepSeek-V3 §2.2): one
    transformer block and a 2h × h projection with the shared output head, the same shape. Medusa
    (Cai et al. 2024, §2.1.1): k heads, each a residual h × h layer and its own V × h head, no
    attention and no cache; the k heads read in one pass cost what k one-head passes cost.
    """
    h, vocab = model.hidden_size, model.vocab_size
    per_param = precision.weights.weight_bytes_per_param
    if method == "medusa":
        head_params = float(h * h + vocab * h)  # W1 (h×h) + W2 (h×V)
        return Speculation(
            method=method,
            draft_tokens=draft_tokens,
            acceptance_rate=acceptance_rate,
            draft_weight_bytes=head_params * per_param,
            draft_flops_per_token=2.0 * head_params,  # multiply + add per weight
            resident_bytes=draft_tokens * head_params * per_param,  # all k heads held
        )
    own = _layer_params(model) + 2 * h * h  # one layer + the 2h×h projection: what the head adds to memory
    params = own + vocab * h  # … and the target's LM head, read every pass
    kv_layer = replica_kv_bytes_per_token(model, precision.kv_cache, tp) / model.layers
    return Speculation(
        method=method,
        draft_tokens=draft_tokens,
        acceptance_rate=acceptance_rate,
        draft_weight_bytes=params * per_param,
        draft_kv_bytes_per_token=kv_layer,  # the head's one layer of cache
        draft_flops_per_token=2.0 * params,
        draft_attention_flops_per_context_token=attention_flops_per_context_token(model) / model.layers,
        resident_bytes=own * per_param,
    )


def draft_model_speculation(
    draft: ModelSpec,
    precision: Precision,
    tp: int,
    *,
    draft_tokens: int,
    acceptance_rate: float,
    acceptance_source: str | None = None,
) -> Speculation:
    """A separate draft model (same precision, same tp as the target): its own weights, cache and FLOPs per pass.

    Each of the k draft passes reads the draft's weights W_d and its cache (kv_d per context token,
    the draft keeping an entry for every token the target does) and spends 2·N_d FLOPs per sequence
    plus its attention; all of it is resident beside the target (`speculative_kv_capacity_tokens`)."""
    return Speculation(
        method="draft_model",
        draft_tokens=draft_tokens,
        acceptance_rate=acceptance_rate,
        draft_weight_bytes=weight_bytes(draft, precision.weights),
        draft_kv_bytes_per_token=replica_kv_bytes_per_token(draft, precision.kv_cache, tp),
        draft_flops_per_token=2.0 * draft.params_active,
        draft_attention_flops_per_context_token=float(attention_flops_per_context_token(draft)),
        resident_bytes=weight_bytes(draft, precision.weights),
        acceptance_source=acceptance_source,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class PairAcceptance:
    """A published per-token acceptance rate α of a (target, separate draft model) pair on one task."""

    target: str
    draft: str
    target_params: float
    draft_params: float
    benchmark: str
    temperature: float
    acceptance_rate: float
    #: The Headroom task the benchmark is (None: a proxy for every task, Leviathan et al.'s rows).
    task: Task | None = None
    source: str = ""

    @property
    def size_ratio(self) -> float:
        """Target parameters over draft parameters."""
        return self.target_params / self.draft_params


#: Leviathan, Kalman & Matias, "Fast Inference from Transformers via Speculative Decoding" (ICML 2023,
#: arXiv 2211.17192), Tables 2 and 3: α of T5-XXL (11B) drafted by T5-small (77M), T5-base (250M) and
#: T5-large (800M) on WMT EnDe translation and CNN/DM summarization at temperature 0 and 1, and of LaMDA
#: (137B) drafted by LaMDA 100M, 2B and 8B at temperature 0. Read from two transcriptions of the tables
#: in public research notes found through this project's code search (they agree; one is the note
#: PUBLISHED_ACCEPTANCE's EAGLE-3 rows come from), not checked against the paper here. Chen et al. (arXiv
#: 2302.01318) state no α (their Figure 1 plots accepted tokens / (K + 1)), so they add no row.
_LEVIATHAN = "Leviathan, Kalman & Matias (ICML 2023, arXiv 2211.17192), Tables 2–3"
_T5XXL, _LAMDA = 11e9, 137e9
_T5_DRAFTS = (("T5-small", 77e6), ("T5-base", 250e6), ("T5-large", 800e6))
PUBLISHED_PAIR_ACCEPTANCE: tuple[PairAcceptance, ...] = (
    *(
        PairAcceptance(
            target="T5-XXL",
            draft=name,
            target_params=_T5XXL,
            draft_params=params,
            benchmark=benchmark,
            temperature=temperature,
            acceptance_rate=alpha,
        )
        for benchmark, temperature, alphas in (
            ("WMT EnDe", 0.0, (0.75, 0.80, 0.82)),
            ("WMT EnDe", 1.0, (0.62, 0.68, 0.71)),
            ("CNN/DM", 0.0, (0.65, 0.73, 0.74)),
            ("CNN/DM", 1.0, (0.53, 0.55, 0.56)),
        )
        for (name, params), alpha in zip(_T5_DRAFTS, alphas, strict=True)
    ),
    *(
        PairAcceptance(
            target="LaMDA 137B",
            draft=name,
            target_params=_LAMDA,
            draft_params=params,
            benchmark="LaMDA's (Table 3)",
            temperature=0.0,
            acceptance_rate=alpha,
        )
        for name, params, alpha in (("LaMDA 100M", 100e6, 0.61), ("LaMDA 2B", 2e9, 0.71), ("LaMDA 8B", 8e9, 0.75))
    ),
)


#: Spec-Bench's SpS pair (Vicuna-7B-v1.3 drafted by Vicuna-68M, sizes as the names state them) per task: τ from
#: `spec_bench_task_length`, α by τ = (1 − α^(k+1))/(1 − α) at k 5. Greedy (the leaderboard's only setting): the
#: overall τ 2.28 read at k 5 gives α 0.578, below Leviathan et al.'s temperature-1 0.62 for the nearest T5 pair, so
#: greedy decoding does not make these rows the optimistic ones (docs/speculative-decoding.md).
SPEC_BENCH_PAIR_ACCEPTANCE: tuple[PairAcceptance, ...] = tuple(
    PairAcceptance(
        target="Vicuna-7B-v1.3",
        draft="Vicuna-68M",
        target_params=7e9,
        draft_params=68e6,
        benchmark=f"Spec-Bench {column}",
        temperature=0.0,
        acceptance_rate=round(
            acceptance_rate_from_length(spec_bench_task_length("draft_model", task), SPEC_BENCH_SPEEDUPS["draft_model"][2]), 3
        ),
        task=task,
        source=f"{_SPEC_BENCH}, SpS: τ {spec_bench_task_length('draft_model', task):g} (mean accepted tokens 2.28 × the "
        "task's speedup over the overall 1.49×) at k 5",
    )
    for task, column in SPEC_BENCH_COLUMNS
)


def draft_model_acceptance(target: ModelSpec, draft: ModelSpec, task: Task | None) -> MethodDefault:
    """The default α of a separate draft model: the published pair (PUBLISHED_PAIR_ACCEPTANCE) at temperature 1 —
    sampling, the OpenAI-compatible APIs' default temperature, and the lower, safer of the paper's two — on
    CNN/DM for summarization traffic and WMT EnDe for every other task (the paper measured no chat), or for chat,
    math and summarization Spec-Bench's SpS pair on that task (SPEC_BENCH_PAIR_ACCEPTANCE, greedy), whichever's
    target/draft size ratio is nearest the pair's in log ratio (total parameters; the papers' drafts are dense).

    The caveat the plan states: two T5 pairs of another model family, a 2023 measurement, and a chain's α taken
    as constant over positions; the one measured modern pair (SpecDecode-Bench's Llama-3.1-70B drafted by
    Llama-3.2-1B on vLLM, docs/speculative-decoding.md) implies α 0.634 at batch 1 where this gives 0.68.
    Measure α on the traffic and give it (constraints.pin.acceptance_rate) where the plan's cost rests on it."""
    benchmark = "CNN/DM" if task == "summarization" else "WMT EnDe"
    ratio = target.params_total / draft.params_total
    rows = [p for p in PUBLISHED_PAIR_ACCEPTANCE if p.benchmark == benchmark and p.temperature == 1.0]
    rows += [p for p in SPEC_BENCH_PAIR_ACCEPTANCE if task is not None and p.task == task]
    found = min(rows, key=lambda p: (abs(math.log(p.size_ratio / ratio)), p.size_ratio))
    return MethodDefault(
        method="draft_model",
        acceptance_rate=found.acceptance_rate,
        source=f"{found.source or _LEVIATHAN}: {found.target} drafted by {found.draft} (size ratio {found.size_ratio:.0f}, "
        f"this pair's {ratio:.0f}), {found.benchmark}, temperature {found.temperature:g}: α {found.acceptance_rate:g}. "
        f"{'Another model family' if found.task else 'Another model family and task'}; "
        "measure α on this traffic (e.g. vLLM's accepted/draft token counters) and give it in "
        "constraints.pin.acceptance_rate",
    )


def check_draft_model(target: ModelSpec, draft: ModelSpec) -> None:
    """A catalog model may draft for `target` when it shares its vocabulary (the engines verify the
    draft's token ids against the target's: vLLM and SGLang require the same tokenizer) and is
    smaller (a draft at least the target's size cannot save a pass). PlannerInputError naming
    constraints.pin.draft_model otherwise."""
    field = {"constraint": "pin.draft_model", "field": "constraints.pin.draft_model"}
    if draft.slug == target.slug:
        raise PlannerInputError(f"{draft.slug} cannot draft for itself", **field)
    if draft.vocab_size <= 0 or draft.vocab_size != target.vocab_size:
        raise PlannerInputError(
            f"{draft.slug} (vocabulary {draft.vocab_size}) cannot draft for {target.slug} (vocabulary {target.vocab_size}): "
            "a draft model needs the target's tokenizer",
            **field,
        )
    if draft.params_active >= target.params_active:
        raise PlannerInputError(
            f"{draft.slug} ({draft.params_active:.3g} active parameters) is not smaller than {target.slug} "
            f"({target.params_active:.3g}): its passes would cost as much as the target's",
            **field,
        )


def speculative_step_model(step_model: StepModel, speculation: Speculation) -> StepModel:
    """The target's step model verifying `speculation`'s drafts."""
    return replace(step_model, speculation=speculation)


def speculative_kv_capacity_tokens(
    gpu: GpuSpec, model: ModelSpec, precision: Precision, tp: int, efficiency: Efficiency, speculation: Speculation
) -> int:
    """KV tokens a replica holds when the draft's resident weights and its cache share the memory:
    ⌊(M − W − W_d) / (kv + kv_d)⌋ (the draft keeps a cache entry for every token the target does)."""
    free = usable_memory_bytes(gpu, tp, efficiency) - weight_bytes(model, precision.weights) - speculation.resident_bytes
    per_token = replica_kv_bytes_per_token(model, precision.kv_cache, tp) + speculation.draft_kv_bytes_per_token
    return max(0, math.floor(free / per_token))


def tpot_ratio(step_model: StepModel, *, batch: float, context_tokens: float) -> float:
    """Speculative over plain time per output token at `batch` sequences of `context_tokens`:
    (t_verify / E) / t_decode; below 1 speculation pays."""
    if step_model.speculation is None:
        raise PlannerInputError("tpot_ratio needs a speculative step model")
    kv = batch * context_tokens
    plain = step_model.step_s(batch, kv, kv)
    return step_model.verify_step_s(batch, kv) / step_model.tokens_per_step / plain  # (t_verify / E) / t_decode


def crossover_batch(step_model: StepModel, *, context_tokens: float) -> int | None:
    """The smallest batch at which speculation stops paying (t_verify / E ≥ t_decode), or None when it
    pays up to `MAX_CROSSOVER_BATCH`. The ratio rises with the batch as the verify step turns
    compute-bound, so doubling then bisection finds the first batch past 1."""

    def stops_paying(batch: int) -> bool:
        return tpot_ratio(step_model, batch=batch, context_tokens=context_tokens) >= 1.0

    if stops_paying(1):
        return 1
    low, high = 1, 2
    while not stops_paying(high):
        if high >= MAX_CROSSOVER_BATCH:
            return None
        low, high = high, high * 2
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if not stops_paying(middle) else (low, middle)
    return high


def available_methods(model: ModelSpec) -> tuple[MethodName, ...]:
    """Draft heads a plan may offer for `model`: EAGLE and Medusa heads can be trained for any
    decoder (both papers train them on a frozen target); MTP only where the model ships its modules."""
    methods: list[MethodName] = ["eagle", "medusa"]
    if model.slug in MTP_MODELS:
        methods.insert(0, "mtp")
    if model.vocab_size <= 0:
        return ()  # a head's cost needs the vocabulary (its LM head)
    return tuple(methods)


def search_method(model: ModelSpec, published: frozenset[str] | None = None) -> MethodName | None:
    """The draft head the search offers for `model`: the available method with the highest default
    acceptance rate (MTP where the model ships it, else EAGLE); None when the model offers none.
    Every head's per-pass cost is about one target layer plus the V × h head (`head_speculation`),
    so the highest α gives the most tokens per step for about the same draft cost. With `published`
    (the heads a checkpoint is published for, as the service's deploy table lists them) only those
    and MTP, whose module ships in the model's own checkpoint, are offered: a plan should not
    speculate with a head nobody can deploy."""
    methods = [m for m in available_methods(model) if published is None or m == "mtp" or m in published]
    if not methods:
        return None
    return max(methods, key=lambda m: METHOD_DEFAULTS[m].acceptance_rate)
