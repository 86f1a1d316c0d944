//! The mock JSON-RPC upstream (echo, fail, sleep, notify, ask,
//! subscribe) over HTTP, WebSocket and newline-delimited TCP.

use super::*;

/// `upstream`'s arguments.
#[derive(clap::Args)]
pub struct UpstreamArgs {
    /// http://ADDR, ws://ADDR or tcp://ADDR (repeatable).
    #[arg(long, required = true)]
    pub listen: Vec<MockAddr>,
    #[command(flatten)]
    pub behavior: mock::MockOptions,
}

/// Runs `npamp-loadgen upstream`.
pub fn main(args: UpstreamArgs) -> ExitCode {
    let UpstreamArgs { listen, behavior } = args;
    match runtime().and_then(|rt| rt.block_on(upstream(listen, behavior.behavior()))) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(EXIT_RUN, &e),
    }
}

async fn upstream(listen: Vec<MockAddr>, behavior: Arc<mock::Behavior>) -> anyhow::Result<()> {
    for addr in listen {
        let bound = mock::spawn(addr, None, behavior.clone())
            .await
            .with_context(|| format!("listening on {addr}"))?;
        println!("mock upstream {bound}");
    }
    tokio::signal::ctrl_c().await?;
    Ok(())
}
