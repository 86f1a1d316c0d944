//! The messages a run sends: built from the scenario's mix (methods,
//! weights, notifications, batches), their `params` from templates.

use crate::scenario::Scenario;
use crate::template::{Rng, Template};

/// One request inside a send: its id, and which mix entry it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Expect {
    pub id: u64,
    pub message: usize,
}

/// One send: the text, and the replies it expects (none for a
/// notification, several for a batch).
#[derive(Clone, Debug)]
pub struct Outbound {
    pub text: String,
    pub expects: Vec<Expect>,
    /// Notifications inside it.
    pub notifications: u32,
    pub batch: bool,
}

/// Builds the messages of a run from the scenario's mix.
pub struct Generator {
    templates: Vec<Option<Template>>,
    methods: Vec<String>,
    /// Each method as a JSON string token, encoded once.
    method_tokens: Vec<String>,
    cumulative: Vec<f64>,
    notification_share: f64,
    batch_share: f64,
    batch_size: usize,
    rng: Rng,
    /// A replay's sends, and the next one's index.
    replay: Option<(std::sync::Arc<crate::replay::Recording>, usize)>,
}

impl Generator {
    pub fn new(s: &Scenario, seed: u64) -> Result<Self, String> {
        let mut cumulative = Vec::new();
        let mut total = 0.0;
        for m in &s.mix.messages {
            total += m.weight;
            cumulative.push(total);
        }
        let templates = s
            .mix
            .messages
            .iter()
            .map(|m| m.params.as_deref().map(Template::parse).transpose())
            .collect::<Result<_, _>>()?;
        Ok(Self {
            templates,
            methods: s.mix.messages.iter().map(|m| m.method.clone()).collect(),
            method_tokens: s
                .mix
                .messages
                .iter()
                .map(|m| serde_json::Value::String(m.method.clone()).to_string())
                .collect(),
            cumulative: cumulative.iter().map(|c| c / total).collect(),
            notification_share: s.mix.notification_share,
            batch_share: s.mix.batch_share,
            batch_size: s.mix.batch_size,
            rng: Rng::new(seed),
            replay: s.replay.as_ref().map(|r| (r.recording.clone(), 0)),
        })
    }

    fn pick(&mut self) -> usize {
        let u = self.rng.unit();
        self.cumulative
            .iter()
            .position(|&c| u < c)
            .unwrap_or(self.cumulative.len() - 1)
    }

    fn object(&mut self, out: &mut String, i: usize, id: Option<u64>, seq: u64) {
        use std::fmt::Write;
        out.push_str("{\"jsonrpc\":\"2.0\",");
        if let Some(id) = id {
            let _ = write!(out, "\"id\":{id},");
        }
        out.push_str("\"method\":");
        out.push_str(&self.method_tokens[i]);
        if let Some(t) = &self.templates[i] {
            out.push_str(",\"params\":");
            let mut rng = self.rng.clone();
            t.render_into(out, seq, &mut rng);
            self.rng = rng;
        }
        out.push('}');
    }

    /// The next send; `next_id` hands out ids unique across the run.
    pub fn next(&mut self, mut next_id: impl FnMut() -> u64) -> Outbound {
        // A replay's schedule has a slot per recorded send, no more.
        if let Some((recording, k)) = &mut self.replay {
            let send = recording.sends.get(*k);
            *k += 1;
            if let Some(send) = send {
                return replayed(send, &self.method_tokens, next_id);
            }
        }
        let u = self.rng.unit();
        let mut text = String::with_capacity(128);
        if u < self.notification_share {
            let i = self.pick();
            let seq = next_id();
            self.object(&mut text, i, None, seq);
            return Outbound {
                text,
                expects: Vec::new(),
                notifications: 1,
                batch: false,
            };
        }
        if u < self.notification_share + self.batch_share {
            let mut expects = Vec::new();
            let mut notifications = 0;
            text.push('[');
            for k in 0..self.batch_size {
                if k > 0 {
                    text.push(',');
                }
                let i = self.pick();
                let id = next_id();
                if self.rng.unit() < self.notification_share {
                    notifications += 1;
                    self.object(&mut text, i, None, id);
                } else {
                    expects.push(Expect { id, message: i });
                    self.object(&mut text, i, Some(id), id);
                }
            }
            text.push(']');
            return Outbound {
                text,
                expects,
                notifications,
                batch: true,
            };
        }
        let i = self.pick();
        let id = next_id();
        self.object(&mut text, i, Some(id), id);
        Outbound {
            text,
            expects: vec![Expect { id, message: i }],
            notifications: 0,
            batch: false,
        }
    }

    pub fn methods(&self) -> &[String] {
        &self.methods
    }

    /// The requests the next send would carry, drawn as [`Generator::next`]
    /// draws them but without building its text or taking ids: a send the
    /// schedule placed and the run does not send (dropped, counted).
    pub fn skip(&mut self) -> u64 {
        if let Some((recording, k)) = &mut self.replay {
            let send = recording.sends.get(*k);
            *k += 1;
            return send.map_or(0, |s| s.objects.iter().filter(|o| o.request).count() as u64);
        }
        let u = self.rng.unit();
        if u < self.notification_share {
            return 0;
        }
        if u < self.notification_share + self.batch_share {
            let mut requests = 0;
            for _ in 0..self.batch_size {
                let _ = self.pick();
                if self.rng.unit() >= self.notification_share {
                    requests += 1;
                }
            }
            return requests;
        }
        1
    }
}

/// A recorded send as sent again: its methods and params as captured, the
/// run's own ids.
fn replayed(
    send: &crate::replay::Recorded,
    method_tokens: &[String],
    mut next_id: impl FnMut() -> u64,
) -> Outbound {
    use std::fmt::Write;
    let mut text = String::with_capacity(128);
    let mut expects = Vec::new();
    let mut notifications = 0;
    if send.batch {
        text.push('[');
    }
    for (i, o) in send.objects.iter().enumerate() {
        if i > 0 {
            text.push(',');
        }
        text.push_str("{\"jsonrpc\":\"2.0\",");
        if o.request {
            let id = next_id();
            let _ = write!(text, "\"id\":{id},");
            expects.push(Expect {
                id,
                message: o.method,
            });
        } else {
            notifications += 1;
        }
        text.push_str("\"method\":");
        text.push_str(method_tokens.get(o.method).map_or("\"\"", String::as_str));
        if let Some(p) = &o.params {
            text.push_str(",\"params\":");
            text.push_str(p);
        }
        text.push('}');
    }
    if send.batch {
        text.push(']');
    }
    Outbound {
        text,
        expects,
        notifications,
        batch: send.batch,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sends_are_valid_json_rpc_with_unique_ids() {
        let s = Scenario::parse(
            r#"
name = "t"
[load]
model = "open"
rate = 1
[mix]
notification_share = 0.2
batch_share = 0.3
batch_size = 4
[[mix.message]]
method = "echo"
params = '[{seq}]'
[[mix.message]]
method = "fail"
"#,
            "t",
        )
        .expect("scenario");
        let mut g = Generator::new(&s, 3).expect("generator");
        let mut id = 0;
        let mut seen = std::collections::HashSet::new();
        for _ in 0..500 {
            let send = g.next(|| {
                id += 1;
                id
            });
            let v: serde_json::Value = serde_json::from_str(&send.text).expect("JSON");
            let objects = match &v {
                serde_json::Value::Array(a) => a.clone(),
                o => vec![o.clone()],
            };
            let with_id: Vec<_> = objects.iter().filter(|o| o.get("id").is_some()).collect();
            assert_eq!(with_id.len(), send.expects.len());
            for e in &send.expects {
                assert!(seen.insert(e.id), "duplicate id {}", e.id);
            }
        }
    }
}
