"""Per-image augmentation for behaviour cloning: random crop/shift and colour jitter on uint8 tensors.

Every image gets its own random draw (per camera, per sample), from a `torch.Generator` when one is
given, so the same seed gives the same augmentation. The geometry is a crop (zoom in, then resize back)
and/or an integer shift with replicated borders, both plain slices with positive steps: an image is never
mirrored or rotated (a mirrored image would flip the meaning of left/right actions).

Drawing and the pixel work are separate (`ImageAugment.draw`, `ImageAugment.apply`), so a batch can take each
sample's draw from that sample's own generator and still do the pixel work once for the whole batch
(`DemoDataset.__getitems__`): the result is the same as augmenting the samples one by one.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F

# RGB -> YIQ (NTSC). Y is the luma torchvision also uses for grayscale; I and Q carry the chroma,
# so saturation scales (I, Q) and a hue shift turns them about the Y axis.
_RGB_TO_YIQ = np.array([[0.299, 0.587, 0.114], [0.595716, -0.274453, -0.321263], [0.211456, -0.522591, 0.311135]])
_YIQ_TO_RGB = np.linalg.inv(_RGB_TO_YIQ)
_LUMA = torch.tensor(_RGB_TO_YIQ[0], dtype=torch.float32)


def _check_range(name: str, value: float, lo: float, hi: float) -> float:
    value = float(value)
    if not lo <= value <= hi:
        raise ValueError(f"{name} must be in [{lo}, {hi}], got {value!r}")
    return value


class AugmentDraw(NamedTuple):
    """The random draws of `n` augmentations (see `ImageAugment.draw`)."""

    boxes: list[tuple[int, int, int, int, int, int]]
    """per draw `(top, left, crop_height, crop_width, shift_y, shift_x)`, see `ImageAugment.sample_boxes`"""
    color: np.ndarray
    """(n, 4) uniforms in [-1, 1]: brightness, contrast, saturation, hue (`ImageAugment.color_params`)"""

    @staticmethod
    def cat(draws: list[AugmentDraw]) -> AugmentDraw:
        """The draws one after the other, as one `AugmentDraw`."""
        return AugmentDraw([box for d in draws for box in d.boxes], np.concatenate([d.color for d in draws]))


class ImageAugment:
    """Random crop (or pad-and-shift) and small colour jitter, drawn independently for every image.

    Args:
        crop_scale: (min, max) fraction of the image *area* kept by the random crop, which is then
            resized back to the input size; aspect ratio is kept. `None` or (1, 1) disables cropping.
        shift_px: random integer translation of up to this many pixels on each axis, borders replicated
            (the DrQ "pad and random crop" augmentation). 0 disables it.
        brightness: multiply by a factor in [1 - brightness, 1 + brightness].
        contrast: blend with the image's mean gray by a factor in [1 - contrast, 1 + contrast].
        saturation: blend with the pixel's gray by a factor in [1 - saturation, 1 + saturation].
        hue: rotate the chroma by up to this fraction of a full turn (0.5 = 180 degrees), either way.

    Call it on a uint8 tensor `(3, H, W)` or `(*, 3, H, W)`; it returns uint8 of the same shape.
    """

    def __init__(
        self,
        crop_scale: tuple[float, float] | None = (0.9, 1.0),
        shift_px: int = 0,
        brightness: float = 0.1,
        contrast: float = 0.1,
        saturation: float = 0.1,
        hue: float = 0.02,
    ) -> None:
        if crop_scale is None:
            crop_scale = (1.0, 1.0)
        if len(crop_scale) != 2 or not 0.0 < crop_scale[0] <= crop_scale[1] <= 1.0:
            raise ValueError(f"crop_scale must be (min, max) with 0 < min <= max <= 1, got {crop_scale!r}")
        if int(shift_px) != shift_px or shift_px < 0:
            raise ValueError(f"shift_px must be a non-negative integer, got {shift_px!r}")
        self.crop_scale = (float(crop_scale[0]), float(crop_scale[1]))
        self.shift_px = int(shift_px)
        self.brightness = _check_range("brightness", brightness, 0.0, 1.0)
        self.contrast = _check_range("contrast", contrast, 0.0, 1.0)
        self.saturation = _check_range("saturation", saturation, 0.0, 1.0)
        self.hue = _check_range("hue", hue, 0.0, 0.5)

    def __repr__(self) -> str:
        return (
            f"ImageAugment(crop_scale={self.crop_scale}, shift_px={self.shift_px}, brightness={self.brightness}, "
            f"contrast={self.contrast}, saturation={self.saturation}, hue={self.hue})"
        )

    @property
    def has_geometry(self) -> bool:
        return self.crop_scale != (1.0, 1.0) or self.shift_px > 0

    @property
    def has_color(self) -> bool:
        return self.brightness > 0 or self.contrast > 0 or self.saturation > 0 or self.hue > 0

    def sample_boxes(
        self, n: int, height: int, width: int, generator: torch.Generator | None = None
    ) -> list[tuple[int, int, int, int, int, int]]:
        """Per image `(top, left, crop_height, crop_width, shift_y, shift_x)` in pixels.

        The crop `[top:top + crop_height, left:left + crop_width]` is resized back to (height, width), then
        moved by (shift_y, shift_x) with replicated borders. Slices and shifts keep both axes' direction.
        """
        lo, hi = self.crop_scale
        u = torch.rand(n, 3, generator=generator, dtype=torch.float64).tolist()
        if self.shift_px > 0:
            shifts = torch.randint(-self.shift_px, self.shift_px + 1, (n, 2), generator=generator).tolist()
        else:
            shifts = [[0, 0]] * n
        boxes = []
        for (area_u, top_u, left_u), (dy, dx) in zip(u, shifts, strict=True):
            side = math.sqrt(lo + (hi - lo) * area_u)  # area fraction -> side fraction, aspect ratio kept
            crop_h, crop_w = max(1, round(side * height)), max(1, round(side * width))
            top = min(int(top_u * (height - crop_h + 1)), height - crop_h)
            left = min(int(left_u * (width - crop_w + 1)), width - crop_w)
            boxes.append((top, left, crop_h, crop_w, int(dy), int(dx)))
        return boxes

    @staticmethod
    def _color_uniforms(n: int, generator: torch.Generator | None) -> np.ndarray:
        """`n` colour draws: uniforms in [-1, 1] for brightness, contrast, saturation and hue."""
        return 2.0 * torch.rand(n, 4, generator=generator, dtype=torch.float64).numpy() - 1.0

    def color_params(self, u: np.ndarray) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Per draw of `u` `(n, 4)`: a `(n, 3, 3)` RGB matrix (brightness, contrast gain, saturation, hue),
        brightness, contrast."""
        # numpy for the per-image algebra: a dozen tiny torch ops would cost more than the pixels.
        brightness = 1.0 + self.brightness * u[:, 0]
        contrast = 1.0 + self.contrast * u[:, 1]
        saturation = 1.0 + self.saturation * u[:, 2]
        angle = self.hue * 2.0 * math.pi * u[:, 3]
        cos, sin = np.cos(angle) * saturation, np.sin(angle) * saturation
        yiq = np.zeros((len(u), 3, 3))
        yiq[:, 0, 0] = 1.0
        yiq[:, 1, 1], yiq[:, 1, 2], yiq[:, 2, 1], yiq[:, 2, 2] = cos, -sin, sin, cos
        matrix = (brightness * contrast)[:, None, None] * (_YIQ_TO_RGB @ yiq @ _RGB_TO_YIQ)
        return (
            torch.from_numpy(matrix.astype(np.float32)),
            torch.from_numpy(brightness.astype(np.float32)),
            torch.from_numpy(contrast.astype(np.float32)),
        )

    def draw(self, n: int, height: int, width: int, generator: torch.Generator | None = None) -> AugmentDraw:
        """`n` augmentations' random draws for `(height, width)` images: geometry first, then colour (always
        both, so a seed gives the same crop whatever the colour settings)."""
        boxes = self.sample_boxes(n, height, width, generator)
        return AugmentDraw(boxes, self._color_uniforms(n, generator))

    @staticmethod
    def _crop_shift(x: torch.Tensor, boxes: list[tuple[int, int, int, int, int, int]]) -> torch.Tensor:
        """Crop, resize back and shift float images `(n, m, 3, H, W)` in place, the m images of x[i] by boxes[i].

        Crops of one size are resized by one call (bilinear interpolation treats every image on its own, so
        this equals resizing them one by one)."""
        m, _, height, width = x.shape[1:]
        sizes: dict[tuple[int, int], list[int]] = {}
        for i, (_top, _left, crop_h, crop_w, _dy, _dx) in enumerate(boxes):
            if (crop_h, crop_w) != (height, width):
                sizes.setdefault((crop_h, crop_w), []).append(i)
        for (crop_h, crop_w), rows in sizes.items():
            crops = []
            for i in rows:
                top, left = boxes[i][:2]
                crops.append(x[i, ..., top : top + crop_h, left : left + crop_w])
            resized = F.interpolate(
                torch.stack(crops).reshape(-1, 3, crop_h, crop_w),
                size=(height, width),
                mode="bilinear",
                align_corners=False,
                antialias=False,
            )
            x[rows] = resized.reshape(len(rows), m, 3, height, width)  # the crops were copied out first
        for i, (_top, _left, _crop_h, _crop_w, dy, dx) in enumerate(boxes):
            if dy or dx:
                pad = max(abs(dy), abs(dx))
                padded = F.pad(x[i], (pad, pad, pad, pad), mode="replicate")
                x[i] = padded[:, :, pad - dy : pad - dy + height, pad - dx : pad - dx + width]
        return x

    def _color(self, x: torch.Tensor, matrix: torch.Tensor, brightness: torch.Tensor, contrast: torch.Tensor):
        # Contrast blends towards the image's mean luma; brightness scales that mean too. Gray (m, m, m) is a
        # fixed point of the saturation/hue matrix, so the blend term is added after it.
        n, _, height, width = x.shape
        flat = x.reshape(n, 3, height * width)
        luma = flat.mean(dim=2) @ _LUMA
        offset = (1.0 - contrast) * brightness * luma
        return (torch.bmm(matrix, flat) + offset[:, None, None]).reshape(n, 3, height, width)

    def __call__(
        self, images: torch.Tensor, generator: torch.Generator | None = None, shared: bool = False
    ) -> torch.Tensor:
        """Augment uint8 `(3, H, W)` or `(*, 3, H, W)` images, each with its own draw.

        `shared=True` draws once for the whole stack, e.g. the history frames of one camera, so that
        consecutive frames are not shifted against each other.
        """
        if images.dim() < 3 or images.shape[-3] != 3:  # `apply` checks the dtype
            raise ValueError(f"ImageAugment takes (3, H, W) or (*, 3, H, W) images, got shape {tuple(images.shape)}")
        shape = images.shape
        height, width = shape[-2:]
        x = images.reshape(-1, 3, height, width)
        x = x[None] if shared else x[:, None]  # (draws, images per draw, 3, H, W)
        return self.apply(x, self.draw(x.shape[0], height, width, generator)).reshape(shape)

    def apply(self, images: torch.Tensor, draw: AugmentDraw) -> torch.Tensor:
        """The pixel work: uint8 images `(n, *, 3, H, W)`, all images of ``images[i]`` augmented by draw i."""
        if images.dtype != torch.uint8:
            raise TypeError(f"ImageAugment takes uint8 images, got {images.dtype}")
        n = images.shape[0]
        if images.dim() < 4 or images.shape[-3] != 3 or len(draw.boxes) != n:
            raise ValueError(f"apply needs (n, *, 3, H, W) images and n draws, got {tuple(images.shape)} and "
                             f"{len(draw.boxes)} draws")  # fmt: skip
        shape = images.shape
        height, width = shape[-2:]
        x = images.reshape(n, -1, 3, height, width).float()
        m = x.shape[1]
        if self.has_geometry:
            x = self._crop_shift(x, draw.boxes)
        x = x.reshape(n * m, 3, height, width)
        if self.has_color:
            matrix, brightness, contrast = self.color_params(np.repeat(draw.color, m, axis=0))
            x = self._color(x, matrix, brightness, contrast)
        return x.round_().clamp_(0, 255).to(torch.uint8).reshape(shape)
