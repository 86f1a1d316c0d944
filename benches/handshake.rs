//! The handshake's CPU cost without I/O, and the ML-KEM-768 backend choice.
//!
//! `handshake_cpu/standard_both_roles`: one complete Standard-profile
//! handshake (CLIENT_HELLO → SERVER_HELLO + SERVER_AUTH → CLIENT_AUTH),
//! client and server in one thread, fixed randomness; 1 / its time is the
//! most handshakes per second one core can run for both sides together.
//!
//! `mlkem768_backends/*`: key generation from the seed `d ‖ z`,
//! encapsulation with the randomness `m`, and decapsulation, in RustCrypto
//! `ml-kem` and in AWS-LC through `handshake::mlkem` (what the handshake
//! uses), in the same group.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use ml_kem::array::Array;
use ml_kem::{Decapsulate, DecapsulationKey, EncapsulationKey, KeyExport, MlKem768};
use npamp_gateway::handshake::{
    Client, ClientRandom, Config, Identity, Server, ServerKem, Trust, mlkem,
};
use npamp_gateway::wire::Deframer;

fn handshake_cpu(c: &mut Criterion) {
    let mut group = c.benchmark_group("handshake_cpu");
    let random = ClientRandom {
        mlkem_seed: [1; 64],
        x25519: [2; 32],
    };
    let id = |b| Identity::from_seed(&[b; 32]).expect("identity");
    let trust = |who: Identity| {
        Trust::Pinned(vec![
            who.public_key().try_into().expect("32-octet public key"),
        ])
    };
    let (trust_server, trust_client) = (trust(id(4)), trust(id(3)));
    group.bench_function("standard_both_roles", |b| {
        b.iter(|| {
            let (mut client, hello) = Client::start(
                Config::default(),
                // Identities from their seeds, as a gateway does per handshake.
                id(3),
                trust_server.clone(),
                &random,
            )
            .expect("client hello");
            let mut server = Server::new(Config::default(), id(4), trust_client.clone());
            let share = server.handle_client_hello(&hello).expect("hello").to_vec();
            let kem = ServerKem::encapsulate(&share, &[5; 32], &[6; 32]).expect("encapsulate");
            let flight = server.respond(&kem).expect("respond");
            let (span, _) = Deframer::default()
                .deframe(&flight)
                .expect("deframe")
                .expect("a whole frame");
            let hello_len = span.octets.len();
            client
                .handle_server_hello(&flight[..hello_len])
                .expect("server hello");
            let (auth, established) = client
                .handle_server_auth(&flight[hello_len..])
                .expect("server auth");
            black_box((
                server.handle_client_auth(&auth).expect("client auth"),
                established,
            ))
        })
    });
    group.finish();
}

fn mlkem768_backends(c: &mut Criterion) {
    let mut group = c.benchmark_group("mlkem768_backends");
    let seed = [7u8; mlkem::SEED_LEN];
    let m = [9u8; mlkem::M_LEN];

    // RustCrypto `ml-kem`.
    let dk = DecapsulationKey::<MlKem768>::from_seed(Array::from(seed));
    let ek_bytes = dk.encapsulation_key().to_bytes();
    let (ct, _) = EncapsulationKey::<MlKem768>::new(&ek_bytes)
        .expect("ek")
        .encapsulate_deterministic(&Array::from(m));
    group.bench_function("rustcrypto_keygen", |b| {
        b.iter(|| {
            let dk = DecapsulationKey::<MlKem768>::from_seed(Array::from(black_box(seed)));
            black_box(dk.encapsulation_key().to_bytes())
        })
    });
    group.bench_function("rustcrypto_encapsulate", |b| {
        b.iter(|| {
            let ek = EncapsulationKey::<MlKem768>::new(black_box(&ek_bytes)).expect("ek");
            black_box(ek.encapsulate_deterministic(&Array::from(m)))
        })
    });
    group.bench_function("rustcrypto_decapsulate", |b| {
        b.iter(|| black_box(dk.decapsulate(black_box(&ct))))
    });

    // AWS-LC through `handshake::mlkem` (what the handshake uses).
    let pair = mlkem::keygen(&seed).expect("keygen");
    let (aws_ct, _) = mlkem::encapsulate(&pair.ek, &m).expect("encapsulate");
    group.bench_function("aws_lc_keygen", |b| {
        b.iter(|| black_box(mlkem::keygen(black_box(&seed)).expect("keygen")))
    });
    group.bench_function("aws_lc_encapsulate", |b| {
        b.iter(|| black_box(mlkem::encapsulate(black_box(&pair.ek), &m).expect("encapsulate")))
    });
    group.bench_function("aws_lc_decapsulate", |b| {
        b.iter(|| black_box(mlkem::decapsulate(&pair.dk, black_box(&aws_ct)).expect("decapsulate")))
    });
    group.finish();
}

criterion_group!(benches, handshake_cpu, mlkem768_backends);
criterion_main!(benches);
