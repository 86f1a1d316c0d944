//! `npamp-gateway` command line.
//!
//! For now one command, `self-check`: it runs the conformance operations on
//! built-in samples and seals and opens a Bridge frame, proving the protocol
//! core works on this machine. The gateway commands arrive with the
//! association and gateway work.

use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use npamp_gateway::bridge::{
    self, BridgeEnvelope, BridgeMessage, ContentType, Effect, MessageKind, ProtocolId, SafetyLabel,
};
use npamp_gateway::record::{Direction, HashAlg, Suite, TrafficKeys, hkdf_extract};
use npamp_gateway::wire::{ChannelId, Deframer, Flags};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(version, about = "JSON-RPC 2.0 edge gateway over N-PAMP")]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Seal a JSON-RPC request into an N-PAMP Bridge frame, deframe and open
    /// it again, and print each step (the default command).
    SelfCheck {
        /// The JSON-RPC message to carry.
        #[arg(
            long,
            default_value = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"}}"#
        )]
        message: String,
    },
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Some(Command::SelfCheck { message }) => self_check(&message),
        None => {
            self_check(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"}}"#)
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn self_check(message: &str) -> anyhow::Result<()> {
    // A fixed, public master secret: this demonstrates the framing, it protects nothing.
    let master = hkdf_extract(HashAlg::Sha256, b"", b"npamp-gateway self-check");
    let derive = || {
        TrafficKeys::derive(
            &master,
            Direction::ClientToServer,
            0,
            Suite::AES_256_GCM,
            ChannelId::BRIDGE,
        )
    };
    let (sender, receiver) = (derive()?, derive()?);

    let msg = BridgeMessage {
        frame_type: bridge::BRIDGE_REQUEST,
        envelope: BridgeEnvelope {
            protocol_id: ProtocolId::MCP,
            message_kind: MessageKind::REQUEST,
            content_type: ContentType::JSON,
            flags: 0,
            correlation_id: b"1",
            method: "tools/call",
        },
        safety: Some(SafetyLabel {
            effect: Effect::Destructive,
            scope: "",
        }),
        foreign: message.as_bytes(),
    };
    let mut plaintext = Vec::with_capacity(msg.encoded_len());
    msg.encode_into(&mut plaintext)?;
    let mut wire = Vec::new();
    let header = sender.seal_frame_into(
        &mut wire,
        Flags::NONE,
        msg.frame_type,
        ChannelId::BRIDGE,
        0,
        |out| out.extend_from_slice(&plaintext),
    )?;
    println!("sealed   {header:?}");
    println!(
        "         {} octets on the wire for a {}-octet message",
        wire.len(),
        message.len()
    );

    let (frame, used) = Deframer::default()
        .span(&wire)?
        .map(|span| (span, span.len))
        .context("deframer wants more bytes for a complete frame")?;
    let plaintext = receiver.open_frame_with_header(&frame.header, &mut wire[..used])?;
    let got = BridgeMessage::decode(frame.header.frame_type, plaintext)?;
    println!(
        "opened   method={} correlation_id={:?} safety={:?}",
        got.envelope.method,
        String::from_utf8_lossy(got.envelope.correlation_id),
        got.safety.map(|s| s.effect)
    );
    if got.foreign != message.as_bytes() {
        bail!("the carried message changed in transit");
    }
    println!("carried  {}", String::from_utf8_lossy(got.foreign));
    println!("ok: the message crossed the record layer octet for octet");
    Ok(())
}
