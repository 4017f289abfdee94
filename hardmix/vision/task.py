"""``hardmix train vision``: MoCo-v2 with any of the core's strategies (MoCHi, MixCSE, ...).

The vision task of the training engine (:mod:`hardmix.training`). One process trains on one device (CPU
or a GPU, with split-BatchNorm); under ``torchrun`` every rank trains its slice of each global batch with
DistributedDataParallel, keys are gathered before they enter the queue and shuffled across ranks for
BatchNorm. Every random draw of a step derives from (seed, step, rank), so a resumed run draws what an
uninterrupted one would.

The selection metric (``eval.selection``) is ``val_knn_top1``: the weighted k-NN top-1
(:mod:`hardmix.vision.knn`) of a validation split carved from the training images (``data.val_samples``,
never trained on) against a bank of the other training images; on unlabeled images (a folder without class
folders) it is the label-free ``val_proxy_top1`` of the same validation images
(:mod:`hardmix.vision.label_free`), and no labelled test score is computed unless ``eval.dataset`` names a
labelled dataset. The test split is read once, at the end, for the final model's held-out scores
(``knn_top1``, ``knn_top5``, ``linear_top1`` and their binomial standard errors): see
:class:`hardmix.vision.evaluation.RunEvaluation`. The final model is the result (MoCo's protocol); the
best validation step is recorded beside it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

from hardmix.losses import ContrastiveLoss
from hardmix.ops.diagnostics import anchor_gradient_norm, embedding_diagnostics
from hardmix.ops.distributed import average_running_statistics
from hardmix.training import StepResult, Task
from hardmix.training.run_folder import BEST, CONFIG
from hardmix.training.task import ConfigFacts
from hardmix.utils.errors import ConfigError
from hardmix.vision.backbones import build_backbone
from hardmix.vision.config import TEST_SCORES, VisionConfig, check_negatives, selection_score
from hardmix.vision.data import (
    EVAL_SPLITS,
    check_labels,
    dataset_root,
    derive_seed,
    is_labelled,
    split_folder,
    step_generator,
)
from hardmix.vision.encoding import BEST_WEIGHTS
from hardmix.vision.evaluation import RunEvaluation
from hardmix.vision.label_free import LABEL_FREE_SCORES
from hardmix.vision.moco import MoCo, lr_at, momentum_at, queue_diagnostics
from hardmix.vision.pipeline import build_train_data


class VisionFacts(ConfigFacts):
    """What a vision config says before anything is built: its selection score (``eval.selection``,
    ``auto`` resolved by whether the images are labelled), its scores and held-out test scores, the image
    folders it reads and their digests, and its report."""

    cfg: VisionConfig

    def selection_metric(self) -> str:
        """``eval.selection``, ``auto`` resolved by whether ``data.dataset`` is labelled."""
        return selection_score(self.cfg.eval.selection, _labelled(self.cfg))

    def same_meaning(self, key: str, saved: Any, now: Any) -> bool:
        """``eval.selection``: ``auto`` means what it resolves to on the run's data (which a resume keeps)."""
        if key != "eval.selection" or saved == now:
            return saved == now
        labelled = _labelled(self.cfg)
        try:
            return selection_score(saved, labelled) == selection_score(now, labelled)
        except ConfigError:
            return False

    def score_names(self) -> list[str]:
        """With ``eval.at_end``: ``val_knn_top1`` and ``val_knn_top5`` (labelled images), the label-free
        scores (where computed) and ``eval.final_scores`` (where there are labelled test images); else none
        (the ``<score>_se`` of each test score besides)."""
        cfg = self.cfg
        if not cfg.eval.at_end:
            return []
        labelled = _labelled(cfg)
        names = ["val_knn_top1", "val_knn_top5"] if labelled else []
        if not labelled or self.selection_metric() == "val_proxy_top1" or cfg.eval.label_free_scores:
            names += list(LABEL_FREE_SCORES)
        if _has_test(cfg):
            names += [s for s in TEST_SCORES if s in cfg.eval.final_scores]
        return names

    def held_out_scores(self) -> list[str]:
        """The test scores of the final model, ``knn_top1``, ``knn_top5``, ``linear_top1``: never selected or
        tuned on (whether this config computes them: :meth:`overrides_for_scores`)."""
        return list(TEST_SCORES)

    def overrides_for_scores(self, scores: list[str]) -> list[str]:
        """``eval.at_end=true`` and the ``eval.final_scores`` list when ``scores`` asks for test scores the
        config does not compute (besides those it does)."""
        cfg = self.cfg
        wanted = {s.removesuffix("_se") for s in scores}
        out = []
        if wanted & {*TEST_SCORES, "val_knn_top1", "val_knn_top5", *LABEL_FREE_SCORES}:
            if not cfg.eval.at_end:
                out.append("eval.at_end=true")
        if wanted & set(LABEL_FREE_SCORES) and not cfg.eval.label_free_scores:
            out.append("eval.label_free_scores=true")
        missing = [s for s in TEST_SCORES if s in wanted and s not in cfg.eval.final_scores]
        if missing:
            have = [s for s in TEST_SCORES if s in cfg.eval.final_scores or s in missing]
            out.append(f"eval.final_scores=[{', '.join(have)}]")
        return out

    def negatives(self) -> int:
        """The queue's keys (MoCo: each query's negatives)."""
        return self.cfg.loss.queue_size

    def data_needs(self) -> list[tuple[str, str]]:
        from hardmix.vision.data import KNOWN_DATASETS

        cfg = self.cfg
        needs = [("data.dataset", KNOWN_DATASETS.get(cfg.data.dataset, cfg.data.dataset))]
        if cfg.eval.at_end or cfg.eval.eval_steps:
            dataset = cfg.eval.dataset or cfg.data.dataset
            needs.append(("eval.dataset", KNOWN_DATASETS.get(dataset, dataset)))
        if cfg.data.class_list:
            needs.append(("data.class_list", cfg.data.class_list))
        return needs

    def input_folders(self) -> dict[str, Path]:
        cfg = self.cfg
        folders = {"data.dataset": dataset_root(cfg.data.dataset)}
        if cfg.eval.dataset:
            folders["eval.dataset"] = dataset_root(cfg.eval.dataset, key="eval.dataset")
        return folders

    def data_fingerprint(self) -> dict[str, Any]:
        """The training split's image count, the images the run trains on, and the digest of every image of
        the split by its path in the split and its content (:func:`hardmix.training.fingerprint.tree_digest`:
        an image rewritten at the same size changes it; the folder may move)."""
        from hardmix.training.fingerprint import tree_digest
        from hardmix.vision.pipeline import train_image_list

        images, idx = train_image_list(self.cfg)
        return {"images": len(images.paths), "training images": int(idx.numel()),
                "image content sha256": tree_digest(images.paths, images.folder)}

    def input_digest(self) -> str | None:
        """The evaluation's images, each by its path and its content: the k-NN bank's split and the test
        split of ``eval.dataset``; None when the run scores no test images."""
        from hardmix.training.fingerprint import tree_digest
        from hardmix.vision.data import eval_splits

        cfg = self.cfg
        if not (cfg.eval.at_end and cfg.eval.final_scores and _has_test(cfg)):
            return None
        train, test = eval_splits(cfg.eval.dataset or cfg.data.dataset, key="eval.dataset")
        return tree_digest([*train.paths, *test.paths], train.folder.parent)

    def report(self, results: dict[str, Any]) -> str:
        final, info = results["final_scores"], results["task_info"]
        lines = []
        if results.get("best_score") is not None:
            name = {"val_knn_top1": "k-NN top-1", "val_proxy_top1": "proxy-task top-1 (label-free)"}.get(
                results["selection_metric"], results["selection_metric"])
            lines.append(f"best validation {name}: {results['best_score']:.2f}% at step "
                         f"{results['best_step']}")
        test = [f"{name} {final[key]:.2f} ± {final[key + '_se']:.2f}" for key, name in
                (("knn_top1", "k-NN top-1"), ("knn_top5", "k-NN top-5"), ("linear_top1", "linear top-1"))
                if key in final]
        if test:
            lines.append(f"test scores of the final model on {info['eval_dataset']} (%, ± binomial SE): "
                         + ", ".join(test))
        if results.get("best_step") is not None:
            lines.append(f"the encoder of step {results['best_step']}: {results['run_dir']}/best")
        lines.append(f"trained {results['steps']} steps; run in {results['run_dir']}")
        return "\n".join(lines)


class VisionTask(Task):
    """Image encoders: MoCo-v2 (momentum encoder, queue, shuffle-BN) with the core's strategies."""

    name = "vision"
    config_class = VisionConfig
    facts_class = VisionFacts
    selection_metric = "val_knn_top1"
    default_score = "knn_top1"
    progress_label = "val knn"
    resumable_keys = ("data.num_workers", "data.cache_dir")
    meaning_keys = {
        "eval.selection": "the selection score",
        "eval.dataset": "the data set of the test scores",
        "eval.knn_k": "the k-NN's k", "eval.knn_temperature": "the k-NN's temperature",
        "eval.knn_train_samples": "the k-NN's bank", "eval.knn_test_samples": "the k-NN's test queries",
        "eval.linear_epochs": "the linear probe's epochs",
        "eval.linear_train_samples": "the linear probe's training images",
        "eval.linear_test_samples": "the linear probe's test images",
    }
    exports = (BEST,)

    cfg: VisionConfig

    def __init__(self, cfg: VisionConfig, runtime: Any) -> None:
        super().__init__(cfg, runtime)
        self.progress_label = "val knn" if self.selection_metric == "val_knn_top1" else "val proxy"

    def check(self) -> None:
        cfg = self.cfg
        dataset_root(cfg.data.dataset)
        check_labels(cfg.data.dataset, cfg.data.train_split, cfg.data.labels, cfg.data.class_list is not None)
        if cfg.eval.at_end or cfg.eval.eval_steps:
            if cfg.data.val_samples is None:
                raise ConfigError(
                    "data.val_samples: the evaluation (eval.at_end, eval.eval_steps) selects on a validation "
                    "split carved from the training images; set its size (e.g. 1000), or eval.at_end: false "
                    "and eval.eval_steps: 0 to train without evaluation")
            root = dataset_root(cfg.eval.dataset or cfg.data.dataset, key="eval.dataset")
            if cfg.eval.at_end and cfg.eval.final_scores and _has_test(cfg):  # the test scores' images
                for splits in (["train"], list(EVAL_SPLITS)):
                    split_folder(root, splits, key="eval.dataset")

    def build(self) -> None:
        cfg, rt = self.cfg, self.runtime
        self.data = build_train_data(cfg, rt.device, rt.rank, rt.world)
        if self.data.num_samples != cfg.data.max_samples:  # fewer images than the config's check assumed
            check_negatives(cfg, self.data.num_samples)
        self.spe = self.data.batches.steps_per_epoch
        self.loss_fn = ContrastiveLoss(cfg.loss.temperature, cfg.loss.strategies)
        backbone, dim = build_backbone(cfg.model.backbone, cfg.model.width, cfg.model.small_stem)
        self.moco = MoCo(
            backbone, dim, cfg.model.proj_hidden, cfg.model.proj_dim, cfg.loss.queue_size,
            bn_splits=cfg.model.bn_splits if rt.world == 1 else 1,
            queue_generator=torch.Generator().manual_seed(derive_seed(cfg.train.seed, 0, 0, 3)),
        ).to(rt.device)
        self.channels_last = rt.device.type == "cuda" and cfg.train.channels_last
        if self.channels_last:
            self.moco = self.moco.to(memory_format=torch.channels_last)
        if rt.world > 1:  # DDP broadcasts rank 0's weights; BN statistics are averaged after each step
            self.moco.set_query_wrapper(rt.ddp(self.moco.encoder_q, broadcast_buffers=False))
            self.moco.encoder_k.load_state_dict(self.moco.encoder_q.state_dict())
        self.evaluation = RunEvaluation(cfg, self.data.split, self.data.val_indices, rt.device)
        self.model_version = 0  # the features of one model version are computed once
        if not self.data.split.labelled:
            why = ("data.labels: false: the images of {} are used unlabeled (sub-folders are not classes)"
                   if cfg.data.labels is False
                   else "data.dataset: {} holds images at its top level: unlabeled")
            rt.say(why.format(self.data.split.folder) + ": selecting on "
                   f"{self.selection_metric}" + ("" if self.evaluation.has_test else
                                                 ", no labelled test scores (eval.dataset names none)"))

    def model(self) -> nn.Module:
        return self.moco

    def steps_for(self, epochs: int) -> int:
        return self.spe * epochs

    def configure_optimizers(self, total_steps: int) -> tuple[torch.optim.Optimizer, Any]:
        t = self.cfg.train
        self.total_steps = total_steps
        base_lr = t.lr * t.batch_size / 256  # MoCo's linear scaling rule
        optimizer = torch.optim.SGD(self.moco.encoder_q.parameters(), lr=base_lr, momentum=t.sgd_momentum,
                                    weight_decay=t.weight_decay)
        warmup = round(t.warmup_epochs * self.spe)
        schedule = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: lr_at(step, total_steps, 1.0, warmup, t.schedule))
        return optimizer, schedule

    def batches(self, start: int, stop: int) -> Iterator[Any]:
        return self.data.batches.iterate(start, stop)

    def train_step(self, batch: Any, step: int) -> StepResult:
        cfg, rt = self.cfg, self.runtime
        v1, v2, ids = batch
        m = momentum_at(step, self.total_steps, cfg.model.momentum, cfg.model.final_momentum,
                        cfg.model.momentum_schedule)
        v1, v2 = v1.to(rt.device, non_blocking=True), v2.to(rt.device, non_blocking=True)
        if self.channels_last:
            v1 = v1.contiguous(memory_format=torch.channels_last)
            v2 = v2.contiguous(memory_format=torch.channels_last)
        self.moco.train()
        with rt.autocast():
            res = self.moco(v1, v2, ids, self.loss_fn, m, step, cfg.loss.two_queries,
                            cfg.loss.mask_same_sample, step_generator(cfg.train.seed, step, rt.rank, 3))
        return StepResult(res.loss, cfg.train.batch_size, res.outputs[0].stats,
                          {"moco": res, "ids": ids, "momentum": m})

    def diagnostics(self, result: StepResult, step: int) -> dict[str, float]:
        """The batch's embedding diagnostics, the queue's (proxy-task accuracy, ...) and the anchors'
        gradient norm against the queue the loss saw."""
        res, ids = result.extra["moco"], result.extra["ids"].to(self.runtime.device, non_blocking=True)
        mask = self.cfg.loss.mask_same_sample
        out = {k: v for k, v in embedding_diagnostics(res.queries, res.keys).items()
               if k not in ("pos_sim", "neg_sim")}
        out.update(queue_diagnostics(res.queries, res.keys, res.queue, res.queue_ids, ids if mask else None))
        scratch = torch.Generator(device=self.runtime.device)
        scratch.manual_seed(0)
        with torch.autocast(self.runtime.device.type, enabled=False):
            out["anchor_grad_norm"] = anchor_gradient_norm(
                lambda a, p: self.loss_fn.queue(a, p, res.queue, ids if mask else None,
                                                res.queue_ids if mask else None, step=step,
                                                generator=scratch).loss,
                res.queries, res.keys)
        out["momentum"] = result.extra["momentum"]
        out["queue_filled"] = self.moco.queue.filled
        return out

    # ---------------------------------------------------------------------------------- evaluation
    def after_optimizer_step(self, result: StepResult, step: int) -> None:
        """Under DDP, every BatchNorm's running statistics become their mean over the ranks: N processes
        then hold what one process with ``model.bn_splits: N`` holds (each rank's slice is one split)."""
        if self.runtime.world > 1:
            average_running_statistics(self.moco)
        self.model_version = step + 1

    def evaluate(self) -> dict[str, float]:
        return self.evaluation.validation(self.moco.backbone, self.model_version)

    def on_new_best(self, run_dir: Path, step: int, scores: dict[str, float]) -> None:
        """``RUN/best/``: the query backbone of the best evaluation so far (``backbone.pt``, the flat state
        dict ``hardmix export vision`` writes) and the run's ``config.yaml``: the selected step's encoder,
        which ``hardmix encode RUN/best --images FOLDER`` reads. The run's result stays the final model's
        (MoCo's protocol)."""
        import yaml

        from hardmix.training.config import plain_config
        from hardmix.utils.confine import save_torch, write_text

        best = run_dir / BEST
        state = {k: v.detach().cpu().clone() for k, v in self.moco.backbone.state_dict().items()}
        save_torch(state, best / BEST_WEIGHTS, run_dir)
        write_text(yaml.safe_dump(plain_config(self.cfg), sort_keys=False), best / CONFIG, run_dir)

    def final_scores(self, run_dir: Any, evaluated: dict[str, float] | None) -> dict[str, float]:
        """The validation scores of the final model (when evaluated at the last step) and, with
        ``eval.at_end``, its held-out test scores (``eval.final_scores``, each with ``<score>_se``)."""
        scores = dict(evaluated or {})
        if self.cfg.eval.at_end:
            scores.update(self.evaluation.test(self.moco.backbone, self.model_version))
        return scores

    def start_scores(self, selection_only: bool) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
        """The seed's untrained network (before its first step) on the validation bank and queries and,
        unless ``selection_only``, on the test scores of the end (k-NN, and the linear probe where the run
        has one): the keys of :meth:`final_scores`."""
        tag = -1  # the features of the start: never a step's
        scores = self.evaluation.validation(self.moco.backbone, tag)
        if self.cfg.eval.at_end and not selection_only:
            scores.update(self.evaluation.test(self.moco.backbone, tag))
        return scores, {}

    def describe(self) -> str:
        d, cfg = self.data, self.cfg
        skipped = f", {len(d.skipped)} undecodable skipped" if d.skipped else ""
        return (f"training {cfg.model.backbone} on {d.num_samples} images ({d.pipeline} pipeline{skipped}), "
                f"{self.spe} steps/epoch, with {self.loss_fn.extra_repr()}")

    def info(self) -> dict[str, Any]:
        d = self.data
        from hardmix.datasets.manager import provenance

        cfg = self.cfg
        return {"dataset": cfg.data.dataset, "dataset_data": provenance(dataset_root(cfg.data.dataset)),
                "num_samples": d.num_samples, "val_samples": int(d.val_indices.numel()),
                "pipeline": d.pipeline,
                "skipped_images": len(d.skipped), "eval_dataset": cfg.eval.dataset or cfg.data.dataset}


def _labelled(cfg: VisionConfig) -> bool:
    return is_labelled(cfg.data.dataset, cfg.data.train_split, cfg.data.labels)


def _has_test(cfg: VisionConfig) -> bool:
    """Whether the run has labelled test images: its own (labelled) or ``eval.dataset``'s."""
    return _labelled(cfg) or (cfg.eval.dataset is not None and cfg.eval.dataset != cfg.data.dataset)


__all__ = ["VisionFacts", "VisionTask"]
