//! The handshake transcript (binding §3): the 2-octet frame type of each
//! handshake frame, then each of its TLVs in canonical form; a transcript
//! point is SHA-256 over everything absorbed so far.

use aws_lc_rs::digest::{Context, SHA256};

use crate::wire::{FrameType, HEADER_LEN};

/// A running transcript hash. Cloning it forks the running hash.
#[derive(Clone)]
pub struct Transcript {
    hash: Context,
}

impl Default for Transcript {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Transcript {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Transcript(..)")
    }
}

impl Transcript {
    pub fn new() -> Self {
        Self {
            hash: Context::new(&SHA256),
        }
    }

    /// AddFrameType: the frame type only, none of the other header octets.
    pub fn add_frame_type(&mut self, frame_type: FrameType) {
        self.hash.update(&frame_type.0.to_be_bytes());
    }

    /// AddTLV: one TLV, `Type ‖ Length ‖ Value`, as on the wire.
    pub fn add_tlv(&mut self, tlv: &[u8]) {
        self.hash.update(tlv);
    }

    /// A cleartext frame: its type, then its TLVs (the octets after the header).
    pub fn add_frame(&mut self, frame: &[u8]) {
        if let Some((head, tlvs)) = frame.split_at_checked(HEADER_LEN) {
            self.hash.update(&head[5..7]);
            self.hash.update(tlvs);
        }
    }

    /// The transcript point: SHA-256 of everything absorbed so far.
    pub fn hash(&self) -> [u8; 32] {
        let digest = self.hash.clone().finish();
        let mut out = [0u8; 32];
        out.copy_from_slice(digest.as_ref());
        out
    }
}
