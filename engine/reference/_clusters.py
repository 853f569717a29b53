"""Balanced clustering of the LM-head rows: the drafter's centroid table.

Every cluster holds exactly ``size`` tokens, so a top-K cluster pick always scans K x size rows
(a fixed draft cost per K, as in the challenge's drafter). k-means runs on a sample of the rows
to place the centroids; then every row is assigned under a capacity limit and the centroids are
recomputed as the means of their members, so ``hidden @ centroid`` is the cluster's mean logit.
"""

from __future__ import annotations

import numpy as np
import torch

_CHUNK = 16384  # rows scored at once: bounds the [chunk, n_clusters] score block to ~128 MB


def _scores(rows: torch.Tensor, centroids: torch.Tensor) -> torch.Tensor:
    """Negative squared distance up to a per-row constant: larger is nearer."""
    return 2.0 * rows @ centroids.T - (centroids * centroids).sum(dim=1)


def _nearest(rows: torch.Tensor, centroids: torch.Tensor) -> torch.Tensor:
    return torch.cat([_scores(rows[i : i + _CHUNK], centroids).argmax(dim=1) for i in range(0, len(rows), _CHUNK)])


def _means(rows: torch.Tensor, assign: torch.Tensor, n_clusters: int) -> tuple[torch.Tensor, torch.Tensor]:
    sums = torch.zeros(n_clusters, rows.shape[1]).index_add_(0, assign, rows)
    counts = torch.bincount(assign, minlength=n_clusters)
    return sums / counts.clamp(min=1).unsqueeze(1), counts


def _kmeans(rows: torch.Tensor, *, n_clusters: int, iters: int, gen: torch.Generator) -> torch.Tensor:
    centroids = rows[torch.randperm(len(rows), generator=gen)[:n_clusters]].clone()
    for _ in range(iters):
        means, counts = _means(rows, _nearest(rows, centroids), n_clusters)
        empty = counts == 0
        # An empty cluster is re-seeded on a random row so that all clusters stay in use.
        reseed = rows[torch.randint(len(rows), (int(empty.sum()),), generator=gen)]
        centroids = torch.where(empty.unsqueeze(1), torch.zeros_like(means), means)
        centroids[empty] = reseed
    return centroids


def _capacitated_assign(rows: torch.Tensor, centroids: torch.Tensor, *, size: int, candidates: int = 8) -> np.ndarray:
    """Each row goes to its nearest cluster that still has room; nearer rows win a contested slot.

    Rounds: every unassigned row proposes to its j-th nearest open cluster; each cluster takes its
    best proposals up to its remaining capacity. Rows left after ``candidates`` proposals are
    scored again against the clusters that still have room.
    """
    n_rows, n_clusters = len(rows), len(centroids)
    capacity = np.full(n_clusters, size, dtype=np.int64)
    assign = np.full(n_rows, -1, dtype=np.int64)
    pending = np.arange(n_rows)
    while pending.size:
        full = torch.from_numpy(capacity == 0)
        m = min(candidates, int((capacity > 0).sum()))
        cand_idx, cand_score = [], []
        for i in range(0, pending.size, _CHUNK):
            s = _scores(rows[torch.from_numpy(pending[i : i + _CHUNK])], centroids)
            s[:, full] = -torch.inf
            top = s.topk(m, dim=1)
            cand_idx.append(top.indices)
            cand_score.append(top.values)
        idx = torch.cat(cand_idx).numpy()
        score = torch.cat(cand_score).numpy()
        for j in range(m):
            alive = assign[pending] == -1
            rows_j, cl_j, sc_j = pending[alive], idx[alive, j], score[alive, j]
            order = np.lexsort((-sc_j, cl_j))  # by cluster, best score first
            rows_j, cl_j = rows_j[order], cl_j[order]
            starts = np.searchsorted(cl_j, cl_j, side="left")
            rank = np.arange(cl_j.size) - starts
            take = rank < capacity[cl_j]
            assign[rows_j[take]] = cl_j[take]
            capacity -= np.bincount(cl_j[take], minlength=n_clusters)
        pending = pending[assign[pending] == -1]
    return assign


def balanced_clusters(
    weight: torch.Tensor, *, n_clusters: int, size: int, seed: int = 0, kmeans_iters: int = 8, sample: int = 65536
) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns (centroids [n_clusters, dim] float32, token ids [n_clusters, size] int64, ascending per cluster)."""
    rows = weight.float()
    if len(rows) != n_clusters * size:
        raise ValueError(f"{len(rows)} rows cannot form {n_clusters} clusters of exactly {size}")
    gen = torch.Generator().manual_seed(seed)
    sample_rows = rows[torch.randperm(len(rows), generator=gen)[: min(sample, len(rows))]]
    centroids = _kmeans(sample_rows, n_clusters=n_clusters, iters=kmeans_iters, gen=gen)
    assign = _capacitated_assign(rows, centroids, size=size)
    # One refinement: means of the balanced clusters, then a second balanced assignment.
    centroids, _ = _means(rows, torch.from_numpy(assign), n_clusters)
    assign = _capacitated_assign(rows, centroids, size=size)
    centroids, counts = _means(rows, torch.from_numpy(assign), n_clusters)
    if not bool((counts == size).all()):
        raise RuntimeError("balanced assignment left clusters of unequal size")
    token_ids = torch.from_numpy(np.argsort(assign, kind="stable")).reshape(n_clusters, size)
    return centroids.contiguous(), token_ids.contiguous()
