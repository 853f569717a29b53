"""Log-probabilities of given tokens under the full head, plus each position's top-N alternatives."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.reference._heads import Heads

_ROWS = 64  # positions per head matmul: bounds the [rows, 262144] fp32 block to 64 MB


@dataclass(frozen=True)
class Scored:
    token: int
    logprob: float
    rank: int  # 1 + number of tokens with a strictly higher log-probability
    top: list[tuple[int, float]]  # (token, logprob), best first


def score(
    heads: Heads, hidden: torch.Tensor, targets: list[int], *, top_n: int, row_of_token: torch.Tensor
) -> list[Scored]:
    """hidden [n, d] final states; targets[i] is the token that followed the state hidden[i]."""
    out: list[Scored] = []
    target_rows = row_of_token[torch.tensor(targets, device=hidden.device)]
    for c0 in range(0, len(targets), _ROWS):
        logits = heads.logits(hidden[c0 : c0 + _ROWS]).float()
        lsm = torch.log_softmax(logits, dim=-1)
        rows = target_rows[c0 : c0 + _ROWS, None]
        lp = lsm.gather(1, rows)
        rank = (lsm > lp).sum(dim=1) + 1
        if top_n:
            top = lsm.topk(top_n, dim=-1)
            top_tokens = heads.token_of_row[top.indices].tolist()
            top_values = top.values.tolist()
        for i in range(len(rows)):
            pairs = list(zip(top_tokens[i], top_values[i])) if top_n else []
            out.append(Scored(targets[c0 + i], float(lp[i, 0]), int(rank[i]), pairs))
    return out
