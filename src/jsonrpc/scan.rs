//! The validating JSON-RPC scanner: one pass over a JSON text, no DOM, byte
//! ranges out.
//!
//! It validates the whole text against RFC 8259 (structure, strings, escapes,
//! numbers, literals, UTF-8), because an edge must answer -32700 for invalid
//! JSON and must never forward half-validated bytes. While it validates, it
//! classifies the top-level object (or each element of a batch) per
//! JSON-RPC 2.0 and records where `method` and `id` sit.
//!
//! Limits are explicit ([`Limits`]) and each has its own error. Parse errors
//! win over classification errors: `{"method":1,` is -32700, not -32600.

use std::ops::Range;

use super::simd::{Kernel, Portable};

/// Limits on what the scanner accepts, each with its own error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest JSON text in octets ([`ScanError::TooLarge`]).
    pub max_len: usize,
    /// Deepest nesting of arrays and objects; the top level is depth 1
    /// ([`ScanError::TooDeep`]).
    pub max_depth: usize,
    /// Most members in one object or elements in one array
    /// ([`ScanError::TooManyMembers`]).
    pub max_members: usize,
    /// Most elements in a batch ([`ScanError::BatchTooLarge`]).
    pub max_batch: usize,
}

impl Limits {
    /// Default largest message: 16 MiB.
    pub const DEFAULT_MAX_LEN: usize = 16 << 20;
    /// Default deepest nesting.
    pub const DEFAULT_MAX_DEPTH: usize = 128;
    /// Default most members per object / elements per array.
    pub const DEFAULT_MAX_MEMBERS: usize = 1 << 20;
    /// Default most batch elements.
    pub const DEFAULT_MAX_BATCH: usize = 100;
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_len: Self::DEFAULT_MAX_LEN,
            max_depth: Self::DEFAULT_MAX_DEPTH,
            max_members: Self::DEFAULT_MAX_MEMBERS,
            max_batch: Self::DEFAULT_MAX_BATCH,
        }
    }
}

/// A JSON string token: the octets between the quotes, as they appear.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StrToken {
    /// The raw octets between the quotes (escapes not decoded).
    pub raw: Range<usize>,
    /// Whether the raw octets contain a backslash escape.
    pub escaped: bool,
}

/// The `id` member of a request or response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdToken {
    /// The token exactly as it appears, quotes included for strings: `"7"`
    /// and `7` are different ids (CC-JSONRPC §8.2).
    pub token: Range<usize>,
    pub kind: IdKind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdKind {
    String,
    Number,
    Null,
}

/// What one JSON-RPC object is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A request: `method` and an `id`.
    Request { method: StrToken, id: IdToken },
    /// A notification: `method` and no `id`.
    Notification { method: StrToken },
    /// A response with `result`.
    Success { id: IdToken },
    /// A response with `error`.
    Error { id: IdToken },
}

impl Kind {
    /// The same kind with its ranges made relative to `start` (a batch
    /// element's ranges index the batch text; this rebases them onto the
    /// element's own octets).
    pub fn relative_to(mut self, start: usize) -> Self {
        let shift = |r: &mut Range<usize>| *r = r.start - start..r.end - start;
        match &mut self {
            Kind::Request { method, id } => {
                shift(&mut method.raw);
                shift(&mut id.token);
            }
            Kind::Notification { method } => shift(&mut method.raw),
            Kind::Success { id } | Kind::Error { id } => shift(&mut id.token),
        }
        self
    }
}

/// Why a syntactically valid object is not a JSON-RPC 2.0 message (-32600).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidRequest {
    #[error("a JSON-RPC message must be an object")]
    NotAnObject,
    #[error("`jsonrpc` must be exactly \"2.0\"")]
    BadVersion,
    #[error("`jsonrpc` member missing")]
    MissingVersion,
    #[error("duplicate `{0}` member")]
    Duplicate(&'static str),
    #[error("`method` must be a string")]
    MethodNotString,
    #[error("`method` contains an escape that is not valid Unicode")]
    MethodNotUnicode,
    #[error("`id` must be a string, a number or null")]
    BadId,
    #[error("`params` must be an array or an object (or null)")]
    BadParams,
    #[error("`result` and `error` must not both be present")]
    ResultAndError,
    #[error("a request must not carry `result` or `error`")]
    MethodWithResult,
    #[error("a response must carry an `id`")]
    ResponseWithoutId,
    #[error("neither `method` nor `result`/`error` present")]
    NoMethodNoResult,
    #[error("`error` must be an object with an integer `code` and a string `message`")]
    BadErrorObject,
}

/// One element of a batch: its octets and what it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Element {
    /// The element's octets in the batch text, untouched.
    pub range: Range<usize>,
    pub kind: Result<Kind, InvalidRequest>,
}

/// A scanned JSON-RPC text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scanned {
    /// One object (the usual case).
    Single(Kind),
    /// A non-empty batch array.
    Batch(Vec<Element>),
}

/// Why a text cannot be carried at all.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ScanError {
    /// -32700: not valid JSON.
    #[error("parse error at octet {offset}: {reason}")]
    Parse { offset: usize, reason: &'static str },
    /// -32600: valid JSON that is not a JSON-RPC 2.0 message.
    #[error("invalid request: {0}")]
    Invalid(InvalidRequest),
    /// -32600: `[]`.
    #[error("invalid request: empty batch")]
    EmptyBatch,
    #[error("message of {len} octets exceeds the limit of {limit}")]
    TooLarge { len: usize, limit: usize },
    #[error("nesting deeper than the limit of {limit}")]
    TooDeep { limit: usize },
    #[error("an object or array has more than the limit of {limit} members")]
    TooManyMembers { limit: usize },
    #[error("batch of {len} elements exceeds the limit of {limit}")]
    BatchTooLarge { len: usize, limit: usize },
}

impl ScanError {
    /// The JSON-RPC error code an edge answers with: -32700 for parse errors,
    /// -32600 for everything else.
    pub const fn jsonrpc_code(&self) -> i32 {
        match self {
            Self::Parse { .. } => -32700,
            _ => -32600,
        }
    }
}

/// Texts shorter than this are scanned with the portable kernel.
const SMALL_TEXT_LEN: usize = 1024;

/// Scans one JSON-RPC text with the kernel that measured fastest for its
/// size (`results/`): portable SWAR below `SMALL_TEXT_LEN` (1 KiB), where
/// strings are short and one 8-octet word answers most of them; SSE2 above on
/// x86-64. The AVX2 kernel measured no faster than SSE2 on this corpus (its
/// out-of-line call costs what the wider vectors save), so it is available
/// through [`scan_using`] but not chosen here.
pub fn scan(text: &[u8], limits: &Limits) -> Result<Scanned, ScanError> {
    #[cfg(target_arch = "x86_64")]
    if text.len() >= SMALL_TEXT_LEN {
        return scan_with::<super::simd::Sse2>(text, limits);
    }
    scan_with::<Portable>(text, limits)
}

/// The kernels a caller can force (tests and benches compare them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelChoice {
    Portable,
    Sse2,
    Avx2,
}

impl KernelChoice {
    /// The kernels this CPU can run.
    pub fn available() -> Vec<Self> {
        let mut v = vec![Self::Portable];
        #[cfg(target_arch = "x86_64")]
        {
            v.push(Self::Sse2);
            if std::is_x86_feature_detected!("avx2") {
                v.push(Self::Avx2);
            }
        }
        v
    }
}

/// [`scan`] with a given kernel; `None` if this CPU cannot run it.
pub fn scan_using(
    kernel: KernelChoice,
    text: &[u8],
    limits: &Limits,
) -> Option<Result<Scanned, ScanError>> {
    match kernel {
        KernelChoice::Portable => Some(scan_with::<Portable>(text, limits)),
        #[cfg(target_arch = "x86_64")]
        KernelChoice::Sse2 => Some(scan_with::<super::simd::Sse2>(text, limits)),
        #[cfg(target_arch = "x86_64")]
        KernelChoice::Avx2 if std::is_x86_feature_detected!("avx2") => {
            Some(scan_with::<super::simd::Avx2>(text, limits))
        }
        _ => None,
    }
}

#[inline(always)]
fn scan_with<K: Kernel>(text: &[u8], limits: &Limits) -> Result<Scanned, ScanError> {
    if text.len() > limits.max_len {
        return Err(ScanError::TooLarge {
            len: text.len(),
            limit: limits.max_len,
        });
    }
    let mut p = Parser::<K> {
        buf: text,
        pos: 0,
        limits,
        failure: None,
        _kernel: std::marker::PhantomData,
    };
    let scanned = p.document();
    p.skip_ws();
    let scanned = match scanned {
        Ok(_) if p.pos != text.len() => {
            let Fail = p.error("trailing characters after the JSON value");
            Err(Fail)
        }
        other => other,
    };
    let scanned = scanned.map_err(|Fail| {
        p.failure.take().unwrap_or(ScanError::Parse {
            offset: p.pos,
            reason: "parse stopped without a reason",
        })
    })?;
    match scanned {
        Document::Single(Ok(kind)) => Ok(Scanned::Single(kind)),
        Document::Single(Err(invalid)) => Err(ScanError::Invalid(invalid)),
        Document::Batch(elements) if elements.is_empty() => Err(ScanError::EmptyBatch),
        Document::Batch(elements) if elements.len() > limits.max_batch => {
            Err(ScanError::BatchTooLarge {
                len: elements.len(),
                limit: limits.max_batch,
            })
        }
        Document::Batch(elements) => Ok(Scanned::Batch(elements)),
    }
}

enum Document {
    Single(Result<Kind, InvalidRequest>),
    Batch(Vec<Element>),
}

/// The top-level members the classifier tracks.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Member {
    Jsonrpc,
    Method,
    Params,
    Id,
    Result,
    Error,
    Other,
}

impl Member {
    fn from_key(key: &[u8]) -> Self {
        match key {
            b"jsonrpc" => Self::Jsonrpc,
            b"method" => Self::Method,
            b"params" => Self::Params,
            b"id" => Self::Id,
            b"result" => Self::Result,
            b"error" => Self::Error,
            _ => Self::Other,
        }
    }

    const fn name(self) -> &'static str {
        match self {
            Self::Jsonrpc => "jsonrpc",
            Self::Method => "method",
            Self::Params => "params",
            Self::Id => "id",
            Self::Result => "result",
            Self::Error => "error",
            Self::Other => "",
        }
    }

    const fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

/// What the value parser saw, enough to classify members.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ValueType {
    Object,
    Array,
    String { escaped: bool },
    Integer,
    Number,
    Literal,
    Null,
}

/// A parse stopped; the reason is in [`Parser::failure`].
struct Fail;

struct Parser<'a, K> {
    buf: &'a [u8],
    pos: usize,
    limits: &'a Limits,
    failure: Option<ScanError>,
    _kernel: std::marker::PhantomData<K>,
}

impl<K: Kernel> Parser<'_, K> {
    /// Records a parse error at the current position; the caller returns
    /// the [`Fail`] marker, keeping the hot path's results register-sized.
    #[cold]
    #[inline(never)]
    fn error(&mut self, reason: &'static str) -> Fail {
        self.stop(ScanError::Parse {
            offset: self.pos,
            reason,
        })
    }

    #[cold]
    #[inline(never)]
    fn stop(&mut self, error: ScanError) -> Fail {
        self.failure.get_or_insert(error);
        Fail
    }

    #[inline(always)]
    fn peek(&self) -> Option<u8> {
        self.buf.get(self.pos).copied()
    }

    #[inline(always)]
    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.peek() {
            self.pos += 1;
        }
    }

    fn document(&mut self) -> Result<Document, Fail> {
        self.skip_ws();
        match self.peek() {
            Some(b'{') => Ok(Document::Single(self.message(1)?)),
            Some(b'[') => self.batch(),
            Some(_) => {
                self.value(1)?;
                Ok(Document::Single(Err(InvalidRequest::NotAnObject)))
            }
            None => Err(self.error("empty input")),
        }
    }

    fn batch(&mut self) -> Result<Document, Fail> {
        self.pos += 1; // '['
        let mut elements = Vec::new();
        self.skip_ws();
        if self.peek() == Some(b']') {
            self.pos += 1;
            return Ok(Document::Batch(elements));
        }
        loop {
            self.skip_ws();
            let start = self.pos;
            let kind = if self.peek() == Some(b'{') {
                self.message(2)?
            } else {
                self.value(2)?;
                Err(InvalidRequest::NotAnObject)
            };
            if elements.len() >= self.limits.max_members {
                return Err(self.stop(ScanError::TooManyMembers {
                    limit: self.limits.max_members,
                }));
            }
            elements.push(Element {
                range: start..self.pos,
                kind,
            });
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    return Ok(Document::Batch(elements));
                }
                Some(_) => return Err(self.error("expected `,` or `]` in array")),
                None => return Err(self.error("unterminated array")),
            }
        }
    }

    /// A JSON-RPC object at `depth`: validated fully, classified on the way.
    fn message(&mut self, depth: usize) -> Result<Result<Kind, InvalidRequest>, Fail> {
        self.check_depth(depth)?;
        self.pos += 1; // '{'
        let mut seen = 0u8;
        let mut invalid: Option<InvalidRequest> = None;
        let mut version_ok = false;
        let mut method: Option<StrToken> = None;
        let mut id: Option<IdToken> = None;
        let mut members = 0usize;

        self.skip_ws();
        if self.peek() == Some(b'}') {
            self.pos += 1;
        } else {
            loop {
                self.skip_ws();
                if self.peek() != Some(b'"') {
                    return Err(self.error("expected a string key"));
                }
                let key = self.string()?;
                let member = self.member_of(&key);
                members += 1;
                if members > self.limits.max_members {
                    return Err(self.stop(ScanError::TooManyMembers {
                        limit: self.limits.max_members,
                    }));
                }
                self.colon()?;
                if member != Member::Other {
                    if seen & member.bit() != 0 {
                        invalid.get_or_insert(InvalidRequest::Duplicate(member.name()));
                    }
                    seen |= member.bit();
                }
                let start = self.pos;
                let value = if member == Member::Error {
                    self.error_object(depth + 1)?
                } else {
                    self.value(depth + 1)?
                };
                let token = start..self.pos;
                match (member, value) {
                    (Member::Jsonrpc, ValueType::String { escaped }) => {
                        version_ok = self.string_equals(&token, escaped, b"2.0");
                    }
                    (Member::Method, ValueType::String { escaped }) => {
                        method = Some(StrToken {
                            raw: token.start + 1..token.end - 1,
                            escaped,
                        });
                    }
                    (Member::Method, _) => {
                        invalid.get_or_insert(InvalidRequest::MethodNotString);
                    }
                    (Member::Id, v) => match id_kind(v) {
                        Some(kind) => id = Some(IdToken { token, kind }),
                        None => {
                            invalid.get_or_insert(InvalidRequest::BadId);
                        }
                    },
                    // `null` is no params: JSON-RPC 2.0 has the member
                    // omitted instead, but LSP clients (pygls) send
                    // `"params": null` for `shutdown` and `exit`, and their
                    // servers take it; the octets reach the server as sent.
                    (Member::Params, ValueType::Object | ValueType::Array | ValueType::Null) => {}
                    (Member::Params, _) => {
                        invalid.get_or_insert(InvalidRequest::BadParams);
                    }
                    (Member::Error, ValueType::Literal) => {
                        // `error_object` reports a malformed error object this way.
                        invalid.get_or_insert(InvalidRequest::BadErrorObject);
                    }
                    _ => {}
                }
                if self.object_member_end()? {
                    break;
                }
            }
        }

        if let Some(invalid) = invalid {
            return Ok(Err(invalid));
        }
        Ok(classify(seen, version_ok, method, id, self.buf))
    }

    /// The value of a top-level `error` member: validated like any value, and
    /// checked to be an object with an integer `code` and a string `message`.
    /// Returns [`ValueType::Literal`] to flag a malformed error object.
    fn error_object(&mut self, depth: usize) -> Result<ValueType, Fail> {
        if self.peek() != Some(b'{') {
            self.value(depth)?;
            return Ok(ValueType::Literal);
        }
        self.check_depth(depth)?;
        self.pos += 1;
        let (mut code, mut message, mut members) = (0u8, 0u8, 0usize);
        self.skip_ws();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return Ok(ValueType::Literal);
        }
        loop {
            self.skip_ws();
            if self.peek() != Some(b'"') {
                return Err(self.error("expected a string key"));
            }
            let key = self.string()?;
            members += 1;
            if members > self.limits.max_members {
                return Err(self.stop(ScanError::TooManyMembers {
                    limit: self.limits.max_members,
                }));
            }
            let raw = &self.buf[key.raw.clone()];
            let mut scratch = [0u8; 8];
            let name = if key.escaped {
                unescape_into(raw, &mut scratch).map_or(&b""[..], |n| &scratch[..n])
            } else {
                raw
            };
            self.colon()?;
            let value = self.value(depth + 1)?;
            match name {
                b"code" => code += if value == ValueType::Integer { 1 } else { 2 },
                b"message" => {
                    message += if matches!(value, ValueType::String { .. }) {
                        1
                    } else {
                        2
                    }
                }
                _ => {}
            }
            if self.object_member_end()? {
                break;
            }
        }
        Ok(if code == 1 && message == 1 {
            ValueType::Object
        } else {
            ValueType::Literal
        })
    }

    /// After an object member: `,` (more follow: `false`) or `}` (the
    /// object ends: `true`).
    #[inline(always)]
    fn object_member_end(&mut self) -> Result<bool, Fail> {
        self.skip_ws();
        match self.peek() {
            Some(b',') => {
                self.pos += 1;
                Ok(false)
            }
            Some(b'}') => {
                self.pos += 1;
                Ok(true)
            }
            Some(_) => Err(self.error("expected `,` or `}` in object")),
            None => Err(self.error("unterminated object")),
        }
    }

    fn member_of(&self, key: &StrToken) -> Member {
        let raw = &self.buf[key.raw.clone()];
        if !key.escaped {
            return Member::from_key(raw);
        }
        // Escaped keys are rare: decode into a small buffer; anything longer
        // than the longest tracked name cannot match.
        let mut decoded = [0u8; 8];
        match unescape_into(raw, &mut decoded) {
            Some(len) => Member::from_key(&decoded[..len]),
            None => Member::Other,
        }
    }

    fn string_equals(&self, token: &Range<usize>, escaped: bool, want: &[u8]) -> bool {
        let raw = &self.buf[token.start + 1..token.end - 1];
        if !escaped {
            return raw == want;
        }
        let mut decoded = [0u8; 8];
        unescape_into(raw, &mut decoded).is_some_and(|len| &decoded[..len] == want)
    }

    #[inline(always)]
    fn colon(&mut self) -> Result<(), Fail> {
        self.skip_ws();
        if self.peek() != Some(b':') {
            return Err(self.error("expected `:` after object key"));
        }
        self.pos += 1;
        self.skip_ws();
        Ok(())
    }

    #[inline(always)]
    fn check_depth(&mut self, depth: usize) -> Result<(), Fail> {
        if depth > self.limits.max_depth {
            return Err(self.stop(ScanError::TooDeep {
                limit: self.limits.max_depth,
            }));
        }
        Ok(())
    }

    /// Any JSON value at `depth`, validated, leaving `pos` after it.
    #[inline(always)]
    fn value(&mut self, depth: usize) -> Result<ValueType, Fail> {
        match self.peek() {
            Some(b'"') => {
                let s = self.string()?;
                Ok(ValueType::String { escaped: s.escaped })
            }
            Some(b'{') => {
                self.container(depth)?;
                Ok(ValueType::Object)
            }
            Some(b'[') => {
                self.container(depth)?;
                Ok(ValueType::Array)
            }
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(b't') => self.literal(b"true", ValueType::Literal),
            Some(b'f') => self.literal(b"false", ValueType::Literal),
            Some(b'n') => self.literal(b"null", ValueType::Null),
            Some(_) => Err(self.error("expected a JSON value")),
            None => Err(self.error("unexpected end of input, expected a value")),
        }
    }

    /// The object or array at `pos`, validated without recursion: one loop
    /// over a stack of up to [`LEVELS`] open containers kept in a bit set
    /// (1 = object) with a member count per level. Deeper nesting continues
    /// in a nested call, so the depth limit, not this stack, bounds nesting.
    fn container(&mut self, depth: usize) -> Result<(), Fail> {
        const LEVELS: usize = 64;
        let mut is_object: u64 = 0;
        let mut members = [0u32; LEVELS];
        let mut level = 0usize; // open containers in this call
        let max_members = self.limits.max_members;
        'open: loop {
            // `pos` is on '{' or '['.
            self.check_depth(depth + level)?;
            let object = self.buf[self.pos] == b'{';
            if level == LEVELS {
                // Out of bits: continue in a nested call.
                self.container(depth + level)?;
            } else {
                is_object = (is_object & !(1 << level)) | (u64::from(object) << level);
                members[level] = 0;
                level += 1;
                self.pos += 1;
                self.skip_ws();
                let close = if object { b'}' } else { b']' };
                if self.peek() == Some(close) {
                    self.pos += 1;
                    level -= 1;
                    if level == 0 {
                        return Ok(());
                    }
                } else {
                    // First member or element.
                    members[level - 1] = 1;
                    if object && !self.key()? {
                        return Err(self.error("expected a string key"));
                    }
                    if let Some(b'{' | b'[') = self.peek() {
                        continue 'open;
                    }
                    self.scalar()?;
                }
            }
            // After a value: `,` then the next member, or the close of the level.
            loop {
                self.skip_ws();
                let in_object = is_object >> (level - 1) & 1 == 1;
                match (self.peek(), in_object) {
                    (Some(b','), _) => {
                        self.pos += 1;
                        self.skip_ws();
                        let count = &mut members[level - 1];
                        *count += 1;
                        if *count as usize > max_members {
                            return Err(self.stop(ScanError::TooManyMembers { limit: max_members }));
                        }
                        if in_object && !self.key()? {
                            return Err(self.error("expected a string key"));
                        }
                        if let Some(b'{' | b'[') = self.peek() {
                            continue 'open;
                        }
                        self.scalar()?;
                    }
                    (Some(b'}'), true) | (Some(b']'), false) => {
                        self.pos += 1;
                        level -= 1;
                        if level == 0 {
                            return Ok(());
                        }
                    }
                    (Some(_), true) => return Err(self.error("expected `,` or `}` in object")),
                    (Some(_), false) => return Err(self.error("expected `,` or `]` in array")),
                    (None, _) => return Err(self.error("unterminated object or array")),
                }
            }
        }
    }

    /// An object key and its colon; `false` if `pos` is not on a string.
    #[inline(always)]
    fn key(&mut self) -> Result<bool, Fail> {
        if self.peek() != Some(b'"') {
            return Ok(false);
        }
        self.string()?;
        self.colon()?;
        Ok(true)
    }

    /// A value that is not an object or array.
    #[inline(always)]
    fn scalar(&mut self) -> Result<(), Fail> {
        match self.peek() {
            Some(b'"') => self.string().map(drop),
            Some(b'-' | b'0'..=b'9') => self.number().map(drop),
            Some(b't') => self.literal(b"true", ValueType::Literal).map(drop),
            Some(b'f') => self.literal(b"false", ValueType::Literal).map(drop),
            Some(b'n') => self.literal(b"null", ValueType::Null).map(drop),
            Some(_) => Err(self.error("expected a JSON value")),
            None => Err(self.error("unexpected end of input, expected a value")),
        }
    }

    #[inline(always)]
    fn literal(&mut self, word: &'static [u8], ty: ValueType) -> Result<ValueType, Fail> {
        if self.buf[self.pos..].starts_with(word) {
            self.pos += word.len();
            Ok(ty)
        } else {
            Err(self.error("invalid literal"))
        }
    }

    /// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`
    #[inline(always)]
    fn number(&mut self) -> Result<ValueType, Fail> {
        let buf = self.buf;
        let mut i = self.pos;
        if buf[i] == b'-' {
            i += 1;
        }
        match buf.get(i) {
            Some(b'0') => i += 1,
            Some(b'1'..=b'9') => i = skip_digits(buf, i + 1),
            _ => {
                self.pos = i;
                return Err(self.error("invalid number: expected a digit"));
            }
        }
        let mut ty = ValueType::Integer;
        if buf.get(i) == Some(&b'.') {
            let digits = i + 1;
            i = skip_digits(buf, digits);
            if i == digits {
                self.pos = i;
                return Err(self.error("invalid number: expected a digit after `.`"));
            }
            ty = ValueType::Number;
        }
        if let Some(b'e' | b'E') = buf.get(i) {
            i += 1;
            if let Some(b'+' | b'-') = buf.get(i) {
                i += 1;
            }
            let digits = i;
            i = skip_digits(buf, digits);
            if i == digits {
                self.pos = i;
                return Err(self.error("invalid number: expected a digit in the exponent"));
            }
            ty = ValueType::Number;
        }
        self.pos = i;
        Ok(ty)
    }

    /// A string starting at `pos` (on the opening quote); leaves `pos` after
    /// the closing quote.
    #[inline(always)]
    fn string(&mut self) -> Result<StrToken, Fail> {
        let buf = self.buf;
        let start = self.pos + 1;
        let mut i = start;
        let mut escaped = false;
        loop {
            i = K::find_special(buf, i);
            match buf.get(i) {
                Some(b'"') => {
                    self.pos = i + 1;
                    return Ok(StrToken {
                        raw: start..i,
                        escaped,
                    });
                }
                Some(b'\\') => {
                    escaped = true;
                    i = self.escape(i)?;
                }
                Some(&b) if b >= 0x80 => {
                    // Octets that end a string or start an escape are ASCII and
                    // cannot occur inside a UTF-8 sequence: validate up to the next one.
                    let end = K::find_delimiter(buf, i);
                    if let Err(e) = std::str::from_utf8(&buf[i..end]) {
                        self.pos = i + e.valid_up_to();
                        return Err(self.error("invalid UTF-8 in string"));
                    }
                    i = end;
                }
                Some(_) => {
                    self.pos = i;
                    return Err(self.error("control character in string"));
                }
                None => {
                    self.pos = i;
                    return Err(self.error("unterminated string"));
                }
            }
        }
    }

    /// Validates the escape at `i` (on the backslash); returns the index after it.
    #[cold]
    fn escape(&mut self, i: usize) -> Result<usize, Fail> {
        match self.buf.get(i + 1) {
            Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => Ok(i + 2),
            Some(b'u') => match self.buf.get(i + 2..i + 6) {
                Some(hex) if hex.iter().all(u8::is_ascii_hexdigit) => Ok(i + 6),
                _ => {
                    self.pos = i;
                    Err(self.error("invalid \\u escape: expected four hex digits"))
                }
            },
            _ => {
                self.pos = i;
                Err(self.error("invalid escape"))
            }
        }
    }
}

/// The index after the run of ASCII digits starting at `i`.
#[inline(always)]
fn skip_digits(buf: &[u8], mut i: usize) -> usize {
    while let Some(b'0'..=b'9') = buf.get(i) {
        i += 1;
    }
    i
}

fn id_kind(v: ValueType) -> Option<IdKind> {
    match v {
        ValueType::String { .. } => Some(IdKind::String),
        ValueType::Integer | ValueType::Number => Some(IdKind::Number),
        ValueType::Null => Some(IdKind::Null),
        _ => None,
    }
}

fn classify(
    seen: u8,
    version_ok: bool,
    method: Option<StrToken>,
    id: Option<IdToken>,
    buf: &[u8],
) -> Result<Kind, InvalidRequest> {
    if seen & Member::Jsonrpc.bit() == 0 {
        return Err(InvalidRequest::MissingVersion);
    }
    if !version_ok {
        return Err(InvalidRequest::BadVersion);
    }
    let result = seen & Member::Result.bit() != 0;
    let error = seen & Member::Error.bit() != 0;
    match (method, result, error, id) {
        (Some(_), true, _, _) | (Some(_), _, true, _) => Err(InvalidRequest::MethodWithResult),
        (Some(method), false, false, id) => {
            if method.escaped {
                let raw = &buf[method.raw.clone()];
                if decode_string(raw).is_none() {
                    return Err(InvalidRequest::MethodNotUnicode);
                }
            }
            Ok(match id {
                Some(id) => Kind::Request { method, id },
                None => Kind::Notification { method },
            })
        }
        (None, true, true, _) => Err(InvalidRequest::ResultAndError),
        (None, true, false, Some(id)) => Ok(Kind::Success { id }),
        (None, false, true, Some(id)) => Ok(Kind::Error { id }),
        (None, true, _, None) | (None, _, true, None) => Err(InvalidRequest::ResponseWithoutId),
        (None, false, false, _) => Err(InvalidRequest::NoMethodNoResult),
    }
}

/// Decodes the escapes of a string's raw octets (already validated by the
/// scanner) into UTF-8. `None` for a lone surrogate, which has no UTF-8 form.
pub fn decode_string(raw: &[u8]) -> Option<String> {
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        let b = raw[i];
        if b != b'\\' {
            out.push(b);
            i += 1;
            continue;
        }
        let (c, used) = decode_escape(raw, i)?;
        let mut utf8 = [0u8; 4];
        out.extend_from_slice(c.encode_utf8(&mut utf8).as_bytes());
        i += used;
    }
    String::from_utf8(out).ok()
}

/// Decodes into `out`; `None` if it does not fit or is not Unicode.
fn unescape_into(raw: &[u8], out: &mut [u8]) -> Option<usize> {
    let (mut i, mut n) = (0, 0);
    while i < raw.len() {
        if raw[i] != b'\\' {
            *out.get_mut(n)? = raw[i];
            n += 1;
            i += 1;
            continue;
        }
        let (c, used) = decode_escape(raw, i)?;
        let mut utf8 = [0u8; 4];
        let bytes = c.encode_utf8(&mut utf8).as_bytes();
        out.get_mut(n..n + bytes.len())?.copy_from_slice(bytes);
        n += bytes.len();
        i += used;
    }
    Some(n)
}

/// The character of the escape at `raw[i]` (a backslash) and the octets it spans.
fn decode_escape(raw: &[u8], i: usize) -> Option<(char, usize)> {
    let c = match raw.get(i + 1)? {
        b'"' => '"',
        b'\\' => '\\',
        b'/' => '/',
        b'b' => '\u{8}',
        b'f' => '\u{c}',
        b'n' => '\n',
        b'r' => '\r',
        b't' => '\t',
        b'u' => {
            let hi = hex4(raw.get(i + 2..i + 6)?)?;
            if (0xD800..0xDC00).contains(&hi) {
                if raw.get(i + 6..i + 8)? != b"\\u" {
                    return None;
                }
                let lo = hex4(raw.get(i + 8..i + 12)?)?;
                if !(0xDC00..0xE000).contains(&lo) {
                    return None;
                }
                let cp = 0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00);
                return Some((char::from_u32(cp)?, 12));
            }
            return Some((char::from_u32(hi)?, 6));
        }
        _ => return None,
    };
    Some((c, 2))
}

fn hex4(h: &[u8]) -> Option<u32> {
    h.iter().try_fold(0u32, |acc, &b| {
        let digit = char::from(b).to_digit(16)?;
        Some(acc << 4 | digit)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan_all(text: &str) -> Result<Scanned, ScanError> {
        let limits = Limits::default();
        let mut answers = KernelChoice::available()
            .into_iter()
            .map(|k| scan_using(k, text.as_bytes(), &limits).expect("available kernel"));
        let first = answers.next().expect("portable kernel");
        for other in answers {
            assert_eq!(first, other, "kernels disagree on {text}");
        }
        assert_eq!(first, scan(text.as_bytes(), &limits));
        first
    }

    fn kind(text: &str) -> Kind {
        match scan_all(text) {
            Ok(Scanned::Single(k)) => k,
            other => panic!("{text}: {other:?}"),
        }
    }

    fn slice<'a>(text: &'a str, r: &Range<usize>) -> &'a str {
        &text[r.clone()]
    }

    fn invalid(text: &str) -> InvalidRequest {
        match scan_all(text) {
            Err(ScanError::Invalid(i)) => i,
            other => panic!("{text}: expected invalid request, got {other:?}"),
        }
    }

    fn parse_error(text: &str) {
        match scan_all(text) {
            Err(e @ ScanError::Parse { .. }) => assert_eq!(e.jsonrpc_code(), -32700),
            other => panic!("{text}: expected parse error, got {other:?}"),
        }
    }

    // JSON-RPC 2.0 §7 examples.

    #[test]
    fn spec_positional_and_named_requests_and_their_results() {
        let t = r#"{"jsonrpc": "2.0", "method": "subtract", "params": [42, 23], "id": 1}"#;
        let Kind::Request { method, id } = kind(t) else {
            panic!()
        };
        assert_eq!(slice(t, &method.raw), "subtract");
        assert_eq!((slice(t, &id.token), id.kind), ("1", IdKind::Number));
        let t = r#"{"jsonrpc": "2.0", "method": "subtract", "params": {"subtrahend": 23, "minuend": 42}, "id": 3}"#;
        assert!(matches!(kind(t), Kind::Request { .. }));
        let t = r#"{"jsonrpc": "2.0", "result": -19, "id": 2}"#;
        let Kind::Success { id } = kind(t) else {
            panic!()
        };
        assert_eq!(slice(t, &id.token), "2");
    }

    #[test]
    fn spec_notifications() {
        let t = r#"{"jsonrpc": "2.0", "method": "update", "params": [1,2,3,4,5]}"#;
        assert!(matches!(kind(t), Kind::Notification { .. }));
        let t = r#"{"jsonrpc": "2.0", "method": "foobar"}"#;
        assert!(matches!(kind(t), Kind::Notification { .. }));
    }

    #[test]
    fn spec_error_response_keeps_string_id_with_quotes() {
        let t = r#"{"jsonrpc": "2.0", "error": {"code": -32601, "message": "Method not found"}, "id": "1"}"#;
        let Kind::Error { id } = kind(t) else {
            panic!()
        };
        assert_eq!((slice(t, &id.token), id.kind), ("\"1\"", IdKind::String));
    }

    #[test]
    fn spec_invalid_json_is_a_parse_error() {
        parse_error(r#"{"jsonrpc": "2.0", "method": "foobar, "params": "bar", "baz]"#);
        parse_error(
            r#"[ {"jsonrpc": "2.0", "method": "sum", "params": [1,2,4], "id": "1"}, {"jsonrpc": "2.0", "method" ]"#,
        );
    }

    #[test]
    fn spec_invalid_request_object() {
        assert_eq!(
            invalid(r#"{"jsonrpc": "2.0", "method": 1, "params": "bar"}"#),
            InvalidRequest::MethodNotString
        );
    }

    #[test]
    fn spec_batches() {
        assert_eq!(scan_all("[]"), Err(ScanError::EmptyBatch));
        let Ok(Scanned::Batch(els)) = scan_all("[1,2,3]") else {
            panic!()
        };
        assert_eq!(els.len(), 3);
        assert!(
            els.iter()
                .all(|e| e.kind == Err(InvalidRequest::NotAnObject))
        );
        let t = r#"[ {"jsonrpc": "2.0", "method": "sum", "params": [1,2,4], "id": "1"}, {"jsonrpc": "2.0", "method": "notify_hello", "params": [7]}, {"jsonrpc": "2.0", "method": "subtract", "params": [42,23], "id": "2"}, {"foo": "boo"}, {"jsonrpc": "2.0", "method": "foo.get", "params": {"name": "myself"}, "id": "5"}, {"jsonrpc": "2.0", "method": "get_data", "id": "9"} ]"#;
        let Ok(Scanned::Batch(els)) = scan_all(t) else {
            panic!()
        };
        assert_eq!(els.len(), 6);
        assert!(matches!(els[1].kind, Ok(Kind::Notification { .. })));
        assert_eq!(els[3].kind, Err(InvalidRequest::MissingVersion));
        assert_eq!(slice(t, &els[3].range), r#"{"foo": "boo"}"#);
        assert!(matches!(els[5].kind, Ok(Kind::Request { .. })));
    }

    // The scanner's own rules.

    #[test]
    fn version_must_be_exactly_2_0() {
        assert_eq!(
            invalid(r#"{"jsonrpc":"2.00","method":"m"}"#),
            InvalidRequest::BadVersion
        );
        assert_eq!(
            invalid(r#"{"jsonrpc":2.0,"method":"m"}"#),
            InvalidRequest::BadVersion
        );
        assert_eq!(invalid(r#"{"method":"m"}"#), InvalidRequest::MissingVersion);
        // An escaped "2.0" is still "2.0".
        assert!(matches!(
            kind(r#"{"jsonrpc":"2\u002e0","method":"m"}"#),
            Kind::Notification { .. }
        ));
    }

    #[test]
    fn method_is_compared_after_unescaping() {
        let t = r#"{"jsonrpc":"2.0","method":"tools\/call","id":7}"#;
        let Kind::Request { method, .. } = kind(t) else {
            panic!()
        };
        assert!(method.escaped);
        assert_eq!(
            decode_string(&t.as_bytes()[method.raw]).as_deref(),
            Some("tools/call")
        );
        assert_eq!(
            invalid(r#"{"jsonrpc":"2.0","method":"\ud800","id":7}"#),
            InvalidRequest::MethodNotUnicode
        );
    }

    #[test]
    fn escaped_member_names_are_recognised() {
        let t = r#"{"jsonrpc":"2.0","\u006dethod":"m","i\u0064":1}"#;
        assert!(matches!(kind(t), Kind::Request { .. }));
        assert_eq!(
            invalid(r#"{"jsonrpc":"2.0","method":"a","\u006dethod":"b"}"#),
            InvalidRequest::Duplicate("method")
        );
    }

    #[test]
    fn string_and_number_ids_differ() {
        let a = r#"{"jsonrpc":"2.0","method":"m","id":"7"}"#;
        let b = r#"{"jsonrpc":"2.0","method":"m","id":7}"#;
        let (Kind::Request { id: ia, .. }, Kind::Request { id: ib, .. }) = (kind(a), kind(b))
        else {
            panic!()
        };
        assert_ne!(slice(a, &ia.token), slice(b, &ib.token));
        let n = r#"{"jsonrpc":"2.0","method":"m","id":null}"#;
        assert!(matches!(
            kind(n),
            Kind::Request {
                id: IdToken {
                    kind: IdKind::Null,
                    ..
                },
                ..
            }
        ));
        assert_eq!(
            invalid(r#"{"jsonrpc":"2.0","method":"m","id":{}}"#),
            InvalidRequest::BadId
        );
        assert_eq!(
            invalid(r#"{"jsonrpc":"2.0","method":"m","id":true}"#),
            InvalidRequest::BadId
        );
    }

    #[test]
    fn result_and_error_never_both() {
        assert_eq!(
            invalid(r#"{"jsonrpc":"2.0","result":1,"error":{"code":1,"message":"x"},"id":1}"#),
            InvalidRequest::ResultAndError
        );
        assert_eq!(
            invalid(r#"{"jsonrpc":"2.0","method":"m","result":1,"id":1}"#),
            InvalidRequest::MethodWithResult
        );
        assert_eq!(
            invalid(r#"{"jsonrpc":"2.0","result":1}"#),
            InvalidRequest::ResponseWithoutId
        );
        assert_eq!(
            invalid(r#"{"jsonrpc":"2.0","id":1}"#),
            InvalidRequest::NoMethodNoResult
        );
    }

    #[test]
    fn error_member_must_be_a_proper_error_object() {
        for bad in [
            r#"{"jsonrpc":"2.0","error":"boom","id":1}"#,
            r#"{"jsonrpc":"2.0","error":{"code":1.5,"message":"x"},"id":1}"#,
            r#"{"jsonrpc":"2.0","error":{"message":"x"},"id":1}"#,
            r#"{"jsonrpc":"2.0","error":{"code":1,"message":2},"id":1}"#,
            r#"{"jsonrpc":"2.0","error":{"code":1,"code":2,"message":"x"},"id":1}"#,
        ] {
            assert_eq!(invalid(bad), InvalidRequest::BadErrorObject, "{bad}");
        }
        let ok = r#"{"jsonrpc":"2.0","error":{"code":-32000,"message":"x","data":{"id":9,"method":"no"}},"id":null}"#;
        assert!(matches!(kind(ok), Kind::Error { .. }));
        // Found by the differential proptest: escaped names inside `error`.
        let escaped = r#"{"jsonrpc":"2.0","error":{"co\u0064e":0,"m\u0065ssage":""},"id":0}"#;
        assert!(matches!(kind(escaped), Kind::Error { .. }));
    }

    #[test]
    fn nested_method_and_id_do_not_confuse_it() {
        let t = r#"{"params":{"method":"inner","id":99,"jsonrpc":"1.0"},"jsonrpc":"2.0","method":"outer","id":1}"#;
        let Kind::Request { method, id } = kind(t) else {
            panic!()
        };
        assert_eq!((slice(t, &method.raw), slice(t, &id.token)), ("outer", "1"));
        let t = r#"{"jsonrpc":"2.0","result":{"method":"x","id":2,"error":null},"id":3}"#;
        let Kind::Success { id } = kind(t) else {
            panic!()
        };
        assert_eq!(slice(t, &id.token), "3");
    }

    #[test]
    fn duplicate_members_are_rejected_not_guessed() {
        for (t, name) in [
            (
                r#"{"jsonrpc":"2.0","jsonrpc":"2.0","method":"m"}"#,
                "jsonrpc",
            ),
            (r#"{"jsonrpc":"2.0","method":"m","id":1,"id":2}"#, "id"),
            (
                r#"{"jsonrpc":"2.0","result":1,"result":2,"id":1}"#,
                "result",
            ),
        ] {
            assert_eq!(invalid(t), InvalidRequest::Duplicate(name));
        }
    }

    #[test]
    fn params_must_be_structured_or_null() {
        for bad in ["3", "\"x\"", "true"] {
            assert_eq!(
                invalid(&format!(
                    r#"{{"jsonrpc":"2.0","method":"m","params":{bad}}}"#
                )),
                InvalidRequest::BadParams,
                "{bad}"
            );
        }
        let lsp_shutdown = br#"{"id":"b","method":"shutdown","jsonrpc":"2.0","params":null}"#;
        assert!(matches!(
            scan(lsp_shutdown, &Limits::default()),
            Ok(Scanned::Single(Kind::Request { .. }))
        ));
    }

    #[test]
    fn whitespace_anywhere_json_allows_it() {
        let t = " \t\r\n{ \"jsonrpc\" \n:\t\"2.0\" , \"method\" : \"m\" ,\"id\" : -1.5e+3 } \n";
        let Kind::Request { id, .. } = kind(t) else {
            panic!()
        };
        assert_eq!(slice(t, &id.token), "-1.5e+3");
    }

    #[test]
    fn parse_errors() {
        for bad in [
            "",
            " ",
            "{",
            "{\"a\"}",
            "{\"a\":}",
            "{\"a\":1,}",
            "[1,]",
            "01",
            "-",
            "1.",
            "1e",
            "tru",
            "nul",
            "\"\\x\"",
            "\"\\u12\"",
            "\"a\u{1}\"",
            "{\"a\":1}x",
            "{'a':1}",
            "[1 2]",
            "\"unterminated",
        ] {
            parse_error(bad);
        }
        assert!(matches!(
            scan(b"\"\xff\"", &Limits::default()),
            Err(ScanError::Parse { .. })
        ));
    }

    #[test]
    fn non_object_top_level_is_invalid_request() {
        for t in ["1", "\"x\"", "null", "true"] {
            assert_eq!(invalid(t), InvalidRequest::NotAnObject);
        }
    }

    #[test]
    fn limits_have_their_own_errors() {
        let limits = Limits {
            max_len: 64,
            max_depth: 3,
            max_members: 4,
            max_batch: 2,
        };
        let long = format!(r#"{{"jsonrpc":"2.0","method":"{}"}}"#, "m".repeat(64));
        assert!(matches!(
            scan(long.as_bytes(), &limits),
            Err(ScanError::TooLarge { limit: 64, .. })
        ));
        let deep = r#"{"jsonrpc":"2.0","method":"m","params":[[[1]]]}"#;
        assert_eq!(
            scan(deep.as_bytes(), &limits),
            Err(ScanError::TooDeep { limit: 3 })
        );
        let wide = r#"{"jsonrpc":"2.0","method":"m","params":[1,2,3,4,5]}"#;
        assert_eq!(
            scan(wide.as_bytes(), &limits),
            Err(ScanError::TooManyMembers { limit: 4 })
        );
        let batch = r#"[{"jsonrpc":"2.0","method":"m"},{"jsonrpc":"2.0","method":"m"},{"jsonrpc":"2.0","method":"m"}]"#;
        let limits = Limits {
            max_len: 1024,
            ..limits
        };
        assert_eq!(
            scan(batch.as_bytes(), &limits),
            Err(ScanError::BatchTooLarge { len: 3, limit: 2 })
        );
    }

    #[test]
    fn member_limit_is_exact_at_every_nesting() {
        let limits = Limits {
            max_members: 4,
            ..Limits::default()
        };
        for (text, ok) in [
            (r#"{"jsonrpc":"2.0","method":"m","params":[1,2,3,4]}"#, true),
            (
                r#"{"jsonrpc":"2.0","method":"m","params":[1,2,3,4,5]}"#,
                false,
            ),
            (
                r#"{"jsonrpc":"2.0","method":"m","params":[[],[],[],[]]}"#,
                true,
            ),
            (
                r#"{"jsonrpc":"2.0","method":"m","params":[[],[],[],[],[]]}"#,
                false,
            ),
            (
                r#"{"jsonrpc":"2.0","method":"m","params":{"a":{},"b":1,"c":2,"d":3}}"#,
                true,
            ),
            (
                r#"{"jsonrpc":"2.0","method":"m","params":{"a":{},"b":1,"c":2,"d":3,"e":4}}"#,
                false,
            ),
        ] {
            let got = scan(text.as_bytes(), &limits);
            assert_eq!(got.is_ok(), ok, "{text}: {got:?}");
        }
    }

    #[test]
    fn deep_nesting_past_the_inline_stack_and_up_to_the_limit() {
        let nest = |n: usize| {
            format!(
                r#"{{"jsonrpc":"2.0","method":"m","params":{}1{}}}"#,
                "[".repeat(n),
                "]".repeat(n)
            )
        };
        let limits = Limits::default(); // depth 128: the message is depth 1
        assert!(scan(nest(127).as_bytes(), &limits).is_ok());
        assert_eq!(
            scan(nest(128).as_bytes(), &limits),
            Err(ScanError::TooDeep { limit: 128 })
        );
        let limits = Limits {
            max_depth: 300,
            ..Limits::default()
        };
        assert!(scan(nest(299).as_bytes(), &limits).is_ok());
        assert!(matches!(
            scan(&nest(200).as_bytes()[..300], &limits),
            Err(ScanError::Parse { .. })
        ));
    }

    #[test]
    fn unicode_in_strings_is_validated_and_kept() {
        let t = "{\"jsonrpc\":\"2.0\",\"method\":\"\u{65e5}\u{672c}\",\"params\":[\"\u{1F600}\u{e9}\"],\"id\":\"\u{4e2d}\"}";
        let Kind::Request { method, id } = kind(t) else {
            panic!()
        };
        assert_eq!(slice(t, &method.raw), "\u{65e5}\u{672c}");
        assert_eq!(slice(t, &id.token), "\"\u{4e2d}\"");
    }
}
