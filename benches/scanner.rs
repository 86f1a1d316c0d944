//! The JSON-RPC scanner against the established parsers, in the same group,
//! on a fixed corpus of realistic messages (`corpus/mod.rs`). Every contender
//! validates the whole text and yields `method` and `id`:
//!
//! - `npamp_scan`: this crate's scanner (kernel chosen at run time), plus the
//!   portable and SSE2 kernels forced, to show what the SIMD paths buy;
//! - `serde_json_borrowed`: a borrowed struct with `&RawValue` fields;
//! - `simd_json_borrowed`: `to_borrowed_value` (on a copy: it mutates its input);
//! - `sonic_rs_get_many`: validating `get_many` of `/method` and `/id`.
//!
//! For a batch each contender yields every element's method and id.

use std::borrow::Cow;
use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use npamp_gateway::jsonrpc::{KernelChoice, Kind, Limits, Scanned, scan, scan_using};
use serde::Deserialize;
use serde_json::value::RawValue;
use simd_json::prelude::*;

mod corpus;

#[derive(Deserialize)]
struct Msg<'a> {
    #[serde(borrow)]
    #[allow(dead_code)]
    jsonrpc: Cow<'a, str>,
    #[serde(borrow)]
    method: Option<Cow<'a, str>>,
    #[serde(borrow)]
    id: Option<&'a RawValue>,
    #[serde(borrow)]
    #[allow(dead_code)]
    params: Option<&'a RawValue>,
    #[serde(borrow)]
    #[allow(dead_code)]
    result: Option<&'a RawValue>,
    #[serde(borrow)]
    #[allow(dead_code)]
    error: Option<&'a RawValue>,
}

fn method_id_len(kind: &Kind) -> usize {
    match kind {
        Kind::Request { method, id } => method.raw.len() + id.token.len(),
        Kind::Notification { method } => method.raw.len(),
        Kind::Success { id } | Kind::Error { id } => id.token.len(),
    }
}

fn npamp(text: &[u8], limits: &Limits) -> usize {
    match scan(text, limits) {
        Ok(Scanned::Single(k)) => method_id_len(&k),
        Ok(Scanned::Batch(els)) => els
            .iter()
            .filter_map(|e| e.kind.as_ref().ok())
            .map(method_id_len)
            .sum(),
        Err(_) => 0,
    }
}

fn npamp_using(kernel: KernelChoice, text: &[u8], limits: &Limits) -> usize {
    match scan_using(kernel, text, limits) {
        Some(Ok(Scanned::Single(k))) => method_id_len(&k),
        Some(Ok(Scanned::Batch(els))) => els
            .iter()
            .filter_map(|e| e.kind.as_ref().ok())
            .map(method_id_len)
            .sum(),
        _ => 0,
    }
}

fn serde_msg(m: &Msg<'_>) -> usize {
    m.method.as_ref().map_or(0, |s| s.len()) + m.id.map_or(0, |r| r.get().len())
}

/// An untagged enum would buffer and lose the borrow, so look at the first octet.
fn serde_borrowed(text: &[u8]) -> usize {
    if text.first() == Some(&b'[') {
        serde_json::from_slice::<Vec<Msg<'_>>>(text).map_or(0, |ms| ms.iter().map(serde_msg).sum())
    } else {
        serde_json::from_slice::<Msg<'_>>(text).map_or(0, |m| serde_msg(&m))
    }
}

fn simd_json_value(v: &simd_json::BorrowedValue<'_>) -> usize {
    v.get("method").and_then(|m| m.as_str()).map_or(0, str::len)
        + v.get("id").map_or(0, |id| id.as_u64().map_or(1, |_| 8))
}

fn simd_json_borrowed(text: &[u8], scratch: &mut Vec<u8>) -> usize {
    scratch.clear();
    scratch.extend_from_slice(text);
    match simd_json::to_borrowed_value(scratch) {
        Ok(v) => match v.as_array() {
            Some(els) => els.iter().map(simd_json_value).sum(),
            None => simd_json_value(&v),
        },
        Err(_) => 0,
    }
}

fn sonic_one(text: &[u8], tree: &sonic_rs::PointerTree) -> usize {
    match sonic_rs::get_many(text, tree) {
        Ok(found) => found.iter().flatten().map(|v| v.as_raw_str().len()).sum(),
        Err(_) => 0,
    }
}

fn sonic_get_many(text: &[u8], tree: &sonic_rs::PointerTree) -> usize {
    if text.first() == Some(&b'[') {
        sonic_rs::to_array_iter(text)
            .map(|el| el.map_or(0, |el| sonic_one(el.as_raw_str().as_bytes(), tree)))
            .sum()
    } else {
        sonic_one(text, tree)
    }
}

fn scanner(c: &mut Criterion) {
    let limits = Limits::default();
    let mut tree = sonic_rs::PointerTree::new();
    tree.add_path(["method"].iter());
    tree.add_path(["id"].iter());
    let mut scratch = Vec::new();

    for msg in corpus::corpus() {
        let text = msg.text.as_bytes();
        // Every contender must agree the message is valid and find something.
        assert!(npamp(text, &limits) > 0, "{}", msg.name);
        assert!(serde_borrowed(text) > 0, "{}", msg.name);
        assert!(simd_json_borrowed(text, &mut scratch) > 0, "{}", msg.name);
        assert!(sonic_get_many(text, &tree) > 0, "{}", msg.name);

        let mut group = c.benchmark_group(format!("scan/{}/{}B", msg.name, text.len()));
        group.throughput(Throughput::Bytes(text.len() as u64));
        group.bench_function("npamp_scan", |b| b.iter(|| npamp(black_box(text), &limits)));
        group.bench_function("npamp_scan_portable", |b| {
            b.iter(|| npamp_using(KernelChoice::Portable, black_box(text), &limits))
        });
        #[cfg(target_arch = "x86_64")]
        group.bench_function("npamp_scan_sse2", |b| {
            b.iter(|| npamp_using(KernelChoice::Sse2, black_box(text), &limits))
        });
        group.bench_function("serde_json_borrowed", |b| {
            b.iter(|| serde_borrowed(black_box(text)))
        });
        group.bench_function("simd_json_borrowed", |b| {
            b.iter(|| simd_json_borrowed(black_box(text), &mut scratch))
        });
        group.bench_function("sonic_rs_get_many", |b| {
            b.iter(|| sonic_get_many(black_box(text), &tree))
        });
        group.finish();
    }
}

criterion_group!(benches, scanner);
criterion_main!(benches);
