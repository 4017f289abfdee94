"""The contrastive loss of hardmix: InfoNCE whose denominator the strategies extend.

In-batch layout (SimCSE): two views z1, z2 (B, D) of a batch; anchor i = z1_i, candidates = all of z2
(gathered over ranks when distributed), positive in column ``offset + i``. With ``both_directions`` the second
direction (z2 as anchor against z1) is added and the two are averaged.

Queue layout (MoCo): query q (B, D), key k (B, D) and a queue (K, D); logits [q.k | q.queue] / tau.

Both build one :class:`~hardmix.strategies.ContrastContext` of cosine similarities per direction and
compose it with the strategies of the step (:func:`~hardmix.losses.composition.composed_direction`, which
divides every column by tau: the one place the temperature enters).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, overload

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from hardmix.losses.composition import composed_direction
from hardmix.losses.info_nce import MIN_TEMPERATURE
from hardmix.ops.mixing import NEG_INF
from hardmix.strategies.base import ContrastContext, Stats, Strategy, UnnormalizedViews
from hardmix.strategies.build import BuiltStrategies, build_strategies
from hardmix.strategies.schedule import Scheduled
from hardmix.utils.errors import ConfigError, StrategyArgumentError


@dataclass
class LossOutput:
    """The loss and what diagnostics need from it (tensors are detached; nothing syncs until asked).

    Attributes:
        loss: scalar mean loss (with gradient).
        positive_sim: (B,) cosine of each anchor (first direction) to its positive.
        negative_sim: scalar mean cosine of the anchors to their valid negatives.
        strategy_stats: per strategy label (its name, or ``name[i]`` for two entries of one name), its
            statistics of this call (first direction).
    """

    loss: Tensor
    positive_sim: Tensor
    negative_sim: Tensor
    strategy_stats: dict[str, Stats] = field(default_factory=dict)

    def stats(self) -> dict[str, float]:
        """Scalars for logging: loss, mean positive and negative similarity, and each strategy's own."""
        out = {
            "loss": float(self.loss.detach()),
            "pos_sim": float(self.positive_sim.mean()),
            "neg_sim": float(self.negative_sim),
        }
        for name, values in self.strategy_stats.items():
            out.update({f"{name}/{k}": float(v) for k, v in values.items()})
        return out


@overload
def _float32(t: Tensor) -> Tensor: ...
@overload
def _float32(t: None) -> None: ...
def _float32(t: Tensor | None) -> Tensor | None:
    """An fp16 / bf16 tensor as float32 (others as they are): the loss and the strategies compute in
    float32 or better, whatever precision the encoder ran in."""
    return t.float() if t is not None and t.dtype in (torch.float16, torch.bfloat16) else t


def _check_same(names: str, tensors: Sequence[Tensor]) -> None:
    """Refuse tensors of different dtypes or devices, naming them."""
    if len({t.dtype for t in tensors}) > 1 or len({t.device for t in tensors}) > 1:
        got = ", ".join(f"{t.dtype} on {t.device}" for t in tensors)
        raise ValueError(f"{names}: must share one dtype and device, got {got}")


def loss_directions(wanted: set[bool | None], both_directions: bool | None) -> bool:
    """Whether the in-batch loss averages both directions: ``both_directions`` if given, else what the
    strategies ask for (``wanted``: each one's :attr:`~hardmix.strategies.Strategy.both_directions`, None
    for no preference), else one direction. A config checks it with this before any loss is built.

    Raises:
        ValueError: ``both_directions: ...`` where the strategies disagree, or contradict the value given.

    Example:
        >>> loss_directions({None, True}, None), loss_directions({None}, None)
        (True, False)
    """
    wanted = wanted - {None}
    if len(wanted) > 1:
        raise ValueError("both_directions: the strategies disagree on second_direction; set it the same "
                         "in each")
    if both_directions is None:
        return bool(wanted.pop()) if wanted else False
    if wanted and both_directions not in wanted:
        raise ValueError(f"both_directions: {both_directions} contradicts the strategies' "
                         f"second_direction={not both_directions}; drop one")
    return bool(both_directions)


class ContrastiveLoss(nn.Module):
    """InfoNCE with composable mixing strategies, in-batch or against a queue.

    Args:
        temperature: tau, required (SimCSE/MixCSE: 0.05; MoCo-v2: 0.2).
        strategies: the strategies, as :func:`~hardmix.strategies.build_strategies` builds them from a
            config (the trainers hand theirs, taken as they are: not built again, only checked to
            compose, as a list made by hand must be); a name, a mapping ``{"name": ..., **arguments}`` or
            a list of them is built by it here (``none`` is plain InfoNCE).
        both_directions: average the two directions (in-batch only). None: true if a strategy asks for
            it (MixCSE's ``second_direction``), else false. An explicit value that contradicts a strategy
            raises.

    Inputs (in_batch): z1, z2 of shape (B, D), any norm (cosine similarity is used).
    Inputs (queue): q, k (B, D) and queue (K, D).

    Example:
        >>> loss_fn = ContrastiveLoss(temperature=0.05, strategies={"name": "mixcse", "lam": 0.2})
        >>> z1, z2 = torch.randn(8, 16, requires_grad=True), torch.randn(8, 16)
        >>> out = loss_fn.in_batch(z1, z2)
        >>> out.loss.backward()
        >>> z1.grad.shape
        torch.Size([8, 16])
    """

    def __init__(
        self, temperature: float, strategies: Any = None, both_directions: bool | None = None
    ) -> None:
        super().__init__()
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) \
                or not temperature >= MIN_TEMPERATURE:
            raise ValueError(f"temperature: must be a number of at least {MIN_TEMPERATURE}, got "
                             f"{temperature!r}")
        self.temperature = float(temperature)
        if strategies is None or strategies == []:
            given: list[Strategy] = []
        elif isinstance(strategies, BuiltStrategies):
            given = list(strategies)  # a config's list, built and checked once: taken as it is
        elif isinstance(strategies, (list, tuple)) and all(isinstance(s, Strategy) for s in strategies):
            given = BuiltStrategies(strategies)  # made by hand: checked to compose, as build_strategies would
            try:
                given.check_composition()  # cheap; a list made by hand has met no build_strategies
            except StrategyArgumentError as e:
                raise ConfigError(f"strategies: {e.message}") from None
        else:
            given = build_strategies(strategies, "strategies")
        self.strategies = [s for s in given if s.name != "none"]
        self.both_directions = loss_directions({s.both_directions for s in self.strategies}, both_directions)

    def extra_repr(self) -> str:
        return (f"temperature={self.temperature}, both_directions={self.both_directions}, "
                f"strategies={self.strategies}")

    @property
    def labels(self) -> list[str]:
        """Each strategy's name in the statistics and the errors: its name, or ``name[i]`` (its place in
        :attr:`strategies`) where two entries share a name, so that they never share (or overwrite) their
        statistics."""
        names = [s.name for s in self.strategies]
        return [n if names.count(n) == 1 else f"{n}[{i}]" for i, n in enumerate(names)]

    def resolve_epochs(self, steps_per_epoch: int) -> None:
        """Turn the schedules given in epochs into optimizer steps (the engine calls it once the task
        knows its steps per epoch)."""
        self.strategies = [s.in_steps(steps_per_epoch) for s in self.strategies]

    def has_schedule(self) -> bool:
        """Whether a strategy's arguments or activity depend on the step (a warm-up or a ramp)."""
        return any(isinstance(s, Scheduled) for s in self.strategies)

    def check_schedules(self, total_steps: int) -> None:
        """Refuse a schedule that keeps its strategy inactive for the whole run (its warm-up reaches the
        run's last step), naming the key: such a run would train the baseline under the strategy's name.
        Every value a ramp takes during the run, step by step, is checked too: a strategy that would refuse
        its arguments at some step is refused before the first, naming the argument and the step."""
        for label, s in zip(self.labels, self.strategies, strict=True):
            if not isinstance(s, Scheduled):
                continue
            warmup = s.warmup_steps
            if warmup and warmup >= total_steps:
                raise ConfigError(
                    f"loss.strategies ({label}).{s.warmup_key}: its warm-up ends at step {warmup}, at or "
                    f"after the run's last ({total_steps}), so {s.name} would never act; shorten the warm-up"
                )
            try:
                s.check_steps(total_steps)
            except StrategyArgumentError as e:
                raise ConfigError(f"loss.strategies ({label}).{e.argument}: {e.message}") from None

    def _active(self, step: int) -> tuple[list[Strategy], list[str], dict[str, Stats]]:
        """The strategies of this step, their labels and the scheduled arguments' values."""
        labels = self.labels
        pairs = [(s, label) for x, label in zip(self.strategies, labels, strict=True)
                 if (s := x.at(step)) is not None]
        schedules = {label: s.scheduled_values(step) for s, label in zip(self.strategies, labels, strict=True)
                     if isinstance(s, Scheduled)}
        return [s for s, _ in pairs], [label for _, label in pairs], schedules

    def in_batch(
        self,
        z1: Tensor,
        z2: Tensor,
        z1_all: Tensor | None = None,
        z2_all: Tensor | None = None,
        offset: int = 0,
        step: int = 0,
        generator: torch.Generator | None = None,
    ) -> LossOutput:
        """In-batch InfoNCE (SimCSE) with the strategies' extra negatives, in float32 or better (fp16 /
        bf16 views are upcast and autocast is off inside: under ``torch.autocast`` the loss is the same).

        Args:
            z1: (B, D) first view (anchors), local rows.
            z2: (B, D) second view (positives), local rows.
            z1_all: (N, D) the first view of the whole batch when distributed (gathered with gradient,
                see :func:`hardmix.ops.distributed.gather_with_grad`); None for one process.
            z2_all: (N, D) likewise for the second view.
            offset: global index of local row 0 (rank * B for equal local batches).
            step: optimizer step, for the strategies' schedules.
            generator: optional generator for the strategies' random draws.

        Raises:
            ValueError: naming the argument, for an empty batch, a batch of one (no negatives), shapes,
                dtypes or devices that do not match.
        """
        z1, z2, z1_all, z2_all = _float32(z1), _float32(z2), _float32(z1_all), _float32(z2_all)
        with torch.autocast(z1.device.type, enabled=False):
            return self._in_batch(z1, z2, z1_all, z2_all, offset, step, generator)

    def _in_batch(self, z1: Tensor, z2: Tensor, z1_all: Tensor | None, z2_all: Tensor | None, offset: int,
                  step: int, generator: torch.Generator | None) -> LossOutput:
        if z1.dim() != 2 or z1.shape != z2.shape:
            raise ValueError(f"z1, z2: must both be (B, D), got {tuple(z1.shape)} and {tuple(z2.shape)}")
        if (z1_all is None) != (z2_all is None):
            raise ValueError("z1_all, z2_all: give both or neither")
        z1_all = z1 if z1_all is None else z1_all
        z2_all = z2 if z2_all is None else z2_all
        if z1_all.dim() != 2 or z2_all.dim() != 2 or {z1_all.shape[1], z2_all.shape[1]} != {z1.shape[1]}:
            raise ValueError(
                f"z1_all, z2_all: must be (N, D) with D = {z1.shape[1]}, got {tuple(z1_all.shape)}, "
                f"{tuple(z2_all.shape)}"
            )
        if self.both_directions and z1_all.shape[0] != z2_all.shape[0]:
            raise ValueError("z1_all, z2_all: a loss in both directions needs both views of the same rows")
        _check_same("z1, z2", [z1, z2, z1_all, z2_all])
        b, n = z1.shape[0], z2_all.shape[0]
        if b == 0:
            raise ValueError("z1: the batch is empty")
        if n < 2:
            raise ValueError("z1: a batch of one has no in-batch negatives")
        if not 0 <= offset <= n - b:
            raise ValueError(f"offset: must be in [0, {n - b}] for {b} local rows of {n}, got {offset}")
        tau = self.temperature
        strategies, labels, schedules = self._active(step)
        h1, h2 = F.normalize(z1, dim=-1), F.normalize(z2, dim=-1)
        h1_all = h1 if z1_all is z1 else F.normalize(z1_all, dim=-1)
        h2_all = h2 if z2_all is z2 else F.normalize(z2_all, dim=-1)
        rows = torch.arange(b, device=z1.device)
        pos_index = rows + offset  # column of each anchor's positive in the whole batch
        valid = torch.ones(b, n, dtype=torch.bool, device=z1.device)
        valid[rows, pos_index] = False

        def direction(
            anchors: Tensor, positives: Tensor, candidates: Tensor, views: UnnormalizedViews, index: int
        ) -> tuple[Tensor, dict[str, Stats], Tensor]:
            cosines = anchors @ candidates.T  # (B, N)
            ctx = ContrastContext(
                anchors=anchors,
                positives=positives,
                candidates=candidates,
                cosines=cosines,
                positive_cosines=cosines[rows, pos_index],
                negative_mask=valid,
                mode="in_batch",
                step=step,
                positive_index=pos_index,
                direction=index,
                generator=generator,
                unnormalized=views,
            )
            return (*composed_direction(ctx, strategies, tau, labels), cosines)

        loss, stats, cosines = direction(h1, h2, h2_all, UnnormalizedViews(z1, z1_all, z2_all), 0)
        if self.both_directions:
            loss2, _, _ = direction(h2, h1, h1_all, UnnormalizedViews(z2, z2_all, z1_all), 1)
            loss = 0.5 * (loss + loss2)
        with torch.no_grad():
            cosines = cosines.detach()
            neg_sim = torch.where(valid, cosines, 0.0).sum() / (b * (n - 1))
        return LossOutput(loss, cosines[rows, pos_index], neg_sim, _merge(stats, schedules))

    def queue(
        self,
        q: Tensor,
        k: Tensor,
        queue: Tensor,
        query_ids: Tensor | None = None,
        queue_ids: Tensor | None = None,
        step: int = 0,
        generator: torch.Generator | None = None,
    ) -> LossOutput:
        """MoCo InfoNCE ``[q.k | q.queue] / tau`` (target 0) with the strategies' extra negatives, in
        float32 or better (as :meth:`in_batch`).

        Args:
            q: (B, D) queries (with gradient), any norm.
            k: (B, D) keys (positives); detached here, as MoCo's momentum keys.
            queue: (K, D) negatives; detached.
            query_ids: optional (B,) sample ids of the queries.
            queue_ids: optional (K,) sample ids of the queue entries; entries that carry the query's own
                id are excluded (a queue larger than the dataset holds the query's earlier key). Id -1
                marks an empty slot (excluded); other negative ids (-2: a random initial key) match no
                query.

        Raises:
            ValueError: naming the argument, for an empty batch or queue, a query whose every queue entry
                is excluded, shapes, id lengths, dtypes or devices that do not match.
        """
        q, k, queue = _float32(q), _float32(k), _float32(queue)
        with torch.autocast(q.device.type, enabled=False):
            return self._queue(q, k, queue, query_ids, queue_ids, step, generator)

    def _queue(self, q: Tensor, k: Tensor, queue: Tensor, query_ids: Tensor | None, queue_ids: Tensor | None,
               step: int, generator: torch.Generator | None) -> LossOutput:
        if q.dim() != 2 or q.shape != k.shape or queue.dim() != 2 or queue.shape[1] != q.shape[1]:
            raise ValueError(
                f"q, k, queue: (B, D), (B, D) and (K, D) expected, got {tuple(q.shape)}, "
                f"{tuple(k.shape)}, {tuple(queue.shape)}"
            )
        _check_same("q, k, queue", [q, k, queue])
        b, n_queue = q.shape[0], queue.shape[0]
        if b == 0:
            raise ValueError("q: the batch is empty")
        if n_queue == 0:
            raise ValueError("queue: empty (no negatives)")
        for name, ids, length in (("query_ids", query_ids, b), ("queue_ids", queue_ids, n_queue)):
            if ids is not None and (ids.dim() != 1 or ids.shape[0] != length or ids.device != q.device):
                raise ValueError(
                    f"{name}: must be ({length},) on {q.device}, got {tuple(ids.shape)} on {ids.device}"
                )
        tau = self.temperature
        strategies, labels, schedules = self._active(step)
        h = F.normalize(q, dim=-1)
        key = F.normalize(k.detach(), dim=-1)
        negatives = F.normalize(queue.detach(), dim=-1)
        valid = torch.ones(1, n_queue, dtype=torch.bool, device=q.device).expand(b, n_queue)
        if queue_ids is not None:
            valid = valid & (queue_ids.view(1, -1) != -1)  # empty slots
            if query_ids is not None:  # the query's own earlier keys
                valid = valid & (query_ids.view(-1, 1) != queue_ids.view(1, -1))
            if not bool(valid.any(dim=1).all()):
                raise ValueError(
                    "queue_ids: every queue entry is excluded for some query (empty slots or its own id)"
                )
        cosines = h @ negatives.T  # (B, K), gradient to q only
        if queue_ids is not None:
            cosines = cosines.masked_fill(~valid, NEG_INF)
        pos = (h * key).sum(dim=1)  # (B,) q . k
        ctx = ContrastContext(
            anchors=h,
            positives=key,
            candidates=negatives,
            cosines=cosines,
            positive_cosines=pos,
            negative_mask=valid,
            mode="queue",
            step=step,
            generator=generator,
        )
        loss, stats = composed_direction(ctx, strategies, tau, labels)
        with torch.no_grad():
            neg_sim = torch.where(valid, cosines.detach(), 0.0).sum() / valid.sum()
        return LossOutput(loss, pos.detach(), neg_sim, _merge(stats, schedules))


def _merge(stats: dict[str, Stats], schedules: dict[str, Stats]) -> dict[str, Stats]:
    for name, values in schedules.items():
        stats.setdefault(name, {}).update(values)
    return stats
