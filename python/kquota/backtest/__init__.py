"""Back-testing quota configurations over recorded traffic (``kquota backtest``).

:mod:`kquota.backtest.kernel` holds the plain pandas/NumPy functions that replay one
broker's requests through the core; :mod:`kquota.backtest.job` wires them into a Spark job;
:mod:`kquota.backtest.report` renders the results; :mod:`kquota.backtest.traffic` generates
realistic demo traffic. Only the job and the report need the ``spark`` extra
(``pip install "kquota[spark]"``).
"""
