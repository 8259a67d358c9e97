"""Reading values out of a Prometheus text scrape, and scraping an endpoint over HTTP
(parsed with prometheus_client's parser)."""

from __future__ import annotations

import re
import urllib.request

from prometheus_client.parser import text_string_to_metric_families


def client_sample(text: str, name: str, client_id: str) -> float:
    """The value of ``name`` for the client-id sensor of ``client_id`` (user tag empty) in
    a Prometheus scrape."""
    for line in text.splitlines():
        match = re.fullmatch(name + r"\{(.*)\} (\S+)", line)
        if match and sorted(match.group(1).split(",")) == [
            f'client_id="{client_id}"',
            'user=""',
        ]:
            return float(match.group(2))
    raise AssertionError(f"no {name} for client {client_id!r} in the scrape:\n{text}")


Samples = dict[str, dict[tuple[str, str], float]]
Labelled = dict[str, dict[tuple[tuple[str, str], ...], float]]


def scrape(url: str) -> tuple[Samples, int]:
    """GET the endpoint; return {family: {(user, client_id): value}} and the body size."""
    body = _get(url)
    families = {
        name: {
            (dict(labels).get("user", ""), dict(labels).get("client_id", "")): value
            for labels, value in values.items()
        }
        for name, values in _labelled(body).items()
    }
    return families, len(body)


def scrape_labelled(url: str) -> Labelled:
    """GET the endpoint; {family: {sorted label pairs: value}}."""
    return _labelled(_get(url))


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as response:
        assert response.status == 200
        body: str = response.read().decode()
    return body


def _labelled(body: str) -> Labelled:
    families: Labelled = {}
    for family in text_string_to_metric_families(body):
        values = families.setdefault(family.name, {})
        for sample in family.samples:
            values[tuple(sorted(sample.labels.items()))] = sample.value
    return families
