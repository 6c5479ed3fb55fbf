//! Tools around the product: the demo, the benchmark, and the fake provider.

pub mod bench;
pub mod bench_dashboard;
pub mod bench_http;
pub mod bench_pg;
pub mod bench_throughput;
pub mod demo;
pub mod fake;
