"""Render terminal text (UTF-8, e.g. `superpod top` output) to a PNG for the docs: light text on a dark background,
DejaVu Sans Mono (shipped with matplotlib), one character cell per character.

    python hack/screenshot.py in.txt out.png"""

from __future__ import annotations

import sys
from pathlib import Path

from matplotlib import font_manager
from PIL import Image, ImageDraw, ImageFont

SIZE, PAD = 15, 16
BACKGROUND, TEXT, PROMPT = (30, 30, 36), (220, 220, 214), (120, 200, 120)


def render(text: str, out: Path) -> None:
    font = ImageFont.truetype(font_manager.findfont("DejaVu Sans Mono"), SIZE)
    left, top, right, bottom = font.getbbox("█")
    cell_width, cell_height = font.getlength("M"), int((bottom - top) * 1.25)
    lines = text.rstrip("\n").splitlines()
    width = int(max(len(line) for line in lines) * cell_width) + 2 * PAD
    image = Image.new("RGB", (width, len(lines) * cell_height + 2 * PAD), BACKGROUND)
    draw = ImageDraw.Draw(image)
    for row, line in enumerate(lines):
        draw.text((PAD, PAD + row * cell_height), line, font=font, fill=PROMPT if line.startswith("$ ") else TEXT)
    image.save(out, optimize=True)


if __name__ == "__main__":
    render(Path(sys.argv[1]).read_text(), Path(sys.argv[2]))
