"""Decoding one image file into 8-bit RGB, the same for every pixel mode PIL opens, or refusing it.

What each mode PIL can open becomes (``v`` a stored value, ``a`` an alpha in [0, 1]):

- ``RGB``, ``L`` (grey), ``1`` (bi-level), ``P`` (palette): the colour each pixel stands for, grey replicated
  over the three channels; 16-bit RGB PNGs are already read by PIL as their high bytes (``v >> 8``).
- ``I;16`` and its byte orders (16-bit grey, PNG or TIFF): ``v >> 8``, as PIL reads 16-bit RGB
  (PIL's own ``convert("RGB")`` clips every value above 255 to white).
- an alpha channel (``RGBA``, ``LA``, ``PA``, a palette's or a PNG's ``transparency``): composited over
  white, ``round(a * colour + (1 - a) * 255)`` (dropping the alpha would show whatever colour the
  transparent pixels happen to store).
- ``CMYK``: ``round((255 - C) * (255 - K) / 255)`` for R, and likewise G, B (no colour profile is applied).
- ``YCbCr``: the JPEG (ITU-R BT.601 full range) conversion.
- the EXIF orientation of a photograph is applied, so the pixels stand as the camera's viewer shows them.

Refused with :class:`ImageModeError` naming the file and mode, since their range or colour space is not
known from the file alone: ``I`` (32-bit integers), ``F`` (32-bit floats), ``LAB``, ``HSV`` and the
premultiplied modes.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

#: Modes decoded (after any transparency is made an alpha channel).
ACCEPTED_MODES = ("1", "L", "P", "RGB", "RGBA", "RGBX", "LA", "PA", "CMYK", "YCbCr", "I;16", "I;16L",
                  "I;16B", "I;16N")
#: What a refused mode holds, for the message.
REFUSED_MODES = {
    "I": "32-bit integer pixels, whose range the file does not say",
    "F": "32-bit float pixels, whose range the file does not say",
    "LAB": "CIE L*a*b* pixels",
    "HSV": "HSV pixels",
    "La": "premultiplied grey and alpha",
    "RGBa": "premultiplied RGB and alpha",
}
#: The value transparent pixels are composited over (white).
BACKGROUND = 255


class ImageModeError(ValueError):
    """An image whose pixel mode cannot be converted to RGB reliably."""


def check_mode(mode: str, path: str | os.PathLike[str] = "<image>") -> None:
    """Refuse a pixel mode :func:`to_rgb` does not convert reliably.

    Raises:
        ImageModeError: naming the file and the mode.
    """
    if mode in REFUSED_MODES or mode not in ACCEPTED_MODES:
        what = REFUSED_MODES.get(mode, "a pixel mode hardmix does not convert")
        raise ImageModeError(f"{path}: image mode {mode} ({what}) cannot be converted to RGB reliably; "
                             "convert the file to 8-bit RGB, or remove it")


def decode_errors() -> tuple[type[BaseException], ...]:
    """What opening or decoding an image file raises for a file that cannot be used: PIL's OSError,
    ValueError and SyntaxError, and its DecompressionBombError (a header that claims more than twice
    ``Image.MAX_IMAGE_PIXELS`` pixels, a possible decompression bomb), which derives from none of them.
    Every reader of image files catches these and says which file, in one line."""
    from PIL import Image

    return (OSError, ValueError, SyntaxError, Image.DecompressionBombError)


def check_header(path: str | os.PathLike[str]) -> None:
    """:func:`check_mode` from the file's header alone (no pixel is decoded), so that a folder decoded
    image by image during training is checked before the first step.

    Raises:
        ImageModeError: a refused mode. OSError and the like: a file PIL cannot open.
    """
    from PIL import Image

    with Image.open(path) as im:
        check_mode(im.mode, path)


def to_rgb(im: Any, path: str | os.PathLike[str] = "<image>") -> Any:
    """The 8-bit RGB PIL image that ``im`` (an open PIL image of any mode) stands for.

    Args:
        im: a PIL image.
        path: its file, named in errors.

    Raises:
        ImageModeError: a mode whose values cannot be converted reliably (naming the file and mode).

    Example:
        >>> from PIL import Image
        >>> grey16 = Image.frombytes("I;16", (1, 1), (40000).to_bytes(2, "little"))
        >>> to_rgb(grey16).getpixel((0, 0))  # 40000 >> 8
        (156, 156, 156)
        >>> half = Image.new("RGBA", (1, 1), (0, 0, 0, 128))
        >>> to_rgb(half).getpixel((0, 0))  # black, half transparent, over white
        (127, 127, 127)
    """
    from PIL import Image, ImageOps

    mode = im.mode
    check_mode(mode, path)
    im = ImageOps.exif_transpose(im) if hasattr(im, "getexif") and im.getexif().get(0x0112, 1) != 1 else im
    if mode.startswith("I;16"):
        grey = (np.asarray(im).astype(np.uint16) >> 8).astype(np.uint8)
        return Image.fromarray(np.repeat(grey[..., None], 3, axis=2))
    if "transparency" in im.info and mode in ("1", "L", "P", "RGB"):
        im = im.convert("RGBA")  # a palette's or a PNG's transparent colour becomes an alpha channel
    if im.mode in ("RGBA", "LA", "PA"):
        rgba = im.convert("RGBA")
        backdrop = Image.new("RGBA", rgba.size, (BACKGROUND, BACKGROUND, BACKGROUND, 255))
        return Image.alpha_composite(backdrop, rgba).convert("RGB")
    return im if im.mode == "RGB" else im.convert("RGB")


def open_rgb(path: str | os.PathLike[str]) -> Any:
    """Open an image file as an 8-bit RGB PIL image (:func:`to_rgb`; the first frame of an animation).

    Raises:
        ImageModeError: a mode that cannot be converted reliably. OSError and the like: undecodable data.
    """
    from PIL import Image

    with Image.open(path) as im:
        im.load()
        rgb = to_rgb(im, path)
        return rgb.copy() if rgb is im else rgb  # closing the file must not take the pixels with it


__all__ = [
    "ACCEPTED_MODES", "BACKGROUND", "REFUSED_MODES", "ImageModeError", "check_header", "check_mode",
    "decode_errors", "open_rgb", "to_rgb",
]
