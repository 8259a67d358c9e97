//! The Python methods several classes share, written once.
//!
//! `QuotaManager` and `ControllerMutationQuotaManager` wrap core managers with the same
//! quota-override, throttle and delay-queue methods, and `ConnectionQuotas` shares their
//! window getters. PyO3 takes one `#[pymethods]` block per class and does not expand
//! macros written inside it, so `pymethods_with!` writes the whole block: the class's own
//! methods followed by the shared groups it names.

/// `pymethods_with!([group, ...] impl Class { own methods })` is
/// `#[pymethods] impl Class { own methods, the groups' methods }` for a class whose
/// `inner` is the core object. The groups:
///
/// * `window`: the `num_samples` and `window_ms` getters (`inner.window()`).
/// * `client_quota`: what a client-quota manager does the same whatever it measures:
///   `enabled`, `set_quota`, `quota`, `quotas`, `throttle`, `throttle_time_avg`,
///   `expired_channels`, `next_unmute_ms`, `sensor_names`.
///
/// Methods whose signature or result differs between the classes (`record`,
/// `remove_quota`, `tags` and `quota_for`, which a callback can make fail, `queue_size`,
/// `sensor_count` and `expire_sensors`) stay with each class.
macro_rules! pymethods_with {
    ([$($group:ident),* $(,)?] impl $class:ident { $($own:tt)* }) => {
        $crate::shared::pymethods_with!(@munch $class [$($group)*] [] [$($own)*]);
    };

    (@munch $class:ident [] [$($shared:tt)*] [$($own:tt)*]) => {
        #[::pyo3::pymethods]
        impl $class {
            $($own)*
            $($shared)*
        }
    };

    (@munch $class:ident [window $($group:ident)*] [$($shared:tt)*] $own:tt) => {
        $crate::shared::pymethods_with!(@munch $class [$($group)*] [$($shared)*
            #[getter]
            fn num_samples(&self) -> u32 {
                self.inner.window().num_samples()
            }

            #[getter]
            fn window_ms(&self) -> i64 {
                self.inner.window().window_ms()
            }
        ] $own);
    };

    (@munch $class:ident [client_quota $($group:ident)*] [$($shared:tt)*] $own:tt) => {
        $crate::shared::pymethods_with!(@munch $class [$($group)*] [$($shared)*
            #[getter]
            fn enabled(&self) -> bool {
                self.inner.enabled()
            }

            fn set_quota(
                &self,
                #[pyo3(from_py_with = $crate::entity::entity)] entity: ::pyo3::Bound<
                    '_,
                    $crate::entity::Entity,
                >,
                #[pyo3(from_py_with = $crate::args::value)] value: f64,
            ) -> $crate::error::CoreResult<()> {
                // Without the GIL: a change tells every sibling's callback, which other
                // threads may be calling with a lock the change needs.
                let e = entity.get().inner.clone();
                Ok(entity.py().detach(|| self.inner.set_quota(&e, value))?)
            }

            fn quota(
                &self,
                #[pyo3(from_py_with = $crate::entity::entity)] entity: ::pyo3::Bound<
                    '_,
                    $crate::entity::Entity,
                >,
            ) -> Option<f64> {
                self.inner.quota(&entity.get().inner)
            }

            fn quotas(&self) -> Vec<($crate::entity::Entity, f64)> {
                self.inner
                    .quotas()
                    .into_iter()
                    .map(|(inner, v)| ($crate::entity::Entity { inner }, v))
                    .collect()
            }

            #[pyo3(signature = (user, client_id, throttle_ms, now_ms=None, channel=None))]
            fn throttle(
                &self,
                #[pyo3(from_py_with = $crate::args::user)] user: $crate::args::Text<'_>,
                #[pyo3(from_py_with = $crate::args::client_id)] client_id: $crate::args::Text<'_>,
                #[pyo3(from_py_with = $crate::args::throttle_ms)] throttle_ms: i64,
                #[pyo3(from_py_with = $crate::args::now_ms)] now_ms: Option<i64>,
                #[pyo3(from_py_with = $crate::args::channel)] channel: Option<u64>,
            ) -> $crate::error::CoreResult<i64> {
                Ok(self.inner.throttle(
                    &user,
                    &client_id,
                    throttle_ms,
                    $crate::args::now_or_clock(now_ms),
                    channel,
                )?)
            }

            #[pyo3(signature = (user, client_id, now_ms=None))]
            fn throttle_time_avg(
                &self,
                #[pyo3(from_py_with = $crate::args::user)] user: $crate::args::Text<'_>,
                #[pyo3(from_py_with = $crate::args::client_id)] client_id: $crate::args::Text<'_>,
                #[pyo3(from_py_with = $crate::args::now_ms)] now_ms: Option<i64>,
            ) -> Option<f64> {
                self.inner
                    .throttle_time_avg(&user, &client_id, $crate::args::now_or_clock(now_ms))
            }

            #[pyo3(signature = (now_ms=None))]
            fn expired_channels(
                &self,
                #[pyo3(from_py_with = $crate::args::now_ms)] now_ms: Option<i64>,
            ) -> Vec<u64> {
                self.inner.expired_channels($crate::args::now_or_clock(now_ms))
            }

            fn next_unmute_ms(&self) -> Option<i64> {
                self.inner.next_unmute_ms()
            }

            fn sensor_names(&self) -> Vec<String> {
                self.inner.sensor_names()
            }
        ] $own);
    };
}

pub(crate) use pymethods_with;
