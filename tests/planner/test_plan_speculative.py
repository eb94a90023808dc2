"""Speculative decoding as a plan's decision (planner/plan_speculative.py) on Llama 3.1 8B.

The configuration is the search's (cheapest without speculation); speculation is then predicted
for it with every draft method and length at the plan's load. At 0.2 requests/s a replica runs
about half a sequence, each step is a weight read, and an EAGLE head (α 0.8) cuts TPOT by about
E/(1 + the head's passes); at 1,500 short requests/s a replica runs ~180 sequences whose verify
steps are compute-bound, so the best draft makes the TPOT worse and auto declines it.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from planner.errors import InfeasiblePlanError
from planner.optimizer import PlanConstraints
from planner.pins import Pin
from planner.planning import PlanningRequest, plan_capacity
from planner.speculative import METHOD_DEFAULTS, SEARCH_DRAFT_TOKENS, tokens_per_step
from planner.workload import FixedLength, Slo, Workload
from tests.planner.test_planning import CHAT, GRID, INPUTS

LOW_LOAD = CHAT.at_rate(0.2)
SHORT = Workload(arrival_rate_rps=1500.0, prompt_tokens=FixedLength(tokens=128), output_tokens=FixedLength(tokens=64))
SHORT_GRID = {"tp_degrees": (1,), "batch_limits": (512,), "chunk_budgets": (8192,)}


def _plan(workload: Workload, mode: str, *, verify: bool = True, pin: Pin | None = None, slo: Slo | None = None, **grid):
    constraints = PlanConstraints(speculative=mode, pin=pin)  # type: ignore[arg-type]
    request = PlanningRequest(
        workload=workload, slo=slo or Slo(ttft_s=1.0, tpot_s=0.06), constraints=constraints, verify=verify, **(grid or GRID)
    )
    return plan_capacity(request, INPUTS)


@pytest.fixture(scope="module")
def low_load_plans():
    return {mode: _plan(LOW_LOAD, mode) for mode in ("off", "on", "auto")}


def test_off_is_the_plan_without_speculation(low_load_plans):
    off = low_load_plans["off"]
    assert off.speculative is None
    assert off.justification.speculative is None


def test_on_at_low_load_lowers_tpot_on_the_same_configuration(low_load_plans):
    """Same GPU, replicas and cost; the predicted and the simulated TPOT both fall by more than half,
    and the record says which draft, its α (the EAGLE paper's 0.8) and E = (1 − 0.8^(k+1))/0.2."""
    off, on = low_load_plans["off"], low_load_plans["on"]
    assert (on.row.gpu, on.replicas, on.cost_usd_per_hour) == (off.row.gpu, off.replicas, off.cost_usd_per_hour)
    assert on.predicted.tpot_s.at_percentile < 0.5 * off.predicted.tpot_s.at_percentile
    assert on.verification.meets_slo
    assert on.verification.simulated.tpot_s.at_percentile < 0.5 * off.verification.simulated.tpot_s.at_percentile
    chosen = on.speculative
    assert chosen.method == "eagle"
    assert chosen.acceptance_rate == METHOD_DEFAULTS["eagle"].acceptance_rate
    assert chosen.tokens_per_step == pytest.approx(tokens_per_step(0.8, chosen.draft_tokens))
    assert chosen.crossover_batch is not None and chosen.crossover_batch > 1
    section = on.justification.speculative
    assert section.chosen == chosen
    assert {(t.method, t.draft_tokens) for t in section.trials} == {("eagle", k) for k in SEARCH_DRAFT_TOKENS}


def test_auto_at_low_load_agrees_with_on(low_load_plans):
    assert low_load_plans["auto"].speculative == low_load_plans["on"].speculative


def test_a_tie_on_cost_keeps_the_configuration_without_speculation(low_load_plans):
    """At 0.2 requests/s one replica serves with or without a head at the same cost, so the search keeps
    off's own setting (speculating variants win only by costing less); speculation is then added on that
    setting for its lower TPOT, at the same replicas."""
    off, auto = low_load_plans["off"], low_load_plans["auto"]
    keep = ("gpu", "tp", "replicas", "weights_precision", "kv_precision", "batch_limit", "chunk_tokens")
    assert [getattr(auto.row, f) for f in keep] == [getattr(off.row, f) for f in keep]
    assert auto.row.draft == f"/eagle-k{auto.speculative.draft_tokens}"
    assert "at its replicas and cost" in auto.justification.speculative.reason


def test_auto_declines_at_high_load_and_shows_why():
    """~180 sequences per replica: every draft predicts a higher TPOT than the plan's own (or an unstable
    queue), so auto keeps the plan unchanged and the section gives the crossover batches it weighed."""
    off = _plan(SHORT, "off", verify=False, slo=Slo(ttft_s=5.0, tpot_s=0.3), **SHORT_GRID)
    auto = _plan(SHORT, "auto", verify=False, slo=Slo(ttft_s=5.0, tpot_s=0.3), **SHORT_GRID)
    assert auto.speculative is None
    assert auto.predicted == off.predicted
    section = auto.justification.speculative
    assert section.chosen is None and "does not lower the TPOT" in section.reason
    assert section.mean_running_sequences > 100
    assert all(t.tpot_s is None or t.tpot_s > section.tpot_s_without for t in section.trials)
    assert all(t.crossover_batch is not None for t in section.trials)


def test_a_pinned_draft_length_is_the_only_one_tried(low_load_plans):
    pinned = _plan(LOW_LOAD, "on", pin=Pin(draft_tokens=2))
    assert pinned.speculative.draft_tokens == 2
    assert {t.draft_tokens for t in pinned.justification.speculative.trials} == {2}


def test_on_without_any_draft_for_the_model_is_an_impossible_request():
    """A model without a vocabulary has no head to cost (its LM head is the draft's): `on` cannot speculate
    and says so, naming the constraint; `auto` returns the plan without speculation."""
    no_vocabulary = replace(INPUTS, model=replace(INPUTS.model, vocab_size=0))
    request = PlanningRequest(
        workload=LOW_LOAD, slo=Slo(ttft_s=1.0, tpot_s=0.06), constraints=PlanConstraints(speculative="on"), verify=False, **GRID
    )
    with pytest.raises(InfeasiblePlanError) as raised:
        plan_capacity(replace(request, advise=False), no_vocabulary)
    assert raised.value.extensions["constraint"] == "speculative"
    auto = plan_capacity(replace(request, constraints=PlanConstraints(speculative="auto")), no_vocabulary)
    assert auto.speculative is None and auto.justification.speculative.trials == ()


def test_a_tpot_bound_plan_buys_fewer_replicas_with_speculation():
    """20 chat requests/s under a 15 ms p99 TPOT. Without speculation one H100 replica at 20 requests/s
    runs a batch whose decode step (the weights, 16 GB, read once per token) is over the target, so the
    cheapest plan is two replicas (8 $/h at 4 $/h per H100 in the test catalog). An EAGLE head at k 5
    emits E = (1 − 0.8⁶)/0.2 = 3.689 tokens per verify step; the verify step reads the same weights
    and KV, so one replica's TPOT at the full 20 requests/s falls under the target and the plan costs
    half: one replica, 4 $/h. The section says what the plan without speculation would cost, the
    crossover batch lies above the plan's occupancy, and the simulator agrees with the speculative plan."""
    slo = Slo(ttft_s=1.0, tpot_s=0.015)
    off = _plan(CHAT.at_rate(20.0), "off", slo=slo)
    auto = _plan(CHAT.at_rate(20.0), "auto", slo=slo)
    assert (off.replicas, off.cost_usd_per_hour) == (2, pytest.approx(8.0))
    assert (auto.replicas, auto.cost_usd_per_hour) == (1, pytest.approx(4.0))
    assert auto.row.gpu == off.row.gpu == "h100-sxm"
    chosen = auto.speculative
    assert (chosen.method, chosen.draft_tokens) == ("eagle", 5)
    assert chosen.tokens_per_step == pytest.approx((1 - 0.8**6) / 0.2)
    section = auto.justification.speculative
    assert (section.cost_usd_per_hour_without, section.replicas_without) == (pytest.approx(8.0), 2)
    assert "the cheapest plan speculates" in section.reason
    assert chosen.crossover_batch > section.mean_running_sequences
    # the plan is verified with speculation and its predicted TPOT is the speculative one
    assert auto.verification.meets_slo
    assert auto.verification.simulated.tpot_s.at_percentile <= slo.tpot_s
    assert auto.predicted.tpot_s.at_percentile < slo.tpot_s < off.predicted.tpot_s.at_percentile * 2
    # every section describes the configuration as planned: the roofline's decode step is the verify step
    at_plan = next(r for r in auto.justification.roofline.decode if r.at == "at_plan_occupancy")
    assert at_plan.output_tokens_per_s == pytest.approx(at_plan.batch * chosen.tokens_per_step / at_plan.step_s)


def test_a_throughput_bound_plan_declines_speculation_past_the_crossover():
    """~183 sequences per replica at 1,500 short requests/s: past k 5's crossover batch (where
    t_verify/E ≥ t_decode for pure decode steps: 182); k 2's pure-decode crossover (259) lies above,
    but each step also carries prefill chunks, which turn the verify step compute-bound sooner, so
    k 2 predicts a TPOT of 40 ms against the plan's 21 ms and k 5 an unstable queue. No speculating
    candidate is cheaper, and auto keeps the configuration, its replicas and cost without speculation."""
    auto = _plan(SHORT, "auto", verify=False, slo=Slo(ttft_s=5.0, tpot_s=0.3), **SHORT_GRID)
    off = _plan(SHORT, "off", verify=False, slo=Slo(ttft_s=5.0, tpot_s=0.3), **SHORT_GRID)
    assert auto.speculative is None
    assert (auto.replicas, auto.cost_usd_per_hour) == (off.replicas, off.cost_usd_per_hour)
    section = auto.justification.speculative
    assert section.trials and all(t.tpot_s is None or t.tpot_s > section.tpot_s_without for t in section.trials)
    assert min(t.crossover_batch for t in section.trials) < section.mean_running_sequences


def test_a_given_acceptance_rate_replaces_the_default():
    """A measured α of 0.6 (pin.acceptance_rate) instead of EAGLE's 0.8: at k 5 a step then emits
    E = (1 − 0.6⁶)/0.4 = 2.38336 tokens, not 3.69; the plan says the rate was given."""
    plan = _plan(LOW_LOAD, "on", verify=False, pin=Pin(acceptance_rate=0.6, draft_tokens=5))
    chosen = plan.speculative
    assert chosen.acceptance_rate == 0.6 and "given" in chosen.acceptance_source
    assert chosen.tokens_per_step == pytest.approx((1 - 0.6**6) / 0.4) == pytest.approx(2.38336)


def test_auto_plans_again_without_speculation_when_the_simulator_refutes_every_plan(monkeypatch):
    """When the simulator refutes every plan the search proposes with speculation offered (its verification
    rounds exhausted: bench/plan_latency.py's request #1 at 200 requests/s), auto answers the plan off
    would have given, saying why, rather than the 422 off would not have given."""
    from planner import planning

    searched = planning._search

    def refuted_with_speculation(planner, space, request):
        if request.constraints.speculative == "auto":
            raise InfeasiblePlanError("every plan refuted", constraint="verification", adjustments=[{}, {}, {}])
        return searched(planner, space, request)

    monkeypatch.setattr(planning, "_search", refuted_with_speculation)
    auto, off = _plan(LOW_LOAD, "auto", verify=False), _plan(LOW_LOAD, "off", verify=False)
    assert auto.speculative is None
    assert (auto.row.gpu, auto.replicas, auto.cost_usd_per_hour) == (off.row.gpu, off.replicas, off.cost_usd_per_hour)
    assert auto.predicted == off.predicted
    assert "refuted every plan" in auto.justification.speculative.reason and "(3 tried)" in auto.justification.speculative.reason
