// Headroom plan explorer: asks POST /v1/plans or POST /v1/capacity from the form, shows the answer
// in words (the plan's decision, cost, the work its prefix cache and speculative decoding save, binding and
// sensitivity sections), its charts, downloads and a recheck on today's catalog,
// the stored plans (newest first, a page at a time) and the deployments with their plan history. Hand-written, no dependencies, no build step;
// every request goes to this service (the page's own origin and path prefix).
"use strict";

(function () {
  const body = document.body;
  const PREFIX = body.dataset.prefix || "";
  const CHARTS = (body.dataset.charts || "").split(",").filter(Boolean);
  //: The charts a stored class plan has (api/charts.py "class plans"); its knee and cost answer 422.
  const CLASS_CHARTS = ["wall", "alternatives", "pools"];
  const $ = (id) => document.getElementById(id);

  //: The stored plan the recheck button asks about (null while none is shown): an answer that arrives
  //: after another plan was opened is dropped, not shown under the wrong plan.
  let recheckPlanId = null;

  // --- small helpers ---------------------------------------------------------------------------

  /** An element with attributes and children (strings become text nodes: nothing is parsed as HTML). */
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (name === "dataset") Object.assign(node.dataset, value);
      else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
      else node.setAttribute(name, value === true ? "" : String(value));
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  const numberFormats = new Map();
  function num(value, digits = 2) {
    if (value === null || value === undefined) return "—";
    if (!numberFormats.has(digits)) {
      numberFormats.set(digits, new Intl.NumberFormat("en-US", { maximumFractionDigits: digits }));
    }
    return numberFormats.get(digits).format(value);
  }
  function usd(value) {
    if (value === null || value === undefined) return "—";
    return "$" + new Intl.NumberFormat("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 2 }).format(value);
  }
  function signedUsd(value) {
    if (value === null || value === undefined) return "—";
    return (value >= 0 ? "+" : "−") + usd(Math.abs(value));
  }
  function precision(weights, kv) {
    return weights === kv ? `${weights} weights and KV cache` : `${weights} weights, ${kv} KV cache`;
  }
  function percent(fraction, digits = 1) {
    return fraction === null || fraction === undefined ? "—" : `${num(fraction * 100, digits)} %`;
  }
  function ms(seconds) {
    return seconds === null || seconds === undefined ? "—" : `${num(seconds * 1000, 1)} ms`;
  }
  function chunk(tokens) {
    return tokens === null || tokens === undefined ? "no chunked prefill" : `chunked prefill ${num(tokens, 0)} tokens`;
  }

  function apiKey() {
    return $("api-key").value.trim();
  }

  /** The JSON API: {ok, status, data}; a network failure is {ok: false, status: 0}. */
  async function api(path, options = {}) {
    const headers = { Accept: "application/json" };
    if (options.body !== undefined) headers["Content-Type"] = "application/json";
    if (apiKey()) headers.Authorization = `Bearer ${apiKey()}`;
    let response;
    try {
      response = await fetch(PREFIX + path, {
        method: options.method || "GET",
        headers,
        body: options.body === undefined ? undefined : JSON.stringify(options.body),
      });
    } catch (error) {
      return { ok: false, status: 0, data: { title: "The service did not answer", detail: String(error) } };
    }
    let data = null;
    try {
      data = await response.json();
    } catch (error) {
      data = { title: `HTTP ${response.status}`, detail: "The answer was not JSON." };
    }
    return { ok: response.ok, status: response.status, data };
  }

  function setStatus(text, kind) {
    const status = $("status");
    status.textContent = text;
    status.className = kind || "";
  }

  /** A problem document (RFC 9457) in words, with an infeasible plan's relaxations as what would change it. */
  function problemView(problem) {
    const parts = [el("p", { class: "problem-title" }, problem.title || "The request failed"), el("p", {}, problem.detail || "")];
    if (Array.isArray(problem.errors) && problem.errors.length) {
      parts.push(el("ul", {}, problem.errors.map((e) => el("li", {}, `${e.field}: ${e.message}`))));
    }
    if (Array.isArray(problem.relaxations) && problem.relaxations.length) {
      const how = problem.relaxations_apply === "all" ? "All of these together would make it possible:" : "Any one of these would make it possible:";
      parts.push(
        el("p", {}, how),
        el(
          "ul",
          { id: "relaxations" },
          problem.relaxations.map((r) =>
            el(
              "li",
              {},
              `${r.constraint}: ${r.current === null ? "unset" : num(r.current)} → ${num(r.value)}${r.unit ? " " + r.unit : ""}`,
              r.cost_usd_per_hour !== null && r.cost_usd_per_hour !== undefined ? ` (the plan would cost ${usd(r.cost_usd_per_hour)} per hour)` : "",
            ),
          ),
        ),
      );
    }
    return el("div", { class: "problem", role: "alert" }, parts);
  }

  // --- the catalog the form offers ---------------------------------------------------------------

  async function loadCatalog() {
    const [models, gpus] = await Promise.all([api("/v1/models?limit=500"), api("/v1/gpus?limit=500")]);
    const modelSelect = $("model");
    modelSelect.replaceChildren();
    if (models.ok) {
      for (const model of models.data.items) modelSelect.append(el("option", { value: model.slug }, `${model.name} (${model.slug})`));
      if (models.data.items.some((m) => m.slug === "llama-3.1-8b")) modelSelect.value = "llama-3.1-8b";
    } else {
      modelSelect.append(el("option", { value: "" }, "the models could not be read"));
    }
    const allowed = $("gpus-allowed");
    const capacityGpu = $("capacity-gpu");
    allowed.replaceChildren(allowed.querySelector("legend"));
    capacityGpu.replaceChildren();
    if (!gpus.ok) {
      allowed.append(el("p", { class: "muted" }, "The GPUs could not be read: " + (gpus.data.detail || gpus.status)));
      return;
    }
    const grid = el("div", { class: "check-grid" });
    for (const gpu of gpus.data.items) {
      const id = `gpu-allow-${gpu.slug}`;
      grid.append(el("div", { class: "check" }, el("input", { type: "checkbox", id, value: gpu.slug, name: "gpus" }), el("label", { for: id }, gpu.slug)));
      capacityGpu.append(el("option", { value: gpu.slug }, `${gpu.name} (${gpu.slug})`));
    }
    allowed.append(grid);
    if (gpus.data.items.some((g) => g.slug === "h100-sxm")) capacityGpu.value = "h100-sxm";
  }

  // --- the question ------------------------------------------------------------------------------

  function mode() {
    return $("mode-capacity").checked ? "capacity" : "plan";
  }

  function showMode() {
    const capacity = mode() === "capacity";
    for (const node of document.querySelectorAll(".plan-only")) node.hidden = capacity;
    for (const node of document.querySelectorAll(".capacity-only")) node.hidden = !capacity;
    $("verify").checked = !capacity; // capacity's own default is no simulation (POST /v1/capacity `verify`)
  }

  function numberOf(id) {
    const text = $(id).value.trim();
    return text === "" ? undefined : Number(text);
  }
  function integerOf(id) {
    const value = numberOf(id);
    return value === undefined ? undefined : Math.round(value);
  }

  function workloadShape() {
    return {
      prompt_tokens: { mean: numberOf("prompt-mean"), p99: numberOf("prompt-p99") },
      output_tokens: { mean: numberOf("output-mean"), p99: numberOf("output-p99") },
    };
  }

  function slo() {
    const targets = {};
    if (numberOf("ttft") !== undefined) targets.ttft_ms = numberOf("ttft");
    if (numberOf("tpot") !== undefined) targets.tpot_ms = numberOf("tpot");
    return targets;
  }

  /** workload.prefix_reuse as the form says it: a shared system prompt, a measured hit rate, or none
   * (undefined). A field left empty is left out, and the API answers 422 naming what is missing. */
  function prefixReuse() {
    const kind = $("prefix-reuse").value;
    if (kind === "system_prompt") {
      return { system_prompt_tokens: numberOf("system-prompt-tokens"), system_prompt_fraction: numberOf("system-prompt-fraction") };
    }
    if (kind === "hit_rate") return { hit_rate: numberOf("hit-rate") };
    return undefined;
  }

  function showPrefixReuse() {
    const kind = $("prefix-reuse").value;
    $("prefix-system-prompt").hidden = kind !== "system_prompt";
    $("prefix-hit-rate").hidden = kind !== "hit_rate";
  }

  /** The POST /v1/plans body the form says: a dry run unless a key is given. */
  function planRequest() {
    const constraints = {};
    const gpus = [...document.querySelectorAll("#gpus-allowed input:checked")].map((box) => box.value);
    if (gpus.length) constraints.gpus = gpus;
    if (integerOf("max-gpus") !== undefined) constraints.max_gpus = integerOf("max-gpus");
    if (numberOf("budget") !== undefined) constraints.budget_usd_per_hour = numberOf("budget");
    const speculative = $("speculative");
    if (speculative.value !== speculative.dataset.default) constraints.speculative = speculative.value; // the default is the API's
    const workload = { arrival_rate_rps: numberOf("arrival-rate"), ...workloadShape() };
    const reuse = prefixReuse();
    if (reuse) workload.prefix_reuse = reuse;
    if ($("task").value) workload.task = $("task").value;
    const request = {
      model: $("model").value,
      workload,
      slo: slo(),
      constraints,
      verify: $("verify").checked,
      store: apiKey() !== "",
    };
    const name = $("deployment-name").value.trim();
    if (request.store && name) request.name = name;
    return request;
  }

  function capacityRequest() {
    return {
      model: $("model").value,
      gpu: $("capacity-gpu").value,
      gpus: integerOf("capacity-gpus"),
      workload: workloadShape(),
      slo: slo(),
      verify: $("verify").checked,
    };
  }

  async function ask(event) {
    event.preventDefault();
    const button = $("submit");
    button.disabled = true;
    clearAnswer();
    try {
      if (mode() === "plan") {
        setStatus("Planning… (searching, then verifying in the simulator)", "busy");
        const answer = await api("/v1/plans", { method: "POST", body: planRequest() });
        if (!answer.ok) return showProblem(answer.data);
        showPlan(answer.data, answer.status === 201);
        if (answer.status === 201) {
          loadPlans();
          loadDeployments();
        }
      } else {
        setStatus("Estimating capacity…", "busy");
        const answer = await api("/v1/capacity", { method: "POST", body: capacityRequest() });
        if (!answer.ok) return showProblem(answer.data);
        showCapacity(answer.data);
        if (body.dataset.capacityChart === "true") await showCapacityChart(capacityRequest());
      }
    } finally {
      button.disabled = false;
    }
  }

  // --- answers -------------------------------------------------------------------------------------

  function clearAnswer() {
    $("answer-body").replaceChildren();
    $("answer-body").hidden = true;
    $("charts").hidden = true;
    if ($("pools-chart")) $("pools-chart").hidden = true;
    $("downloads").hidden = true;
    for (const img of document.querySelectorAll("#charts img, #pools-chart img")) img.removeAttribute("src");
    recheckPlanId = null;
    $("recheck").hidden = true;
    $("recheck-answer").replaceChildren();
  }

  function showAnswer(nodes, statusText) {
    const answerBody = $("answer-body");
    answerBody.replaceChildren(...nodes);
    answerBody.hidden = false;
    setStatus(statusText, "done");
    $("answer").focus();
  }

  function showProblem(problem) {
    showAnswer([problemView(problem)], "No answer: " + (problem.title || "the request failed") + ".");
    $("status").className = "error";
  }

  /** A figure with a raw value for machines (data-value) and words for people. */
  function fact(id, label, value, text) {
    return el("div", {}, el("dt", {}, label), el("dd", { id, dataset: { value: value === null || value === undefined ? "" : String(value) } }, text));
  }
  function replicas(count) {
    return `${count} ${count === 1 ? "replica" : "replicas"}`;
  }

  function bindingView(binding) {
    if (!Array.isArray(binding) || !binding.length) return [];
    const items = [];
    for (const entry of binding) {
      if (entry.kind === "slo") {
        const metric = entry.constraint.replace("slo_", "").toUpperCase();
        const unitMs = entry.constraint !== "slo_e2e";
        const show = (s) => (unitMs ? `${num(s * 1000, 1)} ms` : `${num(s, 2)} s`);
        const saved = entry.relaxed_saving_usd_per_hour;
        const looser = `A ${num(entry.relax_by * 100, 0)} % looser target`;
        const saving =
          saved === null || saved === undefined
            ? ""
            : saved >= 0.005
              ? ` ${looser} would save ${usd(saved)} per hour.`
              : ` ${looser} would save nothing.`;
        items.push(
          el(
            "li",
            { class: entry.binding ? "binds" : "" },
            el("strong", {}, entry.binding ? `${metric} binds: ` : `${metric} holds: `),
            `${show(entry.predicted_at_plan_s)} predicted against a target of ${show(entry.target_s)} (slack ${show(entry.slack_s)}).${saving}`,
          ),
        );
      } else if (entry.kind === "capacity") {
        if (entry.binding) items.push(el("li", { class: "binds" }, el("strong", {}, `${entry.constraint} binds: `), entry.detail));
      } else if (entry.binding) {
        items.push(
          el("li", { class: "binds" }, el("strong", {}, `${entry.constraint} binds: `), `${num(entry.value)} against a limit of ${num(entry.limit)} ${entry.unit} (slack ${num(entry.slack)}).`),
        );
      }
    }
    return [el("h3", {}, "What binds"), el("ul", { id: "answer-binding" }, items)];
  }

  function sensitivityView(sensitivity, costPerHour) {
    if (!sensitivity) return [];
    const rows = sensitivity.traffic.map((level) =>
      el(
        "tr",
        {},
        el("td", {}, `${num(level.traffic_factor)}× (${num(level.arrival_rate_rps)} req/s)`),
        el("td", {}, level.gpu ? `${num(level.gpus, 0)} × ${level.gpu} (tp ${level.tp}, ${replicas(level.replicas)})` : level.breaks || level.note || "nothing serves it"),
        el("td", { class: "num" }, usd(level.cost_usd_per_hour)),
        el("td", { class: "num" }, signedUsd(level.cost_increase_usd_per_hour)),
      ),
    );
    const headroom = `This plan serves up to ${num(sensitivity.max_arrival_rate_rps_within_slo)} req/s within the targets (${num(sensitivity.headroom_fraction * 100, 0)} % headroom over the asked rate).`;
    return [
      el("h3", {}, "What would change it"),
      el("p", { id: "answer-headroom" }, headroom),
      el(
        "table",
        { id: "answer-sensitivity" },
        el("caption", {}, `More traffic, re-planned (this plan: ${usd(costPerHour)} per hour)`),
        el("thead", {}, el("tr", {}, el("th", { scope: "col" }, "Traffic"), el("th", { scope: "col" }, "Plan"), el("th", { scope: "col" }, "Per hour"), el("th", { scope: "col" }, "Change"))),
        el("tbody", {}, rows),
      ),
    ];
  }

  function alternativesView(alternatives) {
    if (!Array.isArray(alternatives) || !alternatives.length) return [];
    const rows = alternatives.map((alt) =>
      el(
        "tr",
        {},
        el("td", {}, alt.kind === "gpu" ? alt.name : `${alt.name} precision`),
        el("td", {}, alt.gpus ? `${num(alt.gpus, 0)} × ${alt.gpu} (tp ${alt.tp}, ${replicas(alt.replicas)})` : "—"),
        el("td", { class: "num" }, alt.cost_usd_per_hour !== null ? usd(alt.cost_usd_per_hour) : alt.cost_at_least_usd_per_hour !== null && alt.cost_at_least_usd_per_hour !== undefined ? `≥ ${usd(alt.cost_at_least_usd_per_hour)}` : "—"),
        el("td", {}, alt.reason),
      ),
    );
    return [
      el(
        "table",
        { id: "answer-alternatives" },
        el("caption", {}, "The alternatives, and why they lost"),
        el("thead", {}, el("tr", {}, el("th", { scope: "col" }, "Option"), el("th", { scope: "col" }, "Its best plan"), el("th", { scope: "col" }, "Per hour"), el("th", { scope: "col" }, "Why not"))),
        el("tbody", {}, rows),
      ),
    ];
  }

  /** One pool in words: "3 × tp 2 h100-sxm (fp8 weights and KV cache), 8,192 tokens per step". */
  function poolText(pool) {
    const limit = pool.batch_limit === null || pool.batch_limit === undefined ? `${num(pool.chunk_tokens, 0)} tokens per step` : `batch limit ${num(pool.batch_limit, 0)}`;
    return `${replicas(pool.replicas)} of tp ${pool.tp} ${pool.gpu} (${precision(pool.precision.weights, pool.precision.kv_cache)}), ${limit}`;
  }

  /** A disaggregated plan's pools as a table: configuration, GPUs, utilisation, what set the size, cost. */
  function poolsView(plan) {
    const section = plan.disaggregation || {};
    const why = new Map((section.pools || []).map((p) => [p.role, p]));
    const rows = plan.plan.pools.map((pool) => {
      const j = why.get(pool.role) || {};
      return el(
        "tr",
        { dataset: { role: pool.role } },
        el("th", { scope: "row" }, pool.role),
        el("td", {}, pool.gpu),
        el("td", { class: "num" }, num(pool.tp, 0)),
        el("td", { class: "num" }, num(pool.replicas, 0)),
        el("td", { class: "num" }, num(pool.tp * (pool.pp || 1) * pool.replicas, 0)),
        el("td", {}, `${pool.precision.weights}/${pool.precision.kv_cache}`),
        el("td", { class: "num" }, pool.batch_limit === null ? "—" : num(pool.batch_limit, 0)),
        el("td", { class: "num" }, pool.chunk_tokens === null ? "—" : num(pool.chunk_tokens, 0)),
        el("td", { class: "num" }, j.rho === undefined ? "—" : num(j.rho, 2)),
        el("td", {}, j.binding || "—"),
        el("td", { class: "num" }, usd(j.cost_usd_per_hour)),
      );
    });
    const transfer = section.transfer
      ? el("p", { id: "answer-transfer" }, `The KV cache crosses ${section.transfer.link}: ${num(section.transfer.p99_ms, 1)} ms for a p${num(section.percentile, 0)} prompt, ${num(section.transfer.mean_ms, 1)} ms on average.`)
      : [];
    return [
      el("h3", {}, "Pools"),
      el(
        "table",
        { id: "answer-pools" },
        el("caption", {}, section.why || "Separate prefill and decode pools"),
        el("thead", {}, el("tr", {}, ["Pool", "GPU", "tp", "Replicas", "GPUs", "Precision", "Batch limit", "Tokens per step", "ρ", "Binding", "Per hour"].map((h) => el("th", { scope: "col" }, h)))),
        el("tbody", {}, rows),
      ),
      transfer,
      section.interference_removed ? el("p", { class: "muted" }, `Interference removed: ${section.interference_removed}.`) : [],
    ];
  }

  //: plan.prefix_caching.routing in words (api/schemas/plan_result.py PrefixCachingRead).
  const ROUTING = {
    prefix_aware: "prefix-aware: each prefix to one replica",
    random: "random: any load balancer",
    as_measured: "as the hit rate was measured",
  };

  /** One row of the with/without table: raw values for machines (data-without, data-with), words for people,
   * and the change from without to with, signed (a lever can buy a lower cost with a higher latency: fewer
   * replicas). `missing` says what a null "without" means (the API's reason), "—" when not given. */
  function leverRow(id, label, without, withIt, show, missing = "—") {
    const known = (v) => v !== null && v !== undefined;
    const change = known(without) && known(withIt) ? withIt - without : null;
    return el(
      "tr",
      { dataset: { row: id, without: without ?? "", with: withIt ?? "" } },
      el("th", { scope: "row" }, label),
      el("td", { class: "num" }, known(without) ? show(without) : missing),
      el("td", { class: "num" }, show(withIt)),
      el("td", { class: "num" }, change === null ? "—" : (change > 0 ? "+" : change < 0 ? "−" : "") + show(Math.abs(change))),
    );
  }

  /** What the plan's prefix cache (plan.prefix_caching, justification.prefix_caching) and speculative
   * decoding (plan.speculative, justification.speculative) save: each lever's parameters, and the
   * planner's figures without and with it; a lever asked for but not deployed, with the planner's reason.
   * Nothing when the plan deploys neither and no prefix reuse was asked for. */
  function workSavedView(plan) {
    const cache = plan.plan.prefix_caching;
    const draft = plan.plan.speculative;
    const justification = plan.justification || {};
    if (!cache && !draft && !justification.prefix_caching) return [];
    const at = plan.predicted ? `p${num(plan.predicted.percentile, 1)}` : "at the SLO's percentile";
    const nodes = [el("h3", { id: "work-saved" }, "Work saved")];
    const rows = [];
    if (!cache && justification.prefix_caching) {
      nodes.push(el("h4", {}, "Prefix cache"), el("p", { id: "answer-prefix-none" }, `None deployed: ${justification.prefix_caching.reason}.`));
    }
    if (cache) {
      const section = justification.prefix_caching || {};
      nodes.push(
        el("h4", {}, "Prefix cache"),
        el(
          "dl",
          { class: "facts", id: "answer-prefix-caching" },
          fact("answer-prefix-hit-rate", "Hit rate", cache.hit_rate, percent(cache.hit_rate)),
          fact("answer-prefix-cache-tokens", "Cache per replica", cache.cache_tokens, `${num(cache.cache_tokens, 0)} tokens`),
          fact("answer-prefix-routing", "Routing", cache.routing, ROUTING[cache.routing] || cache.routing),
          fact("answer-prefix-saved", "Prefill tokens saved", cache.prefill_tokens_saved_fraction, percent(cache.prefill_tokens_saved_fraction)),
        ),
        section.reason ? el("p", { class: "muted" }, `Why: ${section.reason}.`) : [],
      );
      rows.push(
        leverRow("prefix-ttft", `TTFT ${at}, without and with the prefix cache`, section.ttft_s_without, section.ttft_s_with, ms),
        leverRow("prefix-cost", "Per hour, without and with the prefix cache", section.cost_usd_per_hour_without, section.cost_usd_per_hour_with, usd),
      );
    }
    if (!draft && justification.speculative) {
      nodes.push(el("h4", {}, "Speculative decoding"), el("p", { id: "answer-spec-none" }, `None deployed: ${justification.speculative.reason}.`));
    }
    if (draft) {
      const section = justification.speculative || {};
      const trial = (section.trials || []).find((t) => t.method === draft.method && t.draft_tokens === draft.draft_tokens) || {};
      const crossover = draft.crossover_batch === null ? "none: it pays at any batch" : `${num(draft.crossover_batch, 0)} sequences`;
      nodes.push(
        el("h4", {}, "Speculative decoding"),
        el(
          "dl",
          { class: "facts", id: "answer-speculative" },
          fact("answer-spec-method", "Draft method", draft.method, draft.method),
          fact("answer-spec-k", "Draft tokens k", draft.draft_tokens, num(draft.draft_tokens, 0)),
          fact("answer-spec-alpha", "Acceptance α", draft.acceptance_rate, num(draft.acceptance_rate, 3)),
          fact("answer-spec-e", "Tokens per step E", draft.tokens_per_step, num(draft.tokens_per_step, 2)),
          fact("answer-spec-crossover", "Crossover batch", draft.crossover_batch, crossover),
          section.mean_running_sequences === undefined
            ? []
            : fact("answer-spec-running", "Running per replica", section.mean_running_sequences, `${num(section.mean_running_sequences, 1)} sequences`),
        ),
        el(
          "p",
          { class: "muted" },
          `E = (1 − α^(k+1))/(1 − α) tokens per sequence and verify step; past the crossover batch the verify step is compute-bound enough that speculation stops paying. α: ${draft.acceptance_source}.`,
        ),
        section.reason ? el("p", { class: "muted" }, `Why: ${section.reason}.`) : [],
      );
      rows.push(
        // tpot_s_without is null where the plan's per-replica load is unstable without speculation
        leverRow("spec-tpot", `TPOT ${at}, without and with speculation`, section.tpot_s_without, trial.tpot_s, ms, "overloaded"),
        leverRow("spec-cost", "Per hour, without and with speculation", section.cost_usd_per_hour_without, plan.cost.usd_per_hour, usd),
      );
    }
    if (!rows.length) return nodes;
    nodes.push(
      el(
        "table",
        { id: "answer-work-saved" },
        el("caption", {}, "Each lever's figures without and with it, as the planner predicted them (— where it gives none)"),
        el("thead", {}, el("tr", {}, ["Figure", "Without", "With", "Change"].map((h) => el("th", { scope: "col" }, h)))),
        el("tbody", {}, rows),
      ),
    );
    return nodes;
  }

  /** A class plan (POST /v1/plans with `classes`): its chosen arrangement against the others, each
   * pool with the classes it serves, and each class's figures at its percentile; stored, its charts
   * (wall, alternatives, pools: CLASS_CHARTS), its CSV (a row per class), deploy files and recheck. */
  function showClassPlan(plan, stored) {
    const gpus = plan.pools.reduce((n, p) => n + p.replicas * p.tp, 0);
    const chosen = plan.arrangement.chosen;
    const poolText = (p) => `${p.name} for ${p.classes.join(", ")}: ${num(p.replicas * p.tp, 0)} × ${p.gpu}, ${replicas(p.replicas)} of tp ${p.tp}${p.scheduling === "priority" ? ", priority scheduling" : ""}`;
    const poolRows = plan.pools.map((p) =>
      el(
        "tr",
        { dataset: { pool: p.name } },
        el("th", { scope: "row" }, p.name),
        el("td", {}, p.classes.join(", ")),
        el("td", {}, p.scheduling),
        el("td", {}, p.gpu),
        el("td", { class: "num" }, num(p.tp, 0)),
        el("td", { class: "num" }, num(p.replicas, 0)),
        el("td", { class: "num" }, num(p.replicas * p.tp, 0)),
        el("td", {}, `${p.precision.weights}/${p.precision.kv_cache}`),
        el("td", { class: "num" }, num(p.batch_limit, 0)),
        el("td", { class: "num" }, p.chunk_tokens === null ? "—" : num(p.chunk_tokens, 0)),
        el("td", { class: "num" }, `${num(p.utilisation * 100, 0)} %`),
        el("td", { class: "num" }, usd(p.cost_usd_per_hour)),
      ),
    );
    const classRows = plan.classes.map((k) =>
      el(
        "tr",
        { dataset: { class: k.name } },
        el("th", { scope: "row" }, k.name),
        el("td", {}, k.pool),
        el("td", { class: "num" }, num(k.priority, 0)),
        el("td", { class: "num" }, `p${num(k.percentile, 1)}`),
        el("td", { class: "num" }, `${num(k.ttft_ms, 1)} ms`),
        el("td", { class: "num" }, `${num(k.tpot_ms, 1)} ms`),
        el("td", { class: "num" }, `${num(k.e2e_s, 2)} s`),
        el("td", { class: "num" }, k.deadline_h === null ? "—" : `${num(k.deadline_h)} h`),
        el("td", {}, k.meets_target ? "yes" : "no"),
        el("td", { class: "num" }, `${num(k.shed_fraction * 100, 1)} %`),
      ),
    );
    const arrangementRows = plan.arrangement.compared.map((a) =>
      el(
        "tr",
        { class: a.name === chosen ? "current" : "", dataset: { arrangement: a.name } },
        el("th", { scope: "row" }, a.name === chosen ? `${a.name} (chosen)` : a.name),
        el("td", { class: "num" }, usd(a.cost_usd_per_hour)),
        el("td", {}, a.reason),
      ),
    );
    const table = (id, caption, headings, rows) =>
      el("table", { id }, el("caption", {}, caption), el("thead", {}, el("tr", {}, headings.map((h) => el("th", { scope: "col" }, h)))), el("tbody", {}, rows));
    const nodes = [
      el("p", { id: "answer-summary", class: "lead" }, `Serve ${plan.classes.length} traffic classes as ${chosen}: ${plan.pools.map(poolText).join("; ")}.`),
      el("p", { id: "answer-cost" }, `It costs ${usd(plan.cost_usd_per_hour)} per hour, ${usd(plan.cost_usd_per_hour * 730)} per month (730 h).`),
      el(
        "dl",
        { class: "facts" },
        fact("answer-arrangement", "Arrangement", chosen, chosen),
        fact("answer-gpus", "GPUs", gpus, num(gpus, 0)),
        fact("answer-cost-hour", "Per hour", plan.cost_usd_per_hour, usd(plan.cost_usd_per_hour)),
      ),
      el("h3", {}, "Pools"),
      table("answer-class-pools", "The chosen arrangement's pools", ["Pool", "Classes", "Scheduling", "GPU", "tp", "Replicas", "GPUs", "Precision", "Batch limit", "Tokens per step", "Utilisation", "Per hour"], poolRows),
      el("h3", {}, "Classes"),
      table("answer-classes", "Each class at its percentile", ["Class", "Pool", "Priority", "Percentile", "TTFT", "TPOT", "End to end", "Deadline", "Meets target", "Shed"], classRows),
      el("h3", {}, "Arrangements compared"),
      table("answer-arrangements", "The arrangements priced, the cheapest chosen", ["Arrangement", "Per hour", "Why"], arrangementRows),
      el(
        "p",
        { id: "answer-stored", class: "muted" },
        stored ? `Class plan ${plan.id}, stored${plan.name ? ` as deployment ${plan.name}'s plan` : ""}.` : "A dry run: answered, not stored.",
      ),
    ];
    showAnswer(nodes, `Class plan: ${chosen}, ${num(gpus, 0)} GPUs, ${usd(plan.cost_usd_per_hour)} per hour.`);
    if (stored) showStoredExtras(plan.id, false, true);
  }

  function showPlan(plan, stored) {
    if (plan.arrangement) return showClassPlan(plan, stored);
    const decision = plan.plan;
    const cost = plan.cost;
    const pooled = decision.topology === "disaggregated";
    const section = plan.disaggregation || {};
    const rows = decision.fleet && decision.fleet.length ? decision.fleet : null;
    const what = pooled
      ? `Run separate pools on ${num(decision.gpus_total, 0)} GPUs: prefill ${decision.pools.filter((p) => p.role === "prefill").map(poolText).join("; ")}; decode ${decision.pools.filter((p) => p.role === "decode").map(poolText).join("; ")}.`
      : rows
      ? `Buy a mixed fleet of ${num(decision.gpus_total, 0)} GPUs: ` + rows.map((r) => `${num(r.gpus, 0)} × ${r.gpu} (tp ${r.tp}, ${replicas(r.replicas)}, batch ${r.batch_limit})`).join("; ") + "."
      : `Buy ${num(decision.gpus_total, 0)} × ${decision.gpu}: ${replicas(decision.replicas)} of tp ${decision.tp}, ${precision(decision.precision.weights, decision.precision.kv_cache)}, batch limit ${num(decision.batch_limit, 0)}, ${chunk(decision.chunk_tokens)}, at ${num(decision.target_rho * 100, 0)} % utilisation.`;
    const nodes = [
      el("p", { id: "answer-summary", class: "lead" }, what),
      el("p", { id: "answer-cost" }, `It costs ${usd(cost.usd_per_hour)} per hour, ${usd(cost.usd_per_month)} per month (730 h), ${usd(cost.usd_per_million_output_tokens)} per million output tokens.`),
      el(
        "dl",
        { class: "facts" },
        fact("answer-gpu", "GPU", decision.gpu, pooled ? [...new Set(decision.pools.map((p) => p.gpu))].join(" / ") : decision.gpu),
        fact("answer-gpus", "GPUs", decision.gpus_total, num(decision.gpus_total, 0)),
        pooled
          ? fact("answer-replicas", "Replicas × tp", decision.replicas, decision.pools.map((p) => `${p.role} ${p.replicas} × ${p.tp}`).join(", "))
          : fact("answer-replicas", "Replicas × tp", decision.replicas, `${decision.replicas} × ${decision.tp}`),
        fact("answer-cost-hour", "Per hour", cost.usd_per_hour, usd(cost.usd_per_hour)),
        fact("answer-cost-month", "Per month", cost.usd_per_month, usd(cost.usd_per_month)),
        plan.predicted ? fact("answer-ttft", "TTFT p99", plan.predicted.ttft_ms.p99, `${num(plan.predicted.ttft_ms.p99, 1)} ms`) : [],
        plan.predicted ? fact("answer-tpot", "TPOT p99", plan.predicted.tpot_ms.p99, `${num(plan.predicted.tpot_ms.p99, 1)} ms`) : [],
        pooled ? fact("answer-ttft", `TTFT p${num(section.percentile, 0)}`, section.predicted_ttft_ms, `${num(section.predicted_ttft_ms, 1)} ms`) : [],
        pooled ? fact("answer-tpot", `TPOT p${num(section.percentile, 0)}`, section.predicted_tpot_ms, `${num(section.predicted_tpot_ms, 1)} ms`) : [],
      ),
    ];
    if (pooled) nodes.push(...poolsView(plan));
    if (Array.isArray(plan.warnings) && plan.warnings.length) nodes.push(el("ul", { class: "warnings" }, plan.warnings.map((w) => el("li", {}, w.message))));
    nodes.push(...workSavedView(plan));
    if (plan.justification) {
      nodes.push(...bindingView(plan.justification.binding));
      nodes.push(...sensitivityView(plan.justification.sensitivity, cost.usd_per_hour));
      nodes.push(...alternativesView(plan.justification.alternatives));
    }
    if (plan.batch_job) nodes.push(el("p", {}, `The job finishes in ${num(plan.batch_job.finish_h)} h and costs ${usd(plan.batch_job.cost_usd)} in all. ${plan.batch_job.billing}`));
    nodes.push(
      el(
        "p",
        { id: "answer-stored", class: "muted" },
        stored
          ? `Plan ${plan.id}, stored${plan.name ? ` as deployment ${plan.name}'s plan` : ""}.`
          : "A dry run: answered, not stored. Give a planner key to store it and get its charts, CSV and deploy files.",
      ),
    );
    showAnswer(
      nodes,
      pooled
        ? `Plan: separate prefill and decode pools, ${num(decision.gpus_total, 0)} GPUs, ${usd(cost.usd_per_hour)} per hour.`
        : `Plan: ${num(decision.gpus_total, 0)} × ${decision.gpu}, ${usd(cost.usd_per_hour)} per hour.`,
    );
    if (stored) showStoredExtras(plan.id, pooled);
  }

  /** With HEADROOM_REQUIRE_AUTH a stored plan's charts and files need the key too, and neither an
   * <img src> nor a link can send an Authorization header: fetch them with it and show or save a
   * blob: URL of this page. Without it, plain URLs (the browser caches and streams them). */
  const keyedFiles = () => body.dataset.requireAuth === "true";

  async function keyedBlobUrl(url, accept) {
    const headers = { Accept: accept };
    if (apiKey()) headers.Authorization = `Bearer ${apiKey()}`;
    let response;
    try {
      response = await fetch(url, { headers });
    } catch (error) {
      return null;
    }
    if (!response.ok) {
      setStatus(`${url} answered HTTP ${response.status}.`, "error");
      return null;
    }
    return URL.createObjectURL(await response.blob());
  }

  async function showChart(name, url) {
    if (!keyedFiles()) {
      $(`chart-${name}`).src = url;
      return;
    }
    const blob = await keyedBlobUrl(url, "image/svg+xml");
    if (blob) $(`chart-${name}`).src = blob;
  }

  /** A download link to `url`: a plain link, or (with keyed files) one that fetches with the key on click. */
  function setDownload(link, url, filename) {
    link.href = url;
    link.setAttribute("download", filename);
    link.onclick = keyedFiles()
      ? async (event) => {
          event.preventDefault();
          const blob = await keyedBlobUrl(url, "*/*");
          if (!blob) return;
          const save = el("a", { href: blob, download: filename, hidden: "" });
          document.body.append(save);
          save.click();
          save.remove();
          setTimeout(() => URL.revokeObjectURL(blob), 60_000);
        }
      : null;
  }

  /** An image's alt text and its figure's caption for a class plan (data-class-caption) or any other (data-caption). */
  function caption(img, classes) {
    const text = (classes && img.dataset.classCaption) || img.dataset.caption;
    if (!text) return;
    img.alt = text;
    const figcaption = img.closest("figure")?.querySelector("figcaption");
    if (figcaption) figcaption.textContent = text;
  }

  /** A stored plan's charts, downloads and recheck. A disaggregated plan (`pooled`) has no one queue for
   * the wall, knee, cost and alternatives charts: its pools chart is shown in their place. A class plan
   * (`classes`) has a wall (each class's latency against the classes' rate), alternatives (its
   * arrangements) and pools chart, no knee or cost (the service answers 422 for those: not asked). */
  function showStoredExtras(planId, pooled, classes = false) {
    const id = encodeURIComponent(planId);
    const oneQueue = classes ? CHARTS.filter((name) => CLASS_CHARTS.includes(name)) : pooled ? [] : CHARTS;
    for (const name of CHARTS) {
      const img = $(`chart-${name}`);
      const shown = oneQueue.includes(name);
      img.closest("figure").hidden = !shown;
      caption(img, classes);
      if (shown) showChart(name, `${PREFIX}/v1/plans/${id}/charts/${name}.svg`);
      else img.removeAttribute("src");
    }
    $("charts").hidden = !oneQueue.length;
    const poolsChart = $("pools-chart");
    if (poolsChart) {
      const img = $("chart-pools");
      caption(img, classes);
      if (pooled || classes) showChart("pools", `${PREFIX}/v1/plans/${id}/charts/pools.svg`);
      else img.removeAttribute("src");
      poolsChart.hidden = !(pooled || classes);
    }
    setDownload($("download-csv"), `${PREFIX}/v1/plans/${id}/csv`, `plan-${planId}.csv`);
    const target = $("deploy-target");
    const setDeploy = () => {
      setDownload(
        $("download-deploy"),
        `${PREFIX}/v1/plans/${id}/deploy?target=${encodeURIComponent(target.value)}`,
        `plan-${planId}-${target.value}.${target.value === "k8s" ? "yaml" : "sh"}`,
      );
      $("download-deploy").textContent = `download the ${target.value} ${target.value === "k8s" ? "manifests" : "launch command"}`;
    };
    target.onchange = setDeploy;
    setDeploy();
    $("downloads").hidden = false;
    recheckPlanId = planId;
    $("recheck-answer").replaceChildren();
    $("recheck-button").disabled = false;
    $("recheck").hidden = false;
  }

  // --- the recheck of a stored plan ------------------------------------------------------------------

  /** GET /v1/plans/{id}/recheck on the plan shown, and its answer in words and a table. */
  async function recheck() {
    const planId = recheckPlanId;
    if (!planId) return;
    const button = $("recheck-button");
    const box = $("recheck-answer");
    button.disabled = true;
    box.replaceChildren(el("p", { class: "muted" }, `Rechecking plan ${planId} on today's catalog…`));
    try {
      const answer = await api(`/v1/plans/${encodeURIComponent(planId)}/recheck`);
      if (planId !== recheckPlanId) return;
      box.replaceChildren(...(answer.ok ? recheckView(answer.data) : [problemView(answer.data)]));
    } finally {
      if (planId === recheckPlanId) button.disabled = false;
    }
  }

  /** A RecheckResponse or ClassesRecheckResponse (api/schemas/deployments.py) in words. */
  function recheckView(r) {
    const cost = r.cost;
    const costText =
      cost.now_usd_per_hour === null
        ? `It cost ${usd(cost.then_usd_per_hour)} per hour when planned; it cannot be priced today.`
        : `It cost ${usd(cost.then_usd_per_hour)} per hour when planned and costs ${usd(cost.now_usd_per_hour)} now (${signedUsd(cost.change_usd_per_hour)}).`;
    const nodes = [
      el("p", { id: "recheck-summary", class: "lead", dataset: { holds: String(r.holds) } }, `Plan ${r.plan_id} ${r.summary}.`),
      el("p", { id: "recheck-cost" }, `${costText} Catalog version ${r.catalog_version_then} then, ${r.catalog_version_now} now.`),
      r.changes.length
        ? el("ul", { id: "recheck-changes" }, r.changes.map((c) => el("li", {}, el("strong", {}, `${c.kind}: `), c.detail)))
        : el("p", { id: "recheck-changes", class: "muted" }, "Nothing in the catalog changed for its GPUs."),
    ];
    const table = (id, captionText, headings, rows) =>
      el("table", { id }, el("caption", {}, captionText), el("thead", {}, el("tr", {}, headings.map((h) => el("th", { scope: "col" }, h)))), el("tbody", {}, rows));
    if (r.arrangement !== undefined) {
      const rows = r.check.classes.map((k) =>
        el(
          "tr",
          { dataset: { class: k.name, meets: String(k.meets_target), checked: String(k.checked) } },
          el("th", { scope: "row" }, k.name),
          el("td", {}, k.pool),
          el("td", { class: "num" }, num(k.arrival_rate_rps)),
          el("td", { class: "num" }, k.utilisation === null ? "—" : percent(k.utilisation, 0)),
          el("td", { class: "num" }, `${num(k.ttft_ms, 1)} ms / ${num(k.simulated_ttft_p99_ms, 1)} ms`),
          el("td", { class: "num" }, `${num(k.tpot_ms, 1)} ms / ${num(k.simulated_tpot_p99_ms, 1)} ms`),
          el("td", { class: "num" }, `${num(k.e2e_s, 2)} s / ${num(k.simulated_e2e_p99_s, 2)} s`),
          el("td", { class: "num" }, percent(k.shed_fraction)),
          el("td", {}, !k.checked ? `not checked${k.problem ? ": " + k.problem : ""}` : k.meets_target ? "yes" : `no${k.problem ? ": " + k.problem : ""}`),
        ),
      );
      nodes.push(
        table(
          "recheck-classes",
          `Each class on the ${r.arrangement} pools at ${num(r.check.load_factor)}× its rate: at its percentile by the queueing model / simulated p99${r.check.simulated ? "" : " (not simulated)"}`,
          ["Class", "Pool", "Req/s", "Utilisation", "TTFT", "TPOT", "End to end", "Shed", "Meets target"],
          rows,
        ),
      );
    } else {
      const rows = r.check.rows.map((row) =>
        el(
          "tr",
          { dataset: { role: row.role, meets: String(row.meets_slo) } },
          el("th", { scope: "row" }, row.role),
          el("td", {}, row.gpu),
          el("td", { class: "num" }, num(row.per_replica_rate_rps)),
          el("td", { class: "num" }, row.utilisation === null ? "—" : percent(row.utilisation, 0)),
          el("td", { class: "num" }, row.predicted.ttft_ms === null ? "—" : `${num(row.predicted.ttft_ms, 1)} ms`),
          el("td", { class: "num" }, row.predicted.tpot_ms === null ? "—" : `${num(row.predicted.tpot_ms, 1)} ms`),
          el("td", { class: "num" }, row.predicted.e2e_s === null ? "—" : `${num(row.predicted.e2e_s, 2)} s`),
          el(
            "td",
            {},
            row.meets_slo ? "yes" : row.unstable ? "no: overloaded" : `no${row.misses.length ? ": misses " + row.misses.join(", ") : ""}${row.problem ? ": " + row.problem : ""}`,
          ),
        ),
      );
      nodes.push(
        table(
          "recheck-rows",
          `Each configuration at ${num(r.check.arrival_rate_rps)} req/s, by the queueing model at the SLO's percentile`,
          ["Pool", "GPU", "Req/s per replica", "Utilisation", "TTFT", "TPOT", "End to end", "Meets the SLOs"],
          rows,
        ),
      );
    }
    return nodes;
  }

  function showCapacity(answer) {
    const c = answer.configuration;
    const nodes = [
      el(
        "p",
        { id: "answer-summary", class: "lead" },
        `${num(c.gpus_used, 0)} × ${c.gpu} serve up to ${num(answer.max_arrival_rate_rps)} requests/s within the targets: ${replicas(c.replicas)} of tp ${c.tp}, ${precision(c.precision.weights, c.precision.kv_cache)}, batch limit ${num(c.batch_limit, 0)}, ${chunk(c.chunk_tokens)}.`,
      ),
      el("p", { id: "answer-cost" }, answer.cost.usd_per_hour === null ? `No price at ${answer.cost.provider}.` : `They cost ${usd(answer.cost.usd_per_hour)} per hour at ${answer.cost.provider}.`),
      el(
        "dl",
        { class: "facts" },
        fact("answer-gpu", "GPU", c.gpu, c.gpu),
        fact("answer-gpus", "GPUs used", c.gpus_used, num(c.gpus_used, 0)),
        fact("answer-rate", "Most traffic", answer.max_arrival_rate_rps, `${num(answer.max_arrival_rate_rps)} req/s`),
        fact("answer-tokens", "Output tokens/s", answer.output_tokens_per_s, num(answer.output_tokens_per_s, 0)),
        fact("answer-cost-hour", "Per hour", answer.cost.usd_per_hour, usd(answer.cost.usd_per_hour)),
      ),
      el("h3", {}, "What binds"),
      el(
        "p",
        { id: "answer-binding" },
        answer.binding === "saturation"
          ? "Saturation: every target holds up to 99 % of what a replica can process."
          : `${answer.binding.toUpperCase()} reaches its target at ${num(answer.utilisation * 100, 0)} % utilisation (${num(answer.max_rps_per_replica)} req/s per replica of ${num(answer.saturation_rps_per_replica)} at saturation).`,
      ),
    ];
    showAnswer(nodes, `Capacity: ${num(answer.max_arrival_rate_rps)} requests/s on ${num(c.gpus_used, 0)} × ${c.gpu}.`);
  }

  /** POST /v1/capacity/charts/wall.svg draws the same answer; an <img> cannot POST, so the SVG is
   * fetched (with the key, if any) and shown from a blob: URL of this page. */
  async function showCapacityChart(request) {
    const headers = { Accept: "image/svg+xml", "Content-Type": "application/json" };
    if (apiKey()) headers.Authorization = `Bearer ${apiKey()}`;
    let response;
    try {
      response = await fetch(`${PREFIX}/v1/capacity/charts/wall.svg`, { method: "POST", headers, body: JSON.stringify(request) });
    } catch (error) {
      return;
    }
    if (!response.ok) return;
    const url = URL.createObjectURL(await response.blob());
    const caption = "p99 latencies against the rate per replica up to the most it serves within every target, with the SLO lines";
    $("answer-body").append(
      el("figure", { class: "chart" }, el("img", { id: "chart-capacity-wall", src: url, alt: caption }), el("figcaption", {}, caption)),
    );
  }

  // --- stored plans and deployments ----------------------------------------------------------------

  async function openPlan(planId) {
    clearAnswer();
    setStatus(`Reading plan ${planId}…`, "busy");
    const answer = await api(`/v1/plans/${encodeURIComponent(planId)}`);
    if (!answer.ok) return showProblem(answer.data);
    showPlan(answer.data, true);
  }

  //: Plans the "More plans" button asks for at a time (GET /v1/plans allows up to 500).
  const PLANS_PAGE = 20;
  //: How many rows of the stored-plans table are loaded: the next page starts there.
  let plansLoaded = 0;

  /** A stored plan's workload in words: its rate, or its job size and deadline. */
  function workloadText(p) {
    if (p.workload === "batch") return `job of ${num(p.requests, 0)} requests` + (p.deadline_h === null ? "" : ` in ${num(p.deadline_h)} h`);
    if (p.workload === "classes") return `${num(p.arrival_rate_rps)} req/s in classes`;
    return `${num(p.arrival_rate_rps)} req/s`;
  }

  function planRow(p) {
    return el(
      "tr",
      { dataset: { planId: p.id } },
      el("td", {}, new Date(p.created_at).toLocaleString("en-GB")),
      el("th", { scope: "row" }, p.name || "—"),
      el("td", {}, p.model),
      el("td", {}, workloadText(p)),
      el("td", {}, `${num(p.gpus_total, 0)} × ${p.gpu} (tp ${p.tp}, ${replicas(p.replicas)}, ${p.precision})`),
      el("td", { class: "num" }, usd(p.cost_usd_per_hour)),
      el("td", {}, el("button", { type: "button", "aria-label": `Open plan ${p.id}`, onclick: () => openPlan(p.id) }, "Open")),
    );
  }

  /** The stored plans table: the first page afresh, or (`more`) the next page appended, focus moving
   * to the first new row's button so a keyboard user continues where the new rows start. */
  async function loadPlans(more = false) {
    const box = $("plans");
    const offset = more ? plansLoaded : 0;
    const answer = await api(`/v1/plans?limit=${PLANS_PAGE}&offset=${offset}`);
    if (!answer.ok) {
      box.replaceChildren(problemView(answer.data));
      $("more-plans").hidden = true;
      return;
    }
    const page = answer.data;
    if (!more && !page.items.length) {
      box.replaceChildren(el("p", { class: "muted" }, "No stored plans yet: give a planner key to store one (a dry run is not stored)."));
      plansLoaded = 0;
      $("more-plans").hidden = true;
      return;
    }
    const rows = page.items.map(planRow);
    if (more && $("plans-table")) {
      $("plans-table").tBodies[0].append(...rows);
    } else {
      box.replaceChildren(
        el(
          "table",
          { id: "plans-table" },
          el("caption", {}, "Stored plans, newest first"),
          el("thead", {}, el("tr", {}, ["Made", "Deployment", "Model", "Workload", "Plan", "Per hour", ""].map((h) => el("th", { scope: "col" }, h)))),
          el("tbody", {}, rows),
        ),
      );
    }
    plansLoaded = offset + page.items.length;
    $("plans-table").caption.textContent = `Stored plans, newest first (${plansLoaded} of ${page.total})`;
    $("more-plans").hidden = plansLoaded >= page.total;
    if (more && rows.length) rows[0].querySelector("button").focus();
  }

  async function loadDeployments() {
    const box = $("deployments");
    const answer = await api("/v1/deployments?limit=200");
    if (!answer.ok) {
      box.replaceChildren(problemView(answer.data));
      return;
    }
    if (!answer.data.items.length) {
      box.replaceChildren(el("p", { class: "muted" }, "No deployments yet: give a planner key and a deployment name to store one."));
      return;
    }
    const rows = answer.data.items.map((d) =>
      el(
        "tr",
        {},
        el("th", { scope: "row" }, d.name),
        el("td", {}, d.gpu ? (d.arrangement ? `${num(d.gpus_total, 0)} GPUs in ${d.arrangement} class pools` : d.topology === "disaggregated" ? `${num(d.gpus_total, 0)} GPUs in prefill and decode pools` : `${num(d.gpus_total, 0)} × ${d.gpu}`) : "—"),
        el("td", { class: "num" }, d.replicas === null ? "—" : String(d.replicas)),
        el("td", { class: "num" }, usd(d.cost_usd_per_hour)),
        el("td", {}, d.current_plan_id ? el("button", { type: "button", onclick: () => openPlan(d.current_plan_id) }, "Open current plan") : "—"),
        el("td", {}, el("button", { type: "button", onclick: () => loadHistory(d.name) }, "History")),
      ),
    );
    box.replaceChildren(
      el(
        "table",
        { id: "deployments-table" },
        el("caption", {}, `Deployments (${answer.data.total})`),
        el("thead", {}, el("tr", {}, ["Name", "Plan in force", "Replicas", "Per hour", "", ""].map((h) => el("th", { scope: "col" }, h)))),
        el("tbody", {}, rows),
      ),
    );
  }

  /** What changed from the older plan to the newer, in words ("first plan" for the oldest). */
  function changeFrom(older, newer) {
    if (!older) return "first plan";
    const changes = [];
    const topology = (p) => p.topology || "aggregated";
    if ((older.arrangement || null) !== (newer.arrangement || null)) changes.push(`${older.arrangement || "one workload"} → ${newer.arrangement || "one workload"}`);
    else if (topology(older) !== topology(newer)) changes.push(`${topology(older)} → ${topology(newer)}`);
    else if (topology(newer) === "disaggregated") {
      for (const pool of newer.pools || []) {
        const before = (older.pools || []).find((p) => p.role === pool.role);
        if (!before) continue;
        for (const [key, label] of [["gpu", "GPU"], ["tp", "tp"], ["replicas", "replicas"]]) {
          if (before[key] !== pool[key]) changes.push(`${pool.role} ${label} ${before[key]} → ${pool[key]}`);
        }
      }
    }
    for (const [key, label] of [["gpu", "GPU"], ["tp", "tp"], ["replicas", "replicas"], ["gpus_total", "GPUs"], ["precision", "precision"], ["batch_limit", "batch limit"]]) {
      if (older[key] !== newer[key]) changes.push(`${label} ${older[key]} → ${newer[key]}`);
    }
    if (older.arrival_rate_rps !== newer.arrival_rate_rps) changes.push(`traffic ${num(older.arrival_rate_rps)} → ${num(newer.arrival_rate_rps)} req/s`);
    const delta = newer.cost_usd_per_hour - older.cost_usd_per_hour;
    if (Math.abs(delta) >= 0.005) changes.push(`cost ${signedUsd(delta)} per hour`);
    return changes.length ? changes.join(", ") : "same plan";
  }

  async function loadHistory(name) {
    const box = $("history");
    const answer = await api(`/v1/deployments/${encodeURIComponent(name)}/plans?limit=100`);
    if (!answer.ok) {
      box.replaceChildren(problemView(answer.data));
      return;
    }
    const items = answer.data.items; // newest first
    const rows = items.map((p, i) =>
      el(
        "tr",
        { class: p.current ? "current" : "" },
        el("td", {}, new Date(p.created_at).toLocaleString("en-GB")),
        el("td", {}, p.current ? "in force" : ""),
        el(
          "td",
          {},
          p.arrangement
            ? `${num(p.gpus_total, 0)} GPUs, ${p.arrangement}: ` + p.pools.map((pool) => `${pool.replicas} × tp ${pool.tp} ${pool.gpu}`).join(", ")
            : p.topology === "disaggregated"
            ? `${num(p.gpus_total, 0)} GPUs in pools: ` + p.pools.map((pool) => `${pool.role} ${pool.replicas} × tp ${pool.tp} ${pool.gpu}`).join(", ")
            : `${num(p.gpus_total, 0)} × ${p.gpu} (tp ${p.tp}, ${replicas(p.replicas)}, ${p.precision}, batch ${p.batch_limit})`,
        ),
        el("td", { class: "num" }, usd(p.cost_usd_per_hour)),
        el("td", {}, changeFrom(items[i + 1], p)),
        el("td", {}, el("button", { type: "button", onclick: () => openPlan(p.id) }, "Open")),
      ),
    );
    box.replaceChildren(
      el(
        "table",
        { id: "history-table" },
        el("caption", {}, `${name}: ${answer.data.total} plans, newest first`),
        el("thead", {}, el("tr", {}, ["Made", "", "Plan", "Per hour", "Change from the one before", ""].map((h) => el("th", { scope: "col" }, h)))),
        el("tbody", {}, rows),
      ),
    );
  }

  // --- wiring --------------------------------------------------------------------------------------

  document.addEventListener("DOMContentLoaded", () => {
    for (const radio of document.querySelectorAll("input[name=mode]")) radio.addEventListener("change", showMode);
    $("question").addEventListener("submit", ask);
    $("open-plan").addEventListener("submit", (event) => {
      event.preventDefault();
      openPlan($("plan-id").value.trim());
    });
    $("deploy-form").addEventListener("submit", (event) => event.preventDefault());
    $("refresh-deployments").addEventListener("click", loadDeployments);
    $("refresh-plans").addEventListener("click", () => loadPlans());
    $("more-plans").addEventListener("click", () => loadPlans(true));
    $("recheck-button").addEventListener("click", recheck);
    $("prefix-reuse").addEventListener("change", showPrefixReuse);
    // With HEADROOM_REQUIRE_AUTH every read needs a key: read once one is given, not before.
    const load = () => {
      if (body.dataset.requireAuth === "true" && !apiKey()) return;
      loadCatalog();
      loadPlans();
      loadDeployments();
    };
    $("api-key").addEventListener("change", load);
    showMode();
    showPrefixReuse();
    load();
  });
})();
