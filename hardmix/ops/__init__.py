"""The math the losses and strategies share, on unit vectors and logits: feature-space mixing
(:mod:`~hardmix.ops.mixing`), MoCo's queue (:mod:`~hardmix.ops.queue`), the debiased negative term of DCL
and HCL (:mod:`~hardmix.ops.debiased`), the embedding-space diagnostics (:mod:`~hardmix.ops.diagnostics`)
and the ``torch.distributed`` helpers (:mod:`~hardmix.ops.distributed`). Nothing here knows a config, a
command or a modality."""
