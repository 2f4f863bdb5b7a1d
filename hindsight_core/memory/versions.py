"""Versions of a lesson: ``supersede`` writes a correction as a new record linked to
the one it replaces, ``history`` reads a chain back (docs/versions.md).

A semantic lesson is never rewritten in place: the old version stays, marked with
when, why and by whom it was superseded, keeps its usage history and is no longer
recalled (``recall_sql``: current versions only) nor evicted on its own
(``experiences_sql._EVICTABLE``); a write near it merges into the chain's head
(``experiences_sql.head_of``). ``edit`` of a lesson's text goes through here too,
unless the change is a typo (:func:`typo_only`).
"""

from __future__ import annotations

import json
import re
import unicodedata
import uuid
from collections.abc import Mapping
from typing import Any

from ..arguments import parse_id
from ..dedup_veto import merge_veto
from ..errors import NotFoundError, ValidationError
from ..models import Experience, Namespace, WriteResult, show_namespace
from ..runtime.flow import Embed, Flow, Sql
from ..storage import batch_sql
from ..storage import experiences_sql as q
from ..storage import versions_sql as vq
from ..text import is_cjk_text
from .inputs import RecordInput, embedding_text, validate_records
from .read_flows import RecallFlows
from .write_rows import record_row

_PUNCT = re.compile(r"[\W_]+", re.UNICODE)
# What a correction given as a mapping takes from the version it supersedes, if absent.
INHERITED = ("scene", "trigger", "action", "outcome")


def _norm(text: str) -> str:
    return _PUNCT.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip()


def _one_slip(a: str, b: str) -> bool:
    """Whether ``b`` is ``a`` with one character inserted, deleted, replaced, or two
    neighbours swapped (Damerau distance 1)."""
    if a == b or abs(len(a) - len(b)) > 1:
        return a == b
    if len(a) == len(b):
        diff = [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]
        return len(diff) == 1 or (
            len(diff) == 2
            and diff[1] == diff[0] + 1
            and a[diff[0]] == b[diff[1]]
            and a[diff[1]] == b[diff[0]]
        )
    short, long = (a, b) if len(a) < len(b) else (b, a)
    return any(long[:i] + long[i + 1 :] == short for i in range(len(long)))


def typo_only(old: str, new: str) -> bool:
    """Whether changing ``old`` into ``new`` is a typo fix, which ``edit`` may make in
    place (anything else becomes a new version).

    A typo fix changes case, punctuation or spacing only, or makes one slip of one
    character (:func:`_one_slip`) in one word of at least four letters, with no digit,
    and no change the dedup veto would call a different lesson (negation, numbers,
    opposite terms: ``dedup_veto.merge_veto``). Text in Chinese, Japanese or Korean,
    where one character is a word, changes in place only for punctuation and spacing.
    Such an edit cannot turn a lesson into another one, so a version would only add
    noise to the history; the edit's event keeps the old text all the same.
    """
    if _norm(old) == _norm(new):
        return True
    if is_cjk_text(old) or is_cjk_text(new):
        return False
    wa, wb = _norm(old).split(), _norm(new).split()
    diff = [(x, y) for x, y in zip(wa, wb, strict=False) if x != y]
    if len(wa) != len(wb) or len(diff) != 1:
        return False
    x, y = diff[0]
    if min(len(x), len(y)) < 4 or any(c.isdigit() for c in x + y) or not _one_slip(x, y):
        return False
    return merge_veto(old, new, covered=True, minimal_pairs=False) is None


class VersionFlows(RecallFlows):
    """``supersede`` and ``history`` (flows; see ``runtime/flow.py``)."""

    def supersede_flow(
        self,
        old_id: object,
        record: RecordInput,
        *,
        reason: str | None,
        actor: str | None,
        namespace: Namespace | str | None,
        locked: bool = False,
        embedded: tuple[str, list[float]] | None = None,
    ) -> Flow[WriteResult]:
        """Write ``record`` as the new version of ``old_id``'s lesson.

        Under the namespace lock (taken first, as every write and curation does:
        tests/test_lock_order*.py), the chain's head is read and superseded: a version
        already superseded by another writer meanwhile gets its successor superseded,
        so two agents correcting one lesson make one chain of three versions, never a
        fork nor a lost version. The new version is inserted without dedup (a typo fix
        of the old one must not merge back into it); it starts with a fresh score and
        keeps the old one's scenes and criticality. A mapping without ``scene``,
        ``trigger``, ``action`` or ``outcome`` takes them from ``old_id``'s record (a
        correction is often just a new lesson). ``locked``: the caller holds the
        namespace lock already (``edit``); ``embedded``: the text and vector it embedded
        before taking the lock, used when the record's text is still that text (so that
        no model runs under the lock).
        """
        ns = self.namespace_key(namespace)
        rid = parse_id(old_id)
        if reason is not None and not isinstance(reason, str):
            raise ValidationError("reason must be a string", field="reason")
        if reason is not None and len(reason) > self.settings.field_max_chars:
            raise ValidationError(
                f"reason has {len(reason)} characters; at most "
                f"{self.settings.field_max_chars} are kept",
                field="reason",
            )
        yield from self.ready_flow()
        if isinstance(record, Mapping) and not set(INHERITED) <= set(record):
            old = yield from self._get_flow(rid, namespace)
            record = {k: getattr(old, k) for k in INHERITED} | dict(record)
        (rec,) = validate_records([record], self.settings)
        text = embedding_text(rec, self.document_fields)
        if embedded is not None and embedded[0] == text:
            vector = embedded[1]  # the caller embedded it, and warned about its language
        else:
            self._warn_language([rec.lesson])
            (vector,) = yield from Embed([text])
        now = self.now()
        if not locked:
            yield Sql(q.LOCK_NAMESPACE, {"ns": ns})
        heads = yield from Sql(vq.HEAD_FOR_UPDATE, {"ns": ns, "id": rid, **self.decay_params(now)})
        if not heads:
            found = yield from Sql(vq.EXISTS, {"ns": ns, "id": rid})
            if not found:
                raise NotFoundError(f"no record {rid} in namespace {show_namespace(ns)}")
            raise ValidationError(
                f"the chain of record {rid} has no current version (it was forgotten); "
                "write the lesson anew instead",
                field="id",
            )
        head = heads[0]
        new_id = self._new_id()
        lineage = head["lineage"] or head["id"]
        scenes = [s for s in dict.fromkeys((head["scene"], *head["also_scenes"])) if s != rec.scene]
        row = record_row(
            rec,
            ns=ns,
            id=new_id,
            vector=self._vector_fields(text, vector),
            critical=rec.critical or head["critical"],
            created_at=now,
            updated_at=now,
            also_scenes=scenes,
        )
        yield Sql(batch_sql.INSERT_ROWS, batch_sql.insert_rows([row]), fetch="none")
        link = {"ns": ns, "old": head["id"], "new": new_id, "lineage": lineage}
        yield Sql(vq.LINK_NEW, {**link, "version": head["version"] + 1}, fetch="none")
        who = actor if actor is not None else show_namespace(ns)
        marked = yield from Sql(
            vq.MARK_SUPERSEDED, {**link, "now": now, "reason": reason, "actor": who}
        )
        assert marked, "the head was read under the namespace lock and its row lock"
        detail = {"reason": reason, "actor": who, "asked": str(rid)}
        yield Sql(
            batch_sql.EVENT_ROWS,
            batch_sql.event_rows(
                [
                    _event(ns, head["id"], "superseded", now, {**detail, "by": str(new_id)}),
                    _event(ns, new_id, "supersedes", now, {**detail, "of": str(head["id"])}),
                ]
            ),
            fetch="none",
        )
        return WriteResult(id=new_id, status="inserted", supersedes=head["id"])

    def _history_flow(
        self, record_id: object, namespace: Namespace | str | None
    ) -> Flow[list[Experience]]:
        """Every version of ``record_id``'s lesson, oldest first (from any of its ids;
        a record never superseded is a chain of one)."""
        ns = self.namespace_key(namespace)
        rid = parse_id(record_id)
        yield from self.ready_flow()
        rows = yield from Sql(vq.HISTORY, {"ns": ns, "id": rid, **self.decay_params(self.now())})
        if not rows:
            raise NotFoundError(f"no record {rid} in namespace {show_namespace(ns)}")
        return [self._record(r) for r in rows]


def _event(ns: str, rid: uuid.UUID, kind: str, now: Any, detail: dict[str, Any]) -> dict[str, Any]:
    return {"ns": ns, "record_id": rid, "kind": kind, "now": now, "detail": json.dumps(detail)}


__all__ = ["VersionFlows", "typo_only"]
