//! Traffic keys, nonces, and in-place sealing and opening of frames.

use aws_lc_rs::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey};
use zeroize::Zeroizing;

use super::{RecordError, Secret};
use crate::wire::{ChannelId, Flags, FrameType, HEADER_LEN, Header, PREFIX_LEN};

/// AEAD key length of both suites.
pub const KEY_LEN: usize = 32;
/// AEAD IV (and nonce) length.
pub const IV_LEN: usize = 12;
pub const NONCE_LEN: usize = 12;
/// AEAD tag length; the tag is the last component of every sealed frame.
pub const TAG_LEN: usize = 16;

/// An AEAD suite code point (draft §7.2, `registries/aead.csv`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Suite(pub u16);

impl Suite {
    pub const AES_256_GCM: Self = Self(0x0001);
    pub const CHACHA20_POLY1305: Self = Self(0x0002);

    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "AES-256-GCM" => Some(Self::AES_256_GCM),
            "ChaCha20-Poly1305" | "CHACHA20-POLY1305" => Some(Self::CHACHA20_POLY1305),
            _ => None,
        }
    }

    fn algorithm(self) -> Result<&'static aead::Algorithm, RecordError> {
        match self {
            Self::AES_256_GCM => Ok(&aead::AES_256_GCM),
            Self::CHACHA20_POLY1305 => Ok(&aead::CHACHA20_POLY1305),
            Self(other) => Err(RecordError::UnsupportedSuite(other)),
        }
    }
}

/// Which way a traffic key protects frames (the `dir` octet of the traffic context).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    ClientToServer = 0,
    ServerToClient = 1,
}

impl Direction {
    pub const fn from_octet(octet: u8) -> Option<Self> {
        match octet {
            0 => Some(Self::ClientToServer),
            1 => Some(Self::ServerToClient),
            _ => None,
        }
    }
}

/// `traffic_secret = HKDF-Expand-Label(parent, "traffic", dir ‖ epoch₆₄ ‖ suite₁₆ ‖ channel₁₆, HashLen)`
/// (handshake binding §5).
pub fn derive_traffic_secret(
    parent: &Secret,
    dir: Direction,
    epoch: u64,
    suite: Suite,
    channel: ChannelId,
) -> Result<Secret, RecordError> {
    let mut context = [0u8; 13];
    context[0] = dir as u8;
    context[1..9].copy_from_slice(&epoch.to_be_bytes());
    context[9..11].copy_from_slice(&suite.0.to_be_bytes());
    context[11..13].copy_from_slice(&channel.0.to_be_bytes());
    parent.expand_label(b"traffic", &context)
}

/// The per-frame nonce: the IV XOR the sequence number, left-padded to 12
/// octets (draft §7.5). The channel is not part of the nonce.
pub fn nonce(iv: &[u8; IV_LEN], seq: u64) -> [u8; NONCE_LEN] {
    let mut out = *iv;
    for (o, s) in out[4..].iter_mut().zip(seq.to_be_bytes()) {
        *o ^= s;
    }
    out
}

/// The AEAD key and IV of one (direction, epoch, suite, channel).
///
/// The IV is zeroized on drop; the key lives only inside the crypto backend,
/// whose context memory is cleansed when freed (AWS-LC's `OPENSSL_free`).
pub struct TrafficKeys {
    suite: Suite,
    key: LessSafeKey,
    iv: Zeroizing<[u8; IV_LEN]>,
}

impl std::fmt::Debug for TrafficKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TrafficKeys({:?}, ..)", self.suite)
    }
}

impl TrafficKeys {
    /// Keys from raw octets (a key of [`KEY_LEN`], an IV of [`IV_LEN`]).
    pub fn new(suite: Suite, key: &[u8], iv: &[u8]) -> Result<Self, RecordError> {
        let algorithm = suite.algorithm()?;
        if key.len() != algorithm.key_len() {
            return Err(RecordError::KeyLength {
                expected: algorithm.key_len(),
                got: key.len(),
            });
        }
        let iv: [u8; IV_LEN] = iv.try_into().map_err(|_| RecordError::IvLength(iv.len()))?;
        let key = UnboundKey::new(algorithm, key).map_err(|_| RecordError::Crypto("AEAD key"))?;
        Ok(Self {
            suite,
            key: LessSafeKey::new(key),
            iv: Zeroizing::new(iv),
        })
    }

    /// Derives the traffic secret of the tuple from `parent` (a handshake
    /// secret or `master`), then its key (`"key"`, 32) and IV (`"iv"`, 12).
    pub fn derive(
        parent: &Secret,
        dir: Direction,
        epoch: u64,
        suite: Suite,
        channel: ChannelId,
    ) -> Result<Self, RecordError> {
        let secret = derive_traffic_secret(parent, dir, epoch, suite, channel)?;
        Self::from_traffic_secret(&secret, suite)
    }

    /// Key and IV from a traffic secret.
    pub fn from_traffic_secret(secret: &Secret, suite: Suite) -> Result<Self, RecordError> {
        let KeyIv { key, iv } = KeyIv::derive(secret)?;
        Self::new(suite, &key[..], &iv[..])
    }

    pub const fn suite(&self) -> Suite {
        self.suite
    }

    pub fn iv(&self) -> &[u8; IV_LEN] {
        &self.iv
    }

    /// Bare AEAD seal of `in_out` in place; returns the tag.
    #[inline]
    pub fn seal_in_place(
        &self,
        nonce: [u8; NONCE_LEN],
        aad: &[u8],
        in_out: &mut [u8],
    ) -> Result<[u8; TAG_LEN], RecordError> {
        let tag = self
            .key
            .seal_in_place_separate_tag(Nonce::assume_unique_for_key(nonce), Aad::from(aad), in_out)
            .map_err(|_| RecordError::Crypto("AEAD seal"))?;
        let mut out = [0u8; TAG_LEN];
        out.copy_from_slice(tag.as_ref());
        Ok(out)
    }

    /// Bare AEAD open of `ciphertext ‖ tag` in place; returns the plaintext.
    pub fn open_in_place<'a>(
        &self,
        nonce: [u8; NONCE_LEN],
        aad: &[u8],
        in_out: &'a mut [u8],
    ) -> Result<&'a mut [u8], RecordError> {
        self.key
            .open_in_place(Nonce::assume_unique_for_key(nonce), Aad::from(aad), in_out)
            .map_err(|_| RecordError::Open)
    }

    /// Seals a frame in place. `frame` holds, in order: [`HEADER_LEN`] octets
    /// of room for the header, the plaintext, and [`TAG_LEN`] octets of room
    /// for the tag. Writes the header (with `ENC` set and Payload Length =
    /// plaintext + tag), encrypts the plaintext under AAD = header octets
    /// 0–20 and nonce = IV ⊕ `seq`, and writes the tag.
    #[inline]
    pub fn seal_frame(
        &self,
        frame: &mut [u8],
        flags: Flags,
        frame_type: FrameType,
        channel: ChannelId,
        seq: u64,
    ) -> Result<Header, RecordError> {
        let payload_len =
            frame
                .len()
                .checked_sub(HEADER_LEN + TAG_LEN)
                .ok_or(RecordError::FrameLength {
                    declared: 0,
                    got: frame.len(),
                })?;
        let sealed_len = u32::try_from(payload_len + TAG_LEN)
            .map_err(|_| RecordError::PayloadTooLarge(payload_len))?;
        let header = Header::new(flags | Flags::ENC, frame_type, channel, seq, sealed_len);
        let (head, rest) = frame
            .split_first_chunk_mut::<HEADER_LEN>()
            .ok_or(RecordError::PayloadTooLarge(payload_len))?;
        header.write(head)?;
        let (plaintext, tag_room) = rest.split_at_mut(payload_len);
        let tag = self.seal_in_place(nonce(&self.iv, seq), &head[..PREFIX_LEN], plaintext)?;
        tag_room.copy_from_slice(&tag);
        Ok(header)
    }

    /// Appends a sealed frame to `out`: reserves the header, lets `write`
    /// append the plaintext, then seals it in place and appends the tag. Many
    /// frames can be sealed back to back into one buffer for one write.
    #[inline]
    pub fn seal_frame_into(
        &self,
        out: &mut Vec<u8>,
        flags: Flags,
        frame_type: FrameType,
        channel: ChannelId,
        seq: u64,
        write: impl FnOnce(&mut Vec<u8>),
    ) -> Result<Header, RecordError> {
        let start = out.len();
        out.resize(start + HEADER_LEN, 0);
        write(out);
        out.resize(out.len() + TAG_LEN, 0);
        let result = self.seal_frame(&mut out[start..], flags, frame_type, channel, seq);
        if result.is_err() {
            out.truncate(start);
        }
        result
    }

    /// Opens a whole frame (header ‖ ciphertext ‖ tag) in place, checking the
    /// header first; returns the header and the plaintext.
    pub fn open_frame<'a>(
        &self,
        frame: &'a mut [u8],
    ) -> Result<(Header, &'a mut [u8]), RecordError> {
        let header = Header::decode_prefix(frame)?.ok_or(RecordError::FrameLength {
            declared: 0,
            got: frame.len(),
        })?;
        let plaintext = self.open_frame_with_header(&header, frame)?;
        Ok((header, plaintext))
    }

    /// Opens a frame whose header the caller has already decoded (from
    /// [`crate::wire::Deframer`]).
    pub fn open_frame_with_header<'a>(
        &self,
        header: &Header,
        frame: &'a mut [u8],
    ) -> Result<&'a mut [u8], RecordError> {
        let declared = header.payload_len;
        if frame.len() != HEADER_LEN + declared as usize || (declared as usize) < TAG_LEN {
            return Err(RecordError::FrameLength {
                declared,
                got: frame.len(),
            });
        }
        let (head, sealed) = frame.split_at_mut(HEADER_LEN);
        self.open_in_place(nonce(&self.iv, header.seq), &head[..PREFIX_LEN], sealed)
    }

    /// [`TrafficKeys::open_frame_with_header`] or
    /// [`TrafficKeys::open_frame_split`], as the frame was read.
    pub fn open_sealed<'a>(
        &self,
        header: &Header,
        frame: Sealed<'a>,
    ) -> Result<&'a mut [u8], RecordError> {
        match frame {
            Sealed::Whole(frame) => self.open_frame_with_header(header, frame),
            Sealed::Split(frame, tag) => self.open_frame_split(header, frame, &tag),
        }
    }

    /// [`TrafficKeys::open_frame_with_header`] for a frame whose tag is
    /// stored apart from the rest: `frame` holds the header and the
    /// ciphertext (header ‖ ciphertext), `tag` the [`TAG_LEN`] octets that
    /// follow them on the wire. The same checks (Payload Length still counts
    /// the tag); the plaintext, opened in place, ends where `frame` ends.
    pub fn open_frame_split<'a>(
        &self,
        header: &Header,
        frame: &'a mut [u8],
        tag: &[u8; TAG_LEN],
    ) -> Result<&'a mut [u8], RecordError> {
        let declared = header.payload_len;
        // The frame's length on the wire, its tag included.
        let got = frame.len() + TAG_LEN;
        if got != HEADER_LEN + declared as usize || (declared as usize) < TAG_LEN {
            return Err(RecordError::FrameLength { declared, got });
        }
        let (head, ciphertext) = frame.split_at_mut(HEADER_LEN);
        self.key
            .open_in_place_separate_tag(
                Nonce::assume_unique_for_key(nonce(&self.iv, header.seq)),
                Aad::from(&head[..PREFIX_LEN]),
                tag,
                ciphertext,
            )
            .map_err(|_| RecordError::Open)
    }
}

/// A sealed frame as it was read: whole (header ‖ ciphertext ‖ tag), or
/// with its tag stored apart (header ‖ ciphertext, and the tag), as a large
/// frame read into an allocation of its own is.
#[derive(Debug)]
pub enum Sealed<'a> {
    Whole(&'a mut [u8]),
    Split(&'a mut [u8], [u8; TAG_LEN]),
}

impl Sealed<'_> {
    /// The octets opened in place: the whole frame, or all of it but the
    /// tag.
    pub fn octets(&self) -> &[u8] {
        match self {
            Self::Whole(frame) | Self::Split(frame, _) => frame,
        }
    }

    /// The frame's octets in wire order, copied (header ‖ ciphertext ‖ tag).
    pub fn to_vec(&self) -> Vec<u8> {
        match self {
            Self::Whole(frame) => frame.to_vec(),
            Self::Split(frame, tag) => [&frame[..], &tag[..]].concat(),
        }
    }
}

/// The AEAD key and IV of a traffic secret (`"key"`, 32 and `"iv"`, 12 by
/// HKDF-Expand-Label), zeroized on drop.
pub struct KeyIv {
    pub key: Zeroizing<[u8; KEY_LEN]>,
    pub iv: Zeroizing<[u8; IV_LEN]>,
}

impl KeyIv {
    pub fn derive(secret: &Secret) -> Result<Self, RecordError> {
        let mut out = Self {
            key: Zeroizing::new([0u8; KEY_LEN]),
            iv: Zeroizing::new([0u8; IV_LEN]),
        };
        let (hash, prk) = (secret.hash(), secret.as_bytes());
        super::hkdf_expand_label(hash, prk, b"key", b"", &mut out.key[..])?;
        super::hkdf_expand_label(hash, prk, b"iv", b"", &mut out.iv[..])?;
        Ok(out)
    }
}

/// The sending half of one (channel, direction): keys plus the next sequence
/// number. Sequence numbers start at 0 and never wrap: the last one,
/// `u64::MAX`, is never used and the state reports
/// [`RecordError::SequenceExhausted`] instead.
#[derive(Debug)]
pub struct SendState {
    keys: TrafficKeys,
    next_seq: u64,
}

impl SendState {
    pub const fn new(keys: TrafficKeys) -> Self {
        Self { keys, next_seq: 0 }
    }

    pub const fn next_seq(&self) -> u64 {
        self.next_seq
    }

    pub fn keys(&self) -> &TrafficKeys {
        &self.keys
    }

    fn take_seq(&mut self) -> Result<u64, RecordError> {
        if self.next_seq == u64::MAX {
            return Err(RecordError::SequenceExhausted);
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        Ok(seq)
    }

    /// [`TrafficKeys::seal_frame`] at the next sequence number.
    pub fn seal(
        &mut self,
        frame: &mut [u8],
        flags: Flags,
        frame_type: FrameType,
        channel: ChannelId,
    ) -> Result<Header, RecordError> {
        let seq = self.take_seq()?;
        self.keys.seal_frame(frame, flags, frame_type, channel, seq)
    }

    /// [`TrafficKeys::seal_frame_into`] at the next sequence number.
    pub fn seal_into(
        &mut self,
        out: &mut Vec<u8>,
        flags: Flags,
        frame_type: FrameType,
        channel: ChannelId,
        write: impl FnOnce(&mut Vec<u8>),
    ) -> Result<Header, RecordError> {
        let seq = self.take_seq()?;
        self.keys
            .seal_frame_into(out, flags, frame_type, channel, seq, write)
    }

    /// Replaces the keys (after a key update) and restarts the sequence space.
    pub fn rekey(&mut self, keys: TrafficKeys) {
        self.keys = keys;
        self.next_seq = 0;
    }
}

/// The receiving half of one (channel, direction): frames must arrive with
/// exactly the next sequence number; a replayed, reordered or skipped frame is
/// refused with [`RecordError::OutOfSequence`] before any decryption.
#[derive(Debug)]
pub struct RecvState {
    keys: TrafficKeys,
    next_seq: u64,
}

impl RecvState {
    pub const fn new(keys: TrafficKeys) -> Self {
        Self { keys, next_seq: 0 }
    }

    pub const fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Opens the frame in place if it carries the expected sequence number.
    pub fn open<'a>(
        &mut self,
        header: &Header,
        frame: &'a mut [u8],
    ) -> Result<&'a mut [u8], RecordError> {
        self.check_seq(header)?;
        let plaintext = self.keys.open_frame_with_header(header, frame)?;
        self.opened();
        Ok(plaintext)
    }

    /// [`RecvState::open`] for a frame whose tag is stored apart
    /// ([`TrafficKeys::open_frame_split`]).
    pub fn open_split<'a>(
        &mut self,
        header: &Header,
        frame: &'a mut [u8],
        tag: &[u8; TAG_LEN],
    ) -> Result<&'a mut [u8], RecordError> {
        self.check_seq(header)?;
        let plaintext = self.keys.open_frame_split(header, frame, tag)?;
        self.opened();
        Ok(plaintext)
    }

    /// [`RecvState::open`] or [`RecvState::open_split`], as the frame was
    /// read.
    pub fn open_sealed<'a>(
        &mut self,
        header: &Header,
        frame: Sealed<'a>,
    ) -> Result<&'a mut [u8], RecordError> {
        match frame {
            Sealed::Whole(frame) => self.open(header, frame),
            Sealed::Split(frame, tag) => self.open_split(header, frame, &tag),
        }
    }

    /// Refuses a frame out of sequence, before any decryption.
    fn check_seq(&self, header: &Header) -> Result<(), RecordError> {
        if header.seq != self.next_seq {
            return Err(RecordError::OutOfSequence {
                expected: self.next_seq,
                got: header.seq,
            });
        }
        Ok(())
    }

    /// A frame was opened: the next one carries the next number.
    fn opened(&mut self) {
        // `next_seq` reached u64::MAX only if the peer used it, which a
        // conforming sender never does; saturate rather than wrap.
        self.next_seq = self.next_seq.saturating_add(1);
    }

    /// Replaces the keys (after a key update) and restarts the sequence space.
    pub fn rekey(&mut self, keys: TrafficKeys) {
        self.keys = keys;
        self.next_seq = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> TrafficKeys {
        TrafficKeys::new(Suite::AES_256_GCM, &[7; 32], &[9; 12]).unwrap()
    }

    fn sealed(keys: &TrafficKeys, seq: u64, pt: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        keys.seal_frame_into(
            &mut out,
            Flags::NONE,
            FrameType(0x0100),
            ChannelId::BRIDGE,
            seq,
            |b| b.extend_from_slice(pt),
        )
        .unwrap();
        out
    }

    #[test]
    fn nonce_xors_low_eight_octets() {
        let iv = [0xFF; 12];
        assert_eq!(
            hex::encode(nonce(&iv, 0x0102_0304_0506_0708)),
            "fffffffffefdfcfbfaf9f8f7"
        );
    }

    #[test]
    fn seal_then_open_roundtrip_sets_enc_and_length() {
        let k = keys();
        let mut f = sealed(&k, 5, b"hello");
        assert_eq!(f.len(), HEADER_LEN + 5 + TAG_LEN);
        let (h, pt) = k.open_frame(&mut f).unwrap();
        assert_eq!(pt, b"hello");
        assert!(h.flags.contains(Flags::ENC));
        assert_eq!(h.payload_len as usize, 5 + TAG_LEN);
    }

    #[test]
    fn open_rejects_every_single_bit_flip() {
        let k = keys();
        let f = sealed(&k, 1, b"abc");
        for i in 0..f.len() {
            let mut g = f.clone();
            g[i] ^= 0x01;
            assert!(k.open_frame(&mut g).is_err(), "flip at octet {i} accepted");
        }
    }

    /// `frame` as header ‖ ciphertext and its tag apart.
    fn split(frame: &[u8]) -> (Vec<u8>, [u8; TAG_LEN]) {
        let (rest, tag) = frame.split_at(frame.len() - TAG_LEN);
        (rest.to_vec(), tag.try_into().unwrap())
    }

    #[test]
    fn a_frame_opened_with_its_tag_apart_opens_as_a_whole_one() {
        let k = keys();
        for pt in [&b""[..], b"abc", &[0x5A; 20_000]] {
            let f = sealed(&k, 3, pt);
            let h = Header::decode_prefix(&f).unwrap().unwrap();
            let mut whole = f.clone();
            let expected = k.open_frame_with_header(&h, &mut whole).unwrap().to_vec();
            assert_eq!(expected, pt);
            let (mut rest, tag) = split(&f);
            let end = rest.as_ptr_range().end;
            let opened = k.open_frame_split(&h, &mut rest, &tag).unwrap();
            assert_eq!(opened, &expected[..]);
            assert_eq!(
                opened.as_ptr_range().end,
                end,
                "the plaintext ends the buffer"
            );
        }
    }

    #[test]
    fn open_split_rejects_every_single_bit_flip() {
        let k = keys();
        let f = sealed(&k, 1, b"abc");
        let h = Header::decode_prefix(&f).unwrap().unwrap();
        let (rest, tag) = split(&f);
        // Header octets 0-20 are the AAD; the rest of the header is not
        // authenticated by the AEAD (the caller decoded it already).
        for i in (0..PREFIX_LEN).chain(HEADER_LEN..rest.len()) {
            for bit in 0..8 {
                let mut g = rest.clone();
                g[i] ^= 1 << bit;
                assert_eq!(
                    k.open_frame_split(&h, &mut g, &tag),
                    Err(RecordError::Open),
                    "flip of bit {bit} at octet {i} accepted"
                );
            }
        }
        for i in 0..TAG_LEN {
            for bit in 0..8 {
                let mut t = tag;
                t[i] ^= 1 << bit;
                let mut g = rest.clone();
                assert_eq!(
                    k.open_frame_split(&h, &mut g, &t),
                    Err(RecordError::Open),
                    "flip of bit {bit} in the tag's octet {i} accepted"
                );
            }
        }
        // A header decoded with another sequence number: another nonce.
        let mut other = h;
        other.seq += 1;
        assert_eq!(
            k.open_frame_split(&other, &mut rest.clone(), &tag),
            Err(RecordError::Open)
        );
        assert!(k.open_frame_split(&h, &mut rest.clone(), &tag).is_ok());
    }

    #[test]
    fn open_split_rejects_wrong_lengths() {
        let k = keys();
        let f = sealed(&k, 1, b"abcdef");
        let h = Header::decode_prefix(&f).unwrap().unwrap();
        let (rest, tag) = split(&f);
        // One octet short, one too many, the tag left in, nothing at all.
        for len in [rest.len() - 1, rest.len() + 1, f.len(), 0, HEADER_LEN - 1] {
            let mut g = f.clone();
            g.resize(len, 0);
            assert!(
                matches!(
                    k.open_frame_split(&h, &mut g, &tag),
                    Err(RecordError::FrameLength { .. })
                ),
                "{len} octets accepted"
            );
        }
        // A Payload Length shorter than the tag.
        let mut short = h;
        short.payload_len = TAG_LEN as u32 - 1;
        let mut g = rest[..HEADER_LEN - 1].to_vec();
        assert!(matches!(
            k.open_frame_split(&short, &mut g, &tag),
            Err(RecordError::FrameLength { .. })
        ));
    }

    #[test]
    fn recv_state_opens_split_frames_in_sequence() {
        let (k, k2) = (keys(), keys());
        let mut recv = RecvState::new(k2);
        let frames: Vec<_> = (0..3).map(|seq| sealed(&k, seq, b"x")).collect();
        let open = |recv: &mut RecvState, f: &[u8]| {
            let h = Header::decode_prefix(f).unwrap().unwrap();
            let (mut rest, tag) = split(f);
            recv.open_split(&h, &mut rest, &tag).map(|p| p.to_vec())
        };
        assert_eq!(open(&mut recv, &frames[0]).unwrap(), b"x");
        assert_eq!(
            open(&mut recv, &frames[0]),
            Err(RecordError::OutOfSequence {
                expected: 1,
                got: 0
            })
        );
        assert_eq!(
            open(&mut recv, &frames[2]),
            Err(RecordError::OutOfSequence {
                expected: 1,
                got: 2
            })
        );
        // A tampered frame is refused and does not advance the sequence.
        let mut bad = frames[1].clone();
        let last = bad.len() - 1;
        bad[last] ^= 1;
        assert_eq!(open(&mut recv, &bad), Err(RecordError::Open));
        assert_eq!(recv.next_seq(), 1);
        // Whole and split frames share one sequence.
        let h = Header::decode_prefix(&frames[1]).unwrap().unwrap();
        assert!(recv.open(&h, &mut frames[1].clone()).is_ok());
        assert!(open(&mut recv, &frames[2]).is_ok());
        assert_eq!(recv.next_seq(), 3);
    }

    #[test]
    fn recv_state_refuses_replay_and_gaps() {
        let k = keys();
        let k2 = keys();
        let mut send = SendState::new(k);
        let mut recv = RecvState::new(k2);
        let mut frames = Vec::new();
        for _ in 0..3 {
            let mut out = Vec::new();
            send.seal_into(
                &mut out,
                Flags::NONE,
                FrameType(0x0100),
                ChannelId::BRIDGE,
                |b| b.extend_from_slice(b"x"),
            )
            .unwrap();
            frames.push(out);
        }
        let open = |recv: &mut RecvState, f: &mut Vec<u8>| {
            let h = Header::decode_prefix(f).unwrap().unwrap();
            recv.open(&h, f).map(|p| p.to_vec())
        };
        assert_eq!(open(&mut recv, &mut frames[0].clone()).unwrap(), b"x");
        assert_eq!(
            open(&mut recv, &mut frames[0].clone()),
            Err(RecordError::OutOfSequence {
                expected: 1,
                got: 0
            })
        );
        assert_eq!(
            open(&mut recv, &mut frames[2].clone()),
            Err(RecordError::OutOfSequence {
                expected: 1,
                got: 2
            })
        );
        assert!(open(&mut recv, &mut frames[1].clone()).is_ok());
    }

    #[test]
    fn send_state_stops_before_sequence_wraps() {
        let mut s = SendState::new(keys());
        s.next_seq = u64::MAX - 1;
        let mut out = Vec::new();
        let seal = |s: &mut SendState, out: &mut Vec<u8>| {
            s.seal_into(out, Flags::NONE, FrameType(1), ChannelId::CONTROL, |_| {})
        };
        assert_eq!(seal(&mut s, &mut out).unwrap().seq, u64::MAX - 1);
        let before = out.len();
        assert_eq!(seal(&mut s, &mut out), Err(RecordError::SequenceExhausted));
        assert_eq!(
            out.len(),
            before,
            "a refused seal leaves the buffer as it was"
        );
    }

    #[test]
    fn new_rejects_bad_lengths_and_suites() {
        assert!(matches!(
            TrafficKeys::new(Suite::AES_256_GCM, &[0; 16], &[0; 12]),
            Err(RecordError::KeyLength { .. })
        ));
        assert_eq!(
            TrafficKeys::new(Suite::AES_256_GCM, &[0; 32], &[0; 13]).err(),
            Some(RecordError::IvLength(13))
        );
        assert_eq!(
            TrafficKeys::new(Suite(9), &[0; 32], &[0; 12]).err(),
            Some(RecordError::UnsupportedSuite(9))
        );
    }
}
