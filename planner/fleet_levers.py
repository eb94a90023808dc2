"""Prefix caching and speculative decoding in the fleet's candidate tables (planner/fleet_candidates.py).

A fleet workload's levers are the single plan's, offered as more candidates of its table rather
than as a second plan: the MILP then takes whichever is cheapest, and since the lever-free
candidates stay in the table, a workload with a lever never costs more than without it.

Speculative decoding (`speculative`: off, auto, on): the (GPU, precision, tp) groups are expanded
exactly as planner/plan_speculative.py `search_groups` does for a single plan, with
planner/candidates.py `speculative_groups` at planner/speculative.py's SEARCH_DRAFT_TOKENS (auto:
the groups and their speculating variants; on: the variants alone; the acceptance rate is the
method's default for `workload.task`). A variant's candidate id carries its draft ("/eagle-k3").
A workload may pin what drafts (`DraftPin`, a single plan's constraints.pin.draft_model and
acceptance_rate): a catalog model drafting instead of the head (its α the one given, else the
published pair's nearest in size ratio), or the head at a measured α.

Prefix caching (`workload.prefix_reuse`): each variant below is searched as its own table and its
candidates (id suffixed "+pc<tokens>") join the plain ones, as planner/plan_prefix.py's trials join
the plan without a cache:

* a measured hit rate h: every prompt prefills (1 − h) of its tokens (plan_prefix `measured_prompts`),
  no KV set aside, routing "as_measured";
* shared prefixes: a cache of ¼, ½ and all of the per-replica working set (plan_prefix
  `CACHE_FRACTIONS`), its Che hit rates (planner/prefix_cache.py `prefix_hits`), the reduced-prompt
  mixture (plan_prefix `reduced_prompts`) and each replica's KV less the cache (planner/planning.py
  `with_prefix_cache`). The routing is "random": a single plan takes prefix-aware routing over its R
  replicas, but a fleet workload's replica count differs per period and is chosen by the MILP after
  the tables are built, and random routing's hit rate does not depend on R (prefix-aware routing
  only raises it, so the fleet's figure is the conservative one).

The fleet's tables are analytic (no simulator), as they are without levers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from planner.candidates import Group, Option, speculative_groups
from planner.errors import PlannerInputError
from planner.plan_prefix import CACHE_FRACTIONS, measured_prompts, prompt_saved_fraction, reduced_prompts
from planner.plan_result import PrefixCaching, SpeculativeChoice
from planner.plan_speculative import speculative_choice
from planner.planning import with_prefix_cache
from planner.prefix_cache import BLOCK_TOKENS, Routing, prefix_hits
from planner.specs import ModelSpec
from planner.speculative import SEARCH_DRAFT_TOKENS
from planner.workload import Workload

SpeculativeMode = Literal["off", "auto", "on"]

#: The routing a fleet's prefix cache is planned under (module docstring).
FLEET_ROUTING: Routing = "random"


@dataclass(frozen=True, slots=True, kw_only=True)
class DraftPin:
    """What a workload pins about its drafts: a catalog model drafting instead of a head (None: the head) and the
    acceptance rate α measured on its traffic (None: the method's, or the published pair's, default)."""

    draft_model: ModelSpec | None = None
    acceptance_rate: float | None = None

    def __post_init__(self) -> None:
        if self.acceptance_rate is not None and not 0.0 < self.acceptance_rate < 1.0:
            raise PlannerInputError(
                f"acceptance_rate must be in (0, 1), got {self.acceptance_rate}", constraint="acceptance_rate"
            )


@dataclass(frozen=True, slots=True, kw_only=True)
class CandidateLevers:
    """What a fleet candidate runs beyond its configuration: the prefix cache and the draft, each None without."""

    prefix_caching: PrefixCaching | None = None
    speculative: SpeculativeChoice | None = None


NO_LEVERS = CandidateLevers()


@dataclass(frozen=True, slots=True, kw_only=True)
class PrefixVariant:
    """One table to search for a workload: its prompt mix, the KV tokens each replica gives the cache,
    the id suffix of its candidates and what it deploys (None: the plain table)."""

    mix: Workload
    cache_tokens: int
    suffix: str
    prefix_caching: PrefixCaching | None


def prefix_variants(workload: Workload) -> tuple[PrefixVariant, ...]:
    """The plain mix (prefix_reuse dropped, as plan_prefix plans `without`) and, with `workload.prefix_reuse`,
    each cache trial of the module docstring."""
    mix = replace(workload.at_rate(1.0), prefix_reuse=None)
    plain = PrefixVariant(mix=mix, cache_tokens=0, suffix="", prefix_caching=None)
    reuse = workload.prefix_reuse
    if reuse is None:
        return (plain,)
    prompt = mix.prompt_tokens
    if reuse.measured:
        assert reuse.hit_rate is not None
        reduced = measured_prompts(prompt, reuse.hit_rate)
        caching = PrefixCaching(
            hit_rate=reuse.hit_rate,
            cache_tokens=0,
            routing="as_measured",
            prefill_tokens_saved_fraction=prompt_saved_fraction(prompt, reduced),
        )
        return (
            plain,
            PrefixVariant(mix=replace(mix, prompt_tokens=reduced), cache_tokens=0, suffix="+pc-measured", prefix_caching=caching),
        )
    working_set = reuse.working_set_tokens(FLEET_ROUTING, 1)
    variants = [plain]
    seen: set[int] = set()
    for fraction in CACHE_FRACTIONS:
        cache = int(fraction * working_set) // BLOCK_TOKENS * BLOCK_TOKENS  # whole blocks, as plan_prefix
        if cache <= 0 or cache in seen:
            continue
        seen.add(cache)
        hits = prefix_hits(reuse, cache, FLEET_ROUTING, 1)
        reduced = reduced_prompts(prompt, hits.classes)
        caching = PrefixCaching(
            hit_rate=hits.hit_rate,
            cache_tokens=cache,
            routing=FLEET_ROUTING,
            prefill_tokens_saved_fraction=prompt_saved_fraction(prompt, reduced),
        )
        variants.append(
            PrefixVariant(
                mix=replace(mix, prompt_tokens=reduced), cache_tokens=cache, suffix=f"+pc{cache}", prefix_caching=caching
            )
        )
    return tuple(variants)


def cached_groups(groups: Sequence[Group], variant: PrefixVariant) -> list[Group]:
    """`groups` with the variant's cache taken from each replica's KV (planning.py `with_prefix_cache`, judged
    on the variant's prompt mix as a single plan's trial is); a group left too small is dropped."""
    if not variant.cache_tokens:
        return list(groups)
    kept, _dropped = with_prefix_cache(groups, variant.mix, variant.cache_tokens)
    return kept


def speculative_search_groups(
    groups: Sequence[Group],
    model: ModelSpec,
    mix: Workload,
    mode: SpeculativeMode,
    published: frozenset[str] | None,
    draft: DraftPin | None = None,
) -> list[Group]:
    """The groups searched under `mode`, as plan_speculative `search_groups` offers them to a single plan:
    off as they are, auto with their speculating variants, on the variants alone (PlannerInputError when
    the model has no head to offer: the request's error, as a single plan's). With `draft` the variants
    draft with its catalog model (PlannerInputError when it cannot draft for `model`) and/or at its α."""
    if mode == "off":
        if draft is not None and draft.draft_model is not None:
            raise PlannerInputError("a draft_model needs speculative auto or on", constraint="speculative")
        return list(groups)
    pin = DraftPin() if draft is None else draft
    variants = speculative_groups(
        groups,
        model,
        mix,
        draft_tokens=SEARCH_DRAFT_TOKENS,
        published=published,
        acceptance_rate=pin.acceptance_rate,
        draft_model=pin.draft_model,
    )
    if mode == "on":
        if groups and not variants:
            drafter = "no draft head" if pin.draft_model is None else f"no configuration drafting with {pin.draft_model.slug}"
            raise PlannerInputError(
                f"speculative is 'on' but {drafter} can be offered for {model.slug} on the allowed configurations "
                "(no published head for the model, no vocabulary to cost its LM head, or no KV cache left beside it); "
                "set it to 'auto' or 'off'",
                constraint="speculative",
            )
        return variants
    return [*groups, *variants]


def levers_of(option: Option, variant: PrefixVariant, workload: Workload) -> CandidateLevers:
    """The levers a candidate found on `option` in `variant`'s table deploys."""
    return CandidateLevers(prefix_caching=variant.prefix_caching, speculative=speculative_choice(option, workload))
