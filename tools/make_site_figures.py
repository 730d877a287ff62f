"""Draw the two pictures of the site that no chapter draws, and store them with it:

* ``book/figures/transformer.png``: the front page's picture, the Transformer of chapter 07 as the
  package draws it (``transformer_course.diagrams.encoder_decoder``), stored at twice its shown
  width;
* ``tools/course_static/social_card.png`` (1200 x 630 px): the picture a link to the course shows
  when it is shared.

Run it again after changing the diagram or the course's title."""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tools" / "course_static" / "social_card.png"
FRONT = ROOT / "book" / "figures" / "transformer.png"
FRONT_WIDTH_PX = 420  # as shown on the front page (``:width:`` in book/intro.md)


def sinusoidal(n_pos: int, d: int) -> np.ndarray:
    pos = np.arange(n_pos)[:, None]
    i = np.arange(0, d, 2)[None, :]
    angle = pos / 10000 ** (i / d)
    pe = np.zeros((n_pos, d))
    pe[:, 0::2], pe[:, 1::2] = np.sin(angle), np.cos(angle)
    return pe


def front_page_figure() -> None:
    from transformer_course.diagrams import encoder_decoder

    fig = encoder_decoder()
    fig.savefig(FRONT, dpi=2 * FRONT_WIDTH_PX / fig.get_figwidth(), facecolor="white")
    plt.close(fig)


def social_card() -> None:
    fig = plt.figure(figsize=(12, 6.3), dpi=100, facecolor="white")
    ax = fig.add_axes((0.62, 0.1, 0.35, 0.8))
    ax.imshow(sinusoidal(64, 64), cmap="RdBu", aspect="auto", interpolation="nearest")
    ax.set_xlabel("dimension", fontsize=16)
    ax.set_ylabel("position", fontsize=16)
    ax.tick_params(labelsize=13)
    fig.text(0.05, 0.70, "Transformers\nfrom Scratch", fontsize=50, weight="bold", va="center")
    fig.text(
        0.05,
        0.36,
        "Attention, the Transformer, GPT and BERT,\nbuilt in PyTorch one idea per chapter,\n"
        "every part checked against PyTorch\nand Hugging Face.",
        fontsize=18,
        va="center",
        color="#333333",
    )
    fig.text(0.05, 0.1, "sinusoidal positional encoding (chapter 03)", fontsize=13, color="#666666")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(OUT, dpi=100, facecolor="white")
    plt.close(fig)


def main() -> None:
    front_page_figure()
    social_card()


if __name__ == "__main__":
    main()
