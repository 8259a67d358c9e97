"""What the report says in words: the opening paragraphs (who would have been throttled,
how long they would have waited, what the other scenarios and the recommended quotas
change) and the rankings of the entities that matter. The HTML page
(:mod:`~kquota.backtest.report.page`) and the terminal summary
(:mod:`~kquota.backtest.report.terminal`) both show them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

import numpy as np
import pandas as pd  # type: ignore[import-untyped]

from kquota.backtest.frames import ClientLimits
from kquota.backtest.report import units
from kquota.backtest.report.tables import unserved_of

if TYPE_CHECKING:
    from kquota.backtest.options import BacktestResult, RecommendedFile

_REQUESTS_OF: Final = {
    "produce": "produce requests",
    "fetch": "fetch requests",
    "request": "requests",
    "controller_mutation": "controller mutations",
}
_HEADLINE: Final = {
    "closed": "Under {quotas} ({scenario}), clients that honour throttles (closed loop, as "
    "Kafka clients do) would have had {count} requests ({share}) throttled{counted}.",
    "open": "Replayed at their recorded times, as if clients ignored throttles (open loop), "
    "{count} requests ({share}) would have been throttled under {quotas} ({scenario})"
    "{counted}.",
}
_UNTHROTTLED: Final = {
    "closed": "Under {quotas} ({scenario}), clients that honour throttles (closed loop, as "
    "Kafka clients do) would have had none of their {requests} requests throttled.",
    "open": "Replayed at their recorded times (open loop), none of the {requests} requests "
    "would have been throttled under {quotas} ({scenario}).",
}
NAMED_PER_TYPE: Final = 3
"""How many throttled entities of each quota type the opening sentences name."""


def read_entities(out: str | Path) -> pd.DataFrame | None:
    """``DIR/entities/`` (one row per sensor and scenario) of a local output folder, or
    ``None`` when it is not there (a remote output, or no back-test wrote it)."""
    text = str(out)
    if "://" in text and not text.startswith("file://"):
        return None
    folder = Path(text.removeprefix("file://")) / "entities"
    if not folder.is_dir():
        return None
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    frame: pd.DataFrame = pq.read_table(str(folder)).to_pandas()
    return frame


def _listed(items: Sequence[str], more: int = 0, what: str = "more") -> str:
    words = list(items) + ([f"{more:,} {what}"] if more else [])
    if len(words) <= 1:
        return "".join(words)
    return ", ".join(words[:-1]) + " and " + words[-1]


def _throttled_entities(
    result: BacktestResult, entities: pd.DataFrame | None
) -> tuple[pd.DataFrame, bool]:
    """Per throttled entity (quota type and entity, across brokers) of the base scenario:
    ``requests`` (all its requests of that type), ``throttled_requests``,
    ``total_throttle_ms``, ``max_throttle_ms`` and ``brokers`` (where it was throttled),
    most throttle time first; and whether that is every throttled entity (from
    ``entities``) or only the most throttled sensors (``result.top_entities``)."""
    complete = entities is not None
    rows = entities if entities is not None else result.top_entities
    if "scenario" in rows.columns:
        rows = rows[rows["scenario"] == result.base_scenario]
    keys = ["quota_type", "entity"]
    columns = [*keys, "requests", "throttled_requests", "total_throttle_ms"]
    columns += ["max_throttle_ms", "brokers"]
    if rows.empty:
        return pd.DataFrame(columns=columns), complete
    rows = rows.assign(
        throttled_requests=rows["throttled_requests"].fillna(0).astype(np.int64),
        hit=(rows["throttled_requests"] > 0).astype(np.int64),
    )
    per = rows.groupby(keys, as_index=False, observed=True, sort=False).agg(
        requests=("requests", "sum"),
        throttled_requests=("throttled_requests", "sum"),
        total_throttle_ms=("total_throttle_ms", "sum"),
        max_throttle_ms=("max_throttle_ms", "max"),
        brokers=("hit", "sum"),
    )
    per = per[per["throttled_requests"] > 0]
    per = per.sort_values(["total_throttle_ms", *keys], ascending=[False, True, True])
    return per.reset_index(drop=True)[columns], complete


@dataclass(frozen=True)
class Ranking:
    """One ranking of the summary's table of the entities that matter: the entities (quota
    type and entity, across brokers) of the base scenario with the largest ``column``, as
    ``DIR/entities/`` has it per sensor, aggregated across brokers by ``aggregate``.
    Entities where it is 0 are not listed; a ranking whose column the entities do not
    have, or that does not apply to the mode, is left out."""

    title: str
    column: str
    header: str
    """The header of the column that shows what the entities are ranked by."""
    kind: str = ""
    """How that column is formatted (``ms``: durations, in the unit of the largest)."""
    aggregate: str = "sum"
    modes: tuple[str, ...] = ("open", "closed")
    per_entity: bool = False
    """One row per entity, of its quota type with the most requests throttled: for what
    all of an entity's requests share (how late they went out), whatever the sensor."""


RANKINGS: Final = (
    Ranking("Most throttled", "total_throttle_ms", "throttle in all", "ms"),
    Ranking(
        "Most delayed",
        "max_added_latency_ms",
        "sent late, at most",
        "ms",
        "max",
        ("closed",),
        per_entity=True,
    ),
)
"""The rankings of the summary's table, in order; one entry adds one."""
RANKED: Final = 3
"""How many entities each ranking lists."""

_RANKED_COLUMNS: Final = (
    ("type", "quota_type", ""),
    ("quota", "quota", "rate"),
    ("requests throttled", "throttled_requests", ""),
    ("share", "throttled_fraction", "pct"),
    ("longest throttle", "max_throttle_ms", "ms"),
)


def ranked_columns(ranking: Ranking) -> list[tuple[str, str, str]]:
    """The columns of a ranking's rows: the entity, what every ranking shows, then what
    this one ranks by."""
    return [
        ("entity", "entity", ""),
        *_RANKED_COLUMNS,
        (ranking.header, ranking.column, ranking.kind),
    ]


def ranked_entities(
    result: BacktestResult,
    entities: pd.DataFrame | None = None,
    rankings: Sequence[Ranking] = RANKINGS,
) -> list[tuple[Ranking, pd.DataFrame]]:
    """Per ranking (:data:`RANKINGS`) that applies, its first :data:`RANKED` entities:
    ``quota_type``, ``entity``, ``quota`` (the largest of its brokers'),
    ``throttled_requests``, ``throttled_fraction`` (of its requests of that type),
    ``max_throttle_ms`` and the ranking's column.

    ``entities``: ``DIR/entities/`` (:func:`read_entities`); without it, the most
    throttled sensors (``result.top_entities``)."""
    rows = entities if entities is not None else result.top_entities
    if "scenario" in rows.columns:
        rows = rows[rows["scenario"] == result.base_scenario]
    out: list[tuple[Ranking, pd.DataFrame]] = []
    if rows.empty:
        return out
    keys = ["quota_type", "entity"]
    for ranking in rankings:
        if result.mode not in ranking.modes or ranking.column not in rows.columns:
            continue
        per = rows.groupby(keys, as_index=False, observed=True, sort=False).agg(
            quota=("quota", "max"),
            requests=("requests", "sum"),
            throttled_requests=("throttled_requests", "sum"),
            max_throttle_ms=("max_throttle_ms", "max"),
            measure=(ranking.column, ranking.aggregate),
        )
        per = per[per["measure"].fillna(0) > 0]
        if per.empty:
            continue
        per = per.sort_values(
            ["measure", "throttled_requests", *keys],
            ascending=[False, False, True, True],
            kind="stable",
        )
        if ranking.per_entity:
            per = per.drop_duplicates("entity")
        per = per.head(RANKED).rename(columns={"measure": ranking.column})
        per["throttled_fraction"] = per["throttled_requests"] / per["requests"].where(
            per["requests"] > 0
        )
        out.append((ranking, per.reset_index(drop=True)))
    return out


def opening(result: BacktestResult, entities: pd.DataFrame | None = None) -> list[str]:
    """The few sentences the report and the terminal summary open with, computed from the
    results: who would have been throttled (entities, one sentence per quota type), how
    long they would have waited, what the other scenarios change and, after
    ``--recommend``, what the recommended quotas change.

    ``entities``: ``DIR/entities/`` (:func:`read_entities`). Without it the sentences name
    the most throttled sensors' entities (``result.top_entities``) and do not count them.
    """
    return [
        sentence for paragraph in opening_paragraphs(result, entities) for sentence in paragraph
    ]


def opening_paragraphs(
    result: BacktestResult, entities: pd.DataFrame | None = None
) -> list[list[str]]:
    """:func:`opening`'s sentences in short paragraphs: how many requests were throttled;
    who; how long; the other scenarios; what the recommendations optimise; what they
    change."""
    totals = result.totals.set_index("scenario") if not result.totals.empty else None
    if totals is None or result.base_scenario not in totals.index:
        return [["No request was replayed."]]
    base = totals.loc[result.base_scenario]
    requests, throttled = int(base["requests"]), int(base["throttled_requests"])
    mode = result.mode if result.mode in _HEADLINE else "open"
    scale = f"{float(base['scale']):g}"
    words = {
        "quotas": "these quotas" if scale == "1" else f"these quotas scaled by {scale}",
        "scenario": result.base_scenario,
        "requests": f"{requests:,}",
    }
    if not throttled:
        paragraphs = [[_UNTHROTTLED[mode].format(**words)]]
    else:
        per, complete = _throttled_entities(result, entities)
        counted = f", from {len(per):,} entities" if complete and len(per) != 1 else ""
        if complete and len(per) == 1:
            counted = ", all from one entity"
        headline = _HEADLINE[mode].format(
            count=f"{throttled:,} of {requests:,}",
            share=units.share(throttled / requests),
            counted=counted,
            **words,
        )
        paragraphs = [[headline], _who(per, complete), [_delay(result, base, per)]]
    paragraphs.append(unserved_sentences(result))
    paragraphs.append(_other_scenarios(result, totals))
    # what the recommendations optimise, then what they change
    recommended = _recommended(result)
    paragraphs += [recommended[:1], recommended[1:]]
    return [paragraph for paragraph in paragraphs if paragraph]


def recommendation_paragraphs(result: BacktestResult) -> int:
    """How many of :func:`opening_paragraphs`' last paragraphs are the recommendations'."""
    recommended = _recommended(result)
    return len([p for p in (recommended[:1], recommended[1:]) if p])


def limits_text(limits: ClientLimits) -> str:
    """The client limits as Kafka's client settings."""
    return (
        f"buffer.memory {limits.buffer_bytes:,}, delivery.timeout.ms "
        f"{limits.delivery_timeout_ms:,}, default.api.timeout.ms {limits.api_timeout_ms:,}"
    )


def unserved_sentences(result: BacktestResult) -> list[str]:
    """What bounded clients could not have served (closed loop): how much, why, and whose."""
    mine = unserved_of(result)
    if mine is None:
        return []
    limits = result.clients
    bounds = limits_text(limits) if limits is not None else "Kafka's client limits"
    if mine.empty:
        return [f"Within their limits ({bounds}), clients would have sent every request."]
    requests, size = int(mine["requests"].sum()), float(mine["bytes"].sum())
    full, late = int(mine["buffer_full"].sum()), int(mine["timed_out"].sum())
    why = []
    if full:
        why.append(f"{full:,} produce requests found the client's buffer full")
    if late:
        why.append(f"{late:,} requests were still waiting when their timeout ran out")
    named = [
        f"{r['client']} ({int(r['requests']):,} requests, {units.size(float(r['bytes']))})"
        for r in mine.head(NAMED_PER_TYPE).to_dict("records")
    ]
    more = len(mine) - len(named)
    return [
        f"Within their limits ({bounds}), clients could not have sent {requests:,} "
        f"requests ({units.size(size)}): {' and '.join(why)}. Most of it from "
        f"{_listed(named, more, 'other client' if more == 1 else 'other clients')}."
    ]


def _who(per: pd.DataFrame, complete: bool) -> list[str]:
    """Who was throttled, a sentence per quota type (the type with the most throttle time
    first)."""
    time_per_type = per.groupby("quota_type", observed=True)["total_throttle_ms"].sum()
    parts: list[str] = []
    for quota_type in time_per_type.sort_values(ascending=False, kind="stable").index:
        mine = per[per["quota_type"] == quota_type]
        requests = _REQUESTS_OF.get(str(quota_type), "requests")
        named = []
        for record in mine.head(NAMED_PER_TYPE).to_dict("records"):
            share = int(record["throttled_requests"]) / max(int(record["requests"]), 1)
            named.append(
                f"{record['entity']} ({int(record['throttled_requests']):,} requests, "
                f"{units.share(share)} of its {requests}, up to "
                f"{units.duration(float(record['max_throttle_ms']))})"
            )
        more = len(mine) - len(named) if complete else 0
        what = "other entity" if more == 1 else "other entities"
        quotas = f"the {units.TYPE_WORDS.get(str(quota_type), str(quota_type))} quotas"
        lead = "" if complete or parts else "Among the most throttled sensors, "
        text = f"{lead}{quotas} would throttle {_listed(named, more, what)}"
        parts.append(f"{text[0].upper()}{text[1:]}.")
    return parts


def _delay(result: BacktestResult, base: pd.Series, per: pd.DataFrame) -> str:
    """How long the throttled requests would have waited (closed loop) or how far the
    demand exceeds the quotas (open loop)."""
    throttled = int(base["throttled_requests"])
    mean = float(base["total_throttle_ms"]) / throttled
    p99, longest = float(base["p99_throttle_ms"]), float(base["max_throttle_ms"])
    where = ""
    if not per.empty:
        top = per.sort_values("max_throttle_ms", ascending=False, kind="stable").iloc[0]
        if float(top["max_throttle_ms"]) == longest:  # else not among the rows at hand
            quota_type = str(top["quota_type"])
            where = f" ({top['entity']}, {units.TYPE_WORDS.get(quota_type, quota_type)})"
    spread = (
        f"{units.duration(mean)} on average; over all requests the p99 throttle is "
        f"{units.duration(p99)} and the longest {units.duration(longest)}{where}"
    )
    if result.mode == "closed":
        lag = float(base["mean_added_latency_ms"])
        most = float(base.get("max_added_latency_ms", 0) or 0)
        if result.clients is None:
            return (
                f"A throttled request was held back {spread}. Waiting, clients fell behind: "
                f"their requests went out {units.duration(lag)} late on average, at most "
                f"{units.duration(most)} (unbounded clients: they hold every request however "
                "late)."
            )
        return (
            f"A throttled request was held back {spread}. Clients held what they could "
            f"not send yet: requests went out {units.duration(lag)} late on average, at most "
            f"{units.duration(most)}."
        )
    return (
        f"The brokers would have answered the throttled requests with throttles of {spread}: "
        "this measures how far the recorded demand exceeds the quotas, not what clients "
        "would wait (a closed-loop run, --mode closed, tells that)."
    )


def _other_scenarios(result: BacktestResult, totals: pd.DataFrame) -> list[str]:
    """The other scenarios in one sentence: their throttled share, p99 and longest."""
    parts: list[str] = []
    for scenario in result.scenarios:
        if scenario == result.base_scenario or scenario not in totals.index:
            continue
        row = totals.loc[scenario]
        share = units.share(int(row["throttled_requests"]) / max(int(row["requests"]), 1))
        parts.append(
            f"scaled by {float(row['scale']):g} ({scenario}), "
            + ("the quotas would throttle " if not parts else "")
            + f"{share} of requests (p99 {units.duration(float(row['p99_throttle_ms']))}, longest "
            f"{units.duration(float(row['max_throttle_ms']))})"
        )
    if not parts:
        return []
    text = "; ".join(parts)
    return [f"{text[0].upper()}{text[1:]}."]


def _recommended(result: BacktestResult) -> list[str]:
    """What the recommended quota file changes and gives, when ``--recommend`` ran."""
    recommended = result.recommendations
    file = result.recommended
    if recommended is None or recommended.empty or file is None:
        return []
    change = recommended["change"]
    raised = recommended[change == "raise"].sort_values(
        ["current_throttled_fraction", "quota_type", "entity"], ascending=[False, True, True]
    )
    examples = []
    for record in raised.head(2).to_dict("records"):
        quota_type = str(record["quota_type"])
        examples.append(
            f"{record['entity']}'s {units.TYPE_WORDS.get(quota_type, quota_type)} quota from "
            f"{units.amount(float(record['current_quota']), quota_type)} to "
            f"{units.amount(float(record['applied_quota']), quota_type)} "
            f"({units.share(float(record['current_throttled_fraction']))} of its requests "
            "throttled)"
        )
    changes = []
    if len(raised) > len(examples):
        changes.append(f"raises {len(raised):,} quotas, such as {_listed(examples)}")
    elif len(raised):
        changes.append(f"raises {_listed(examples)}")
    lowered = int((change == "lower").sum())
    if lowered:
        changes.append(f"lowers {lowered:,} that are more than their entities need")
    added = int((change == "add").sum())
    if added:
        changes.append(f"sets {added:,} where there is none")
    sentences = [_method(file, result)]
    if not changes:
        sentences.append("The recommended quota file is the quotas as they are.")
        return sentences
    # named within the output folder: the sentence reads the same wherever that is
    sentences.append(
        f"The recommended quota file (recommendations/quotas.json) {_listed(changes)}."
    )
    before = result.totals[result.totals["scenario"] == result.base_scenario]
    after = file.totals
    if len(before) and len(after):
        b, a = before.iloc[0], after.iloc[0]
        sentences.append(
            "Back-tested on the same traffic, it throttles "
            f"{int(a['throttled_requests']):,} requests "
            f"({units.share(float(a['throttled_fraction']))}) where the quotas of "
            f"{result.base_scenario} throttle "
            f"{int(b['throttled_requests']):,} ({units.share(float(b['throttled_fraction']))}), "
            f"{units.duration(float(a['total_throttle_ms']))} of throttle in all against "
            f"{units.duration(float(b['total_throttle_ms']))}."
        )
    return sentences


def _method(file: RecommendedFile, result: BacktestResult) -> str:
    """What the recommendations optimise, in words."""
    kept = [] if file.lower else ["a quota is never lowered (--lower allows it)"]
    if not file.add_quotas:
        kept.append("an entity without a quota gets none (--add-quotas gives it one)")
    rules = f"; {_listed(kept)}" if kept else ""
    return (
        "Each entity's recommended quota is the smallest that keeps the share of its "
        f"requests throttled at or under the target on this traffic ({result.base_scenario}), "
        f"plus {file.headroom:.0%} headroom{rules}."
    )
