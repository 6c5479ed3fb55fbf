//! `sendonce bench`: the benchmarks (throughput against a minimal row and the original design,
//! PostgreSQL, the HTTP API, the dashboard, the fake provider's inbox) and the store code only
//! they use.

pub mod bench;
pub mod bench_dashboard;
pub mod bench_http;
pub mod bench_inbox;
pub mod bench_pg;
pub mod bench_throughput;
mod http_arms;
pub mod limit;
pub mod original;
pub mod seed;
