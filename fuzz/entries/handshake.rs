//! Every handshake message a peer can send, as arbitrary bytes: the server
//! reading CLIENT_HELLO and CLIENT_AUTH, the client reading SERVER_HELLO and
//! SERVER_AUTH. Never panics; a valid-looking prefix is taken from a real
//! handshake so the fuzzer starts deep inside the state machines.

use npamp_gateway::handshake::{Client, ClientRandom, Config, Identity, Server, ServerKem, Trust};

/// One input, as the fuzzer hands it over.
pub fn run(data: &[u8]) {
    let Some((&which, bytes)) = data.split_first() else {
        return;
    };
    let id = |b: u8| Identity::from_seed(&[b; 32]);
    let (Ok(client_id), Ok(server_id)) = (id(1), id(2)) else {
        return;
    };
    let random = ClientRandom {
        mlkem_seed: [3; 64],
        x25519: [4; 32],
    };
    let Ok((mut client, hello)) = Client::start(
        Config::default(),
        client_id,
        Trust::InsecureAcceptAny,
        &random,
    ) else {
        return;
    };
    let mut server = Server::new(Config::default(), server_id, Trust::InsecureAcceptAny);
    match which % 4 {
        0 => {
            let _ = server.handle_client_hello(bytes);
        }
        1 => {
            let _ = client.handle_server_hello(bytes);
        }
        2 => {
            // A real SERVER_HELLO, then arbitrary bytes as SERVER_AUTH.
            let Ok(share) = server.handle_client_hello(&hello).map(<[u8]>::to_vec) else {
                return;
            };
            let Ok(kem) = ServerKem::encapsulate(&share, &[5; 32], &[6; 32]) else {
                return;
            };
            let Ok(flight) = server.respond(&kem) else {
                return;
            };
            let sh_len =
                36 + u32::from_be_bytes([flight[17], flight[18], flight[19], flight[20]]) as usize;
            if client.handle_server_hello(&flight[..sh_len]).is_ok() {
                let _ = client.handle_server_auth(bytes);
            }
        }
        _ => {
            // A real CLIENT_HELLO, then arbitrary bytes as CLIENT_AUTH.
            let Ok(share) = server.handle_client_hello(&hello).map(<[u8]>::to_vec) else {
                return;
            };
            let Ok(kem) = ServerKem::encapsulate(&share, &[5; 32], &[6; 32]) else {
                return;
            };
            if server.respond(&kem).is_ok() {
                let _ = server.handle_client_auth(bytes);
            }
        }
    }
}
