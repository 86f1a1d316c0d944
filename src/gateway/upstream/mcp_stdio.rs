//! An MCP server over stdio (`--upstream-cmd` with `--protocol mcp`): a
//! child process per association, as MCP's stdio transport has it. Its
//! messages are newline-delimited JSON-RPC, and it is ended as the
//! transport's shutdown asks (stdin closed, then SIGTERM, then SIGKILL),
//! which is how [`super::child`] runs every command: this kind runs it so,
//! and says MCP in the logs.

use futures_util::FutureExt;

use super::{Address, Delivery, Kind};
use crate::bridge::ProtocolId;

/// A program and its arguments, for MCP.
pub struct McpStdio;

impl Kind for McpStdio {
    fn name(&self) -> &'static str {
        "mcp-stdio"
    }

    fn parse(&self, _url: &str) -> Option<Result<Address, String>> {
        None
    }

    fn takes(&self, address: &Address, protocol: ProtocolId) -> bool {
        matches!(address, Address::Command(_)) && protocol == ProtocolId::MCP
    }

    fn delivery(&self) -> Delivery {
        Delivery::Session(|address, env, session, rx| match address {
            Address::Command(argv) => super::child::run(argv, env, session, rx).boxed(),
            _ => std::future::ready("not a command".to_owned()).boxed(),
        })
    }
}
