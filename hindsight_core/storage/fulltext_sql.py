"""Full-text search pieces shared by experience recall and item search.

Text is tokenized in Python (``hindsight_core.text``) and reaches PostgreSQL as
tsvector / tsquery literals, so no parser configuration or extension is needed and
Chinese (CJK bigrams) is searchable.
"""

from __future__ import annotations

from functools import lru_cache

import sqlalchemy as sa

# ts_rank normalisation 1: rank / (1 + log(document length)). Without it a long text
# that repeats a common query word outranks the short one that answers the query;
# on LongMemEval (bench/bench_longmemeval.py) it lifted keyword-only session
# recall@5 from 0.80 to 0.85 and hybrid session NDCG@5 from 0.928 to 0.945.
TS_NORM = 1


# A term found in more than this share of a table's rows does not generate keyword
# candidates either (Elasticsearch's common-terms ``cutoff_frequency`` rule): it says
# little about which row is meant, and ranking its matches was most of a small store's
# recall (1,000 records: 0.25 ms of 0.75). Below ~10,000 rows this cut, not
# ``keyword_scan_limit``, decides. LongMemEval with each question's ~500 turns alone in
# the table: hybrid and vector-only metrics identical, keyword-only identical but one
# (session recall_all@10 0.883 -> 0.900); hybrid p50 12.6 -> 10.1 ms.
COMMON_TERM_SHARE = 0.02


@lru_cache(maxsize=8)
def common_terms_sql(table: str) -> sa.TextClause:
    """Terms of ``table.search_tsv`` so frequent (from ANALYZE's statistics: in more
    than ``:limit`` rows, or in more than ``COMMON_TERM_SHARE`` of them) that ranking
    their matches would cost more than it tells; recall and item search leave them out
    of keyword candidate generation (they still count in the score). Shared through
    ``memory.terms.CommonTerms``."""
    return sa.text(
        f"""
        SELECT m.term FROM pg_stats s,
            unnest(CAST(CAST(s.most_common_elems AS text) AS text[]), s.most_common_elem_freqs)
                AS m(term, freq)
        WHERE s.schemaname = current_schema() AND s.tablename = '{table}'
          AND s.attname = 'search_tsv' AND m.term IS NOT NULL
          AND (m.freq > {COMMON_TERM_SHARE}
               OR m.freq * (SELECT GREATEST(c.reltuples, 0) FROM pg_class c
                            WHERE c.oid = CAST('{table}' AS regclass)) > :limit)
        """
    )



def tsvector_literal(tokens: list[str]) -> str:
    """A tsvector literal with positions, bypassing PostgreSQL's parser.

    Tokens come from ``text.tokens`` and hold only letters and digits, so they need
    no escaping; they are quoted anyway so that no token is read as an operator.
    """
    positions: dict[str, list[int]] = {}
    for pos, tok in enumerate(tokens[:16000], start=1):
        positions.setdefault(tok, []).append(min(pos, 16383))
    return " ".join(f"'{t}':{','.join(map(str, p[:256]))}" for t, p in positions.items())


def tsquery_literal(terms: list[str]) -> str | None:
    """An OR query over the terms, or ``None`` when there are none."""
    return " | ".join(f"'{t}'" for t in terms) or None
