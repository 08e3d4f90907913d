"""Discrete-event simulation of vLLM-style continuous batching.

One loop iteration is one engine step, scheduled as vLLM V1's
``Scheduler.schedule`` (vllm/v1/core/sched/scheduler.py) does: every running
sequence that finished its prompt decodes one token; the remaining per-step
token budget (max_num_batched_tokens) goes to prompt chunks (chunked prefill),
first to sequences already running, then to waiting ones (FIFO) while
max_num_seqs allows, except in a step that preempted (``if not
preempted_reqs``). KV blocks are allocated for the tokens a step schedules
(``KVCacheManager.allocate_slots``); when a step cannot get the blocks it needs,
the newest running sequence is preempted (recompute: its blocks are freed and it
re-enters the queue head, to prefill its prompt and generated tokens again, the
last chunk sampling its next token as a first prefill does). With prefix caching
(V1's default) a preempted sequence's full blocks stay cached in the free queue
until reused, tail first (``free`` returns them in reverse order, the free queue
evicts its oldest first), and on resuming it recomputes only what was evicted
(``get_computed_blocks``). Step time comes from the same step model as the
closed form.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from analytics.capacity.engine import StepModel


@dataclass(frozen=True)
class SimulationResult:
    requests_completed: int
    duration_s: float
    throughput_tokens_per_s: float
    requests_per_s: float
    ttft_p50_ms: float
    ttft_p95_ms: float
    ttft_p99_ms: float
    itl_mean_ms: float
    itl_p50_ms: float
    itl_p95_ms: float
    itl_p99_ms: float
    e2e_p50_ms: float
    e2e_p95_ms: float
    preemptions: int
    mean_running_batch: float
    steps: int
    e2e_p99_ms: float = float("nan")  # nan: no request finished


class _FreeQueue:
    """vLLM V1's free block queue, by runs of blocks instead of single blocks.

    Blocks are taken from the head (least recently freed first) and freed to the
    tail. A preempted sequence's full blocks are one run it owns, ordered as
    ``free`` returns them (last block first), so taking from the head evicts its
    prefix from the end; what is left when it resumes is its cache hit.
    """

    def __init__(self, blocks: int) -> None:
        self.runs: deque[list[int]] = deque([[-1, blocks]])  # [owner, blocks]
        self.owned: dict[int, list[int]] = {}

    def take(self, k: int) -> None:
        while k > 0:
            run = self.runs[0]
            used = min(k, run[1])
            run[1] -= used
            k -= used
            if run[1] == 0:
                self.runs.popleft()

    def give(self, blocks: int, owner: int = -1, cached: int = 0) -> None:
        """Free ``blocks``; the first ``cached`` of them (in token order) stay
        findable by ``owner`` until taken."""
        if blocks > cached:
            self.runs.append([-1, blocks - cached])
        if cached:
            run = [owner, cached]
            self.runs.append(run)
            self.owned[owner] = run

    def cached(self, owner: int) -> int:
        run = self.owned.get(owner)
        return run[1] if run is not None and run[0] == owner else 0

    def claim(self, owner: int, hit: int) -> None:
        """``owner`` resumes on its first ``hit`` cached blocks: they leave the
        queue; the rest of its run is only free blocks now."""
        run = self.owned.pop(owner, None)
        if run is not None:
            run[0] = -1
            run[1] -= hit


def poisson_arrivals(rate_per_s: float, duration_s: float, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    n = rng.poisson(rate_per_s * duration_s)
    return np.sort(rng.uniform(0.0, duration_s, n))


def _weighted_percentiles(
    values: np.ndarray, weights: np.ndarray, qs: tuple[float, ...]
) -> list[float]:
    if len(values) == 0 or weights.sum() == 0:
        return [float("nan")] * len(qs)
    order = np.argsort(values)
    v = values[order]
    cw = np.cumsum(weights[order])
    total = cw[-1]
    return [float(v[min(np.searchsorted(cw, q * total), len(v) - 1)]) for q in qs]


def simulate(
    model: StepModel,
    arrivals: np.ndarray,
    *,
    prompt_tokens: int | np.ndarray,
    output_tokens: int | np.ndarray,
    max_time_s: float | None = None,
    concurrency: int | None = None,
    resubmit_s: float = 0.0,
) -> SimulationResult:
    """Step the engine over ``arrivals`` (seconds, sorted).

    ``concurrency`` makes it a closed loop, as a benchmark client with that many
    slots (``--max-concurrency``) sends: only the first ``concurrency`` arrivals
    are used as given, and each later request arrives ``resubmit_s`` (the
    per-request overhead before the engine sees it) after one completes or is
    dropped, so the run's duration holds the last partial wave and its tail.
    """
    arrivals = np.asarray(arrivals, dtype=float)
    n = len(arrivals)
    if concurrency is not None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        arrivals = arrivals.copy()
        arrivals[concurrency:] = np.inf
    released = min(n, concurrency) if concurrency is not None else n
    prompts = np.broadcast_to(np.asarray(prompt_tokens, dtype=np.int64), (n,)).copy()
    outputs = np.broadcast_to(np.asarray(output_tokens, dtype=np.int64), (n,)).copy()
    bs = model.block_size
    free_blocks = model.num_gpu_blocks
    queue = _FreeQueue(free_blocks)
    caching = model.prefix_caching
    budget_cap = model.max_num_batched_tokens
    max_seqs = model.max_num_seqs

    # Per-request state (index = request id).
    generated = np.zeros(n, dtype=np.int64)
    prefilled = np.zeros(n, dtype=np.int64)  # prompt tokens (incl. recomputed) in KV
    to_prefill = prompts.copy()  # grows by `generated` after a preemption
    blocks = np.zeros(n, dtype=np.int64)
    first_token = np.full(n, np.nan)
    finished = np.full(n, np.nan)

    waiting: deque[int] = deque()
    running: list[int] = []
    next_arrival = 0
    now = 0.0
    preemptions = 0
    step_durations: list[float] = []
    step_decodes: list[int] = []
    batch_time = 0.0
    end = max_time_s if max_time_s is not None else np.inf

    while (next_arrival < n or waiting or running) and now < end:
        while next_arrival < n and arrivals[next_arrival] <= now:
            waiting.append(next_arrival)
            next_arrival += 1
        if not running and not waiting:
            now = arrivals[next_arrival]
            continue
        # 1. decodes: sequences whose prompt is in the KV cache.
        run_idx = np.fromiter(running, dtype=np.int64, count=len(running))
        dec = run_idx[prefilled[run_idx] >= to_prefill[run_idx]]
        need = int(np.maximum(0, -(-(prefilled[dec] + 1) // bs) - blocks[dec]).sum())
        preempted = False
        while need > free_blocks and running:
            victim = running.pop()  # newest first, as vLLM does
            preempted = True
            free_blocks += blocks[victim]
            full = int(prefilled[victim] // bs) if caching else 0
            queue.give(int(blocks[victim]), victim, full)
            blocks[victim] = 0
            to_prefill[victim] = prompts[victim] + generated[victim]
            prefilled[victim] = 0
            waiting.appendleft(victim)
            preemptions += 1
            run_idx = np.fromiter(running, dtype=np.int64, count=len(running))
            dec = run_idx[prefilled[run_idx] >= to_prefill[run_idx]]
            need = int(
                np.maximum(0, -(-(prefilled[dec] + 1) // bs) - blocks[dec]).sum()
            )
        n_dec = len(dec)
        budget = budget_cap - n_dec
        # 2. prefill chunks: running first, then admit waiting.
        chunks: list[tuple[int, int]] = []
        partial = run_idx[prefilled[run_idx] < to_prefill[run_idx]]
        for r in partial.tolist():
            if budget <= 0:
                break
            left = to_prefill[r] - prefilled[r]
            if left > 0:
                take = int(min(left, budget))
                extra = max(0, -(-(prefilled[r] + take) // bs) - blocks[r])
                if extra > free_blocks - need:
                    break
                chunks.append((r, take))
                need += extra
                budget -= take
        # The running sequences' blocks leave the free queue before a waiting
        # one looks for its cached prefix, as allocate_slots runs in that order.
        queue.take(need)
        free_blocks -= need
        allocated, need = need, 0
        while waiting and budget > 0 and len(running) < max_seqs and not preempted:
            r = waiting[0]
            # Full blocks only, and never the last token (its logits are needed).
            hit = min(queue.cached(r), int(to_prefill[r] - 1) // bs)
            take = int(min(to_prefill[r] - hit * bs, budget))
            extra = -(-(hit * bs + take) // bs)  # the hit blocks leave the queue too
            if extra > free_blocks - need:
                break
            waiting.popleft()
            queue.claim(r, hit)
            free_blocks -= hit
            blocks[r] = hit
            prefilled[r] = hit * bs
            running.append(r)
            chunks.append((r, take))
            need += extra - hit
            budget -= take
        if not n_dec and not chunks:
            # Nothing fits (a prompt larger than the whole cache): drop it.
            if waiting:
                waiting.popleft()
                if concurrency is not None and released < n:
                    arrivals[released] = now + resubmit_s
                    released += 1
            continue
        # 3. step time from the step model.
        if n_dec:
            t = model.decode_step_s(n_dec, float(prefilled[dec].mean()))
        else:
            t = model.t0_s
        for r, take in chunks:
            t += model.prefill_work_s(take, prefilled[r])
        now += t
        batch_time += len(running) * t
        step_durations.append(t)
        step_decodes.append(n_dec)
        # 4. apply the step.
        prefilled[dec] += 1
        generated[dec] += 1
        for r, take in chunks:
            prefilled[r] += take
            if prefilled[r] >= to_prefill[r]:
                # The step that ends a prefill (or a recompute) samples a token.
                if generated[r] == 0:
                    first_token[r] = now
                generated[r] += 1
        touched = np.concatenate(
            [
                dec,
                np.fromiter((r for r, _ in chunks), dtype=np.int64, count=len(chunks)),
            ]
        )
        new_blocks = -(-prefilled[touched] // bs)
        grow = np.maximum(new_blocks - blocks[touched], 0)
        queue.take(int(grow.sum()) - allocated)
        free_blocks -= int(grow.sum()) - allocated
        blocks[touched] += grow
        run_idx = np.fromiter(running, dtype=np.int64, count=len(running))
        done_mask = generated[run_idx] >= outputs[run_idx]
        if done_mask.any():
            done = run_idx[done_mask]
            free_blocks += int(blocks[done].sum())
            queue.give(int(blocks[done].sum()))
            blocks[done] = 0
            finished[done] = now
            running = run_idx[~done_mask].tolist()
            if concurrency is not None:
                # The client sends the next request as each one completes.
                k = min(len(done), n - released)
                arrivals[released : released + k] = now + resubmit_s
                released += k

    ok = ~np.isnan(finished)
    ttft = (first_token - arrivals)[~np.isnan(first_token)] * 1000
    e2e = (finished - arrivals)[ok] * 1000
    durations = np.asarray(step_durations) * 1000
    decodes = np.asarray(step_decodes, dtype=float)
    itl = _weighted_percentiles(durations, decodes, (0.5, 0.95, 0.99))
    itl_mean = (
        float((durations * decodes).sum() / decodes.sum()) if decodes.sum() else np.nan
    )
    sim_time = now if now > 0 else 1.0
    tokens = float(outputs[ok].sum())

    def pct(x: np.ndarray, q: float) -> float:
        return float(np.percentile(x, q)) if len(x) else float("nan")

    return SimulationResult(
        requests_completed=int(ok.sum()),
        duration_s=float(sim_time),
        throughput_tokens_per_s=tokens / sim_time,
        requests_per_s=float(ok.sum()) / sim_time,
        ttft_p50_ms=pct(ttft, 50),
        ttft_p95_ms=pct(ttft, 95),
        ttft_p99_ms=pct(ttft, 99),
        itl_mean_ms=itl_mean,
        itl_p50_ms=itl[0],
        itl_p95_ms=itl[1],
        itl_p99_ms=itl[2],
        e2e_p50_ms=pct(e2e, 50),
        e2e_p95_ms=pct(e2e, 95),
        e2e_p99_ms=pct(e2e, 99),
        preemptions=preemptions,
        mean_running_batch=batch_time / sim_time,
        steps=len(step_durations),
    )
