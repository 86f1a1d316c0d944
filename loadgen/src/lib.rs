//! `npamp-loadgen`: load for JSON-RPC services and for `npamp-gateway`,
//! with exact accounting of every request and latency measured from the
//! intended send time.
//!
//! - [`scenario`]: scenario files (mix, load model, SLOs);
//! - [`template`]: `params` templates and the messages of a run;
//! - [`engine`]: the schedule, the targets (HTTP, WebSocket, TCP, N-PAMP)
//!   and the accounting;
//! - [`summary`]: the JSON summary of a run, its schema, how it is computed;
//! - [`table`]: the final table;
//! - [`chart`]: the chart kit every page draws with;
//! - [`report`]: `report.svg`, a run's charts (and the summary's old paths);
//! - [`html`]: the self-contained HTML report;
//! - [`capacity`]: the highest rate that meets an SLO (steps, then bisection);
//! - [`compare`]: two summaries side by side, with a regression threshold;
//! - [`merge`]: the shards of a run across machines, added into one;
//! - [`impair`]: a lossy, slow UDP path for fault injection;
//! - [`slow`]: slow clients (slowloris, unread WebSocket replies);
//! - [`http`], [`tls`], [`header`]: the HTTP clients (HTTP/1.1, HTTP/2), TLS
//!   and the request headers of a run.

pub mod capacity;
pub mod chart;
pub mod compare;
pub mod engine;
pub mod flood;
pub mod header;
pub mod html;
pub mod http;
pub mod impair;
pub mod merge;
pub mod mix;
pub mod replay;
pub mod report;
pub mod run_dir;
pub mod scenario;
pub mod slow;
pub mod summary;
pub mod table;
pub mod template;
pub mod tls;
