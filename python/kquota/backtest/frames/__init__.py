"""Plain pandas/NumPy functions over one group of requests.

Nothing here imports Spark. The Spark job (:mod:`kquota.backtest.job`) only groups the
traffic and calls these functions on each group; the tests call them directly.

A *group* is a table of requests that all went to one broker (quotas, and so sensors, are
per broker in Kafka). Its columns are those of the traffic table (:data:`TS`, :data:`USER`,
:data:`CLIENT`, :data:`API`, :data:`BYTES`, optionally :data:`THREAD` and the tie-breaking
:data:`SEQ_COLUMNS`); rows may come in any order: every function replays them in time order,
ties broken by :data:`SEQ_COLUMNS` (the position of the row in the input), and returns its
results in the group's own row order.

The modules, each re-exported here:

* :mod:`~kquota.backtest.frames.schema`: the columns a replay reads (kquota's traffic
  schema, :mod:`kquota.traffic_schema`) and writes;
* :mod:`~kquota.backtest.frames.replay`: the sensors requests resolve to, and the open and
  closed loop replays (:func:`replay_open`, :func:`replay_closed`);
* :mod:`~kquota.backtest.frames.entities`: per-sensor summaries (:func:`summarize`);
* :mod:`~kquota.backtest.frames.recommendation`: recommended quotas (:func:`recommend`) and
  the quota file to apply from them (:func:`applicable`).

Every throttle comes from the core's :class:`kquota.ReplayKernel`, on managers built from
the :class:`~kquota.config.QuotaConfig` with Kafka's own precedence rules: in one pass per
broker (both loops), or in open loop as a request pass then a byte pass
(:class:`SplitReplay`), when the Spark job splits a broker's traffic by sensor.
"""

from kquota.backtest.frames import entities, recommendation, replay, schema
from kquota.backtest.frames.entities import *  # noqa: F403 (this package re-exports them)
from kquota.backtest.frames.recommendation import *  # noqa: F403
from kquota.backtest.frames.replay import *  # noqa: F403
from kquota.backtest.frames.schema import *  # noqa: F403

__all__: list[str] = []
__all__ += entities.__all__
__all__ += recommendation.__all__
__all__ += replay.__all__
__all__ += schema.__all__
