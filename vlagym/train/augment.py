"""Per-image augmentation for behaviour cloning: a random zoom and shift of the view, a smooth gain field (off by
default), then colour jitter, on uint8 tensors.

Every image gets its own random draw (per camera, per sample): `ImageAugment.num_uniforms` uniforms in [0, 1) that
fix all of its parameters (`NUM_UNIFORMS` for the view and the jitter, then `SHADING_UNIFORMS` for the gain field
when it is on, so turning it on leaves the other draws as they were). `ImageAugment.apply` takes them as an
array, so the caller decides where they come from: `DemoDataset` derives each sample's from (seed, epoch, index,
camera) alone, so a sample is augmented the same whatever batch it falls in, and the pixel work still runs once for
the whole batch. The geometry is one bilinear resampling of the whole image (a zoom of the kept area, then a
sub-pixel shift, borders extended) with both axes keeping their direction: an image is never mirrored or turned (a
mirrored image would flip the meaning of left/right actions).
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from vlagym.train.configs import AugmentConfig

# RGB -> YIQ (NTSC). Y is the luma torchvision also uses for grayscale; I and Q carry the chroma,
# so saturation scales (I, Q) and a hue shift turns them about the Y axis.
_RGB_TO_YIQ = np.array([[0.299, 0.587, 0.114], [0.595716, -0.274453, -0.321263], [0.211456, -0.522591, 0.311135]])
_YIQ_TO_RGB = np.linalg.inv(_RGB_TO_YIQ)
_LUMA = torch.tensor(_RGB_TO_YIQ[0], dtype=torch.float32)

NUM_UNIFORMS = 9
"""uniforms per draw: zoom area, view centre y and x, shift y and x, brightness, contrast, saturation, hue"""
SHADING_GRID = 3
SHADING_UNIFORMS = SHADING_GRID * SHADING_GRID
"""uniforms per draw of the gain field (`AugmentConfig.shading`): its log-gain at each node of its grid, row by row"""


class ImageAugment:
    """Random zoom and shift of the view, a smooth gain field and colour jitter, drawn independently for every image.

    Takes an `AugmentConfig` (the ranges; see its fields), or its fields as keyword arguments, which override
    the config's. Call it on a uint8 tensor `(3, H, W)` or `(*, 3, H, W)`; it returns uint8 of the same shape.
    """

    def __init__(self, config: AugmentConfig | None = None, /, **overrides: object) -> None:
        if overrides.get("crop_scale", ()) is None:  # None: no zoom
            overrides["crop_scale"] = (1.0, 1.0)
        self.config = AugmentConfig(**{**(config or AugmentConfig()).to_dict(), **overrides})  # checks the ranges

    def __repr__(self) -> str:
        return f"ImageAugment({self.config!r})"

    @property
    def has_geometry(self) -> bool:
        return self.config.crop_scale != (1.0, 1.0) or self.config.shift_px > 0

    @property
    def num_uniforms(self) -> int:
        """Uniforms per draw: `NUM_UNIFORMS`, plus `SHADING_UNIFORMS` with the gain field on."""
        return NUM_UNIFORMS + (SHADING_UNIFORMS if self.config.shading > 0 else 0)

    @property
    def has_color(self) -> bool:
        c = self.config
        return c.brightness > 0 or c.contrast > 0 or c.saturation > 0 or c.hue > 0

    def draw(self, n: int, generator: torch.Generator | None = None) -> np.ndarray:
        """`n` draws `(n, num_uniforms)` from `generator` (torch's global one when None)."""
        return torch.rand(n, self.num_uniforms, generator=generator, dtype=torch.float64).numpy()

    def views(self, uniforms: np.ndarray, height: int, width: int) -> np.ndarray:
        """Per draw `(scale, centre_y, centre_x)` of the source area that fills the output, in the normalised
        coordinates of `grid_sample` (-1..1 across the image): output pixel at normalised (y, x) reads the
        source at (centre_y + scale * y, centre_x + scale * x). The zoomed area lies inside the image; the
        shift (in output pixels) may move it past the border, whose pixels are then extended."""
        u = np.asarray(uniforms, dtype=np.float64)
        lo, hi = self.config.crop_scale
        scale = np.sqrt(lo + (hi - lo) * u[:, 0])  # area fraction -> side fraction, aspect ratio kept
        centre_y = (2.0 * u[:, 1] - 1.0) * (1.0 - scale)
        centre_x = (2.0 * u[:, 2] - 1.0) * (1.0 - scale)
        shift_y = (2.0 * u[:, 3] - 1.0) * self.config.shift_px
        shift_x = (2.0 * u[:, 4] - 1.0) * self.config.shift_px
        # Moving the content by +d output pixels reads the source d pixels (2d / size normalised) earlier.
        return np.stack([scale, centre_y - scale * 2.0 * shift_y / height, centre_x - scale * 2.0 * shift_x / width], 1)

    def color_params(self, uniforms: np.ndarray) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Per draw: a `(n, 3, 3)` RGB matrix (brightness, contrast gain, saturation, hue), brightness, contrast."""
        # numpy for the per-image algebra: a dozen tiny torch ops would cost more than the pixels.
        c = self.config
        u = 2.0 * np.asarray(uniforms, dtype=np.float64)[:, 5:] - 1.0  # in [-1, 1]
        brightness = 1.0 + c.brightness * u[:, 0]
        contrast = 1.0 + c.contrast * u[:, 1]
        saturation = 1.0 + c.saturation * u[:, 2]
        angle = c.hue * 2.0 * math.pi * u[:, 3]
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

    @staticmethod
    def _resample(x: torch.Tensor, views: np.ndarray) -> torch.Tensor:
        """Float images `(n, 3, H, W)`, image i resampled by `views[i]` (see `views`): bilinear, borders extended.

        The sampling grid is built by broadcasting, so an image's result does not depend on the others."""
        _, _, height, width = x.shape
        v = torch.from_numpy(views.astype(np.float32))
        ys = (torch.arange(height, dtype=torch.float32) * 2.0 + 1.0) / height - 1.0  # pixel centres
        xs = (torch.arange(width, dtype=torch.float32) * 2.0 + 1.0) / width - 1.0
        grid = torch.empty(len(v), height, width, 2)
        grid[..., 0] = (v[:, 2, None] + v[:, 0, None] * xs)[:, None, :]
        grid[..., 1] = (v[:, 1, None] + v[:, 0, None] * ys)[:, :, None]
        return F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=False)

    def gain_fields(self, uniforms: np.ndarray, height: int, width: int) -> torch.Tensor:
        """Per draw the `(n, 1, H, W)` gain field: exp of a log-gain in [-shading, shading] at each node of a
        `SHADING_GRID` x `SHADING_GRID` grid whose corner nodes sit on the image's corners, bilinear in between."""
        u = np.asarray(uniforms, dtype=np.float64)[:, NUM_UNIFORMS : NUM_UNIFORMS + SHADING_UNIFORMS]
        nodes = np.exp(self.config.shading * (2.0 * u - 1.0)).reshape(-1, 1, SHADING_GRID, SHADING_GRID)
        nodes = torch.from_numpy(nodes.astype(np.float32))
        return F.interpolate(nodes, size=(height, width), mode="bilinear", align_corners=True)

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
        """Augment uint8 `(3, H, W)` or `(*, 3, H, W)` images, each with its own draw from `generator`.

        `shared=True` draws once for the whole stack, e.g. the history frames of one camera, so that
        consecutive frames are not moved against each other.
        """
        if images.dim() < 3 or images.shape[-3] != 3:  # `apply` checks the dtype
            raise ValueError(f"ImageAugment takes (3, H, W) or (*, 3, H, W) images, got shape {tuple(images.shape)}")
        shape = images.shape
        x = images.reshape(-1, 3, *shape[-2:])
        x = x[None] if shared else x[:, None]  # (draws, images per draw, 3, H, W)
        return self.apply(x, self.draw(x.shape[0], generator)).reshape(shape)

    def apply(self, images: torch.Tensor, uniforms: np.ndarray, camera: str | None = None) -> torch.Tensor:
        """The pixel work: uint8 images `(n, *, 3, H, W)`, all images of ``images[i]`` augmented by draw
        ``uniforms[i]`` (`(n, num_uniforms)` in [0, 1), e.g. from `draw`); the images of a camera named in
        `unshifted_cameras` keep their view, those in `unshaded_cameras` get no gain field."""
        if images.dtype != torch.uint8:
            raise TypeError(f"ImageAugment takes uint8 images, got {images.dtype}")
        n = images.shape[0]
        uniforms = np.asarray(uniforms, dtype=np.float64)
        if images.dim() < 4 or images.shape[-3] != 3 or uniforms.shape != (n, self.num_uniforms):
            raise ValueError(f"apply needs (n, *, 3, H, W) images and (n, {self.num_uniforms}) draws, got "
                             f"{tuple(images.shape)} and {uniforms.shape}")  # fmt: skip
        shape = images.shape
        height, width = shape[-2:]
        x = images.reshape(n, -1, 3, height, width).float()
        m = x.shape[1]
        x = x.reshape(n * m, 3, height, width)
        if m > 1:
            uniforms = np.repeat(uniforms, m, axis=0)
        if self.has_geometry and camera not in self.config.unshifted_cameras:
            x = self._resample(x, self.views(uniforms, height, width))
        if self.config.shading > 0 and camera not in self.config.unshaded_cameras:
            x = x * self.gain_fields(uniforms, height, width)
        if self.has_color:
            x = self._color(x, *self.color_params(uniforms))
        return x.round_().clamp_(0, 255).to(torch.uint8).reshape(shape)
