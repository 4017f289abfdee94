"""MoCo-v2's augmentations, batched on tensors, and torchvision's PIL pipeline for comparison.

MoCo-v2 (Chen et al. 2020, arXiv:2003.04297; ``moco/main_moco.py --aug-plus``) draws per image:
RandomResizedCrop(scale=(0.2, 1)), ColorJitter(0.4, 0.4, 0.4, 0.1) with p = 0.8 (its four operations in a
random order), RandomGrayscale(p = 0.2), GaussianBlur(sigma in [0.1, 2]) with p = 0.5, a horizontal flip,
then normalization.

:class:`TensorAugment` applies the same distribution to a whole uint8 batch (B, 3, H, W) with one
batched operation per step, on whatever device the batch lives on: the crops and resizes in one
``torchvision.ops.roi_align`` call (bilinear, averaging over the crop when it shrinks), the jitter with
per-image factors and per-image order, the blur as a grouped convolution with per-image kernels. All
randomness comes from a ``torch.Generator`` on the CPU, so a batch depends only on the generator's seed,
not on the device. The formulas are torchvision's (``transforms.v2.functional``).

On a GPU the step waits for nothing here: every draw of a batch is made on the CPU first (the crop boxes,
the jitter's factors, order and rows, the grayscale, blur and flip choices, the blur kernels), packed into
one tensor and sent with one non-blocking copy (:func:`to_device`); the operations then only launch
kernels. Each jitter stage treats brightness, contrast and saturation in one pass (all three are a blend
``f x + (1 - f) base`` with base 0, the image's mean gray or its gray image) and hue in a second.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import Tensor

from hardmix.vision.config import AugmentSection

_GRAY = (0.2989, 0.587, 0.114)  # torchvision's rgb_to_grayscale weights


def _uniform(
    n: int, lo: float, hi: float, generator: torch.Generator | None, shape: tuple[int, ...] = ()
) -> Tensor:
    return lo + (hi - lo) * torch.rand((n, *shape), generator=generator)


def random_resized_crop_boxes(
    n: int,
    height: int,
    width: int,
    scale: tuple[float, float],
    ratio: tuple[float, float],
    generator: torch.Generator | None = None,
    attempts: int = 10,
) -> Tensor:
    """Crop boxes of RandomResizedCrop (torchvision's ``get_params``), drawn for n images at once.

    Up to ``attempts`` (area, aspect) draws per image; the first that fits is kept, otherwise the
    center crop clamped to ``ratio``, as torchvision does.

    Returns:
        (n, 4) float boxes ``(x1, y1, x2, y2)`` in pixel-edge coordinates (integer-valued).
    """
    area = height * width
    target = area * _uniform(n, scale[0], scale[1], generator, (attempts,))
    log_r = _uniform(n, math.log(ratio[0]), math.log(ratio[1]), generator, (attempts,))
    aspect = torch.exp(log_r)
    w = torch.round(torch.sqrt(target * aspect))
    h = torch.round(torch.sqrt(target / aspect))
    ok = (w > 0) & (w <= width) & (h > 0) & (h <= height)
    first = ok.float().argmax(dim=1, keepdim=True)
    w = w.gather(1, first).squeeze(1)
    h = h.gather(1, first).squeeze(1)
    found = ok.any(dim=1)
    u = torch.rand(n, 2, generator=generator)
    top = torch.floor(u[:, 0] * (height - h + 1).clamp_min(1))
    left = torch.floor(u[:, 1] * (width - w + 1).clamp_min(1))
    # Fallback: the whole image, clamped to the ratio range, centered.
    in_ratio = width / height
    if in_ratio < ratio[0]:
        fw, fh = width, round(width / ratio[0])
    elif in_ratio > ratio[1]:
        fh, fw = height, round(height * ratio[1])
    else:
        fw, fh = width, height
    w = torch.where(found, w, float(fw))
    h = torch.where(found, h, float(fh))
    top = torch.where(found, top, float((height - fh) // 2))
    left = torch.where(found, left, float((width - fw) // 2))
    return torch.stack([left, top, left + w, top + h], dim=1)


def crop_resize(images: Tensor, boxes: Tensor, size: int) -> Tensor:
    """Crop each image to its box and resize it to ``size`` x ``size``, in one batched call.

    ``torchvision.ops.roi_align`` with ``aligned=True`` samples bilinearly at the output pixel centers and
    averages ceil(box / size) samples per output pixel, which smooths crops that shrink.

    Args:
        images: (B, C, H, W) float.
        boxes: (B, 4) ``(x1, y1, x2, y2)`` per image, pixel-edge coordinates.
    """
    from torchvision.ops import roi_align

    index = torch.arange(images.shape[0], dtype=images.dtype, device=images.device).unsqueeze(1)
    rois = torch.cat([index, boxes.to(images.device, images.dtype)], dim=1)
    return roi_align(
        images, rois, output_size=(size, size), spatial_scale=1.0, sampling_ratio=-1, aligned=True
    )


def _gray(x: Tensor) -> Tensor:
    r, g, b = x.unbind(1)
    return (_GRAY[0] * r + _GRAY[1] * g + _GRAY[2] * b).unsqueeze(1)


def _blend(a: Tensor, b: Tensor, ratio: Tensor) -> Tensor:
    return (ratio * a + (1.0 - ratio) * b).clamp_(0.0, 1.0)


def adjust_brightness(x: Tensor, f: Tensor) -> Tensor:
    """Per-image brightness ``clamp(f x)``; x (n, 3, H, W) in [0, 1], f (n,)."""
    return (x * f.view(-1, 1, 1, 1)).clamp_(0.0, 1.0)


def adjust_contrast(x: Tensor, f: Tensor) -> Tensor:
    """Per-image contrast: blend with the mean gray level of each image."""
    mean = _gray(x).mean(dim=(1, 2, 3), keepdim=True)
    return _blend(x, mean, f.view(-1, 1, 1, 1))


def adjust_saturation(x: Tensor, f: Tensor) -> Tensor:
    """Per-image saturation: blend with the grayscale image."""
    return _blend(x, _gray(x), f.view(-1, 1, 1, 1))


def rgb_to_hsv(x: Tensor) -> Tensor:
    """(n, 3, H, W) RGB in [0, 1] to HSV, torchvision's ``_rgb2hsv``."""
    r, g, b = x.unbind(1)
    maxc, minc = x.amax(dim=1), x.amin(dim=1)
    eqc = maxc == minc
    cr = maxc - minc
    ones = torch.ones_like(maxc)
    s = cr / torch.where(eqc, ones, maxc)
    crd = torch.where(eqc, ones, cr)
    rc, gc, bc = (maxc - r) / crd, (maxc - g) / crd, (maxc - b) / crd
    hr = (maxc == r) * (bc - gc)
    hg = ((maxc == g) & (maxc != r)) * (2.0 + rc - bc)
    hb = ((maxc != g) & (maxc != r)) * (4.0 + gc - rc)
    h = torch.fmod((hr + hg + hb) / 6.0 + 1.0, 1.0)
    return torch.stack([h, s, maxc], dim=1)


def hsv_to_rgb(x: Tensor) -> Tensor:
    """(n, 3, H, W) HSV to RGB: channel c = v - v s clamp(min(k, 4 - k), 0, 1), k = (n_c + 6 h) mod 6 with
    n = (5, 3, 1) for (R, G, B); torchvision's sector table's values in a few elementwise passes."""
    h, s, v = x[:, 0:1], x[:, 1:2], x[:, 2:3]
    n = torch.tensor([5.0, 3.0, 1.0], device=x.device, dtype=x.dtype).view(1, 3, 1, 1)
    k = torch.remainder(n + 6.0 * h, 6.0)
    return v - v * s * torch.minimum(k, 4.0 - k).clamp(0.0, 1.0)


def adjust_hue(x: Tensor, f: Tensor) -> Tensor:
    """Per-image hue shift by f (n,) in [-0.5, 0.5] turns of the color wheel."""
    hsv = rgb_to_hsv(x)
    h = torch.remainder(hsv[:, 0] + f.view(-1, 1, 1), 1.0)
    return hsv_to_rgb(torch.stack([h, hsv[:, 1], hsv[:, 2]], dim=1))


_JITTER_OPS = (adjust_brightness, adjust_contrast, adjust_saturation, adjust_hue)


def pack(tensors: dict[str, Tensor]) -> tuple[Tensor, list[tuple[str, torch.Size, torch.dtype]]]:
    """Flatten CPU tensors into one float32 tensor and its layout (for :func:`unpack`). Integer and boolean
    tensors must hold values that float32 represents exactly (below 2**24): row indices and masks.

    Example:
        >>> flat, layout = pack({"rows": torch.tensor([0, 2]), "f": torch.tensor([[0.5]])})
        >>> flat.tolist(), [t.tolist() for t in unpack(flat, layout).values()]
        ([0.0, 2.0, 0.5], [[0, 2], [[0.5]]])
    """
    flat = torch.cat([t.reshape(-1).float() for t in tensors.values()])
    return flat, [(name, t.shape, t.dtype) for name, t in tensors.items()]


def unpack(flat: Tensor, layout: list[tuple[str, torch.Size, torch.dtype]]) -> dict[str, Tensor]:
    """The tensors :func:`pack` flattened, as views of ``flat`` (or casts, for other dtypes)."""
    out, at = {}, 0
    for name, shape, dtype in layout:
        n = shape.numel()
        out[name] = flat[at : at + n].view(shape).to(dtype)
        at += n
    return out


def to_device(tensors: dict[str, Tensor], device: torch.device) -> dict[str, Tensor]:
    """Move CPU tensors to ``device`` in one non-blocking copy (:func:`pack`, the copy, :func:`unpack`).

    On the CPU they are returned as they are. A non-blocking copy from pageable memory is staged at once:
    the host neither waits for the device's queue nor may the memory be reused early.
    """
    if device.type == "cpu" or not tensors:
        return tensors
    flat, layout = pack(tensors)
    return unpack(flat.to(device, non_blocking=True), layout)


class JitterDraws:
    """The draws of one ColorJitter over a batch, made on the CPU (same order and distributions as
    torchvision: per image an on/off draw, four factors, a random order of the four operations).

    ``plan()`` gives, per stage, the rows whose operation at that stage is brightness, contrast or
    saturation (with their factor and which of the three: 0, 1, 2) and the rows whose operation is hue
    (with their shift): CPU tensors, to be moved to the batch's device with :func:`to_device`.
    """

    def __init__(
        self,
        n: int,
        strength: tuple[float, float, float, float],
        prob: float,
        generator: torch.Generator | None,
    ) -> None:
        b, c, s, h = strength
        self.apply = torch.rand(n, generator=generator) < prob
        self.factors = torch.stack(
            [
                _uniform(n, max(0.0, 1 - b), 1 + b, generator),
                _uniform(n, max(0.0, 1 - c), 1 + c, generator),
                _uniform(n, max(0.0, 1 - s), 1 + s, generator),
                _uniform(n, -h, h, generator),
            ],
            dim=1,
        )
        self.order = torch.rand(n, 4, generator=generator).argsort(dim=1)
        self.enabled = (b > 0, c > 0, s > 0, h > 0)

    def plan(self) -> dict[str, Tensor]:
        """``{f"bcs_rows{t}", f"bcs_f{t}", f"bcs_kind{t}", f"hue_rows{t}", f"hue_f{t}"}`` for t = 0..3,
        only the non-empty ones."""
        out: dict[str, Tensor] = {}
        for stage in range(4):
            op = self.order[:, stage]
            bcs = self.apply & (op < 3)
            for k in range(3):
                if not self.enabled[k]:
                    bcs &= op != k
            rows = torch.nonzero(bcs).squeeze(1)
            if rows.numel():
                kind = op[rows]
                out[f"bcs_rows{stage}"] = rows
                out[f"bcs_f{stage}"] = self.factors[rows, kind]
                out[f"bcs_kind{stage}"] = kind
            if self.enabled[3]:
                rows = torch.nonzero(self.apply & (op == 3)).squeeze(1)
                if rows.numel():
                    out[f"hue_rows{stage}"] = rows
                    out[f"hue_f{stage}"] = self.factors[rows, 3]
        return out


def _blend_bcs(x: Tensor, f: Tensor, kind: Tensor) -> Tensor:
    """Brightness (kind 0), contrast (1) or saturation (2) per image, in one pass: ``clamp(f x + (1 - f)
    base)`` with base 0, the image's mean gray level or its gray image; for each image the same arithmetic
    as :func:`adjust_brightness`, :func:`adjust_contrast` and :func:`adjust_saturation`."""
    gray = _gray(x)
    mean = gray.mean(dim=(1, 2, 3), keepdim=True)
    kind = kind.view(-1, 1, 1, 1)
    base = torch.where(kind == 1, mean, torch.where(kind == 2, gray, torch.zeros_like(gray)))
    return _blend(x, base, f.view(-1, 1, 1, 1))


def apply_jitter(x: Tensor, plan: dict[str, Tensor]) -> Tensor:
    """Apply :meth:`JitterDraws.plan` (on ``x``'s device) to ``x`` (n, 3, H, W): per stage, one pass for the
    images whose operation is brightness, contrast or saturation, one for those whose operation is hue."""
    out = x.clone()
    for stage in range(4):
        rows = plan.get(f"bcs_rows{stage}")
        if rows is not None:
            out[rows] = _blend_bcs(out[rows], plan[f"bcs_f{stage}"].to(x.dtype), plan[f"bcs_kind{stage}"])
        rows = plan.get(f"hue_rows{stage}")
        if rows is not None:
            out[rows] = adjust_hue(out[rows], plan[f"hue_f{stage}"].to(x.dtype))
    return out


def color_jitter(
    x: Tensor, strength: tuple[float, float, float, float], prob: float, generator: torch.Generator | None
) -> Tensor:
    """ColorJitter with probability ``prob`` per image, each image with its own factors and its own
    random order of the four operations (torchvision draws ``randperm(4)`` per call)."""
    plan = JitterDraws(x.shape[0], strength, prob, generator).plan()
    return apply_jitter(x, to_device(plan, x.device))


def random_grayscale(x: Tensor, prob: float, generator: torch.Generator | None) -> Tensor:
    """Grayscale (replicated on 3 channels) with probability ``prob`` per image."""
    pick = to_device({"pick": torch.rand(x.shape[0], generator=generator) < prob}, x.device)["pick"]
    return torch.where(pick.view(-1, 1, 1, 1), _gray(x).expand_as(x), x)


def blur_kernel_size(kernel: int, height: int, width: int) -> int:
    """The blur's kernel size at an image size: at most ``kernel``, odd, and less than the image's sides."""
    return min(kernel, 2 * ((min(height, width) - 1) // 2) + 1)


def draw_blur(
    n: int, prob: float, sigma: tuple[float, float], k: int, generator: torch.Generator | None
) -> dict[str, Tensor]:
    """The blur's draws for n images on the CPU: ``{"rows": (m,), "w1d": (m, k)}`` for the m images blurred
    (each with sigma ~ U(sigma)), or ``{}`` when none is (or the kernel is under 3)."""
    pick = torch.rand(n, generator=generator) < prob
    sig = _uniform(n, sigma[0], sigma[1], generator)
    rows = torch.nonzero(pick).squeeze(1)
    if rows.numel() == 0 or k < 3:
        return {}
    half = (k - 1) / 2
    pos = torch.linspace(-half, half, k)
    w1d = torch.exp(-0.5 * (pos.view(1, -1) / sig[rows].view(-1, 1)) ** 2)
    return {"rows": rows, "w1d": w1d / w1d.sum(dim=1, keepdim=True)}


def apply_blur(x: Tensor, draws: dict[str, Tensor]) -> Tensor:
    """Blur the rows of :func:`draw_blur` (on ``x``'s device) with their kernels: one grouped separable
    convolution, reflect padding (torchvision's ``gaussian_blur``)."""
    if not draws:
        return x
    n, c, hgt, wid = x.shape
    rows, w1d = draws["rows"], draws["w1d"].to(x.dtype)
    m, k = w1d.shape
    weight = w1d.repeat_interleave(c, dim=0)  # (m * c, k)
    sub = x[rows].reshape(1, m * c, hgt, wid)
    pad = k // 2
    sub = F.pad(sub, (pad, pad, pad, pad), mode="reflect")
    sub = F.conv2d(sub, weight.view(m * c, 1, 1, k), groups=m * c)
    sub = F.conv2d(sub, weight.view(m * c, 1, k, 1), groups=m * c)
    out = x.clone()
    out[rows] = sub.view(m, c, hgt, wid)
    return out


def random_blur(
    x: Tensor, prob: float, sigma: tuple[float, float], kernel: int, generator: torch.Generator | None
) -> Tensor:
    """Gaussian blur with probability ``prob`` per image and sigma ~ U(sigma) per image, reflect padding
    (torchvision's ``gaussian_blur``), as one grouped separable convolution over the chosen images."""
    k = blur_kernel_size(kernel, x.shape[2], x.shape[3])
    return apply_blur(x, to_device(draw_blur(x.shape[0], prob, sigma, k, generator), x.device))


class TensorAugment:
    """MoCo-v2's augmentation of a uint8 batch, batched (see the module docstring).

    Args:
        cfg: the ``augment`` config section.

    Call:
        images: (B, 3, H, W) uint8 on any device; generator: a CPU ``torch.Generator``.
        Returns (B, 3, S, S) float32 normalized views, S = ``cfg.crop_size``, on the images' device.

    Example:
        >>> aug = TensorAugment(AugmentSection(crop_size=16))
        >>> x = torch.randint(0, 256, (4, 3, 32, 32), dtype=torch.uint8)
        >>> aug(x, torch.Generator().manual_seed(0)).shape
        torch.Size([4, 3, 16, 16])
    """

    def __init__(self, cfg: AugmentSection) -> None:
        self.cfg = cfg
        self.mean = torch.tensor(cfg.mean).view(1, 3, 1, 1)
        self.std = torch.tensor(cfg.std).view(1, 3, 1, 1)
        self._norm: dict[torch.device, tuple[Tensor, Tensor]] = {}

    def __call__(self, images: Tensor, generator: torch.Generator | None = None) -> Tensor:
        if images.device.type == "cpu":
            with cpu_threads(1):
                return self._apply(images, generator)
        return self._apply(images, generator)

    def draws(self, n: int, height: int, width: int, generator: torch.Generator | None) -> dict[str, Tensor]:
        """Every draw of a batch of n images of ``height`` x ``width``, on the CPU, in the order the
        operations use the generator: crop boxes, jitter, grayscale, blur, flip."""
        cfg = self.cfg
        d = {"boxes": random_resized_crop_boxes(n, height, width, cfg.crop_scale, cfg.crop_ratio, generator)}
        if cfg.jitter_prob > 0 and any(v > 0 for v in cfg.jitter):
            d.update(JitterDraws(n, cfg.jitter, cfg.jitter_prob, generator).plan())
        if cfg.grayscale_prob > 0:
            d["gray"] = torch.rand(n, generator=generator) < cfg.grayscale_prob
        if cfg.blur_prob > 0:
            k = blur_kernel_size(cfg.kernel_size, cfg.crop_size, cfg.crop_size)
            blur = draw_blur(n, cfg.blur_prob, cfg.blur_sigma, k, generator)
            d.update({f"blur_{name}": t for name, t in blur.items()})
        if cfg.flip_prob > 0:
            d["flip"] = torch.rand(n, generator=generator) < cfg.flip_prob
        return d

    def _normalization(self, device: torch.device) -> tuple[Tensor, Tensor]:
        if device not in self._norm:
            self._norm[device] = (self.mean.to(device), self.std.to(device))
        return self._norm[device]

    def _apply(self, images: Tensor, generator: torch.Generator | None) -> Tensor:
        cfg = self.cfg
        n, _, h, w = images.shape
        d = to_device(self.draws(n, h, w, generator), images.device)  # one copy, no wait
        x = images.float().div_(255.0)
        x = crop_resize(x, d["boxes"], cfg.crop_size).clamp_(0.0, 1.0)
        if cfg.jitter_prob > 0 and any(v > 0 for v in cfg.jitter):
            x = apply_jitter(x, d)
        if "gray" in d:
            x = torch.where(d["gray"].view(-1, 1, 1, 1), _gray(x).expand_as(x), x)
        if "blur_rows" in d:
            x = apply_blur(x, {"rows": d["blur_rows"], "w1d": d["blur_w1d"]})
        if "flip" in d:
            x = torch.where(d["flip"].view(-1, 1, 1, 1), x.flip(-1), x)
        mean, std = self._normalization(x.device)
        return (x - mean) / std


@contextmanager
def cpu_threads(n: int) -> Iterator[None]:
    """Run the block with ``n`` torch CPU threads. The augmentations are many small elementwise kernels:
    on few (and shared) cores their thread synchronization costs more than it saves
    (``docs/performance.md``, "Data alone")."""
    before = torch.get_num_threads()
    if before == n:
        yield
        return
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def normalize_uint8(images: Tensor, mean: tuple[float, ...], std: tuple[float, ...]) -> Tensor:
    """Evaluation preprocessing of a uint8 batch: scale to [0, 1] and normalize (no augmentation)."""
    m = torch.tensor(mean, device=images.device).view(1, -1, 1, 1)
    s = torch.tensor(std, device=images.device).view(1, -1, 1, 1)
    return (images.float() / 255.0 - m) / s


def pil_transform(cfg: AugmentSection):  # noqa: ANN201 (a torchvision Compose)
    """torchvision's per-image PIL pipeline of the same augmentations (MoCo's ``--aug-plus``)."""
    from torchvision import transforms as T

    ops = [
        T.RandomResizedCrop(cfg.crop_size, scale=cfg.crop_scale, ratio=cfg.crop_ratio),
        T.RandomApply([T.ColorJitter(*cfg.jitter)], p=cfg.jitter_prob),
        T.RandomGrayscale(p=cfg.grayscale_prob),
    ]
    if cfg.blur_prob > 0:
        ops.append(T.RandomApply([T.GaussianBlur(cfg.kernel_size, sigma=cfg.blur_sigma)], p=cfg.blur_prob))
    ops += [T.RandomHorizontalFlip(cfg.flip_prob), T.ToTensor(), T.Normalize(cfg.mean, cfg.std)]
    return T.Compose(ops)
