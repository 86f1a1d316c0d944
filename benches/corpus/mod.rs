//! A fixed corpus of realistic JSON-RPC messages, generated deterministically
//! (no fixture files): MCP, Ethereum, LSP, and a 100-element batch.

/// xorshift64*: deterministic filler for hashes and addresses.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn hex(&mut self, octets: usize) -> String {
        let mut s = String::from("0x");
        for _ in 0..octets {
            s.push_str(&format!("{:02x}", self.next() as u8));
        }
        s
    }

    fn quantity(&mut self, max: u64) -> String {
        format!("0x{:x}", self.next() % max)
    }
}

pub struct Message {
    pub name: &'static str,
    pub text: String,
}

pub fn corpus() -> Vec<Message> {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    vec![
        Message {
            name: "mcp_initialize",
            text: mcp_initialize(),
        },
        Message {
            name: "mcp_tools_call",
            text: mcp_tools_call(),
        },
        Message {
            name: "mcp_tools_call_result",
            text: mcp_tools_call_result(),
        },
        Message {
            name: "eth_call",
            text: eth_call(&mut rng),
        },
        Message {
            name: "mcp_tools_list_result",
            text: mcp_tools_list_result(),
        },
        Message {
            name: "lsp_completion_result",
            text: lsp_completion_result(),
        },
        Message {
            name: "eth_getBlockByNumber_result",
            text: eth_get_block_result(&mut rng),
        },
        Message {
            name: "eth_getLogs_result",
            text: eth_get_logs_result(&mut rng),
        },
        Message {
            name: "batch_100_eth_getBalance",
            text: batch(&mut rng),
        },
    ]
}

fn mcp_initialize() -> String {
    r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{"roots":{"listChanged":true},"sampling":{},"elicitation":{}},"clientInfo":{"name":"example-client","title":"Example Client Display Name","version":"1.0.0"}}}"#.into()
}

fn mcp_tools_call() -> String {
    r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"get_weather","arguments":{"location":"New York","units":"imperial"},"_meta":{"progressToken":"a3f1"}}}"#.into()
}

fn mcp_tools_call_result() -> String {
    "{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"Current weather in New York:\\nTemperature: 72\u{b0}F\\nConditions: Partly cloudy\\nHumidity: 65%\\nWind: 8 mph NW\"}],\"isError\":false}}".into()
}

fn eth_call(rng: &mut Rng) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"eth_call","params":[{{"from":"{}","to":"{}","gas":"0x1e8480","data":"0x70a08231000000000000000000000000{}"}},"latest"]}}"#,
        rng.hex(20),
        rng.hex(20),
        &rng.hex(20)[2..]
    )
}

fn mcp_tools_list_result() -> String {
    let tools: Vec<String> = [
        ("get_weather", "Get current weather information for a location"),
        ("search_files", "Search the workspace for files whose name or content matches a pattern"),
        ("read_file", "Read the complete contents of a file from the file system"),
        ("run_query", "Run a read-only SQL query against the analytics warehouse"),
        ("create_issue", "Create an issue in the tracker with a title, body and labels"),
    ]
    .iter()
    .map(|(name, desc)| {
        format!(
            r#"{{"name":"{name}","title":"{name} tool","description":"{desc}","inputSchema":{{"type":"object","properties":{{"location":{{"type":"string","description":"City name or zip code"}},"limit":{{"type":"integer","minimum":1,"maximum":100}}}},"required":["location"]}},"annotations":{{"readOnlyHint":true,"openWorldHint":false}}}}"#
        )
    })
    .collect();
    format!(
        r#"{{"jsonrpc":"2.0","id":1,"result":{{"tools":[{}],"nextCursor":"next-page-cursor"}}}}"#,
        tools.join(",")
    )
}

fn lsp_completion_result() -> String {
    let items: Vec<String> = (0..40)
        .map(|i| {
            format!(
                r#"{{"label":"method_{i}","kind":2,"detail":"fn method_{i}(&self, arg: u32) -> Result<String, Error>","documentation":{{"kind":"markdown","value":"Returns the value for `arg`.\n\n# Errors\nFails when the index is out of range."}},"sortText":"{i:04}","insertText":"method_{i}(${{1:arg}})","insertTextFormat":2}}"#
            )
        })
        .collect();
    format!(
        r#"{{"jsonrpc":"2.0","id":17,"result":{{"isIncomplete":false,"items":[{}]}}}}"#,
        items.join(",")
    )
}

fn transaction(rng: &mut Rng) -> String {
    format!(
        r#"{{"blockHash":"{}","blockNumber":"0x13a4f2c","from":"{}","gas":"{}","gasPrice":"{}","maxFeePerGas":"{}","maxPriorityFeePerGas":"{}","hash":"{}","input":"{}","nonce":"{}","to":"{}","transactionIndex":"{}","value":"{}","type":"0x2","accessList":[],"chainId":"0x1","v":"0x1","r":"{}","s":"{}","yParity":"0x1"}}"#,
        rng.hex(32),
        rng.hex(20),
        rng.quantity(1 << 24),
        rng.quantity(1 << 36),
        rng.quantity(1 << 36),
        rng.quantity(1 << 30),
        rng.hex(32),
        rng.hex(68),
        rng.quantity(1 << 16),
        rng.hex(20),
        rng.quantity(256),
        rng.quantity(1 << 60),
        rng.hex(32),
        rng.hex(32),
    )
}

/// ~10 KB: a block with hydrated transactions.
fn eth_get_block_result(rng: &mut Rng) -> String {
    let txs: Vec<String> = (0..9).map(|_| transaction(rng)).collect();
    format!(
        r#"{{"jsonrpc":"2.0","id":42,"result":{{"baseFeePerGas":"0x5d21dba00","difficulty":"0x0","extraData":"0x6265617665726275696c642e6f7267","gasLimit":"0x1c9c380","gasUsed":"0xe4e1c0","hash":"{}","logsBloom":"{}","miner":"{}","mixHash":"{}","nonce":"0x0000000000000000","number":"0x13a4f2c","parentHash":"{}","receiptsRoot":"{}","sha3Uncles":"{}","size":"0x1f8a3","stateRoot":"{}","timestamp":"0x65a1b2c3","transactions":[{}],"transactionsRoot":"{}","uncles":[],"withdrawals":[],"withdrawalsRoot":"{}"}}}}"#,
        rng.hex(32),
        rng.hex(256),
        rng.hex(20),
        rng.hex(32),
        rng.hex(32),
        rng.hex(32),
        rng.hex(32),
        rng.hex(32),
        txs.join(","),
        rng.hex(32),
        rng.hex(32),
    )
}

/// ~100 KB: `eth_getLogs` over a busy range.
fn eth_get_logs_result(rng: &mut Rng) -> String {
    let logs: Vec<String> = (0..170)
        .map(|i| {
            format!(
                r#"{{"address":"{}","topics":["0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef","{}","{}"],"data":"{}","blockNumber":"0x13a4f2c","transactionHash":"{}","transactionIndex":"{}","blockHash":"{}","logIndex":"0x{:x}","removed":false}}"#,
                rng.hex(20),
                rng.hex(32),
                rng.hex(32),
                rng.hex(32),
                rng.hex(32),
                rng.quantity(256),
                rng.hex(32),
                i
            )
        })
        .collect();
    format!(
        r#"{{"jsonrpc":"2.0","id":7,"result":[{}]}}"#,
        logs.join(",")
    )
}

fn batch(rng: &mut Rng) -> String {
    let els: Vec<String> = (0..100)
        .map(|i| {
            format!(
                r#"{{"jsonrpc":"2.0","id":{i},"method":"eth_getBalance","params":["{}","latest"]}}"#,
                rng.hex(20)
            )
        })
        .collect();
    format!("[{}]", els.join(","))
}
