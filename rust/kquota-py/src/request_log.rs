//! `parse_request_log`: a batch of request-log lines (a pyarrow string array's buffers)
//! into the core's columns, without the GIL, returned as numpy arrays that pyarrow wraps
//! without copying.

use numpy::PyArray1;
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use kquota_core::requestlog::{self, Columns, Lines, Options, Strings};

/// A buffer's bytes (pyarrow exports its buffers as signed chars). Safety: the exporter (a pyarrow buffer, immutable) stays alive while
/// the `PyBuffer` does, and is not written while the GIL is released.
fn bytes(buffer: &PyBuffer<i8>) -> &[u8] {
    if buffer.len_bytes() == 0 {
        return &[];
    }
    unsafe { std::slice::from_raw_parts(buffer.buf_ptr() as *const u8, buffer.len_bytes()) }
}

fn contiguous(buffer: &PyBuffer<i8>, name: &str) -> PyResult<()> {
    if buffer.is_c_contiguous() {
        Ok(())
    } else {
        Err(PyValueError::new_err(format!(
            "{name} must be a contiguous buffer"
        )))
    }
}

/// Parses `length` lines of an Arrow string array from its buffers: `offsets` (int32,
/// at least `offset + length + 1` of them), `data`, `validity` (a bitmap, or None) and the
/// array's `offset`. Returns the columns of `kquota_core::requestlog::Columns` by name.
#[pyfunction]
#[pyo3(signature = (offsets, data, validity, offset, length, num_partitions = 1))]
pub(crate) fn parse_request_log<'py>(
    py: Python<'py>,
    offsets: PyBuffer<i8>,
    data: PyBuffer<i8>,
    validity: Option<PyBuffer<i8>>,
    offset: usize,
    length: usize,
    num_partitions: i32,
) -> PyResult<Bound<'py, PyDict>> {
    contiguous(&offsets, "offsets")?;
    contiguous(&data, "data")?;
    if let Some(v) = &validity {
        contiguous(v, "validity")?;
    }
    let needed = offset
        .checked_add(length)
        .and_then(|n| n.checked_add(1))
        .and_then(|n| n.checked_mul(4))
        .ok_or_else(|| PyValueError::new_err("offset + length is too large"))?;
    if offsets.len_bytes() < needed {
        return Err(PyValueError::new_err(format!(
            "offsets hold {} bytes, {needed} needed for {length} lines from {offset}",
            offsets.len_bytes()
        )));
    }
    let columns = py.detach(|| {
        let raw = &bytes(&offsets)[offset * 4..needed];
        // Arrow buffers are 64-byte aligned; another buffer is read through a copy
        let copied: Vec<i32>;
        let ints: &[i32] = match unsafe { raw.align_to::<i32>() } {
            (&[], ints, &[]) => ints,
            _ => {
                copied = raw
                    .chunks_exact(4)
                    .map(|c| i32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
                    .collect();
                &copied
            }
        };
        let lines = Lines {
            offsets: ints,
            data: bytes(&data),
            valid: validity.as_ref().map(|v| (bytes(v), offset)),
        };
        requestlog::parse_lines(lines, Options { num_partitions })
    });
    columns_dict(py, columns)
}

fn strings<'py>(out: &Bound<'py, PyDict>, name: &str, s: Strings) -> PyResult<()> {
    let py = out.py();
    out.set_item(format!("{name}_offsets"), PyArray1::from_vec(py, s.offsets))?;
    out.set_item(format!("{name}_data"), PyArray1::from_vec(py, s.data))?;
    if let Some(valid) = s.valid {
        out.set_item(format!("{name}_valid"), PyArray1::from_vec(py, valid))?;
    }
    Ok(())
}

fn columns_dict(py: Python<'_>, c: Columns) -> PyResult<Bound<'_, PyDict>> {
    let out = PyDict::new(py);
    macro_rules! plain {
        ($($name:ident),*) => {$(
            out.set_item(stringify!($name), PyArray1::from_vec(py, c.$name))?;
        )*};
    }
    macro_rules! nullable {
        ($($name:ident),*) => {$(
            out.set_item(stringify!($name), PyArray1::from_vec(py, c.$name.values))?;
            out.set_item(concat!(stringify!($name), "_valid"), PyArray1::from_vec(py, c.$name.valid))?;
        )*};
    }
    plain!(reason, before_us, bytes, kafka_throttle, share_fetch);
    plain!(topic_offsets, topics_valid, topic_op);
    plain!(
        read_offsets,
        read_kind,
        read_partition,
        read_offset,
        read_bytes
    );
    nullable!(
        wall_us,
        thread_ns,
        acks,
        api_version,
        correlation_id,
        strict,
        topic_count,
        fetch_connection,
        fetch_position,
        fetch_empty,
        fetch_max_bytes
    );
    strings(&out, "example", c.example)?;
    strings(&out, "user", c.user)?;
    strings(&out, "client", c.client)?;
    strings(&out, "api", c.api)?;
    strings(&out, "topic_name", c.topic_name)?;
    strings(&out, "topic_id", c.topic_id)?;
    strings(&out, "read_topic", c.read_topic)?;
    Ok(out)
}

/// The size Kafka checked against the fetch quota for a throttled consumer fetch of
/// version `version` whose response with no records is `empty` bytes, under its
/// `max_bytes`, when each of its partitions (in request order) could read
/// `(partition_max_bytes, available, first_batch)`.
#[pyfunction]
pub(crate) fn throttled_fetch_size(
    version: i32,
    empty: i64,
    max_bytes: i64,
    partitions: Vec<(i64, i64, i64)>,
) -> i64 {
    let reads: Vec<requestlog::PartitionRead> = partitions
        .into_iter()
        .map(
            |(max_bytes, available, first_batch)| requestlog::PartitionRead {
                max_bytes,
                available,
                first_batch,
            },
        )
        .collect();
    requestlog::throttled_fetch_size(version, empty, max_bytes, &reads)
}
