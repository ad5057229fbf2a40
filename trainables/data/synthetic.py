"""Deterministic, seedable synthetic "cats vs dogs" images.

This module replaces the Kaggle PetImages set for offline runs.  Every image
is a procedurally drawn animal head on a cluttered background, rendered with
vectorised numpy masks over a coordinate grid (no PIL, no per-pixel loops).

What the images look like
-------------------------
* Background: a two-colour linear gradient at a random angle, optional
  sinusoidal stripes, and a handful of distractor shapes (ellipses and
  triangles in random colours, some of them fur-coloured and ear-shaped).
* Head: an ellipse of a random fur colour (one palette shared by both
  classes), optionally with tabby-like stripes, at a random position, scale
  and in-plane rotation.  On it: a lighter muzzle, two eyes with a pupil, a
  nose, and sometimes whiskers or a tongue.
* Cats lean towards upright, pointy, triangular ears, a narrow short muzzle,
  slit pupils, a small triangular nose and whiskers.
* Dogs lean towards floppy, rounded ears hanging at the sides of the head, a
  long broad snout, round pupils, a big round dark nose and a tongue.
* Finally a random brightness/contrast jitter and per-pixel Gaussian noise.

What makes the task hard
------------------------
Every class cue is drawn from overlapping class-conditional distributions:
one shared per-image "dogginess" latent is mixed with independent per-feature
noise, so cues vary within a class and their tails overlap (a cat with
droopy round ears, a dog with pricked ones).  With the calibrated settings
below the overlap is small (an ideal classifier would be right on ~99% of
images); the difficulty is for the small model on few images: colour
carries no label information (shared palettes, random backgrounds), pose
and scale vary, distractor triangles mimic cat ears and occluders sometimes
hide parts of the head, so a small CNN has to learn shape, and with a few
hundred images per class it overfits.

Determinism
-----------
Image ``i`` of class ``c`` is drawn from ``numpy.random.default_rng([seed, c,
i])`` alone, so an image never depends on how many others are requested:
train/val/test index ranges stay stable when split sizes change.
"""

from __future__ import annotations

import numpy as np
import torch

CLASS_NAMES: tuple[str, str] = ("cat", "dog")

# Fur colours shared by both classes (RGB in [0, 1]); a per-image jitter is
# added on top so colour alone never identifies the class.
_FUR_PALETTE = np.array(
    [
        [0.92, 0.55, 0.20],  # ginger
        [0.55, 0.35, 0.18],  # brown
        [0.12, 0.11, 0.10],  # black
        [0.55, 0.55, 0.57],  # grey
        [0.95, 0.93, 0.88],  # white
        [0.90, 0.80, 0.60],  # cream
        [0.75, 0.60, 0.40],  # fawn
        [0.35, 0.30, 0.28],  # dark grey-brown
    ],
    dtype=np.float32,
)

# Iris colours, again shared; cats and dogs only differ in sampling weights.
_IRIS_PALETTE = np.array(
    [
        [0.45, 0.75, 0.25],  # green
        [0.85, 0.70, 0.15],  # yellow
        [0.80, 0.50, 0.15],  # amber
        [0.40, 0.25, 0.12],  # brown
        [0.35, 0.55, 0.85],  # blue
    ],
    dtype=np.float32,
)
_IRIS_WEIGHTS = np.array(
    [
        [0.30, 0.25, 0.25, 0.10, 0.10],  # cat
        [0.10, 0.10, 0.30, 0.40, 0.10],  # dog
    ],
    dtype=np.float64,
)

# How strongly the shared latent drives the class cues versus independent
# per-feature noise.  Together with the Beta concentration and the position
# jitter below these are the difficulty knobs: more weight on the latent, a
# sharper Beta and less jitter mean easier, more consistent classes.
# Calibrated on the seed study's small CNN at 32 px, 600 training images per
# class: Adam (lr 1e-3, batch 32) reaches ~0.78 validation accuracy in 5
# epochs with ~0.86 on training images; SGD at batch 256 ~0.69 after 6; a
# logistic regression on per-channel colour statistics scores ~0.55.
_LATENT_WEIGHT = 0.95
_LATENT_BETA = (1.0, 8.0)
_POSITION_JITTER = 0.08  # head centre offset, in half-image units


def _coords(image_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Pixel-centre grid in [-1, 1]; y grows downwards like image rows.

    Both are read-only ``(H, W)`` broadcast views, so a 2-D window slices
    them without copying.
    """
    t = (np.arange(image_size, dtype=np.float32) + 0.5) * (2.0 / image_size) - 1.0
    shape = (image_size, image_size)
    return np.broadcast_to(t[None, :], shape), np.broadcast_to(t[:, None], shape)


_Window = tuple[slice, slice]


def _window(cx: float, cy: float, radius: float, image_size: int) -> _Window:
    """Rows and columns of the pixels whose centres lie within ``radius`` of ``(cx, cy)``.

    Coordinates are image units ([-1, 1]).  Every shape is evaluated only in
    the window that bounds its non-zero coverage: most parts (eyes, nose,
    whiskers, distractors) are small, and evaluating them over the whole grid
    made 224 px images several times slower.  The window is padded by a pixel
    on each side, so the result is the same as a full-grid evaluation.
    """
    scale = image_size / 2.0  # image units -> pixels

    def span(c: float) -> slice:
        lo = int(np.floor((c - radius + 1.0) * scale - 0.5)) - 1
        hi = int(np.ceil((c + radius + 1.0) * scale - 0.5)) + 2
        return slice(min(max(lo, 0), image_size), min(max(hi, 0), image_size))

    return span(cy), span(cx)


def _ellipse_reach(a: float, b: float, pixel: float) -> float:
    """Distance from the centre beyond which ``_ellipse_sdf`` gives zero coverage.

    The approximate distance scales with the short semi-axis, so thin
    ellipses (slit pupils at low resolution) reach further than ``max(a, b)``.
    """
    return max(a, b) * (1.0 + 0.5 * pixel / min(a, b))


def _teardrop_reach(length: float, width: float, pixel: float) -> float:
    """Distance from the base beyond which ``_teardrop_sdf`` gives zero coverage."""
    return float(np.hypot(length + 0.5 * pixel, width + 0.5 * pixel))


def _alpha(sdf: np.ndarray, pixel: float) -> np.ndarray:
    """Soft coverage from an (approximate) signed distance for antialiasing.

    ``pixel`` is the pixel size in the same units as ``sdf``; a one-pixel ramp
    keeps edges smooth at every resolution from 16 to 224 px.
    """
    return np.clip(0.5 - sdf / pixel, 0.0, 1.0)


def _paint(img: np.ndarray, alpha: np.ndarray, color: np.ndarray) -> None:
    """Alpha-composite a flat colour onto ``img`` in place."""
    img += alpha[..., None] * (color - img)


def _ellipse_sdf(
    u: np.ndarray, v: np.ndarray, cx: float, cy: float, a: float, b: float, angle: float = 0.0
) -> np.ndarray:
    """Approximate signed distance to a rotated ellipse (exact for circles)."""
    c, s = np.cos(angle), np.sin(angle)
    du, dv = u - cx, v - cy
    p = (du * c + dv * s) / a
    q = (-du * s + dv * c) / b
    return (np.sqrt(p * p + q * q) - 1.0) * min(a, b)


def _teardrop_sdf(
    u: np.ndarray,
    v: np.ndarray,
    bx: float,
    by: float,
    phi: float,
    length: float,
    width: float,
    k: float,
) -> np.ndarray:
    """Approximate signed distance to an ear-like shape.

    The shape starts at base centre ``(bx, by)``, points in direction ``phi``
    (0 = up, positive = clockwise on screen) and has half-width profile
    ``width * (1 - t**k) ** (1 / k)`` along its normalised length ``t``.
    ``k = 1`` is a sharp triangle (cat ear); ``k ~ 2.5`` is a rounded, lobed
    flap (dog ear).  One shape family lets the ear cue vary continuously.
    """
    dx, dy = np.sin(phi), -np.cos(phi)
    du, dv = u - bx, v - by
    t = du * dx + dv * dy
    n = np.abs(-du * dy + dv * dx)
    tn = np.clip(t / length, 0.0, 1.0)
    w = width * (1.0 - tn**k) ** (1.0 / k)
    return np.maximum(np.maximum(n - w, -t), t - length)


def _segment_sdf(
    u: np.ndarray, v: np.ndarray, x0: float, y0: float, x1: float, y1: float, half_width: float
) -> np.ndarray:
    """Signed distance to a thick line segment (whiskers, mouth lines)."""
    ex, ey = x1 - x0, y1 - y0
    du, dv = u - x0, v - y0
    h = np.clip((du * ex + dv * ey) / (ex * ex + ey * ey), 0.0, 1.0)
    return np.sqrt((du - h * ex) ** 2 + (dv - h * ey) ** 2) - half_width


def _jitter_color(rng: np.random.Generator, base: np.ndarray, amount: float) -> np.ndarray:
    return np.clip(base + rng.normal(0.0, amount, 3), 0.0, 1.0).astype(np.float32)


def _cue(rng: np.random.Generator, latent: float) -> float:
    """One class cue in [0, 1]: shared latent mixed with independent noise.

    0 means "very cat-like", 1 "very dog-like".  Mixing keeps the cues
    correlated (an image tends to be consistently cat- or dog-like) without
    making any single cue decisive.
    """
    return float(_LATENT_WEIGHT * latent + (1.0 - _LATENT_WEIGHT) * rng.random())


def _draw_background(
    img: np.ndarray, x: np.ndarray, y: np.ndarray, rng: np.random.Generator
) -> None:
    """Gradient + stripes + distractor shapes, identical in law for both classes."""
    image_size = img.shape[0]
    pixel = 2.0 / image_size
    c0, c1 = rng.random(3).astype(np.float32), rng.random(3).astype(np.float32)
    ang = rng.uniform(0.0, 2.0 * np.pi)
    t = np.clip(0.5 + 0.5 * (x * np.cos(ang) + y * np.sin(ang)), 0.0, 1.0)
    img[:] = c0 + t[..., None] * (c1 - c0)

    if rng.random() < 0.5:
        # Soft sinusoidal stripes (fences, blinds, fabric) at a random angle.
        ang = rng.uniform(0.0, np.pi)
        freq = rng.uniform(3.0, 12.0)
        wave = np.sin(freq * np.pi * (x * np.cos(ang) + y * np.sin(ang)) + rng.uniform(0, 6.3))
        _paint(
            img, rng.uniform(0.15, 0.5) * np.clip(wave, 0.0, 1.0), rng.random(3).astype(np.float32)
        )

    # Distractors: blobs and triangles, sometimes fur-coloured, so that
    # "there is a pointy triangle somewhere" or "there is a fur-coloured
    # blob" is not a usable shortcut.
    for _ in range(int(rng.integers(2, 7))):
        if rng.random() < 0.4:
            color = _jitter_color(rng, _FUR_PALETTE[rng.integers(len(_FUR_PALETTE))], 0.08)
        else:
            color = rng.random(3).astype(np.float32)
        cx, cy = rng.uniform(-1.0, 1.0, 2)
        size = rng.uniform(0.08, 0.35)
        if rng.random() < 0.5:
            minor = size * rng.uniform(0.3, 1.0)
            win = _window(cx, cy, _ellipse_reach(size, minor, pixel), image_size)
            sdf = _ellipse_sdf(x[win], y[win], cx, cy, size, minor, rng.uniform(0, np.pi))
        else:
            win = _window(cx, cy, _teardrop_reach(size * 1.5, size * 0.6, pixel), image_size)
            sdf = _teardrop_sdf(
                x[win],
                y[win],
                cx,
                cy,
                rng.uniform(-np.pi, np.pi),
                size * 1.5,
                size * 0.6,
                rng.uniform(1.0, 2.5),
            )
        _paint(img[win], _alpha(sdf, pixel), color)


def _draw_head(
    img: np.ndarray,
    x: np.ndarray,
    y: np.ndarray,
    image_size: int,
    label: int,
    rng: np.random.Generator,
) -> None:
    """Draw one cat- or dog-leaning head; all shape cues overlap between classes."""
    # Shared latent: cats draw from Beta(a, b), dogs from the mirror Beta(b, a).
    a, b = _LATENT_BETA
    latent = float(rng.beta(a, b) if label == 0 else rng.beta(b, a))

    # Pose: position, scale and in-plane rotation, same law for both classes.
    r = rng.uniform(0.26, 0.42)
    cx, cy = rng.uniform(-_POSITION_JITTER, _POSITION_JITTER, 2)
    cy += 0.05  # leave room above for upright ears
    theta = rng.normal(0.0, 0.25)
    ct, st = np.cos(theta), np.sin(theta)
    dx, dy = x - cx, y - cy
    # Head-local frame in units of head radius; v < 0 is "up" on the head.
    u = (dx * ct + dy * st) / r
    v = (-dx * st + dy * ct) / r
    px = 2.0 / image_size / r  # pixel size in head units

    def around(hx: float, hy: float, reach: float) -> _Window:
        """Window around head-local point ``(hx, hy)``; ``reach`` in head units."""
        return _window(
            cx + r * (hx * ct - hy * st), cy + r * (hx * st + hy * ct), r * reach, image_size
        )

    fur = _jitter_color(rng, _FUR_PALETTE[rng.integers(len(_FUR_PALETTE))], 0.06)
    light = np.clip(
        fur + rng.uniform(0.15, 0.6) * (np.array([0.97, 0.95, 0.9], np.float32) - fur), 0, 1
    )
    dark = (fur * rng.uniform(0.3, 0.7)).astype(np.float32)
    # Ears sometimes darker or lighter than the face, for both classes.
    ear_color = [fur, dark, light][int(rng.choice(3, p=[0.6, 0.25, 0.15]))]

    # --- ears (drawn first so the head covers their base) -----------------
    droop = _cue(rng, latent)  # 0: pricked upright, 1: hanging down the sides
    shape = _cue(rng, latent)  # 0: sharp triangle, 1: rounded lobe
    ear_len = 0.55 + 0.55 * _cue(rng, latent) + rng.normal(0.0, 0.05)
    ear_w = 0.28 + 0.12 * rng.random()
    k = 1.0 + 1.8 * shape
    base_ang = rng.uniform(0.55, 0.85) + 0.35 * droop  # base position around the rim
    tilt = 0.25 + 2.3 * droop**1.5  # 0.25 rad (up-outward) .. ~2.55 rad (down)
    for side in (-1.0, 1.0):
        bx = side * np.sin(base_ang) * 0.92
        by = -np.cos(base_ang) * 0.92
        phi = side * (tilt + rng.normal(0.0, 0.08))
        win = around(bx, by, _teardrop_reach(ear_len, ear_w, px))
        sdf = _teardrop_sdf(u[win], v[win], bx, by, phi, ear_len, ear_w, k)
        _paint(img[win], _alpha(sdf, px), ear_color)
        if droop < 0.5 and rng.random() < 0.7:
            # Inner ear: a smaller pinkish copy, more visible on upright ears.
            inner = np.array([0.9, 0.6, 0.6], np.float32) * rng.uniform(0.7, 1.0)
            sdf = _teardrop_sdf(u[win], v[win], bx, by, phi, ear_len * 0.65, ear_w * 0.5, k)
            _paint(img[win], 0.7 * _alpha(sdf, px), inner)

    # --- head ---------------------------------------------------------------
    aspect = 0.9 + 0.2 * _cue(rng, latent) + rng.normal(0.0, 0.04)
    head = around(0.0, 0.0, _ellipse_reach(1.0, aspect, px))
    head_a = _alpha(_ellipse_sdf(u[head], v[head], 0.0, 0.0, 1.0, aspect), px)
    _paint(img[head], head_a, fur)
    if rng.random() < 0.35:
        # Tabby/brindle stripes for both classes, clipped to the head.
        sang = rng.uniform(-0.4, 0.4)
        wave = np.sin(
            rng.uniform(7.0, 14.0) * (u[head] * np.cos(sang) + v[head] * np.sin(sang))
            + rng.uniform(0, 6.3)
        )
        stripes = head_a * rng.uniform(0.4, 0.8) * np.clip(2.0 * wave - 0.6, 0.0, 1.0)
        _paint(img[head], stripes, dark)

    # --- muzzle / snout -------------------------------------------------------
    snout = _cue(rng, latent)
    mw = 0.32 + 0.28 * snout  # half-width
    mh = 0.22 + 0.30 * snout  # half-height: long dog snouts reach below the jaw
    my = 0.35 + 0.30 * snout
    win = around(0.0, my, _ellipse_reach(mw, mh, px))
    _paint(img[win], _alpha(_ellipse_sdf(u[win], v[win], 0.0, my, mw, mh), px), light)

    # --- eyes -----------------------------------------------------------------
    pupil = _cue(rng, latent)  # 0: vertical slit, 1: round
    iris_color = _jitter_color(rng, _IRIS_PALETTE[rng.choice(5, p=_IRIS_WEIGHTS[label])], 0.05)
    ex = rng.uniform(0.32, 0.45)
    ey = rng.uniform(-0.25, -0.05)
    er = rng.uniform(0.12, 0.2)
    ea, eb = er * (1.25 - 0.2 * pupil), er * (0.8 + 0.2 * pupil)
    pw = er * (0.25 + 0.6 * pupil)
    for side in (-1.0, 1.0):
        # One window holds the iris, the pupil and the glint.
        win = around(
            side * ex,
            ey,
            max(_ellipse_reach(ea, eb, px), _ellipse_reach(pw, er * 0.85, px), 0.1 + px),
        )
        uw, vw = u[win], v[win]
        eye = _ellipse_sdf(uw, vw, side * ex, ey, ea, eb, side * 0.2)
        _paint(img[win], _alpha(eye, px), iris_color)
        _paint(
            img[win],
            _alpha(_ellipse_sdf(uw, vw, side * ex, ey, pw, er * 0.85), px),
            np.zeros(3, np.float32),
        )
        _paint(
            img[win],
            _alpha(_ellipse_sdf(uw, vw, side * ex + 0.04, ey - 0.04, 0.035, 0.035), px),
            np.ones(3, np.float32),
        )

    # --- nose -----------------------------------------------------------------
    nose = _cue(rng, latent)
    ny = my - mh * 0.55
    nw = 0.08 + 0.1 * nose
    nose_color = (
        np.array([0.85, 0.5, 0.55], np.float32) if rng.random() < 0.7 - 0.6 * nose else dark * 0.4
    )
    # Downward-pointing shape: sharp (triangle) for cat-like, lobed for dog-like.
    win = around(0.0, ny - nw * 0.6, _teardrop_reach(nw * 1.4, nw, px))
    sdf = _teardrop_sdf(u[win], v[win], 0.0, ny - nw * 0.6, np.pi, nw * 1.4, nw, 1.0 + 1.5 * nose)
    _paint(img[win], _alpha(sdf, px), nose_color)
    # Mouth: short lines down from the nose.
    mouth = dark * 0.5
    mouth_y = ny + nw * 0.9
    lw = max(0.02, 0.35 * px)
    win = around(0.0, mouth_y, 0.12 + lw + px)
    _paint(
        img[win],
        _alpha(_segment_sdf(u[win], v[win], 0.0, mouth_y, 0.0, mouth_y + 0.12, lw), px),
        mouth,
    )

    # --- whiskers and tongue ----------------------------------------------------
    if rng.random() < 0.75 - 0.6 * _cue(rng, latent):
        wcol = (
            np.array([0.95, 0.95, 0.95], np.float32)
            if fur.mean() < 0.5
            else np.array([0.1, 0.1, 0.1], np.float32)
        )
        for side in (-1.0, 1.0):
            for j in range(3):
                x0, y0 = side * mw * 0.6, my - 0.05 + 0.07 * j
                x1, y1 = side * (mw + 0.6), y0 + 0.12 * (j - 1)
                win = around(x0, y0, float(np.hypot(x1 - x0, y1 - y0)) + lw + px)
                sdf = _segment_sdf(u[win], v[win], x0, y0, x1, y1, lw)
                _paint(img[win], 0.8 * _alpha(sdf, px), wcol)
    if rng.random() < 0.05 + 0.45 * _cue(rng, latent):
        ta = 0.1 + 0.05 * snout
        win = around(0.0, mouth_y + 0.18, _ellipse_reach(ta, 0.14, px))
        tongue = _ellipse_sdf(u[win], v[win], 0.0, mouth_y + 0.18, ta, 0.14)
        _paint(img[win], _alpha(tongue, px), np.array([0.9, 0.35, 0.45], np.float32))


def draw_image(label: int, image_size: int, rng: np.random.Generator) -> np.ndarray:
    """Draw one synthetic image of class ``label`` (0 = cat, 1 = dog).

    Returns a uint8 array of shape ``(image_size, image_size, 3)``.  All
    randomness comes from ``rng``, so the result is a pure function of its
    state.
    """
    if label not in (0, 1):
        raise ValueError(f"label must be 0 (cat) or 1 (dog), got {label}")
    if image_size < 8:
        raise ValueError(f"image_size must be at least 8, got {image_size}")
    x, y = _coords(image_size)
    pixel = 2.0 / image_size
    img = np.empty((image_size, image_size, 3), dtype=np.float32)

    _draw_background(img, x, y, rng)
    _draw_head(img, x, y, image_size, label, rng)

    if rng.random() < 0.3:
        # Occluder in front of the head (a toy, a hand, a bowl): sometimes
        # hides an ear or the snout, so no single region is always decisive.
        cxo, cyo = rng.uniform(-0.8, 0.8, 2)
        so = rng.uniform(0.1, 0.25)
        minor = so * rng.uniform(0.4, 1.0)
        win = _window(cxo, cyo, _ellipse_reach(so, minor, pixel), image_size)
        sdf = _ellipse_sdf(x[win], y[win], cxo, cyo, so, minor, rng.uniform(0, np.pi))
        _paint(img[win], _alpha(sdf, pixel), rng.random(3).astype(np.float32))

    # Global photometric jitter and sensor noise.
    img = (img - 0.5) * rng.uniform(0.75, 1.2) + 0.5 + rng.uniform(-0.12, 0.12)
    img += rng.normal(0.0, rng.uniform(0.01, 0.06), img.shape).astype(np.float32)
    return (np.clip(img, 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)


def make_synthetic_split(
    label: int, start: int, count: int, image_size: int, seed: int
) -> torch.Tensor:
    """Images ``start .. start + count - 1`` of class ``label`` as uint8 ``(count, 3, H, W)``.

    Image ``i`` of class ``c`` uses ``numpy.random.default_rng([seed, c, i])``,
    so a given index always yields the same image regardless of ``start`` and
    ``count``; calling twice with the same arguments is bit-identical.
    """
    if count < 0 or start < 0:
        raise ValueError(f"start and count must be non-negative, got start={start}, count={count}")
    out = np.empty((count, 3, image_size, image_size), dtype=np.uint8)
    for j in range(count):
        rng = np.random.default_rng([seed, label, start + j])
        out[j] = draw_image(label, image_size, rng).transpose(2, 0, 1)
    return torch.from_numpy(out)
