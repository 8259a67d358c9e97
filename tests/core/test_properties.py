"""Property tests: the Rust core (``kquota``) against the pure-Python reference model.

Hypothesis generates traces of API calls; each trace runs through a fresh core object and a
fresh model object, and every return value must agree exactly (floats with ``==``, NaN equal
to NaN; an exception on one side must be an exception of the same class on the other).
After every manager step the observable state (``enabled``, ``queue_size``, ``sensor_names``,
``quotas``) is compared too, so a rejected call that changed something is caught at once.

The traces go where callers should not: clocks that go back and jump by up to 2**60 ms,
subnormal, zero, negative-zero and near-overflow values, and user and client names of any
Unicode (empty, NUL, astral planes). Names with a lone surrogate cannot cross into Rust:
there the core alone runs the call, which must raise a ValueError showing the surrogate
and leave the state equal to the model's (which did not run it).

On a failure, Hypothesis prints the shrunk trace and the notes: one line per step, written
as the Python call that was made (``m.record('alice', 'c1', 1e+18, now_ms=1000)``;
``handle`` is the broker's request handling, see :func:`core_traces.handle`) followed by
what it returned, and both values where core and model differ.
``--hypothesis-show-statistics`` shows what the traces exercised (throttles, wrapped
throttles, expiry, errors, clocks going back).

The traces and their runner are in ``tests/support/core_traces.py``; bad input is
``tests/core/test_properties_bad_input.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import kquota
import numpy as np
import numpy.typing as npt
import pytest
import reference_model as model
from core_traces import (
    CI,
    EntitySpec,
    ManagerConfig,
    Raised,
    RateConfig,
    Step,
    advance,
    check_same,
    encodable_client_names,
    encodable_entities,
    encodable_user_names,
    invalid_usages,
    manager_configs,
    manager_traces,
    observable_state,
    outcome,
    rate_traces,
    replay_manager_trace,
    run_step,
    small_gaps,
    valid_quotas,
    valid_usages,
)
from hypothesis import event, given, note, settings
from hypothesis import strategies as st


@pytest.mark.slow
@settings(CI, max_examples=400)
@given(manager_traces())
def test_manager_traces_agree(trace: tuple[ManagerConfig, list[Step]]) -> None:
    replay_manager_trace(*trace)


# -- SampledRate --------------------------------------------------------------------------------


@settings(CI, max_examples=300)
@given(rate_traces())
def test_sampled_rate_traces_agree(trace: tuple[RateConfig, list[Step]]) -> None:
    config, steps = trace
    core = kquota.SampledRate(config.num_samples, config.window_ms, config.quota)
    ref = model.SampledRate(config.num_samples, config.window_ms, config.quota)
    note(
        f"r = SampledRate(num_samples={config.num_samples}, window_ms={config.window_ms}, "
        f"quota={config.quota!r})"
    )
    now = config.start_ms
    seen: set[str] = set()
    for index, step in enumerate(steps):
        now = advance(now, config.gap_ms(step.gap), config.monotonic)
        source = step.source(now, receiver="r")
        note(f"[{index}] {source}")
        result = run_step(core, kquota, step, now)
        check_same(f"step {index}: {source}", result, run_step(ref, model, step, now))
        if isinstance(result, Raised):
            seen.add(f"{step.method} raised {result.cls.__name__}")
        elif isinstance(result, tuple) and result[0] == "Check" and result[1]:
            seen.add("violated" if result[2] < 2**63 - 1 else "violated, throttle saturated")
        check_same(
            f"config after step {index}",
            (core.num_samples, core.window_ms, core.quota),
            (ref.num_samples, ref.window_ms, ref.quota),
        )
    for what in sorted(seen):
        event(what)


# -- record_batch -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Batch:
    config: ManagerConfig
    quotas: tuple[tuple[EntitySpec, float], ...]
    keys: tuple[tuple[str, str], ...]
    now_ms: tuple[int, ...]
    key_index: tuple[int, ...]
    values: tuple[float, ...]
    unrecord_if: tuple[bool, ...] | None

    def arrays(
        self,
    ) -> tuple[
        npt.NDArray[np.int64],
        npt.NDArray[np.int64],
        npt.NDArray[np.float64],
        npt.NDArray[np.bool_] | None,
    ]:
        return (
            np.array(self.now_ms, dtype=np.int64),
            np.array(self.key_index, dtype=np.int64),
            np.array(self.values, dtype=np.float64),
            None if self.unrecord_if is None else np.array(self.unrecord_if, dtype=np.bool_),
        )

    def configured(self, module: Any) -> Any:
        manager = self.config.make(module)
        for entity, value in self.quotas:
            manager.set_quota(entity.build(module.Entity), value)
        return manager


MAX_EVENTS: Final = 400


@st.composite
def batches(draw: st.DrawFn) -> Batch:
    config = draw(manager_configs())
    quotas = draw(st.lists(st.tuples(encodable_entities, valid_quotas), max_size=6))
    keys = draw(
        st.lists(st.tuples(encodable_user_names, encodable_client_names), min_size=1, max_size=6)
    )
    # Events pick their clock step and value from small drawn palettes with a drawn seed:
    # long batches at a small drawing cost (Hypothesis still shrinks n, palettes and seed).
    n = draw(st.integers(min_value=0, max_value=MAX_EVENTS))
    gap_palette = [config.gap_ms(g) for g in draw(st.lists(small_gaps, min_size=1, max_size=4))]
    value_palette = draw(st.lists(valid_usages.map(float), min_size=1, max_size=4))
    rng = np.random.default_rng(draw(st.integers(min_value=0, max_value=2**32 - 1)))
    steps = [gap_palette[i] for i in rng.integers(0, len(gap_palette), n).tolist()]
    now_ms = [config.start_ms + int(t) for t in np.cumsum(steps, dtype=np.int64).tolist()]
    values = [value_palette[i] for i in rng.integers(0, len(value_palette), n).tolist()]
    key_index = rng.integers(0, len(keys), n).tolist()
    # Only a fetch manager takes unrecord_if (the others refuse it: test_core.py).
    with_unrecord = config.quota_type == "fetch" and draw(st.booleans())
    unrecord_if = (rng.random(n) < 0.2).tolist() if with_unrecord else None
    return Batch(
        config,
        tuple(quotas),
        tuple(keys),
        tuple(now_ms),
        tuple(key_index),
        tuple(values),
        None if unrecord_if is None else tuple(unrecord_if),
    )


def _read_client(manager: Any, user: str, client_id: str, now_ms: int) -> object:
    def read() -> object:
        return (manager.measure(user, client_id, now_ms), manager.bound(user, client_id))

    return outcome(read)


@settings(CI, max_examples=200)
@given(batches())
def test_record_batch_equals_one_at_a_time(batch: Batch) -> None:
    note(repr(batch))
    arrays = batch.arrays()
    core_batch = batch.configured(kquota)
    result = outcome(lambda: core_batch.record_batch(*arrays[:3], list(batch.keys), arrays[3]))

    # The same events one at a time on a second core manager, as the broker does them.
    core_single = batch.configured(kquota)
    fetch = batch.config.quota_type == "fetch"
    expected: list[int] = []
    for i, (t, k, v) in enumerate(zip(batch.now_ms, batch.key_index, batch.values, strict=True)):
        user, client = batch.keys[k]
        throttle = core_single.record(user, client, v, now_ms=t)
        if fetch and (throttle > 0 or (batch.unrecord_if is not None and batch.unrecord_if[i])):
            core_single.unrecord(user, client, v, now_ms=t)
        expected.append(throttle)
    check_same("core batch vs core one at a time", result, ("ndarray", "int32", expected))
    event(f"throttled {'no' if not any(t > 0 for t in expected) else 'some'} events")

    # The model's batch.
    ref_batch = batch.configured(model)
    ref_result = outcome(lambda: ref_batch.record_batch(*arrays[:3], list(batch.keys), arrays[3]))
    check_same("core batch vs model batch", result, ref_result)

    # Afterwards the three managers are in the same state.
    end = batch.now_ms[-1] if batch.now_ms else batch.config.start_ms
    for user, client in batch.keys:
        reads = [_read_client(m, user, client, end) for m in (core_batch, core_single, ref_batch)]
        check_same(f"({user!r}, {client!r}) batch vs one at a time", reads[0], reads[1])
        check_same(f"({user!r}, {client!r}) core vs model", reads[0], reads[2])
    state = observable_state(core_batch)
    check_same("state: batch vs one at a time", state, observable_state(core_single))
    check_same("state: core vs model", state, observable_state(ref_batch))


@settings(CI, max_examples=100)
@given(batches(), st.integers(min_value=0, max_value=MAX_EVENTS), invalid_usages)
def test_record_batch_rejects_bad_usage_before_recording(
    batch: Batch, position: int, bad: float
) -> None:
    """A bad value anywhere in a batch: both raise the same class and record nothing."""
    if not batch.values:
        return
    now, index, values, drops = batch.arrays()
    values[position % len(values)] = bad
    core, ref = batch.configured(kquota), batch.configured(model)
    check_same(
        "bad batch",
        outcome(lambda: core.record_batch(now, index, values, list(batch.keys), drops)),
        outcome(lambda: ref.record_batch(now, index, values, list(batch.keys), drops)),
    )
    check_same("state after a bad batch", observable_state(core), observable_state(ref))
    assert core.sensor_names() == []
