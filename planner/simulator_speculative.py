"""The simulator's replica for a step model that speculates (planner/simulator.py runs it).

Every step verifies k drafted tokens per decoding sequence and each sequence emits n + 1 tokens, n
drawn from the truncated geometric of the acceptance rate (planner/speculative.py) by the replica's
own seeded generator; the step lasts `StepModel.verify_step_s`, and with chunked prefill each
decoder's k + 1 tokens count against the budget. Admission, KV reservation and the times recorded
are the plain replica's, a prefix found in the replica's cache (`cached`, planner/simulator_prefix.py) included:
its tokens are not prefilled nor reserved again, but every step reads them.

It keeps the plain replica's speed (aggregates, a heap of finishing steps, decode-only stretches
evaluated at once) by drawing each sequence's whole path ahead: its emitted tokens per step, e_1,
e_2, …, until they cover its o − 1 tokens after the first (the last one cut to fit), for every
request routed to the replica at once, in one flat draw. These are the same per-sequence, per-step
draws taken ahead of time; when a sequence starts decoding its path fixes the step at which it
finishes (a heap entry, as without speculation) and adds e_j to the replica's context growth at the
j-th step after (`growth`, by absolute step number), so the KV each step reads is exactly the sum
of the running sequences' contexts.
"""

from __future__ import annotations

import heapq
import math
from typing import Any

import numpy as np

from planner.errors import PlannerInputError, SimulationLimitError
from planner.simulator import CHECKPOINT_STEPS_MASK, EngineReplica, prefill_chunks
from planner.speculative import draw_emitted_tokens
from planner.step_model import StepModel

#: Steps of context growth allocated at a time (the array doubles past it).
_GROWTH_CHUNK = 4096


class SpeculativeReplica(EngineReplica):
    """One continuous-batching engine whose step model speculates (see the module docstring)."""

    def __init__(self, step_model: StepModel, *, rng: np.random.Generator, **kwargs: Any) -> None:
        super().__init__(step_model, **kwargs)
        spec = step_model.speculation
        if spec is None:
            raise PlannerInputError("a speculative replica needs a step model with a speculation")
        self.speculation = spec
        self.rng = rng
        self.growth = np.zeros(_GROWTH_CHUNK, dtype=np.int64)  # context added after each step, by step number
        #: Drawn paths not yet started, by request: (draws, first index, steps, tokens the last step overshoots).
        self.paths: dict[int, tuple[np.ndarray, int, int, int]] = {}
        self.drawn = 0  # requests of `ids` whose paths are drawn

    def _path(self, rid: int, start_step: int) -> int:
        """Record request `rid`'s drawn path as context growth after steps start_step + 1, …; returns
        how many steps it decodes for. Paths are drawn for every request routed here so far at once."""
        if rid not in self.paths:
            self._draw_paths()
        flat, first, steps, overshoot = self.paths.pop(rid)
        end = start_step + 1 + steps
        self._reserve(end)
        self.growth[start_step + 1 : end] += flat[first : first + steps]
        self.growth[end - 1] -= overshoot  # the last step emits only what is left
        return steps

    def _draw_paths(self) -> None:
        """Paths of the requests routed here since the last call: ⌊(o − 1)/E⌋ + 8 draws each in one flat
        array; a request whose draws fall short (rare) is drawn again on its own."""
        spec = self.speculation
        rids = [rid for rid in self.ids[self.drawn :] if self.output[rid] > 1]
        self.drawn = len(self.ids)
        if not rids:
            return
        remaining = np.array([self.output[rid] - 1 for rid in rids], dtype=np.int64)
        sizes = (remaining / spec.tokens_per_step).astype(np.int64) + 8
        ends = np.cumsum(sizes)
        starts = ends - sizes
        flat = draw_emitted_tokens(self.rng, spec.acceptance_rate, spec.draft_tokens, int(ends[-1]))
        covered = np.cumsum(flat)
        before = np.where(starts > 0, covered[np.maximum(starts - 1, 0)], 0)
        reach = np.searchsorted(covered, before + remaining, side="left")  # the draw that covers each request
        for index, rid in enumerate(rids):
            if reach[index] < ends[index]:
                first, last = int(starts[index]), int(reach[index])
                overshoot = int(covered[last] - before[index] - remaining[index])
                self.paths[rid] = (flat, first, last - first + 1, overshoot)
            else:
                self.paths[rid] = self._long_path(int(remaining[index]))

    def _long_path(self, remaining: int) -> tuple[np.ndarray, int, int, int]:
        """One request's path drawn until it covers `remaining`."""
        spec = self.speculation
        draws = np.zeros(0, dtype=np.int64)
        while int(draws.sum()) < remaining:
            more = draw_emitted_tokens(
                self.rng, spec.acceptance_rate, spec.draft_tokens, int(remaining / spec.tokens_per_step) + 8
            )
            draws = np.concatenate((draws, more))
        covered = np.cumsum(draws)
        steps = int(np.searchsorted(covered, remaining, side="left")) + 1
        return draws, 0, steps, int(covered[steps - 1]) - remaining

    def _reserve(self, end: int) -> None:
        """Make `growth` hold steps up to `end` (doubling)."""
        if end > self.growth.size:
            extra = max(end, 2 * self.growth.size) - self.growth.size
            self.growth = np.concatenate((self.growth, np.zeros(extra, dtype=np.int64)))

    def _durations(self, decoders: int, contexts: np.ndarray) -> np.ndarray:
        """`verify_step_s(decoders, kv)` at each total context in `contexts` (decode-only steps)."""
        sm, spec = self.step_model, self.speculation
        v = sm.verify_tokens
        mem = sm.memory_s(decoders * v, contexts)
        comp = sm.compute_s(decoders * v, v * contexts + decoders * (v - 1) * v / 2.0)
        target = np.maximum(mem, comp) + (1.0 - sm.memory_compute_overlap) * np.minimum(mem, comp)
        draft_mem = (spec.draft_weight_bytes + contexts * spec.draft_kv_bytes_per_token) / sm.memory_bandwidth_bytes_per_s
        draft_comp = (
            decoders * spec.draft_flops_per_token + contexts * spec.draft_attention_flops_per_context_token
        ) / sm.compute_flops_per_s
        draft = spec.draft_tokens * (
            np.maximum(draft_mem, draft_comp) + (1.0 - sm.memory_compute_overlap) * np.minimum(draft_mem, draft_comp)
        )
        return np.asarray(target + sm.comm_s(decoders * v) + sm.step_overhead_s + draft)

    def _stretch(
        self, t: float, t_stop: float, to_completion: int, decoders: int, context: int, steps: int
    ) -> tuple[int, float, int]:
        """Decode-only steps from `t` until the next completion or a step starting at or after `t_stop`:
        (steps taken, when the next step starts, context after them)."""
        first = self.step_model.verify_step_s(decoders, context)
        self._reserve(steps + to_completion + 2)
        if to_completion == 1 or t + first >= t_stop:
            return 1, t + first, context + int(self.growth[steps + 1])
        n = to_completion
        if t_stop < math.inf:
            n = min(n, int((t_stop - t) / first) + 2)  # steps only lengthen as contexts grow
        grown = np.cumsum(self.growth[steps + 1 : steps + n + 1])  # context added after each of the n steps
        contexts = context + np.concatenate(([0], grown[:-1]))
        starts = np.empty(n + 1)
        starts[0] = t
        starts[1:] = self._durations(decoders, contexts.astype(np.float64))
        np.cumsum(starts, out=starts)
        taken = n if t_stop == math.inf else max(1, int(np.searchsorted(starts[:n], t_stop, side="left")))
        return taken, float(starts[taken]), context + int(grown[taken - 1])

    def run_until(self, t_limit: float) -> None:
        """Execute every step that starts before `t_limit` with the requests routed so far (the plain
        replica's loop with the verify step, the budget counting k + 1 tokens per decoder and each
        sequence's drawn path)."""
        sm, v = self.step_model, self.step_model.verify_tokens
        arrival, prompt, output, cached = self.arrival, self.prompt, self.output, self.cached
        ids, n_ids = self.ids, len(self.ids)
        prefilling, finishing = self.prefilling, self.finishing
        heappush, heappop = heapq.heappush, heapq.heappop
        while True:
            self._admit()
            if self.running == 0:
                if self.head >= n_ids:
                    break
                self.t = max(self.t, arrival[ids[self.head]])
                continue
            if self.t >= t_limit:
                break
            step_finished = 0
            if not prefilling:
                t_stop = self._admissible_at(self.head, self.running, self.kv_free, t_limit)
                taken, self.t, self.decoder_context = self._stretch(
                    self.t, t_stop, finishing[0][0] - self.steps, self.decoders, self.decoder_context, self.steps
                )
                self.steps += taken
            else:
                decoders, context = self.decoders, self.decoder_context
                new, kv_read, attended, chunks = prefill_chunks(prefilling, prompt, self.chunk_tokens, decoders * v, context)
                self.t += sm.verify_step_s(
                    decoders,
                    context,
                    prefill_tokens=new - decoders * v,
                    prefill_kv_tokens=kv_read - context,
                    prefill_attended=attended - context,
                )
                self.steps += 1
                self._reserve(self.steps + 1)
                self.decoder_context += int(self.growth[self.steps])
                done = chunks if chunks and prefilling[chunks - 1][1] == prompt[prefilling[chunks - 1][0]] else max(chunks - 1, 0)
                for rid, _ in prefilling[:done]:
                    self.first_token[rid] = self.t
                    if output[rid] == 1:
                        self.finish[rid] = self.t
                        step_finished += 1
                        self.running -= 1
                        self.kv_free += prompt[rid] + 1 - cached[rid]
                    else:
                        heappush(finishing, (self.steps + self._path(rid, self.steps), rid))
                        self.decoders += 1
                        self.decoder_context += prompt[rid] + 1  # the next step reads the prompt and the first token
                del prefilling[:done]
            while finishing and finishing[0][0] == self.steps:
                rid = heappop(finishing)[1]
                self.finish[rid] = self.t
                step_finished += 1
                self.running -= 1
                self.decoders -= 1
                need = prompt[rid] + output[rid]
                self.decoder_context -= need
                self.kv_free += need - cached[rid]
            self.finished += step_finished
            self.last_step_end, self.last_step_finished = self.t, step_finished
            if self.checkpoint is not None and self.steps & CHECKPOINT_STEPS_MASK == 0:
                self.checkpoint()
            if self.max_steps is not None and self.steps > self.max_steps:
                raise SimulationLimitError(f"simulation exceeded its bound of {self.max_steps} steps", max_steps=self.max_steps)

    def _admit(self) -> None:
        """FCFS admission at the start of a step: a free slot and KV room for the head request."""
        while self.head < len(self.ids) and self.running < self.batch_limit:
            rid = self.ids[self.head]
            need = self.prompt[rid] + self.output[rid] - self.cached[rid]
            if self.arrival[rid] > self.t or need > self.kv_free:
                break
            self.head += 1
            self.running += 1
            self.kv_free -= need
            self.admission[rid] = self.t
            self.prefilling.append([rid, self.cached[rid]])  # a cached prefix is not prefilled again
