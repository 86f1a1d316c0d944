//! A gateway in code: the options a command line or a config file gives,
//! set by calls, checked the same way ([`GatewayOptions`]), then started.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use npamp_gateway::gateway::Gateway;
//!
//! let origin = Gateway::builder()
//!     .listen("quic://127.0.0.1:7443".parse()?)
//!     .upstream("http://127.0.0.1:8545".parse()?)
//!     .trust([0x11; 32])
//!     .start()
//!     .await?;
//! println!("listening on {}", origin.listening[0]);
//! # Ok(()) }
//! ```

use super::config::{GatewayOptions, PeerKey};
use super::{Gateway, GatewayConfig, GatewayError, IngressUrl, Upstream};
use crate::assoc::PeerAddr;

/// Builds a [`GatewayConfig`] (or starts a [`Gateway`]) from calls.
#[derive(Debug, Default)]
pub struct GatewayBuilder {
    options: GatewayOptions,
    identity: Option<zeroize::Zeroizing<[u8; 32]>>,
}

impl Gateway {
    /// A gateway set up in code ([`GatewayBuilder`]).
    pub fn builder() -> GatewayBuilder {
        GatewayBuilder::default()
    }
}

impl GatewayBuilder {
    /// Accept associations here (an origin); repeatable.
    pub fn listen(mut self, addr: PeerAddr) -> Self {
        self.options.listen.push(addr);
        self
    }

    /// Deliver to this upstream (an origin).
    pub fn upstream(mut self, upstream: Upstream) -> Self {
        self.options.upstream = vec![upstream];
        self
    }

    /// Accept JSON-RPC clients here (an edge; needs [`Self::peer`]);
    /// repeatable.
    pub fn ingress(mut self, url: IngressUrl) -> Self {
        self.options.ingress.push(url);
        self
    }

    /// An origin an edge carries its clients to; repeatable (see
    /// `--peer`).
    pub fn peer(mut self, addr: PeerAddr) -> Self {
        self.options.peer.push(addr);
        self
    }

    /// Trust this peer public key; repeatable.
    pub fn trust(mut self, key: [u8; 32]) -> Self {
        self.options.trust.push(PeerKey(key));
        self
    }

    /// Accept any peer identity. INSECURE: anyone can impersonate the peer.
    pub fn insecure_accept_any_peer(mut self) -> Self {
        self.options.insecure_accept_any_peer = true;
        self
    }

    /// This gateway's identity seed (what `keygen` writes); without it, an
    /// identity file given in the options, or else a fresh ephemeral one.
    pub fn identity_seed(mut self, seed: impl Into<zeroize::Zeroizing<[u8; 32]>>) -> Self {
        self.identity = Some(seed.into());
        self
    }

    /// Any other option, as the command line or the file would set it.
    pub fn options(mut self, set: impl FnOnce(&mut GatewayOptions)) -> Self {
        set(&mut self.options);
        self
    }

    /// The configuration, checked as `serve` checks its options.
    pub fn config(self) -> Result<GatewayConfig, GatewayError> {
        let mut config = self
            .options
            .resolve()
            .map_err(|e| GatewayError::Config(e.to_string()))?;
        if let Some(seed) = self.identity {
            config.endpoint.identity_seed = seed;
            config.ephemeral_identity = false;
        }
        Ok(config)
    }

    /// Binds every listener and starts serving.
    pub async fn start(self) -> Result<Gateway, GatewayError> {
        Gateway::start(self.config()?).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::Address;

    #[test]
    fn a_builder_is_checked_as_the_options_are() {
        let e = Gateway::builder()
            .ingress("http://127.0.0.1:0".parse().unwrap())
            .insecure_accept_any_peer()
            .config()
            .unwrap_err();
        assert!(e.to_string().contains("needs a peer gateway"), "{e}");
        let seed = zeroize::Zeroizing::new([9; 32]);
        let c = Gateway::builder()
            .listen("quic://127.0.0.1:0".parse().unwrap())
            .upstream(Upstream::command(vec!["cat".into()]).unwrap())
            .trust([1; 32])
            .identity_seed(seed)
            .options(|o| o.max_batch = Some("7".parse().unwrap()))
            .config()
            .unwrap();
        assert_eq!(*c.endpoint.identity_seed, [9; 32]);
        assert!(!c.ephemeral_identity);
        assert_eq!(c.limits.max_batch, 7);
        assert!(matches!(
            c.upstream.as_ref().map(|u| u.address()),
            Some(Address::Command(_))
        ));
    }
}
