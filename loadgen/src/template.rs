//! `params` templates: a message's parameters with placeholders
//! (`{seq}`, `{rand:N}`, `{hex:N}`, `{bytes:N}`), and the seeded generator
//! they draw from.

/// A small, fast, seeded generator for test data (not for cryptography).
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed.max(1))
    }

    /// xorshift64*.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[derive(Clone, Debug, PartialEq)]
enum Part {
    Text(String),
    Seq,
    Rand(u64),
    Hex(usize),
    Bytes(usize),
}

/// A parsed `params` template.
#[derive(Clone, Debug, PartialEq)]
pub struct Template(Vec<Part>);

impl Template {
    /// Placeholders: `{seq}`, `{rand:N}`, `{hex:N}`, `{bytes:N}`; any other
    /// `{` is literal JSON.
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut parts = Vec::new();
        let mut text = String::new();
        let mut rest = s;
        while let Some(i) = rest.find('{') {
            text.push_str(&rest[..i]);
            let after = &rest[i + 1..];
            let end = after.find('}');
            let placeholder = end.map(|e| &after[..e]).filter(|p| {
                p.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == ':' || c == '_')
                    && !p.is_empty()
            });
            match (placeholder, end) {
                (Some(p), Some(e)) => {
                    let part = match p.split_once(':') {
                        None if p == "seq" => Part::Seq,
                        Some(("rand", n)) => Part::Rand(number(n, p)?.max(1) as u64),
                        Some(("hex", n)) => Part::Hex(number(n, p)?),
                        Some(("bytes", n)) => Part::Bytes(number(n, p)?),
                        _ => {
                            return Err(format!(
                                "unknown placeholder {{{p}}}: expected {{seq}}, {{rand:N}}, {{hex:N}} or {{bytes:N}}"
                            ));
                        }
                    };
                    if !text.is_empty() {
                        parts.push(Part::Text(std::mem::take(&mut text)));
                    }
                    parts.push(part);
                    rest = &after[e + 1..];
                }
                _ => {
                    text.push('{');
                    rest = after;
                }
            }
        }
        text.push_str(rest);
        if !text.is_empty() {
            parts.push(Part::Text(text));
        }
        Ok(Self(parts))
    }

    pub fn render(&self, seq: u64, rng: &mut Rng) -> String {
        let mut out = String::new();
        self.render_into(&mut out, seq, rng);
        out
    }

    pub fn render_into(&self, out: &mut String, seq: u64, rng: &mut Rng) {
        use std::fmt::Write;
        for p in &self.0 {
            match p {
                Part::Text(t) => out.push_str(t),
                Part::Seq => {
                    let _ = write!(out, "{seq}");
                }
                Part::Rand(n) => {
                    let _ = write!(out, "{}", rng.next_u64() % n);
                }
                Part::Hex(n) => {
                    for _ in 0..*n {
                        let d = (rng.next_u64() % 16) as u32;
                        out.push(char::from_digit(d, 16).unwrap_or('0'));
                    }
                }
                Part::Bytes(n) => out.extend(std::iter::repeat_n('x', *n)),
            }
        }
    }
}

fn number(n: &str, p: &str) -> Result<usize, String> {
    n.parse()
        .map_err(|_| format!("{{{p}}}: {n:?} is not a number"))
        .and_then(|v: usize| {
            if v > 64 << 20 {
                Err(format!("{{{p}}}: {v} is larger than 64 MiB"))
            } else {
                Ok(v)
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_render_and_literal_braces_stay() {
        let t = Template::parse(r#"{"n":{seq},"r":{rand:10},"h":"{hex:4}","b":"{bytes:3}"}"#)
            .expect("parse");
        let mut rng = Rng::new(7);
        let s = t.render(42, &mut rng);
        let v: serde_json::Value = serde_json::from_str(&s).expect("JSON");
        assert_eq!(v["n"], 42);
        assert!(v["r"].as_u64().expect("r") < 10);
        assert_eq!(v["h"].as_str().expect("h").len(), 4);
        assert_eq!(v["b"], "xxx");
        assert!(Template::parse("{bogus:1}").is_err());
    }
}
