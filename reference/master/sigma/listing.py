"""Search, filter, sort and paging of Sigma's tables, pure: rows are dicts of plain values, a query says which to show in what order."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

PER_PAGE = 50


@dataclass(frozen=True)
class Query:
    """What a listing page was asked for: `q` a substring of any searched field (case-insensitive),
    `filters` exact values of named fields ("" is any), `sort` a column name, "-" first for
    descending, and the 1-based `page`."""

    q: str = ""
    filters: tuple[tuple[str, str], ...] = ()
    sort: str = ""
    page: int = 1
    per_page: int = PER_PAGE


@dataclass(frozen=True)
class Page:
    rows: list[dict[str, Any]]
    matched: int  # rows that pass the search and filters
    total: int  # rows before them
    page: int  # the page shown, within 1..pages
    pages: int
    first: int  # the 1-based number of the page's first row among those matched
    sort: str  # the sort applied ("" when the asked one is not a column)
    note: str  # why the query was not taken as asked, or ""


def select(
    rows: Sequence[Mapping[str, Any]], query: Query, searched: Sequence[str], columns: Sequence[str], default_sort: str
) -> Page:
    """The page of `rows` that `query` asks for: searched over the `searched` fields, filtered,
    sorted by one of `columns` (numbers before text, then by the default sort), paged."""
    needle = query.q.strip().lower()
    kept = [
        r for r in rows
        if (not needle or any(needle in str(r.get(f, "")).lower() for f in searched))
        and all(not want or str(r.get(name, "")) == want for name, want in query.filters)
    ]  # fmt: skip
    note = ""
    sort = query.sort or default_sort
    if sort.lstrip("-") not in columns:
        note = f"no column {sort.lstrip('-')!r} to sort by; sorted by {default_sort.lstrip('-')}"
        sort = default_sort
    name, descending = sort.lstrip("-"), sort.startswith("-")
    base = default_sort.lstrip("-")
    kept.sort(key=lambda r: _key(r.get(base)))
    kept.sort(key=lambda r: _key(r.get(name)), reverse=descending)
    pages = max(1, -(-len(kept) // query.per_page))
    page = min(max(1, query.page), pages)
    if query.page > pages and kept:
        note = (note + "; " if note else "") + f"there are {pages} page(s): showing the last"
    start = (page - 1) * query.per_page
    rows_shown = [dict(r) for r in kept[start : start + query.per_page]]
    return Page(rows_shown, len(kept), len(rows), page, pages, start + 1, sort, note)


def _key(value: Any) -> tuple[int, Any]:
    if isinstance(value, bool):
        return (0, int(value))
    if isinstance(value, int | float):
        return (0, value)
    return (1, "" if value is None else str(value).lower())


def link(path: str, params: Mapping[str, str], **change: str | int) -> str:
    """`path` with `params` and `change` as its query, empty values left out."""
    from urllib.parse import urlencode

    merged = {**params, **{k: str(v) for k, v in change.items()}}
    query = urlencode({k: v for k, v in merged.items() if v and not (k == "page" and v == "1")})
    return f"{path}?{query}" if query else path
