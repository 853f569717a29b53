"""The LM heads: the target's full head and the drafter's centroid head, one row layout for both.

The head rows are stored in cluster order (cluster c owns rows [c * 128, (c + 1) * 128)). The full
head is one matmul over all rows; the centroid head gathers the rows of its top-K clusters in
ascending cluster order and runs the same matmul and the same decision on them. At K = 2,048 the
gathered rows would be the full head's rows in the full head's order, so it uses them directly
(no 335 MB copy per draft step): the same call, the same numbers.

The greedy decision, identical however the logits were computed. A bf16 matmul's logits depend in
their last bit on the kernel's blocking (batched verification rows vs a one-row decode step), so the
choice is not "argmax of whatever bf16 logits came out" but ``D(h)``: the argmax over ALL tokens of
``r_j = fp32 dot(h, w_j)`` computed one candidate at a time by one fixed function (ties: lowest
token id). Any path's bf16 logit ``P_j`` is within ``rho = ulp/2 + 2 eps`` of ``r_j`` (rounding to
bf16, plus the fp32 summation error of each of the two dot products, ``eps <= n u / (1 - n u) *
max_row_norm * |h|`` for any summation order), so every maximiser of ``r`` lies in ``{j : P_j >=
max P - 2 rho}``; scoring just those candidates with ``r`` yields ``D(h)`` from the one-row logits
and from the batched ones alike. Exact by construction.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from engine.reference._model import Gemma3


def ulp_bf16(x: torch.Tensor) -> torch.Tensor:
    """Spacing of bf16 numbers at |x| (8 significant bits)."""
    exp = torch.floor(torch.log2(x.abs().clamp(min=2.0**-126)))
    return torch.pow(2.0, exp - 7)


def fp32_sum_error(n: int) -> float:
    """|fp32 sum of n exact terms - true sum| <= this * sum |terms|, for any summation order."""
    u = 2.0**-24
    return n * u / (1 - n * u)


class Heads:
    def __init__(self, model: Gemma3, *, centroids: torch.Tensor, cluster_size: int) -> None:
        self.rows = model.head_rows  # [vocab, hidden], cluster order
        self.token_of_row = model.head_order  # token id at each row
        self.vocab, self.hidden = self.rows.shape
        self.cluster_size = cluster_size
        self.num_clusters = self.vocab // cluster_size
        self.centroids = centroids.to(device=self.rows.device, dtype=self.rows.dtype)
        self._rows_by_cluster = self.rows.view(self.num_clusters, cluster_size, self.hidden)
        max_norm = float(self.rows.float().norm(dim=1).max())
        self._eps_per_hidden_norm = fp32_sum_error(self.hidden) * max_norm
        self.refined = 0  # decisions that needed the fp32 candidates (statistics for benchmarks)

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """Full-head logits [M, vocab] in row (cluster) order."""
        return F.linear(h, self.rows)

    def _refined(self, h32: torch.Tensor, row: int) -> float:
        return float(torch.dot(h32, self.rows[row].float()))

    def decide(self, hs: list[torch.Tensor], logits: torch.Tensor, rows: torch.Tensor | None = None) -> list[int]:
        """``D(h)`` for each h [1, hidden] in ``hs`` from its row of bf16 ``logits`` [M, n] over head
        rows ``rows`` (None: all rows, in order)."""
        top2 = logits.topk(2, dim=-1)
        values = top2.values.float()
        eps = self._eps_per_hidden_norm * torch.cat(hs).float().norm(dim=-1)
        # 1.05 and the additive terms: if rounding could reach the next binade, use its wider spacing.
        floor = values[:, 0] - ulp_bf16(values[:, 0].abs() * 1.05 + 4 * eps + 1e-6) - 4 * eps
        clear = (values[:, 1] < floor).tolist()  # only the top logit can hold D(h)
        top = top2.indices[:, 0]
        best = (top if rows is None else rows[top]).tolist()
        picks = []
        for i, h in enumerate(hs):
            if clear[i]:
                picks.append(int(self.token_of_row[best[i]]))
                continue
            near = torch.nonzero(logits[i].float() >= floor[i]).flatten()
            near = near if rows is None else rows[near]
            self.refined += 1
            h32 = h.reshape(-1).float()
            picks.append(-max((self._refined(h32, int(r)), -int(self.token_of_row[r])) for r in near)[1])
        return picks

    def greedy_one(self, h: torch.Tensor) -> int:
        """The plain decoding step: ``D(h)`` from the one-row full head, h [1, hidden]."""
        return self.decide([h], self.logits(h))[0]

    def greedy_many(self, hs: list[torch.Tensor]) -> list[int]:
        """``[greedy_one(h) for h in hs]`` with one batched matmul (same answers: see module doc)."""
        return self.decide(hs, self.logits(torch.cat(hs)))

    def draft(self, h: torch.Tensor, *, top_k: int) -> int:
        """Centroid head: ``D`` restricted to the tokens of the top-K clusters (h·centroid)."""
        if top_k >= self.num_clusters:  # every cluster, in order: exactly the full head's rows
            return self.greedy_one(h)
        return self.draft_from_clusters(h, top_k=top_k)

    def draft_from_clusters(self, h: torch.Tensor, *, top_k: int) -> int:
        """The centroid head's own path (score, keep top K, gather, decide), with no shortcut."""
        scores = F.linear(h, self.centroids)[0]
        clusters = scores.topk(top_k).indices.sort().values
        rows = self._rows_by_cluster.index_select(0, clusters).view(-1, self.hidden)
        row_ids = (
            clusters[:, None] * self.cluster_size + torch.arange(self.cluster_size, device=clusters.device)
        ).view(-1)
        return self.decide([h], F.linear(h, rows), row_ids)[0]
