"""Read and write pairwise MRFs in the UAI format (MARKOV networks).

Format (UAI 2008+ inference competitions): the word ``MARKOV``; the number of variables;
their cardinalities; the number of factors; one scope line per factor (``size v1 v2 ...``);
then for each factor the number of entries followed by the table of (non-log) potential
values, the LAST variable of the scope changing fastest (C order).

Only factors of one or two variables are supported.  Several factors with the same scope
are multiplied.  A zero potential is stored as log value :data:`LOG_ZERO` (finite, so that
message passing never meets ``-inf``).
"""

from __future__ import annotations

import os

import numpy as np

from robustep.mrf.model import PairwiseMRF

#: log-potential used for a zero entry read from a file (≈ log 1e-300).
LOG_ZERO = -690.0


def write_uai(mrf: PairwiseMRF, path: str | os.PathLike) -> None:
    """Write ``mrf`` as a UAI MARKOV file: n unary factors, then m pairwise factors.

    Values are exp(log-potential − max) per table written with 17 significant digits, so the
    model round-trips up to a constant factor per table (which changes only log Z; the
    constants are not lost: ``read_uai`` returns the same marginals and
    :func:`uai_log_scale` gives the offset).
    """
    card = mrf.cardinalities
    lines = ["MARKOV", str(mrf.n_variables), " ".join(str(int(c)) for c in card)]
    lines.append(str(mrf.n_variables + mrf.n_edges))
    for i in range(mrf.n_variables):
        lines.append(f"1 {i}")
    for i, j in mrf.edges:
        lines.append(f"2 {i} {j}")
    lines.append("")
    for i in range(mrf.n_variables):
        t = mrf.log_unary[i, : card[i]]
        lines += [str(card[i]), " ".join(f"{v:.17g}" for v in np.exp(t - t.max())), ""]
    for e, (i, j) in enumerate(mrf.edges):
        t = mrf.log_pairwise[e, : card[i], : card[j]]
        vals = np.exp(t - t.max()).ravel()
        lines += [str(vals.size), " ".join(f"{v:.17g}" for v in vals), ""]
    with open(path, "w") as f:
        f.write("\n".join(lines))


def uai_log_scale(mrf: PairwiseMRF) -> float:
    """log Z(mrf) − log Z(read_uai(written file)): the constants removed by :func:`write_uai`."""
    card = mrf.cardinalities
    s = sum(float(mrf.log_unary[i, : card[i]].max()) for i in range(mrf.n_variables))
    s += sum(
        float(mrf.log_pairwise[e, : card[i], : card[j]].max()) for e, (i, j) in enumerate(mrf.edges)
    )
    return s


def read_uai(path: str | os.PathLike) -> PairwiseMRF:
    """Read a UAI MARKOV file with unary and pairwise factors into a :class:`PairwiseMRF`."""
    try:
        with open(path, encoding="utf-8") as f:
            tok = f.read().split()
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"{path}: not a text file ({exc.reason} at byte {exc.start}); a UAI file is plain "
            "text — check that the path points at the .uai model (not a compressed or "
            "evidence file)"
        ) from None
    if not tok or tok[0].upper() != "MARKOV":
        raise ValueError(
            f"{path}: not a UAI MARKOV file (first word {tok[0] if tok else 'nothing'!r}); "
            "only MARKOV networks are supported"
        )
    p = 1

    def nxt():
        nonlocal p
        if p >= len(tok):
            raise ValueError(f"{path}: file ends early (truncated UAI file)")
        p += 1
        return tok[p - 1]

    def integer(what):
        word = nxt()
        try:
            return int(word)
        except ValueError:
            raise ValueError(
                f"{path}: expected an integer ({what}) at word {p}, got {word!r}; the file is "
                "not a valid UAI MARKOV file"
            ) from None

    def number(what):
        word = nxt()
        try:
            return float(word)
        except ValueError:
            raise ValueError(
                f"{path}: expected a number ({what}) at word {p}, got {word!r}; the file is not "
                "a valid UAI MARKOV file"
            ) from None

    n = integer("number of variables")
    card = [integer("a cardinality") for _ in range(n)]
    if any(c < 1 for c in card):
        raise ValueError(f"{path}: every cardinality must be >= 1; got {card}")
    nf = integer("number of factors")
    scopes = []
    for _ in range(nf):
        s = integer("a factor's scope size")
        scope = [integer("a variable index") for _ in range(s)]
        bad = [v for v in scope if not 0 <= v < n]
        if bad:
            raise ValueError(
                f"{path}: factor scope {scope} names variable {bad[0]}, outside 0..{n - 1} "
                f"(the file declares {n} variables)"
            )
        if s not in (1, 2):
            raise ValueError(
                f"{path}: factor over {s} variables {scope}; only unary and pairwise factors "
                "are supported"
            )
        scopes.append(scope)
    unaries = [np.zeros(c) for c in card]
    pair: dict[tuple[int, int], np.ndarray] = {}
    for scope in scopes:
        size = integer("a table size")
        expect = int(np.prod([card[v] for v in scope]))
        if size != expect:
            raise ValueError(f"{path}: factor {scope} has {size} entries; expected {expect}")
        vals = np.array([number(f"a potential of factor {scope}") for _ in range(size)])
        if np.any(vals < 0) or not np.all(np.isfinite(vals)):
            raise ValueError(f"{path}: factor {scope} has negative or non-finite potentials")
        with np.errstate(divide="ignore"):
            logv = np.where(vals > 0, np.log(np.where(vals > 0, vals, 1.0)), LOG_ZERO)
        if len(scope) == 1:
            unaries[scope[0]] = unaries[scope[0]] + logv
        else:
            i, j = scope
            t = logv.reshape(card[i], card[j])
            if (j, i) in pair:
                pair[(j, i)] = pair[(j, i)] + t.T
            else:
                pair[(i, j)] = pair.get((i, j), 0.0) + t
    edges = list(pair.keys())
    return PairwiseMRF.from_factors(
        unaries, np.array(edges, dtype=np.intp).reshape(-1, 2), [pair[e] for e in edges]
    )
