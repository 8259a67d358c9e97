//! The request-log reader's JSON parser, chosen by this bench: the same borrowed, typed
//! view of a line (`requestlog::json::Line`) read by serde_json, sonic-rs and simd-json,
//! and the whole reader (head, parse, sizes, columns) with the parser it uses.
//!
//! Lines: Kafka 3.9.2 and 4.1.2 request logs (`tests/backtest/data`) and, when
//! `KQUOTA_REQUEST_LOG` names a file, its lines (`make bench-rust` writes one with
//! `tests/support/requestlog_gen.py`: Produce and Fetch of every version, other APIs).

use std::path::Path;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use kquota_core::requestlog::json::{too_deep, Line};
use kquota_core::requestlog::{line, parse_lines, Lines, Options};

/// Each source's JSON bodies (of `Completed request:{` lines) and all its lines.
fn sources() -> Vec<(String, Vec<String>, Vec<String>)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/backtest/data");
    let mut files: Vec<(String, std::path::PathBuf)> = ["kafka-3.9.2", "kafka-4.1.2"]
        .iter()
        .map(|v| (v.to_string(), root.join(v).join("kafka-request.log")))
        .collect();
    if let Ok(path) = std::env::var("KQUOTA_REQUEST_LOG") {
        files.push(("generated".to_owned(), path.into()));
    }
    files
        .into_iter()
        .filter_map(|(name, path)| {
            let text = std::fs::read_to_string(&path).ok()?;
            let lines: Vec<String> = text.lines().map(str::to_owned).collect();
            let bodies = lines
                .iter()
                .filter_map(|l| match line::head(l.as_bytes()) {
                    line::Head::Json { json } => line::body(l.as_bytes(), json)
                        .map(|b| String::from_utf8_lossy(b).into_owned()),
                    _ => None,
                })
                .collect();
            Some((name, bodies, lines))
        })
        .collect()
}

fn serde_json_view(text: &str) -> Option<Line<'_>> {
    serde_json::from_str(text).ok()
}

fn sonic_view(text: &str) -> Option<Line<'_>> {
    sonic_rs::from_str(text).ok()
}

/// simd-json parses in place: the line is copied into `scratch` first (its strings
/// borrow from the copy).
fn simd_view<'a>(text: &str, scratch: &'a mut Vec<u8>) -> Option<Line<'a>> {
    scratch.clear();
    scratch.extend_from_slice(text.as_bytes());
    simd_json::serde::from_slice(scratch.as_mut_slice()).ok()
}

/// What the sizes read, so no parser's work is optimised away.
fn digest(line: &Line<'_>) -> i64 {
    let header = line.request_header.get();
    header.and_then(|h| h.request_api_key.value()).unwrap_or(0) as i64
        + line.throttle_time_ms.value().unwrap_or(0)
        + line
            .request
            .get()
            .and_then(|r| r.topic_data.get())
            .map_or(0, |t| t.len() as i64)
        + line
            .response
            .get()
            .and_then(|r| r.responses.get())
            .map_or(0, |t| t.len() as i64)
}

fn parsers(c: &mut Criterion) {
    for (name, bodies, lines) in sources() {
        // every parser must read every body the same way before it is timed
        let mut scratch = Vec::new();
        for body in &bodies {
            let want = serde_json_view(body).map(|l| digest(&l));
            assert_eq!(
                sonic_view(body).map(|l| digest(&l)),
                want,
                "sonic-rs: {body}"
            );
            assert_eq!(
                simd_view(body, &mut scratch).map(|l| digest(&l)),
                want,
                "simd-json: {body}"
            );
        }
        let bytes: usize = bodies.iter().map(String::len).sum();
        let mut group = c.benchmark_group(format!("request_log_json/{name}"));
        group.throughput(Throughput::Bytes(bytes as u64));
        group.bench_function("serde_json", |b| {
            b.iter(|| {
                bodies
                    .iter()
                    .filter_map(|t| serde_json_view(t))
                    .map(|l| digest(&l))
                    .sum::<i64>()
            })
        });
        group.bench_function("sonic_rs", |b| {
            b.iter(|| {
                bodies
                    .iter()
                    .filter_map(|t| sonic_view(t))
                    .map(|l| digest(&l))
                    .sum::<i64>()
            })
        });
        group.bench_function("simd_json", |b| {
            let mut scratch = Vec::new();
            b.iter(|| {
                bodies
                    .iter()
                    .filter_map(|t| simd_view(t, &mut scratch).map(|l| digest(&l)))
                    .sum::<i64>()
            })
        });
        group.bench_function("depth_check", |b| {
            b.iter(|| bodies.iter().filter(|t| too_deep(t.as_bytes())).count())
        });
        group.finish();

        // the whole reader over an Arrow-style column of the lines
        let mut offsets = vec![0i32];
        let mut data = Vec::new();
        for l in &lines {
            data.extend_from_slice(l.as_bytes());
            offsets.push(data.len() as i32);
        }
        let mut group = c.benchmark_group(format!("request_log_lines/{name}"));
        group.throughput(Throughput::Elements(lines.len() as u64));
        group.bench_function("parse_lines", |b| {
            b.iter_batched(
                || (),
                |()| {
                    let batch = Lines {
                        offsets: &offsets,
                        data: &data,
                        valid: None,
                    };
                    parse_lines(batch, Options::default()).len()
                },
                BatchSize::SmallInput,
            )
        });
        group.finish();
    }
}

criterion_group!(benches, parsers);
criterion_main!(benches);
