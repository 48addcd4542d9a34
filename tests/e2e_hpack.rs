//! switchyard's HPACK codec against the `h2` crate over real HTTP/2 connections on 127.0.0.1:
//! header blocks that `h2`'s client encodes (Huffman-coded, filling its dynamic table, with
//! never-indexed fields) decode here to the fields it sent, and blocks encoded here reach an
//! `h2` server as the fields written.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Request};
use switchyard::data::wire::hpack::{Decoder, Encoder};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const HEADERS: u8 = 0x1;
const SETTINGS: u8 = 0x4;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;

/// A field as compared here: name, value, sent never-indexed.
type Seen = (String, Vec<u8>, bool);

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut out = len.to_be_bytes()[1..].to_vec();
    out.extend_from_slice(&[kind, flags]);
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

async fn read_frame(s: &mut TcpStream) -> (u8, u8, u32, Vec<u8>) {
    let mut head = [0u8; 9];
    s.read_exact(&mut head).await.unwrap();
    let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
    let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
    let mut payload = vec![0; len];
    s.read_exact(&mut payload).await.unwrap();
    (head[3], head[4], stream, payload)
}

/// The header blocks of the requests `h2` sends, in order, as a decoder sees them.
fn requests() -> Vec<Request<()>> {
    let mut out = Vec::new();
    for i in 0..6 {
        let mut secret = HeaderValue::from_static("Bearer token-of-some-length");
        secret.set_sensitive(true);
        let req = Request::post(format!(
            "http://svc.example:8080/pkg.Service/Method{}",
            i % 2
        ))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("grpc-timeout", format!("{}m", 100 + i))
        .header("x-repeated", "the same value every time")
        .header("x-long", "x".repeat(200 + i))
        .header("accept-encoding", "gzip, deflate")
        .header(
            "x-obs-text",
            HeaderValue::from_bytes(b"caf\xc3\xa9").unwrap(),
        )
        .header("authorization", secret)
        .body(())
        .unwrap();
        out.push(req);
    }
    out
}

fn fields_of(req: &Request<()>) -> Vec<Seen> {
    let uri = req.uri();
    let mut out = vec![
        (
            ":method".into(),
            req.method().as_str().as_bytes().to_vec(),
            false,
        ),
        (
            ":scheme".into(),
            uri.scheme_str().unwrap().as_bytes().to_vec(),
            false,
        ),
        (
            ":authority".into(),
            uri.authority().unwrap().as_str().as_bytes().to_vec(),
            false,
        ),
        (":path".into(), uri.path().as_bytes().to_vec(), false),
    ];
    for (n, v) in req.headers() {
        out.push((
            n.as_str().to_owned(),
            v.as_bytes().to_vec(),
            v.is_sensitive(),
        ));
    }
    out
}

fn sorted(mut fields: Vec<Seen>) -> Vec<Seen> {
    fields.sort();
    fields
}

#[tokio::test]
async fn blocks_h2_encodes_decode_here_to_the_fields_it_sent() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let sent = requests();
    let expected: Vec<Vec<Seen>> = sent.iter().map(fields_of).collect();
    let client = tokio::spawn(async move {
        let tcp = TcpStream::connect(addr).await.unwrap();
        let (mut h2, conn) = h2::client::handshake(tcp).await.unwrap();
        tokio::spawn(conn);
        let mut streams = Vec::new();
        for req in sent {
            h2 = h2.ready().await.unwrap();
            let (response, _) = h2.send_request(req, true).unwrap();
            streams.push(response);
        }
        // Kept open until the test has read every block.
        tokio::time::sleep(Duration::from_secs(5)).await;
        drop(streams);
    });
    let (mut s, _) = listener.accept().await.unwrap();
    let mut preface = [0u8; 24];
    s.read_exact(&mut preface).await.unwrap();
    assert_eq!(preface, PREFACE);
    s.write_all(&frame(SETTINGS, 0, 0, &[])).await.unwrap();
    let mut decoder = Decoder::new(4096);
    let mut got = Vec::new();
    let mut block = Vec::new();
    while got.len() < expected.len() {
        let (kind, flags, _, mut payload) =
            tokio::time::timeout(Duration::from_secs(5), read_frame(&mut s))
                .await
                .unwrap();
        match kind {
            HEADERS => {
                assert_eq!(flags & (PADDED | PRIORITY), 0, "h2 sends neither");
                block = payload;
            }
            CONTINUATION => block.append(&mut payload),
            SETTINGS if flags & 1 == 0 => {
                s.write_all(&frame(SETTINGS, 1, 0, &[])).await.unwrap();
                continue;
            }
            _ => continue,
        }
        if flags & END_HEADERS != 0 {
            let mut fields = Vec::new();
            decoder
                .decode(&Bytes::from(std::mem::take(&mut block)), |f| {
                    let name = String::from_utf8(f.name.to_vec()).unwrap();
                    fields.push((name, f.value.to_vec(), f.sensitive));
                })
                .unwrap();
            got.push(fields);
        }
    }
    for (got, want) in got.into_iter().zip(expected) {
        assert_eq!(sorted(got), sorted(want));
    }
    client.abort();
}

#[tokio::test]
async fn blocks_encoded_here_reach_an_h2_server_as_the_fields_written() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let count = requests().len();
    let server = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let mut conn = h2::server::handshake(tcp).await.unwrap();
        let mut seen = Vec::new();
        while seen.len() < count {
            let (req, _respond) = conn.accept().await.unwrap().unwrap();
            seen.push(fields_of(&req.map(|_| ())));
        }
        seen
    });
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(PREFACE).await.unwrap();
    s.write_all(&frame(SETTINGS, 0, 0, &[])).await.unwrap();
    let mut encoder = Encoder::new();
    let written: Vec<Vec<Seen>> = requests().iter().map(fields_of).collect();
    for (i, fields) in written.iter().enumerate() {
        let mut block = Vec::new();
        encoder.encode(
            fields.iter().map(|(n, v, s)| (n.as_bytes(), &v[..], *s)),
            &mut block,
        );
        // The third block goes in two frames, as a block larger than a frame would.
        let stream = 1 + 2 * i as u32;
        if i == 2 {
            let (a, b) = block.split_at(block.len() / 2);
            s.write_all(&frame(HEADERS, END_STREAM, stream, a))
                .await
                .unwrap();
            s.write_all(&frame(CONTINUATION, END_HEADERS, stream, b))
                .await
                .unwrap();
        } else {
            let flags = END_STREAM | END_HEADERS;
            s.write_all(&frame(HEADERS, flags, stream, &block))
                .await
                .unwrap();
        }
        if i == 3 {
            // The first block said "table size 0"; after new settings the encoder says it
            // again, which the server must accept.
            encoder.peer_table_size_changed();
        }
    }
    let seen = tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .unwrap()
        .unwrap();
    // `h2`'s decoder does not report which fields came never-indexed (the unit tests check
    // that the encoder sends `authorization` so): names and values are compared.
    let plain =
        |fields: Vec<Seen>| sorted(fields.into_iter().map(|(n, v, _)| (n, v, false)).collect());
    assert_eq!(seen.len(), written.len());
    for (got, want) in seen.into_iter().zip(written) {
        assert_eq!(plain(got), plain(want));
    }
}
