"""KV-length distributions of the seed experiment: a fixed total number of KV tokens spread over a batch.

| name | meaning |
|---|---|
| uniform | every request holds total / B tokens |
| skew40, skew60, skew80 | one request holds 40/60/80 % of the tokens, the other B - 1 share the rest evenly |
| two40 | two requests hold 40 % each, the other B - 2 share the remaining 20 % evenly |

Totals are exact: the long requests get floor(share * total) tokens, and the tokens that an even split leaves
over go one each to the first short requests. The long requests come first in the batch (request 0, and 1 for
two40), as in the H200 captures of ../shared/traces. Pure Python: no torch needed.
"""

from __future__ import annotations

from dataclasses import dataclass

from .checks import one_of

DEFAULT_TOTAL_TOKENS = 262_144


@dataclass(frozen=True)
class Distribution:
    """A named distribution: `long_shares` are the fractions of the total held by the long requests."""

    name: str
    long_shares: tuple[float, ...]

    @property
    def min_batch(self) -> int:
        """The smallest batch the distribution can be formed with (the long requests plus one short one)."""
        return len(self.long_shares) + 1 if self.long_shares else 1


DISTRIBUTIONS: dict[str, Distribution] = {
    d.name: d
    for d in (
        Distribution("uniform", ()),
        Distribution("skew40", (0.40,)),
        Distribution("skew60", (0.60,)),
        Distribution("skew80", (0.80,)),
        Distribution("two40", (0.40, 0.40)),
    )
}


def _even_split(tokens: int, parts: int) -> list[int]:
    """`tokens` split into `parts` integers differing by at most one, larger ones first."""
    base, extra = divmod(tokens, parts)
    return [base + 1] * extra + [base] * (parts - extra)


def kv_lens(dist: str, batch_size: int, total_tokens: int = DEFAULT_TOTAL_TOKENS) -> list[int]:
    """Every request's KV length (tokens) for `dist` at `batch_size` requests and `total_tokens` in all.

    Raises ValueError (one line) for an unknown name, a batch too small for the distribution, or a total that
    leaves some request with no token.
    """
    one_of(dist, DISTRIBUTIONS, "distribution")
    d = DISTRIBUTIONS[dist]
    if batch_size < d.min_batch:
        raise ValueError(f"distribution {dist} needs a batch of at least {d.min_batch} requests, got {batch_size}")
    if total_tokens < batch_size:
        raise ValueError(f"{total_tokens} tokens cannot give each of {batch_size} requests one token")
    longs = [int(share * total_tokens) for share in d.long_shares]
    if longs and min(longs) < 1:
        raise ValueError(f"{dist} with {total_tokens} tokens leaves a long request empty at batch {batch_size}")
    rest = total_tokens - sum(longs)
    shorts = _even_split(rest, batch_size - len(longs))
    if shorts[-1] < 1:
        raise ValueError(f"{dist} with {total_tokens} tokens leaves short requests empty at batch {batch_size}")
    return longs + shorts
