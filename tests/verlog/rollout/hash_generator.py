"""A generator for the rollout tests that needs no model: each answer is picked by a hash of the prompt's tokens alone,
so the answers do not depend on how requests are batched or ordered."""

from __future__ import annotations

import zlib

from verlog.rollout import Generation

ACTIONS = ("go forward", "turn left", "turn right")


class HashGenerator:
    """Answers ``ACTION: <one of ACTIONS>`` (then end of sequence), each token at log-probability -0.5."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer

    def generate(self, requests, sampling) -> list[Generation]:
        out = []
        for request in requests:
            h = zlib.crc32(repr(request.prompt_ids).encode())
            text = f"ACTION: {ACTIONS[h % len(ACTIONS)]}"
            ids = [*self.tokenizer.encode(text, add_special_tokens=False), self.tokenizer.eos_token_id]
            out.append(Generation(token_ids=ids, log_probs=[-0.5] * len(ids)))
        return out
