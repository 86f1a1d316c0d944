//! The six handshake KAT files: kem-wire, key-schedule, transcript, finished,
//! certverify and handshake-flow (every frame byte for byte).
//!
//! Read from `$NPAMP_TEST_VECTORS` (default `../shared/npamp/test-vectors`);
//! each test says SKIPPED and grades nothing when its file is absent.

use std::path::{Path, PathBuf};

use npamp_gateway::handshake::{
    CLIENT_CONTEXT, Client, ClientKem, ClientRandom, Config, Identity, SERVER_CONTEXT, Server,
    ServerKem, Transcript, Trust, finished_mac, signing_input, verify_finished,
};
use npamp_gateway::record::{
    Direction, HashAlg, Secret, Suite, hkdf_expand, hkdf_expand_label,
    hkdf_expand_label_with_prefix, hkdf_extract,
};
use npamp_gateway::wire::{ChannelId, FrameType};
use serde_json::Value;
use zeroize::Zeroizing;

fn kat(name: &str) -> Option<Value> {
    let dir = std::env::var_os("NPAMP_TEST_VECTORS").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/npamp/test-vectors"),
        PathBuf::from,
    );
    let path = dir.join("v1").join(name);
    match std::fs::read_to_string(&path) {
        Ok(text) => Some(serde_json::from_str(&text).expect("KAT is JSON")),
        Err(_) => {
            eprintln!(
                "SKIPPED: {} not found (set NPAMP_TEST_VECTORS)",
                path.display()
            );
            None
        }
    }
}

fn hex(v: &Value) -> Vec<u8> {
    hex::decode(v.as_str().expect("hex string")).expect("valid hex")
}

fn arr<const N: usize>(v: &Value) -> [u8; N] {
    hex(v).try_into().expect("fixed-length hex")
}

#[test]
fn kem_wire_kat() {
    let Some(k) = kat("kem-wire-kat.json") else {
        return;
    };
    let keygen = &k["mlkem768_keygen"];
    let mut seed = [0u8; 64];
    seed[..32].copy_from_slice(&hex(&keygen["d"]));
    seed[32..].copy_from_slice(&hex(&keygen["z"]));
    let x = &k["x25519_rfc7748_6_1"];
    let client = ClientKem::new(&seed, &arr(&x["alice_private"])).expect("keygen");
    // KEMShare = ek (NIST) ‖ alice_public (RFC 7748), ML-KEM first.
    let mut expected_share = hex(&keygen["ek"]);
    expected_share.extend_from_slice(&hex(&x["alice_public"]));
    assert_eq!(client.share().len(), 1216);
    assert_eq!(hex::encode(client.share()), hex::encode(&expected_share));

    // The server side, encapsulating to that share with bob's key: the
    // X25519 half of the combined secret is the RFC 7748 shared secret, and
    // the client recovers the same 64 octets.
    let server = ServerKem::encapsulate(client.share(), &[0x42; 32], &arr(&x["bob_private"]))
        .expect("encapsulate");
    assert_eq!(&server.ciphertext[1088..], &hex(&x["bob_public"])[..]);
    assert_eq!(&server.shared_secret[32..], &hex(&x["shared_secret"])[..]);
    let recovered = client.decapsulate(&server.ciphertext).expect("decapsulate");
    assert_eq!(*recovered, *server.shared_secret);
    eprintln!(
        "not graded: mlkem768_decaps_reference needs the NIST decapsulation key, which the KAT does not carry"
    );
}

#[test]
fn key_schedule_kat() {
    let Some(k) = kat("key-schedule-kat.json") else {
        return;
    };
    // RFC 5869 TC1 anchors Extract and Expand.
    let tc = &k["rfc5869_tc1"];
    let prk = hkdf_extract(HashAlg::Sha256, &hex(&tc["salt"]), &hex(&tc["ikm"]));
    assert_eq!(prk.as_bytes(), &hex(&tc["prk"])[..]);
    let mut okm = vec![0u8; tc["L"].as_u64().expect("L") as usize];
    hkdf_expand(
        HashAlg::Sha256,
        prk.as_bytes(),
        &[&hex(&tc["info"])],
        &mut okm,
    )
    .expect("expand");
    assert_eq!(okm, hex(&tc["okm"]));

    // RFC 8448 anchors the Expand-Label construction (with TLS 1.3's prefix).
    let r = &k["rfc8448_expand_label"];
    let secret = hex(&r["client_handshake_traffic_secret"]);
    for (label, field, len) in [
        ("key", "write_key", 16),
        ("iv", "write_iv", 12),
        ("finished", "finished_key", 32),
    ] {
        let mut out = vec![0u8; len];
        hkdf_expand_label_with_prefix(
            HashAlg::Sha256,
            b"tls13 ",
            &secret,
            label.as_bytes(),
            b"",
            &mut out,
        )
        .expect("expand label");
        assert_eq!(out, hex(&r[field]), "RFC 8448 {field}");
    }

    // The N-PAMP ladder from the fixed inputs, by the construction the KAT
    // states, against the same derivation done step by step with the RFC-anchored oracle.
    let inputs = &k["npamp_inputs"];
    let mut ikm = hex(&inputs["ikm_mlkem_ss"]);
    ikm.extend_from_slice(&hex(&inputs["ikm_x25519_ss"]));
    let hs = hkdf_extract(HashAlg::Sha256, &[0u8; 32], &ikm);
    let th_kem = hex(&inputs["th_kem"]);
    let c_hs = hs.expand_label(b"c hs", &th_kem).expect("c hs");
    let mut oracle = [0u8; 32];
    hkdf_expand_label_with_prefix(
        HashAlg::Sha256,
        b"n-pamp ",
        hs.as_bytes(),
        b"c hs",
        &th_kem,
        &mut oracle,
    )
    .expect("oracle");
    assert_eq!(c_hs.as_bytes(), &oracle);
    let mut tls = [0u8; 32];
    hkdf_expand_label_with_prefix(
        HashAlg::Sha256,
        b"tls13 ",
        hs.as_bytes(),
        b"c hs",
        &th_kem,
        &mut tls,
    )
    .expect("tls13");
    assert_ne!(
        c_hs.as_bytes(),
        &tls,
        "the n-pamp prefix separates the domains"
    );
}

#[test]
fn transcript_kat() {
    let Some(k) = kat("transcript-kat.json") else {
        return;
    };
    let mut t = Transcript::new();
    let points = &k["expected_transcript_points"];
    let mut got = serde_json::Map::new();
    for frame in k["frames"].as_array().expect("frames") {
        let ft = u16::from_str_radix(
            frame["frame_type"]
                .as_str()
                .expect("type")
                .trim_start_matches("0x"),
            16,
        )
        .expect("hex type");
        t.add_frame_type(FrameType(ft));
        for tlv in frame["tlvs"].as_array().expect("tlvs") {
            let ty = u16::from_str_radix(
                tlv["type"].as_str().expect("t").trim_start_matches("0x"),
                16,
            )
            .expect("t");
            let value = hex(&tlv["value"]);
            let mut enc = ty.to_be_bytes().to_vec();
            enc.extend_from_slice(&(value.len() as u16).to_be_bytes());
            enc.extend_from_slice(&value);
            t.add_tlv(&enc);
            let name = tlv["name"].as_str().expect("name");
            let point = match (ft, name) {
                (0x0101, "KEMCiphertext") => Some("th_kem"),
                (0x0102, "ServerIdentityKey") => Some("th_sid"),
                (0x0102, "ServerCertVerify") => Some("th_scv"),
                (0x0103, "ClientIdentityKey") => Some("th_cid"),
                (0x0103, "ClientCertVerify") => Some("th_ccv"),
                _ => None,
            };
            if let Some(p) = point {
                got.insert(p.into(), Value::String(hex::encode(t.hash())));
            }
        }
    }
    for p in ["th_kem", "th_sid", "th_scv", "th_cid", "th_ccv"] {
        assert_eq!(got.get(p), points.get(p), "{p}");
    }
}

#[test]
fn finished_kat() {
    let Some(k) = kat("finished-kat.json") else {
        return;
    };
    let i = &k["npamp_inputs"];
    for (key, th, expected) in [
        ("finished_key_server", "th_scv", "verify_data_server"),
        ("finished_key_client", "th_ccv", "verify_data_client"),
    ] {
        let fk = Secret::from_slice(HashAlg::Sha256, &hex(&i[key])).expect("key");
        let mac = finished_mac(&fk, &hex(&i[th]));
        assert_eq!(
            hex::encode(&mac),
            k["expected"][expected].as_str().expect("hex")
        );
        assert!(verify_finished(&fk, &hex(&i[th]), &mac).is_ok());
        let mut bad = mac.clone();
        bad[31] ^= 1;
        assert!(verify_finished(&fk, &hex(&i[th]), &bad).is_err());
    }
    // RFC 4231 anchors the HMAC primitive.
    for tc in ["tc1", "tc2"] {
        let t = &k["rfc4231_hmac_sha256"][tc];
        let key = hex(&t["key"]);
        let mac = aws_lc_rs_hmac(&key, &hex(&t["data"]));
        assert_eq!(
            hex::encode(mac),
            t["hmac_sha256"].as_str().expect("hex"),
            "{tc}"
        );
    }
}

/// HMAC-SHA-256 through the same Finished code path with an arbitrary-length key.
fn aws_lc_rs_hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    // Finished keys are HashLen octets; RFC 4231 keys are not, so go through
    // HKDF-Extract, which is HMAC(salt = key, ikm = data).
    hkdf_extract(HashAlg::Sha256, key, data).as_bytes().to_vec()
}

#[test]
fn certverify_kat() {
    let Some(k) = kat("certverify-kat.json") else {
        return;
    };
    let i = &k["npamp_inputs"];
    let e = &k["expected"];
    for (side, context, th) in [
        ("server", SERVER_CONTEXT, "th_sid"),
        ("client", CLIENT_CONTEXT, "th_cid"),
    ] {
        let id = Identity::from_seed(&arr(&i[format!("{side}_seed")])).expect("seed");
        assert_eq!(id.public_key(), &hex(&i[format!("{side}_pub")])[..]);
        let input = signing_input(context, &hex(&i[th]));
        assert_eq!(
            hex::encode(&input),
            e[format!("signing_input_{side}")].as_str().expect("hex")
        );
        let sig = id.sign(&input);
        assert_eq!(
            hex::encode(&sig),
            e[format!("signature_{side}")].as_str().expect("hex")
        );
        let mut value = 0x0807u16.to_be_bytes().to_vec();
        value.extend_from_slice(&sig);
        assert_eq!(
            hex::encode(&value),
            e[format!("certverify_value_{side}")].as_str().expect("hex")
        );
    }
    // RFC 8032 §7.1 anchors Ed25519.
    for tc in ["test1", "test2"] {
        let t = &k["rfc8032_ed25519"][tc];
        let id = Identity::from_seed(&arr(&t["seed"])).expect("seed");
        assert_eq!(id.public_key(), &hex(&t["public_key"])[..]);
        assert_eq!(id.sign(&hex(&t["message"])), hex(&t["signature"]));
    }
}

#[test]
fn handshake_flow_kat_every_frame_byte_for_byte() {
    let Some(k) = kat("handshake-flow-kat.json") else {
        return;
    };
    let i = &k["inputs"];
    let e = &k["expected"];
    let client_id =
        Identity::from_seed(&arr(&i["client_identity_ed25519_seed"])).expect("client seed");
    let server_id =
        Identity::from_seed(&arr(&i["server_identity_ed25519_seed"])).expect("server seed");
    let client_pub: [u8; 32] = client_id.public_key().try_into().expect("32");
    let server_pub: [u8; 32] = server_id.public_key().try_into().expect("32");
    let config = Config {
        suites: vec![Suite::AES_256_GCM],
    };

    let random = ClientRandom {
        mlkem_seed: arr(&i["mlkem768_seed_dz"]),
        x25519: arr(&i["client_x25519_private"]),
    };
    let (mut client, client_hello) = Client::start(
        config.clone(),
        client_id,
        Trust::Pinned(vec![server_pub]),
        &random,
    )
    .expect("start");
    assert_eq!(
        hex::encode(&client_hello),
        e["frames"]["client_hello"].as_str().expect("hex"),
        "CLIENT_HELLO"
    );

    let mut server = Server::new(config, server_id, Trust::Pinned(vec![client_pub]));
    let share = server
        .handle_client_hello(&client_hello)
        .expect("client hello")
        .to_vec();
    assert_eq!(
        hex::encode(&share),
        e["kem"]["kem_share"].as_str().expect("hex")
    );
    // The KAT pins the server's encapsulation output rather than its randomness.
    let kem = ServerKem {
        ciphertext: hex(&e["kem"]["kem_ciphertext"]),
        shared_secret: Zeroizing::new(arr(&i["combined_secret"])),
    };
    let flight = server.respond(&kem).expect("server flight");
    let server_hello = hex(&e["frames"]["server_hello"]);
    let server_auth = hex(&e["frames"]["server_auth"]);
    assert_eq!(
        hex::encode(&flight[..server_hello.len()]),
        hex::encode(&server_hello),
        "SERVER_HELLO"
    );
    assert_eq!(
        hex::encode(&flight[server_hello.len()..]),
        hex::encode(&server_auth),
        "SERVER_AUTH"
    );

    client
        .handle_server_hello(&server_hello)
        .expect("server hello");
    let (client_auth, client_done) = client
        .handle_server_auth(&server_auth)
        .expect("server auth");
    assert_eq!(
        hex::encode(&client_auth),
        e["frames"]["client_auth"].as_str().expect("hex"),
        "CLIENT_AUTH"
    );
    let server_done = server
        .handle_client_auth(&client_auth)
        .expect("client auth");

    assert_eq!(client_done.peer_identity, server_pub);
    assert_eq!(server_done.peer_identity, client_pub);
    let secrets = &e["secrets"];
    assert_eq!(
        hex::encode(client_done.master_secret().as_bytes()),
        secrets["master_secret"].as_str().expect("hex")
    );
    assert_eq!(
        hex::encode(server_done.master_secret().as_bytes()),
        secrets["master_secret"].as_str().expect("hex")
    );
    for (dir, key, iv) in [
        (Direction::ClientToServer, "app_c2s_key", "app_c2s_iv"),
        (Direction::ServerToClient, "app_s2c_key", "app_s2c_iv"),
    ] {
        let keys = client_done
            .traffic_keys(dir, 0, ChannelId::CONTROL)
            .expect("app keys");
        assert_eq!(
            hex::encode(keys.iv()),
            secrets[iv].as_str().expect("hex"),
            "{iv}"
        );
        // The key itself stays inside the AEAD context; check it by sealing.
        let reference = npamp_gateway::record::TrafficKeys::new(
            Suite::AES_256_GCM,
            &hex(&secrets[key]),
            keys.iv(),
        )
        .expect("reference keys");
        let mut a = b"probe".to_vec();
        let mut b = a.clone();
        let ta = keys.seal_in_place([0; 12], b"", &mut a).expect("seal");
        let tb = reference.seal_in_place([0; 12], b"", &mut b).expect("seal");
        assert_eq!((a, ta), (b, tb), "{key}");
    }
    // The handshake secret ladder, for a clearer failure if a frame differs.
    let hs = hkdf_extract(HashAlg::Sha256, b"", &hex(&i["combined_secret"]));
    assert_eq!(
        hex::encode(hs.as_bytes()),
        secrets["handshake_secret"].as_str().expect("hex")
    );
    let th_kem = hex(&e["transcript"]["th_kem"]);
    let mut c_hs = [0u8; 32];
    hkdf_expand_label(HashAlg::Sha256, hs.as_bytes(), b"c hs", &th_kem, &mut c_hs).expect("c hs");
    assert_eq!(
        hex::encode(c_hs),
        secrets["c_hs_secret"].as_str().expect("hex")
    );
}

#[test]
fn wrong_pinned_key_and_tampering_fail_the_handshake() {
    let server_id = Identity::from_seed(&[2; 32]).expect("seed");
    let server_pub: [u8; 32] = server_id.public_key().try_into().expect("32");
    let random = ClientRandom {
        mlkem_seed: [3; 64],
        x25519: [4; 32],
    };
    let run = |client_trust: Trust, tamper: Option<usize>| -> Result<(), String> {
        let (mut client, hello) = Client::start(
            Config::default(),
            Identity::from_seed(&[1; 32]).expect("s"),
            client_trust,
            &random,
        )
        .map_err(|e| e.to_string())?;
        let mut server = Server::new(
            Config::default(),
            Identity::from_seed(&[2; 32]).expect("s"),
            Trust::InsecureAcceptAny,
        );
        let share = server
            .handle_client_hello(&hello)
            .map_err(|e| e.to_string())?
            .to_vec();
        let kem = ServerKem::encapsulate(&share, &[5; 32], &[6; 32]).map_err(|e| e.to_string())?;
        let mut flight = server.respond(&kem).map_err(|e| e.to_string())?;
        if let Some(at) = tamper {
            flight[at] ^= 0x01;
        }
        let sh_len = 36 + u32::from_be_bytes(flight[17..21].try_into().expect("4")) as usize;
        client
            .handle_server_hello(&flight[..sh_len])
            .map_err(|e| e.to_string())?;
        let (auth, _) = client
            .handle_server_auth(&flight[sh_len..])
            .map_err(|e| e.to_string())?;
        server
            .handle_client_auth(&auth)
            .map_err(|e| e.to_string())?;
        Ok(())
    };
    assert_eq!(run(Trust::Pinned(vec![server_pub]), None), Ok(()));
    let wrong = run(Trust::Pinned(vec![[9; 32]]), None).expect_err("wrong pin must fail");
    assert!(wrong.contains("not among the pinned keys"), "{wrong}");
    // A flipped bit in the ML-KEM ciphertext: implicit rejection, then the
    // server's Finished (or the AUTH frame's AEAD) fails.
    assert!(run(Trust::InsecureAcceptAny, Some(36 + 40 + 100)).is_err());
    // A flipped bit in the sealed SERVER_AUTH.
    assert!(run(Trust::InsecureAcceptAny, Some(1183 + 40)).is_err());
}
