//! The Language Server Protocol through a pair (`--protocol lsp`): its
//! `Content-Length` framing at the TCP ingress and at `connect`, and on the
//! child process's stdio at the origin; server-to-client requests and
//! notifications both ways; the session ending with its server; hostile
//! framing answered as `src/lsp.rs` documents, with a healthy session beside
//! it unaffected; and real language servers (pylsp from PyPI, pyright from
//! npm) driven by a real client library (pygls) direct and through the pair,
//! over QUIC and over TLS, giving the same results.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::process::{Child, Command};

use crate::support::{BIN, Client, Pair, PairOptions, Up};
use npamp_gateway::lsp::{LspReader, write_message};

/// An LSP client: LSP-framed messages on a TCP connection or a `connect`
/// process's stdio.
struct Lsp {
    write: Box<dyn AsyncWrite + Unpin + Send>,
    read: LspReader<Box<dyn AsyncRead + Unpin + Send>>,
    connect: Option<Child>,
}

impl Lsp {
    async fn tcp(url: &str) -> Lsp {
        let addr = url.strip_prefix("tcp://").expect("tcp URL");
        let tcp = tokio::net::TcpStream::connect(addr).await.expect("TCP");
        let (r, w) = tcp.into_split();
        Lsp {
            write: Box::new(w),
            read: LspReader::new(Box::new(r), 64 << 20),
            connect: None,
        }
    }

    /// `npamp-gateway connect --protocol lsp` to the pair's origin, as an
    /// editor runs its server command.
    async fn connect(pair: &Pair) -> Lsp {
        let key = pair.keys.0.join("edge.key");
        let mut child = Command::new(BIN)
            .args(["connect", "--protocol", "lsp", "--peer", &pair.peer()])
            .arg("--identity")
            .arg(&key)
            .args(["--trust", &pair.origin_pub])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("connect");
        let write = Box::new(child.stdin.take().expect("stdin"));
        let read = Box::new(child.stdout.take().expect("stdout"));
        Lsp {
            write,
            read: LspReader::new(read, 64 << 20),
            connect: Some(child),
        }
    }

    async fn send(&mut self, v: Value) {
        write_message(&mut self.write, v.to_string().as_bytes())
            .await
            .expect("send");
        self.write.flush().await.expect("flush");
    }

    async fn send_raw(&mut self, octets: &[u8]) {
        self.write.write_all(octets).await.expect("send");
        self.write.flush().await.expect("flush");
    }

    /// The next message, or `None` when the stream ended.
    async fn recv(&mut self) -> Option<Value> {
        let next = tokio::time::timeout(Duration::from_secs(20), self.read.next())
            .await
            .expect("a message in time");
        next.ok()
            .flatten()
            .map(|m| serde_json::from_slice(&m).expect("JSON"))
    }

    async fn call(&mut self, v: Value) -> Value {
        self.send(v).await;
        self.recv().await.expect("a reply")
    }
}

/// A pair for LSP: `--protocol lsp` on both sides, a TCP ingress, and the
/// mock upstream as the origin's child (which answers in the framing it is
/// spoken to in: LSP's, as the origin writes it under `--protocol lsp`).
async fn lsp_pair(transport: &str, edge_extra: &[&str]) -> Pair {
    let edge_extra = [&["--protocol", "lsp"], edge_extra].concat();
    Pair::start(PairOptions {
        transport,
        upstream: Up::Stdio,
        origin_extra: &["--protocol", "lsp"],
        edge_extra: &edge_extra,
        ingresses: &["tcp"],
        ..Default::default()
    })
    .await
}

fn request(id: u64, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_lsp_session_crosses_the_pair_both_ways_over_quic_and_tls() {
    for transport in ["quic", "tls"] {
        let pair = lsp_pair(transport, &[]).await;
        let tcp = pair.ingress("tcp");
        for mut lsp in [Lsp::tcp(&tcp).await, Lsp::connect(&pair).await] {
            let params = json!({"processId": null, "rootUri": "file:///w", "capabilities": {}});
            let r = lsp.call(request(1, "initialize", params.clone())).await;
            assert_eq!(r, json!({"jsonrpc": "2.0", "id": 1, "result": params}));
            // A server-to-client request (as `workspace/configuration`),
            // answered by the client, then the answer to the request that
            // caused it.
            lsp.send(request(2, "ask", json!({"items": [{"section": "python"}]})))
                .await;
            let question = lsp.recv().await.expect("the server's request");
            assert_eq!(question["method"], "mock/question", "{question}");
            let qid = question["id"].clone();
            lsp.send(json!({"jsonrpc": "2.0", "id": qid, "result": [null]}))
                .await;
            let r = lsp.recv().await.expect("the answer");
            assert_eq!(r["id"], 2, "{r}");
            assert_eq!(r["result"], json!({"answer": [null]}), "{r}");
            // A server notification (as `textDocument/publishDiagnostics`),
            // and a message of megabytes (a full-document sync) both ways.
            let big = "x".repeat(3 << 20);
            lsp.send(request(3, "notify", json!({"text": big}))).await;
            let mut got = [lsp.recv().await, lsp.recv().await];
            got.sort_by_key(|m| m.as_ref().map(|m| m.get("method").is_none()));
            let [note, reply] = got;
            let (note, reply) = (note.expect("notification"), reply.expect("reply"));
            assert_eq!(note["method"], "mock/notified");
            assert_eq!(note["params"]["text"].as_str().map(str::len), Some(3 << 20));
            assert_eq!(reply["id"], 3);
            assert_eq!(
                reply["result"]["text"].as_str().map(str::len),
                Some(3 << 20)
            );
        }
        // A line client on the same ingress is still a line client
        // (`--framing auto`).
        let mut lines = Client::tcp(&tcp).await;
        let r = lines.call(request(4, "echo", json!([1]))).await;
        assert_eq!(r["result"], json!([1]), "{transport}: {r}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tcp_upstream_is_spoken_to_in_lsp_and_its_requests_reach_the_client() {
    // The mock on TCP answers in the framing it is spoken to in: the
    // origin writes LSP's (`--protocol lsp`) and reads what comes back.
    let (_mock, url) = crate::support::mock("tcp").await;
    let pair = Pair::start(PairOptions {
        upstream: Up::Given,
        origin_extra: &["--protocol", "lsp", "--upstream", &url],
        edge_extra: &["--protocol", "lsp"],
        ingresses: &["tcp"],
        ..Default::default()
    })
    .await;
    let mut lsp = Lsp::tcp(&pair.ingress("tcp")).await;
    let r = lsp.call(request(1, "echo", json!({"a": 1}))).await;
    assert_eq!(r["result"], json!({"a": 1}), "{r}");
    lsp.send(request(2, "ask", json!({"items": [{}]}))).await;
    let question = lsp.recv().await.expect("the server's request");
    assert_eq!(question["method"], "mock/question", "{question}");
    lsp.send(json!({"jsonrpc": "2.0", "id": question["id"], "result": [null]}))
        .await;
    let r = lsp.recv().await.expect("the answer");
    assert_eq!(
        (r["id"].clone(), r["result"].clone()),
        (json!(2), json!({"answer": [null]}))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_session_ends_with_its_language_server_and_connect_exits() {
    let pair = lsp_pair("quic", &[]).await;
    // Over TCP: the server exits (the mock's `exit`, as a language server
    // exits on LSP's `exit`): the request it took is answered
    // MayHaveExecuted (it may have run), and the connection closes; no
    // server is started again under it.
    let mut lsp = Lsp::tcp(&pair.ingress("tcp")).await;
    assert_eq!(lsp.call(request(1, "echo", json!([]))).await["id"], 1);
    lsp.send(request(2, "exit", json!([]))).await;
    let r = lsp.recv().await.expect("an answer");
    assert_eq!(r["id"], 2, "{r}");
    assert_eq!(r["error"]["code"], -32014, "{r}");
    assert!(lsp.recv().await.is_none(), "the connection closes");
    // Over connect: the process exits, and says it was fine.
    let mut lsp = Lsp::connect(&pair).await;
    assert_eq!(lsp.call(request(1, "echo", json!([]))).await["id"], 1);
    lsp.send(request(2, "exit", json!([]))).await;
    let _ = lsp.recv().await;
    let mut child = lsp.connect.take().expect("connect");
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .expect("connect exits when its server does")
        .expect("status");
    assert!(status.success(), "{status}");
    // A server that does not heed LSP's `exit` (the mock takes it as any
    // notification) is stopped after the grace period, as when its
    // association ends (stdin closed: the mock exits then), and the
    // session ends with it.
    let mut lsp = Lsp::tcp(&pair.ingress("tcp")).await;
    assert_eq!(lsp.call(request(1, "echo", json!([]))).await["id"], 1);
    let sent = std::time::Instant::now();
    lsp.send(json!({"jsonrpc": "2.0", "method": "exit"})).await;
    assert!(lsp.recv().await.is_none(), "the connection closes");
    let took = sent.elapsed();
    assert!(
        took >= Duration::from_millis(1900) && took < Duration::from_secs(8),
        "{took:?}: the grace of 2 s, then stdin closed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_lsp_framing_is_answered_as_documented_beside_a_healthy_session() {
    let pair = lsp_pair("quic", &["--max-body", "4096", "--stall-timeout", "1s"]).await;
    let tcp = pair.ingress("tcp");
    let mut healthy = Lsp::tcp(&tcp).await;
    let mut n = 0;
    let mut healthy_call = async || {
        n += 1;
        let r = healthy.call(request(n, "echo", json!([n]))).await;
        assert_eq!(r["result"], json!([n]), "the healthy session: {r}");
    };
    healthy_call().await;

    // Each case: what is sent, what the answer's error says, and whether
    // the connection carries on.
    let pad = "y".repeat(5000);
    let oversized = format!(r#"{{"jsonrpc":"2.0","id":7,"method":"echo","params":["{pad}"]}}"#);
    let endless = format!("Content-Length: 3\r\nX-Pad: {}", "z".repeat(9000));
    let cases: [(&str, Vec<u8>, i64, &str, bool); 6] = [
        (
            "no Content-Length",
            b"Content-Type: application/vscode-jsonrpc\r\n\r\n{}".to_vec(),
            -32700,
            "without Content-Length",
            false,
        ),
        (
            "a negative Content-Length",
            b"Content-Length: -5\r\n\r\n{}".to_vec(),
            -32700,
            "is not a length",
            false,
        ),
        (
            "a Content-Length over --max-body",
            format!("Content-Length: {}\r\n\r\n{oversized}", oversized.len()).into_bytes(),
            -32600,
            "exceeds the limit of 4096",
            true,
        ),
        (
            "a header block that never ends",
            endless.into_bytes(),
            -32700,
            "more than 8192 octets",
            false,
        ),
        (
            "a body shorter than announced, then the end of the stream",
            b"Content-Length: 100\r\n\r\n{\"jsonrpc\":\"2.0\"}".to_vec(),
            -32700,
            "ended inside a message: 17 of the 100 octets",
            false,
        ),
        (
            "a body shorter than announced, and the stream left open",
            b"Content-Length: 100\r\n\r\n{\"jsonrpc\":\"2.0\"}".to_vec(),
            -32700,
            "no octet of a message begun came for 1.0 s (--stall-timeout)",
            false,
        ),
    ];
    for (what, octets, code, says, carries_on) in cases {
        let mut hostile = Lsp::tcp(&tcp).await;
        hostile.send_raw(&octets).await;
        if what.contains("end of the stream") {
            hostile.write.shutdown().await.expect("half-close");
        }
        let r = hostile
            .recv()
            .await
            .unwrap_or_else(|| panic!("{what}: no answer"));
        assert_eq!(r["error"]["code"], code, "{what}: {r}");
        let data = r["error"]["data"].as_str().unwrap_or_default();
        assert!(data.contains(says), "{what}: {r}");
        if code == -32600 {
            assert_eq!(r["id"], 7, "{what}: the id its head shows: {r}");
        }
        if carries_on {
            let r = hostile.call(request(8, "echo", json!(["after"]))).await;
            assert_eq!(r["result"], json!(["after"]), "{what}: {r}");
        } else {
            assert!(
                hostile.recv().await.is_none(),
                "{what}: the connection closes"
            );
        }
        healthy_call().await;
    }

    // A notification over --max-body (a whole file opened): no answer can
    // name it, so the editor is told in a way it shows its user; the
    // session carries on.
    let text = "z".repeat(5000);
    let did_open = json!({"jsonrpc": "2.0", "method": "textDocument/didOpen",
        "params": {"textDocument": {"uri": "file:///w/big.py", "text": text}}});
    let mut editor = Lsp::tcp(&tcp).await;
    editor.send(did_open).await;
    let shown = editor.recv().await.expect("told");
    assert_eq!(shown["method"], "window/showMessage", "{shown}");
    assert_eq!(shown["params"]["type"], 1, "{shown}");
    let message = shown["params"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("over --max-body (4096)"), "{shown}");
    let r = editor.call(request(9, "echo", json!([9]))).await;
    assert_eq!(r["result"], json!([9]), "{r}");
    healthy_call().await;
}

/// Where `.ci/lsp-tools.sh` installs the language servers and pygls
/// (`NPAMP_LSP_TOOLS` elsewhere).
fn tools() -> PathBuf {
    std::env::var_os("NPAMP_LSP_TOOLS").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/lsp-tools"),
        PathBuf::from,
    )
}

/// Runs `drive.py` (a pygls client playing an editor) against `server`;
/// its one line of JSON, or why it failed.
async fn drive(flavour: &str, how: &[&str]) -> Result<Value, String> {
    let python = tools().join("venv/bin/python");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/lsp/drive.py");
    let out = Command::new(python)
        .arg(script)
        .args(["--server", flavour, "--timeout", "60"])
        .args(how)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(120), out)
        .await
        .map_err(|_| "drive.py ran over 120 s".to_owned())?
        .map_err(|e| format!("drive.py: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "drive.py {how:?}: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    serde_json::from_slice(&out.stdout).map_err(|e| format!("drive.py's output: {e}"))
}

/// Processes but `except` whose command line holds `marker`.
fn running_with(marker: &str, except: i32) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let except = except.to_string();
    dir.flatten()
        .filter(|e| e.file_name().to_str() != Some(except.as_str()))
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains(marker))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_language_servers_give_the_same_results_through_the_pair() {
    let tools = tools();
    let pylsp = tools.join("venv/bin/pylsp");
    let pyright = tools.join("npm/node_modules/.bin/pyright-langserver");
    let mut servers = Vec::new();
    match pylsp.exists() && tools.join("venv/bin/python").exists() {
        true => servers.push(("pylsp", vec![pylsp.display().to_string()])),
        false => eprintln!(
            "==== SKIPPED: pylsp and pygls are not in {} (run .ci/lsp-tools.sh) ====",
            tools.display()
        ),
    }
    match pyright.exists() && !servers.is_empty() {
        true => servers.push((
            "pyright",
            vec![pyright.display().to_string(), "--stdio".into()],
        )),
        false => eprintln!(
            "==== SKIPPED: pyright (or pygls) is not in {} (run .ci/lsp-tools.sh) ====",
            tools.display()
        ),
    }
    for (flavour, argv) in servers {
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        let direct = drive(flavour, &[&["--io", "--"], &argv[..]].concat())
            .await
            .unwrap_or_else(|e| panic!("{flavour} direct: {e}"));
        assert_eq!(direct["server_exit"], 0, "{flavour} direct: {direct}");
        let mut over_tcp = direct.clone();
        over_tcp.as_object_mut().map(|o| o.remove("server_exit"));
        for transport in ["quic", "tls"] {
            for ingress in ["connect", "tcp"] {
                // A marker on the server's command line (an argument both
                // servers ignore) finds its process afterwards.
                let marker = format!(
                    "npamp-lsp-{}-{flavour}-{transport}-{ingress}",
                    std::process::id()
                );
                let command = format!("{} --log-file /tmp/{marker}.log", argv.join(" "));
                let command = match flavour {
                    "pylsp" => command,
                    _ => format!("{} --{marker}", argv.join(" ")),
                };
                let pair = Pair::start(PairOptions {
                    transport,
                    upstream: Up::Given,
                    origin_extra: &["--protocol", "lsp", "--upstream-cmd", &command],
                    edge_extra: &["--protocol", "lsp"],
                    ingresses: &["tcp"],
                    ..Default::default()
                })
                .await;
                let what = format!("{flavour} through the pair over {transport}, by {ingress}");
                let got = match ingress {
                    "connect" => {
                        let key = pair.keys.0.join("edge.key").display().to_string();
                        let peer = pair.peer();
                        let connect = [
                            "--io",
                            "--",
                            BIN,
                            "connect",
                            "--protocol",
                            "lsp",
                            "--peer",
                            &peer,
                            "--identity",
                            &key,
                            "--trust",
                            &pair.origin_pub,
                        ];
                        drive(flavour, &connect).await
                    }
                    _ => {
                        let tcp = pair.ingress("tcp");
                        let addr = tcp.strip_prefix("tcp://").expect("tcp URL");
                        drive(flavour, &["--tcp", addr]).await
                    }
                };
                let got = got.unwrap_or_else(|e| panic!("{what}: {e}"));
                let want = if ingress == "tcp" { &over_tcp } else { &direct };
                assert_eq!(&got, want, "{what}");
                // The server exited on `exit`, and nothing started another.
                let origin = pair.origin.pid();
                let mut left = running_with(&marker, origin);
                for _ in 0..100 {
                    if left.is_empty() {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    left = running_with(&marker, origin);
                }
                assert!(left.is_empty(), "{what}: still running: {left:?}");
                eprintln!("{what}: the same as direct, and the server is gone");
                let _ = std::fs::remove_file(format!("/tmp/{marker}.log"));
            }
        }
    }
}
