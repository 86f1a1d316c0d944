//! `npamp-loadgen`: the load generator paired with `npamp-gateway`.
//!
//! Nothing is implemented here yet: the open-loop scheduler, scenarios and
//! HdrHistogram reports are tracked by their own issue. The crate exists so the
//! workspace layout is in place and builds from the first commit.
