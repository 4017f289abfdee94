"""Fast kernels of the contrastive loss: the same numbers as the strategies' plain implementations, in
fewer passes over the (B, N) matrices. Each module is one trick; the tests check each against the plain
path (``ContrastiveLoss(impl="plain")``) and against NumPy.

- :mod:`~hardmix.kernels.pairwise`: one product, its stop-gradient views.
- :mod:`~hardmix.kernels.block_logsumexp`: InfoNCE over several blocks with a fused backward.
- :mod:`~hardmix.kernels.derived_logits`, :mod:`~hardmix.kernels.gathered_logits`,
  :mod:`~hardmix.kernels.scaled_logits`: extra logits that are linear in a block, and their backward.
- :mod:`~hardmix.kernels.fused_in_batch`: the whole one-process in-batch loss (SimCSE, MixCSE).
- :mod:`~hardmix.kernels.mixture_norms`, :mod:`~hardmix.kernels.mixcse_logits`,
  :mod:`~hardmix.kernels.mochi_logits`: the mixtures' logits in closed form.
- :mod:`~hardmix.kernels.row_topk`, :mod:`~hardmix.kernels.pair_sampling`,
  :mod:`~hardmix.kernels.faiss_inner_products`: MoCHi's selection, pair draws and pair norms.
- :mod:`~hardmix.kernels.queue_exclusions`, :mod:`~hardmix.kernels.shortcuts`: what the loss knows
  about the negative mask without a (B, N) pass.

The dependency runs one way: the kernels import nothing from :mod:`hardmix.strategies` or
:mod:`hardmix.losses` (a test walks the imports).
"""

from hardmix.kernels.derived_logits import DerivedLogits
from hardmix.kernels.gathered_logits import GatheredLogits
from hardmix.kernels.scaled_logits import ScaledLogits
from hardmix.kernels.shortcuts import LogitShortcuts

__all__ = ["DerivedLogits", "GatheredLogits", "LogitShortcuts", "ScaledLogits"]
