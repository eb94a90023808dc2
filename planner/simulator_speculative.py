"""The simulator's replica for a step model that speculates (planner/simulator.py runs it).

Every step verifies k drafted tokens per decoding sequence and each sequence emits n + 1 tokens, n
drawn from the truncated geometric of the acceptance rate (planner/speculative.py) by the replica's
own seeded generator; the step lasts `StepModel.verify_step_s`, and with chunked prefill each
decoder's k + 1 tokens count against the budget. Admission, KV reservation and the times recorded
are the plain replica's.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from planner.errors import PlannerInputError, SimulationLimitError
from planner.simulator import _CHECKPOINT_STEPS_MASK, _prefill_chunks, _Replica
from planner.speculative import draw_emitted_tokens
from planner.step_model import StepModel


class SpeculativeReplica(_Replica):
    """A replica whose step model speculates: each step every decoding sequence emits n + 1 tokens,
    n drawn from the truncated geometric of its acceptance rate (planner/speculative.py), so decoders
    advance unevenly and keep per-sequence state. Steps that prefill are taken one at a time; a
    decode-only stretch draws every step's tokens at once (a steps × decoders matrix), finds the first
    completion from the column sums and times the steps on the growing total context together."""

    def __init__(self, step_model: StepModel, *, rng: np.random.Generator, **kwargs: Any) -> None:
        super().__init__(step_model, **kwargs)
        spec = step_model.speculation
        if spec is None:
            raise PlannerInputError("a speculative replica needs a step model with a speculation")
        self.speculation = spec
        self.acceptance_rate, self.draft_tokens = spec.acceptance_rate, spec.draft_tokens
        self.rng = rng
        self.decoding: list[int] = []  # requests past their prompt, in the order they started decoding
        self.left: list[int] = []  # … their output tokens still to emit
        self.seq_context: list[int] = []  # … their contexts (prompt + tokens emitted)

    def _start_decoding(self, rid: int, t: float) -> int:
        """The first token of `rid` at t; returns 1 if that was its only token (it leaves)."""
        self.first_token[rid] = t
        if self.output[rid] == 1:
            self.finish[rid] = t
            self.kv_free += self.prompt[rid] + 1
            return 1
        self.decoding.append(rid)
        self.left.append(self.output[rid] - 1)
        self.seq_context.append(self.prompt[rid] + 1)
        return 0

    def _advance_decoders(self, t: float) -> int:
        """Every decoder emits its drawn tokens at the end of the step ending at t; returns how many left."""
        if not self.decoding:
            return 0
        emitted = draw_emitted_tokens(self.rng, self.acceptance_rate, self.draft_tokens, len(self.decoding)).tolist()
        keep_ids, keep_left, keep_context, done = [], [], [], 0
        for rid, left, context, tokens in zip(self.decoding, self.left, self.seq_context, emitted, strict=True):
            if tokens >= left:
                self.finish[rid] = t
                self.kv_free += self.prompt[rid] + self.output[rid]
                done += 1
            else:
                keep_ids.append(rid)
                keep_left.append(left - tokens)
                keep_context.append(context + tokens)
        self.decoding, self.left, self.seq_context = keep_ids, keep_left, keep_context
        return done

    def run_until(self, t_limit: float) -> None:
        """Execute every step that starts before `t_limit`: admit FCFS, verify the decoders' drafts and
        prefill within the budget (each decoder's k + 1 verified tokens count against it), draw."""
        sm, v = self.step_model, self.step_model.verify_tokens
        while True:
            self._admit()
            if self.running == 0:
                if self.head >= len(self.ids):
                    break
                self.t = max(self.t, self.arrival[self.ids[self.head]])
                continue
            if self.t >= t_limit:
                break
            if not self.prefilling:
                self._speculative_stretch(self._admissible_at(self.head, self.running, self.kv_free, t_limit))
                self._check_limits()
                continue
            decoders, kv = len(self.decoding), sum(self.seq_context)
            new, prefill_kv, prefill_attended, done = _prefill_chunks(
                self.prefilling, self.prompt, self.chunk_tokens, decoders * v, 0
            )
            prefill = new - decoders * v
            if done and self.prefilling[done - 1][1] != self.prompt[self.prefilling[done - 1][0]]:
                done -= 1  # the last chunked prompt is not finished
            self.t += sm.verify_step_s(
                decoders, kv, prefill_tokens=prefill, prefill_kv_tokens=prefill_kv, prefill_attended=prefill_attended
            )
            self.steps += 1
            finished = self._advance_decoders(self.t)
            for rid, _ in self.prefilling[:done]:
                finished += self._start_decoding(rid, self.t)
            del self.prefilling[:done]
            self._after_step(finished)

    def _after_step(self, finished: int) -> None:
        self.running -= finished
        self.finished += finished
        self.last_step_end, self.last_step_finished = self.t, finished
        self._check_limits()

    def _check_limits(self) -> None:
        if self.checkpoint is not None and self.steps & _CHECKPOINT_STEPS_MASK == 0:
            self.checkpoint()
        if self.max_steps is not None and self.steps > self.max_steps:
            raise SimulationLimitError(f"simulation exceeded its bound of {self.max_steps} steps", max_steps=self.max_steps)

    def _speculative_stretch(self, t_stop: float) -> None:
        """Decode-only steps from `self.t` until the first completion, or until a step would start at
        or after `t_stop` (an admissible arrival); at least one step."""
        sm, spec = self.step_model, self.speculation
        left = np.array(self.left)
        n = int(left.min())  # every step emits at least one token per sequence
        first = sm.verify_step_s(len(left), sum(self.seq_context))
        if t_stop < math.inf:
            n = max(1, min(n, int((t_stop - self.t) / first) + 2))
        emitted = draw_emitted_tokens(self.rng, spec.acceptance_rate, spec.draft_tokens, n * left.size).reshape(n, left.size)
        emitted_so_far = np.cumsum(emitted, axis=0)  # row i: tokens after step i + 1
        done = emitted_so_far >= left
        finishing = done.any(axis=1)
        steps = int(np.argmax(finishing)) + 1 if finishing.any() else n
        contexts = sum(self.seq_context) + np.concatenate(([0], np.cumsum(emitted.sum(axis=1))[: steps - 1]))
        starts = self.t + np.concatenate(([0.0], np.cumsum(self._verify_durations(left.size, contexts))))
        if t_stop < math.inf:
            steps = max(1, min(steps, int(np.searchsorted(starts[:steps], t_stop, side="left"))))
        self.t = float(starts[steps])
        self.steps += steps
        grown = emitted_so_far[steps - 1]
        keep_ids, keep_left, keep_context, finished = [], [], [], 0
        for rid, remaining, context, tokens in zip(self.decoding, self.left, self.seq_context, grown.tolist(), strict=True):
            if tokens >= remaining:
                self.finish[rid] = self.t
                self.kv_free += self.prompt[rid] + self.output[rid]
                finished += 1
            else:
                keep_ids.append(rid)
                keep_left.append(remaining - tokens)
                keep_context.append(context + tokens)
        self.decoding, self.left, self.seq_context = keep_ids, keep_left, keep_context
        self.running -= finished
        self.finished += finished
        self.last_step_end, self.last_step_finished = self.t, finished

    def _verify_durations(self, decoders: int, contexts: np.ndarray) -> np.ndarray:
        """`verify_step_s(decoders, kv)` at each total context in `contexts` (decode-only steps)."""
        sm = self.step_model
        v = sm.verify_tokens
        mem = sm.memory_s(decoders * v, contexts)
        comp = sm.compute_s(decoders * v, v * contexts + decoders * (v - 1) * v / 2.0)
        target = np.maximum(mem, comp) + (1.0 - sm.memory_compute_overlap) * np.minimum(mem, comp) + sm.comm_s(decoders * v)
        return np.asarray(target + sm.step_overhead_s + self._draft_durations(decoders, contexts))

    def _draft_durations(self, decoders: int, contexts: np.ndarray) -> np.ndarray:
        sm, spec = self.step_model, self.speculation
        mem = (spec.draft_weight_bytes + contexts * spec.draft_kv_bytes_per_token) / sm.memory_bandwidth_bytes_per_s
        comp = (
            decoders * spec.draft_flops_per_token + contexts * spec.draft_attention_flops_per_context_token
        ) / sm.compute_flops_per_s
        return np.asarray(spec.draft_tokens * (np.maximum(mem, comp) + (1.0 - sm.memory_compute_overlap) * np.minimum(mem, comp)))

    def _admit(self) -> None:
        """FCFS admission at the start of a step: a free slot and KV room for the head request."""
        while self.head < len(self.ids) and self.running < self.batch_limit:
            rid = self.ids[self.head]
            need = self.prompt[rid] + self.output[rid]
            if self.arrival[rid] > self.t or need > self.kv_free:
                break
            self.head += 1
            self.running += 1
            self.kv_free -= need
            self.admission[rid] = self.t
            self.prefilling.append([rid, 0])
