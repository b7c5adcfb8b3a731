"""Sigma's HTML pieces: the style, escaping, tables with sortable headers, pagers, filter forms, the page frame and the login page."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from reference.master.sigma.listing import Page, link
from reference.master.sigma.script import SCRIPT
from reference.resources import format_quantity

STATE_CLASS = {"RUNNING": "ok", "PENDING": "warn", "DEAD": "bad", "BACKOFF": "bad", "up": "ok", "down": "bad"}

STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#1d2330;background:#f4f6f9}
header{background:#1d2330;color:#fff;padding:10px 20px;display:flex;gap:24px;align-items:baseline}
header a{color:#fff;text-decoration:none;font-weight:600}
header a.home{font-size:18px}
header span{color:#aeb7c7}
main{padding:16px 20px;max-width:1200px}
h2{font-size:16px;margin:22px 0 8px}
table{border-collapse:collapse;background:#fff;width:100%;box-shadow:0 1px 2px #0002}
th,td{text-align:left;padding:5px 10px;border-bottom:1px solid #e3e7ee;vertical-align:top}
th{background:#eef1f6;font-weight:600}
th a{color:#1d2330;text-decoration:none}
a{color:#1f5fbf}
.ok{color:#17803d;font-weight:600}.warn{color:#a86400;font-weight:600}.bad{color:#c3221f;font-weight:600}
.done{color:#5b6475;font-weight:600}
tr.down td{background:#fde8e8}
.kv td:first-child{font-weight:600;width:160px}
.bar{position:relative;height:14px;width:220px;background:#e3e7ee;border-radius:3px;overflow:hidden}
.bar .resv{position:absolute;top:0;left:0;height:100%;background:#8fb3ea}
.bar .used{position:absolute;top:4px;left:0;height:6px;background:#1d4f9c}
.legend,.note,.pager{color:#5b6475;font-size:12px}
.legend i{display:inline-block;width:10px;height:10px;margin:0 4px 0 10px;vertical-align:middle}
.pager{margin:6px 0}.pager a{margin:0 6px}
pre{background:#11151c;color:#d8dee9;padding:10px;overflow:auto;max-height:360px;font-size:12px;white-space:pre-wrap}
.pending{color:#a86400}
#live{font-size:12px;color:#aeb7c7}
form.filter{display:flex;gap:8px;align-items:center;margin:6px 0;flex-wrap:wrap}
form.filter input,form.filter select,.actions input{padding:3px 6px}
.actions{display:flex;gap:12px;align-items:center;margin:8px 0}
button{padding:3px 10px;cursor:pointer}button.danger{color:#fff;background:#c3221f;border:1px solid #9b1714;border-radius:3px}
#action-result{font-size:13px}
.charts{display:flex;gap:16px;flex-wrap:wrap}
figure.chart{margin:0;background:#fff;box-shadow:0 1px 2px #0002;padding:6px 8px}
figure.chart figcaption{font-size:12px;color:#5b6475;margin-bottom:4px}
figure.chart .frame{fill:#fff;stroke:#e3e7ee}figure.chart .line{fill:none;stroke:#1d4f9c;stroke-width:1.5}
figure.chart circle.line{fill:#1d4f9c}figure.chart .limit{stroke:#c3221f;stroke-dasharray:4 3}
figure.chart .axis{display:flex;justify-content:space-between;font-size:11px;color:#8a93a3}
.login{max-width:640px;background:#fff;padding:16px 20px;box-shadow:0 1px 2px #0002}
.login input{width:100%;padding:6px;font:13px monospace;margin:8px 0}
.login code{background:#eef1f6;padding:1px 4px}
"""


def e(value: Any) -> str:
    return escape("" if value is None else str(value))


def state(value: Any) -> str:
    return f'<span class="{STATE_CLASS.get(str(value), "")}">{e(value)}</span>'


def table(columns: Sequence[str], rows: list[list[str]], row_classes: list[str] | None = None,
          headers: Sequence[str] | None = None) -> str:  # fmt: skip
    """Rows of ready HTML cells under `columns` (or `headers`, HTML already: sort links)."""
    head = "".join(f"<th>{h}</th>" for h in headers) if headers else "".join(f"<th>{e(c)}</th>" for c in columns)
    body = "".join(
        f'<tr class="{(row_classes or [""] * len(rows))[i]}">' + "".join(f"<td>{c}</td>" for c in row) + "</tr>"
        for i, row in enumerate(rows)
    )
    css = ' class="listing"' if headers else ""  # a listing: searched, sorted and paged
    return f"<table{css}><thead><tr>{head}</tr></thead><tbody>{body or '<tr><td>none</td></tr>'}</tbody></table>"


def sort_headers(path: str, params: Mapping[str, str], page: Page, columns: Sequence[tuple[str, str]]) -> list[str]:
    """Column headers that sort by their column when clicked, again for the other direction."""
    out = []
    for label, name in columns:
        if not name:
            out.append(e(label))
            continue
        mark = " ▲" if page.sort == name else " ▼" if page.sort == f"-{name}" else ""
        target = f"-{name}" if page.sort == name else name
        out.append(f'<a href="{e(link(path, params, sort=target, page=1))}">{e(label)}{mark}</a>')
    return out


def pager(path: str, params: Mapping[str, str], page: Page, what: str) -> str:
    """'rows 51-100 of 230 jobs (1,024 in all)' with links to the other pages."""
    first = page.first
    shown = f"{what} {first}-{first + len(page.rows) - 1} of {page.matched}" if page.rows else f"no {what} match"
    if page.matched != page.total:
        shown += f" ({page.total} in all)"
    links = []
    if page.page > 1:
        links.append(f'<a href="{e(link(path, params, page=page.page - 1))}">&larr; previous</a>')
    if page.pages > 1:
        links.append(f"page {page.page} of {page.pages}")
    if page.page < page.pages:
        links.append(f'<a href="{e(link(path, params, page=page.page + 1))}">next &rarr;</a>')
    note = f' <span class="bad">{e(page.note)}</span>' if page.note else ""
    return f'<div class="pager">{e(shown)} {" ".join(links)}{note}</div>'


def filter_form(path: str, params: Mapping[str, str], placeholder: str,
                choices: Sequence[tuple[str, str, Sequence[str]]]) -> str:  # fmt: skip
    """A search box and a select per filter (name, label, values), kept as the URL's query."""
    selects = []
    for name, label, values in choices:
        options = "".join(
            f'<option value="{e(v)}"{" selected" if params.get(name) == v else ""}>{e(v or "any " + label)}</option>'
            for v in ["", *values]
        )
        selects.append(f'<select name="{e(name)}" aria-label="{e(label)}">{options}</select>')
    sort = f'<input type="hidden" name="sort" value="{e(params["sort"])}">' if params.get("sort") else ""
    return (
        f'<form class="filter" method="get" action="{e(path)}">'
        f'<input type="search" name="q" value="{e(params.get("q", ""))}" placeholder="{e(placeholder)}" aria-label="search">'
        f'{"".join(selects)}{sort}<button type="submit">filter</button>'
        f'{f" <a href={chr(34)}{e(path)}{chr(34)}>clear</a>" if any(params.get(k) for k in ("q", *(c[0] for c in choices))) else ""}'
        "</form>"
    )


def key_values(pairs: list[tuple[str, str]]) -> str:
    return '<table class="kv">' + "".join(f"<tr><td>{e(k)}</td><td>{v}</td></tr>" for k, v in pairs) + "</table>"


def bar(resource: str, reserved: int, used: int, capacity: int) -> str:
    """Reserved (light) and used (dark) out of capacity, with the figures beside it."""
    if capacity <= 0:
        return "-"
    r, u = min(100.0, 100 * reserved / capacity), min(100.0, 100 * used / capacity)
    label = f"{format_quantity(resource, reserved)} reserved, {format_quantity(resource, used)} used of {format_quantity(resource, capacity)}"
    return (
        f'<div class="bar" title="{e(label)}"><div class="resv" style="width:{r:.1f}%"></div>'
        f'<div class="used" style="width:{u:.1f}%"></div></div><span class="legend">{e(label)}</span>'
    )


def nav(sub: str) -> str:
    return (f'<a class="home" href="/ui">Sigma</a><a href="/ui">jobs</a><a href="/ui/machines">machines</a>'
            f'<a href="/ui/events">events</a><span>{sub}</span>')  # fmt: skip


def page(title: str, body: str, revision: int, replica_name: str, who: str = "") -> str:
    user = f' data-user="{e(who)}"' if who else ""
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{e(title)} - Sigma</title>
<meta name="viewport" content="width=device-width,initial-scale=1"><style>{STYLE}</style></head>
<body data-revision="{revision}"{user}>
<header>{nav(f"minborg cell, served by replica {e(replica_name)}" + (f", signed in as {e(who)}" if who else ""))}
<span id="live">revision {revision}</span></header>
<main>{body}</main>
<script>{SCRIPT}</script>
</body></html>"""


LOGIN = """<div class="login" id="login"><h2>Sign in to the cell</h2>
<p class="bad" id="login-message"></p>
<p>Sigma reads the cell with your token, as the <code>minborg</code> command does. Paste it here:
it stays in this browser tab (<code>sessionStorage</code>) and goes only to this cell, in an
<code>Authorization</code> header.</p>
<form id="login-form"><input id="login-token" name="token" type="password" autocomplete="off"
placeholder="mbt_..." aria-label="token"><button type="submit">sign in</button></form>
<p>Where to get one:</p><ul>
<li>a user's token: the cell's admin runs <code>minborg user add NAME</code>, which prints it once;</li>
<li>the cell's admin token: the file <code>admin.token</code> in the cell's state dir
(<code>cat .minborg/admin.token</code> for a cell started with <code>minborg cell up</code>);</li>
<li><code>minborg ui --open</code> opens this page signed in with the token the command line uses.</li>
</ul></div>"""


def shell_page() -> str:
    """A page asked for without a token: no data of the cell, the login form, and the script
    that asks for the page again with the token it holds or is given."""
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>Sigma</title>
<meta name="viewport" content="width=device-width,initial-scale=1"><style>{STYLE}</style></head>
<body data-revision="0" data-shell="1">
<header>{nav("minborg cell")}<span id="live">signing in...</span></header>
<main><noscript>Sigma needs JavaScript to send your token.</noscript><p id="loading">Loading the cell with your token...</p></main>
<template id="login-template">{LOGIN}</template>
<script>{SCRIPT}</script>
</body></html>"""
