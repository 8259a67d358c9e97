"""Back-testing quota configurations over recorded traffic (``kquota backtest``).

:mod:`kquota.backtest.frames` holds the plain pandas/NumPy functions that replay one
broker's requests through the core. The Spark job is wired in small modules around it:

* :mod:`~kquota.backtest.options`: what a back-test takes and gives (``BacktestOptions``,
  ``BacktestResult``, the output column names);
* :mod:`~kquota.backtest.session`: the SparkSession, progress lines, Spark's errors as
  kquota's;
* :mod:`~kquota.backtest.inputs`: checking and reading the traffic, validating its rows,
  preparing the output folder;
* :mod:`~kquota.backtest.stages`: the Arrow functions the executors run (``mapInArrow``,
  Arrow UDFs), and :mod:`~kquota.backtest.broker_replay`, the by-broker replay through
  the core's kernel;
* :mod:`~kquota.backtest.tally`: what the executors count for the driver as the rows go
  out (Spark accumulators);
* :mod:`~kquota.backtest.outputs`: the layout of ``DIR/requests/`` and how to read it back
  as one row per request and scenario;
* :mod:`~kquota.backtest.summaries`: the per-sensor summaries, recommendations and report
  tables Spark aggregates after the replay;
* :mod:`~kquota.backtest.job`: :func:`~kquota.backtest.job.run`, the order of the steps;
* ``python -m kquota.backtest``: the spark-submit entry point (``kquota backtest``'s
  arguments).

:mod:`kquota.backtest.report` renders the results; :mod:`kquota.backtest.synthetic`
generates realistic demo traffic and :mod:`kquota.backtest.requestlog` reads Kafka's
request log. Only the Spark modules and the report need the ``spark`` extra
(``pip install "kquota[spark]"``).
"""
