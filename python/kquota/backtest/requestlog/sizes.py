"""Request and response sizes in bytes as Kafka counts them, rebuilt from a line's logged
fields with the message schema of the logged version (``../shared/docs/kafka-request-log.md``,
section 5): :func:`uvarint_size` in Python, the rest as Spark column expressions, so no
Python runs per line."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column


def uvarint_size(n: int) -> int:
    """Bytes of ``n`` as Kafka's unsigned varint (compact lengths: ``n`` = length + 1)."""
    size = 1
    while n >= 0x80:
        n >>= 7
        size += 1
    return size


def _uv(n: Column) -> Column:
    """:func:`uvarint_size` as a Spark column."""
    from pyspark.sql import functions as F

    return (
        F.when(n < 1 << 7, 1)
        .when(n < 1 << 14, 2)
        .when(n < 1 << 21, 3)
        .when(n < 1 << 28, 4)
        .otherwise(5)
    ).cast("long")


def _sum(array: Column, size: Callable[[Column], Column]) -> Column:
    """The sum of ``size(element)`` over an array (0 for a null array)."""
    from pyspark.sql import functions as F

    return F.coalesce(
        F.aggregate(array, F.lit(0).cast("long"), lambda acc, x: acc + size(x)), F.lit(0)
    ).cast("long")


def _count(array: Column) -> Column:
    from pyspark.sql import functions as F

    return F.coalesce(F.size(array), F.lit(0)).cast("long")


def _string_size(text: Column, flexible: Column | bool) -> Column:
    """A nullable string: int16 length (-1 for null) or compact (uvarint length + 1)."""
    from pyspark.sql import functions as F

    n = F.coalesce(F.octet_length(text).cast("long"), F.lit(0))
    compact = F.when(text.isNull(), F.lit(1)).otherwise(_uv(n + 1) + n)
    return F.when(F.lit(flexible), compact).otherwise(2 + n).cast("long")


def produce_request_size(header: Column, request: Column) -> Column:
    """Kafka's ``request.sizeInBytes`` of a Produce line: header + body (doc section 5)."""
    from pyspark.sql import functions as F

    version = header["requestApiVersion"]
    flexible = version >= 9
    client = F.coalesce(F.octet_length(header["clientId"]).cast("long"), F.lit(0))
    head = F.when(flexible, 11 + client).otherwise(10 + client)

    def partition(p: Column) -> Column:
        r = p["recordsSizeInBytes"]
        records = F.when(flexible, F.when(r.isNull(), 1).otherwise(_uv(r + 1) + r)).otherwise(
            4 + F.coalesce(r, F.lit(0))
        )
        return 4 + records + F.when(flexible, 1).otherwise(0)

    def topic(t: Column) -> Column:
        parts = t["partitionData"]
        name = F.when(version >= 13, F.lit(16)).otherwise(_string_size(t["name"], flexible))
        count = F.when(flexible, _uv(_count(parts) + 1)).otherwise(4)
        return name + count + _sum(parts, partition) + F.when(flexible, 1).otherwise(0)

    topics = request["topicData"]
    txn = F.when(version >= 3, _string_size(request["transactionalId"], flexible)).otherwise(0)
    count = F.when(flexible, _uv(_count(topics) + 1)).otherwise(4)
    body = txn + 2 + 4 + count + _sum(topics, topic) + F.when(flexible, 1).otherwise(0)
    return (head + body).cast("long")


def fetch_response_size(version: Column, response: Column) -> Column:
    """4 + the Fetch response body size, as ``FetchResponse.sizeOf`` (doc section 5).

    Both key sets of the logged response are read: 3.0 and later name a topic's partitions
    ``partitions`` and their records ``records`` (``recordsSizeInBytes``), 2.8 names them
    ``partitionResponses`` and ``recordSet`` (``recordSetSizeInBytes``); a reader of one set
    only would find no partition in the other's lines. Records printed as ``null`` (error
    partitions, 4.0+) have no size key and count as 0 bytes of records, which Kafka encodes
    in as many bytes as an empty record set. ``nodeEndpoints`` is not counted: Kafka sizes
    the response for the quota with an empty node list and adds the endpoints afterwards."""
    from pyspark.sql import functions as F

    flexible = version >= 12

    def flex(value: int) -> Column:
        return F.when(flexible, value).otherwise(0)

    def tagged(struct: Column, size: int) -> Column:
        # tag (1 byte) + size (1 byte) + the struct's fields and its own empty tag buffer
        return F.when(struct.isNull(), 0).otherwise(2 + size + 1)

    def partition(p: Column) -> Column:
        aborted = p["abortedTransactions"]
        n = _count(aborted)
        aborted_size = F.when(version < 4, 0).otherwise(
            F.when(flexible, F.when(aborted.isNull(), 1).otherwise(_uv(n + 1) + 17 * n)).otherwise(
                4 + 16 * n
            )
        )
        r = F.coalesce(p["recordsSizeInBytes"], p["recordSetSizeInBytes"], F.lit(0))
        records = F.when(flexible, _uv(r + 1) + r).otherwise(4 + r)
        tags = (
            tagged(p["divergingEpoch"], 12)
            + tagged(p["currentLeader"], 8)
            + tagged(p["snapshotId"], 12)
        )
        count = (
            F.when(p["divergingEpoch"].isNotNull(), 1).otherwise(0)
            + F.when(p["currentLeader"].isNotNull(), 1).otherwise(0)
            + F.when(p["snapshotId"].isNotNull(), 1).otherwise(0)
        )
        return (
            4
            + 2
            + 8
            + F.when(version >= 4, 8).otherwise(0)
            + F.when(version >= 5, 8).otherwise(0)
            + aborted_size
            + F.when(version >= 11, 4).otherwise(0)
            + records
            + F.when(flexible, _uv(count) + tags).otherwise(0)
        )

    def topic(t: Column) -> Column:
        parts = F.coalesce(t["partitions"], t["partitionResponses"])
        name = F.when(version >= 13, F.lit(16)).otherwise(_string_size(t["topic"], flexible))
        count = F.when(flexible, _uv(_count(parts) + 1)).otherwise(4)
        return name + count + _sum(parts, partition) + flex(1)

    topics = response["responses"]
    # an empty fetch: 8 B (v0), 12 B (v1-6), 18 B (v7-11, error code and session id), 16 B
    # (v12+, compact count and tag buffer)
    body = (
        F.when(version >= 1, 4).otherwise(0)
        + F.when(version >= 7, 2 + 4).otherwise(0)
        + F.when(flexible, _uv(_count(topics) + 1)).otherwise(4)
        + _sum(topics, topic)
        + flex(1)
    )
    return (4 + body).cast("long")
