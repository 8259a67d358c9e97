//! `SensorReading`: one live quota sensor in a `QuotaManager` snapshot.

use pyo3::prelude::*;

use kquota_core as core;

/// One live quota sensor as a metrics reporter reads it.
#[pyclass(module = "kquota._core", frozen, get_all)]
pub(crate) struct SensorReading {
    user: String,
    client_id: String,
    rate: f64,
    bound: f64,
    throttle_time_avg: Option<f64>,
}

#[pymethods]
impl SensorReading {
    fn __repr__(&self) -> String {
        format!(
            "SensorReading(user={:?}, client_id={:?}, rate={:?}, bound={:?}, throttle_time_avg={})",
            self.user,
            self.client_id,
            self.rate,
            self.bound,
            self.throttle_time_avg
                .map_or("None".to_owned(), |v| format!("{v:?}"))
        )
    }
}

impl From<core::SensorSnapshot> for SensorReading {
    fn from(s: core::SensorSnapshot) -> Self {
        SensorReading {
            user: s.user,
            client_id: s.client_id,
            rate: s.rate,
            bound: s.bound,
            throttle_time_avg: s.throttle_time_avg,
        }
    }
}
