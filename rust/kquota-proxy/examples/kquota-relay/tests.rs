//! The relays on real sockets on 127.0.0.1: a client pipelining requests (encoded by
//! Kafka's generated codec) through a relay to a peer that answers each in order.

use std::net::SocketAddr;

use crate::relay::{framed_relay, plain_relay, RelayError};
use bytes::{Buf, BytesMut};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, MetadataRequest, ProduceRequest, RequestHeader, ResponseHeader,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use kquota_proxy::{parse_request_header, produce_acks, FrameReader, DEFAULT_MAX_FRAME_BYTES};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A request frame (size prefix included) and whether it gets a response.
fn request(key: ApiKey, version: i16, correlation_id: i32, acks: i16) -> (Vec<u8>, bool) {
    let mut header = RequestHeader::default();
    header.request_api_key = key as i16;
    header.request_api_version = version;
    header.correlation_id = correlation_id;
    header.client_id = Some(StrBytes::from_static_str("relay-test"));
    let mut body = BytesMut::new();
    header
        .encode(&mut body, key.request_header_version(version))
        .unwrap();
    match key {
        ApiKey::ApiVersions => ApiVersionsRequest::default().encode(&mut body, version),
        ApiKey::Metadata => MetadataRequest::default().encode(&mut body, version),
        _ => {
            let mut produce = ProduceRequest::default();
            produce.acks = acks;
            produce.encode(&mut body, version)
        }
    }
    .unwrap();
    let mut frame = (body.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(&body);
    (frame, !(key == ApiKey::Produce && acks == 0))
}

/// A mix of APIs and header versions, with Produce acks=0 (no response) among them.
fn requests(n: i32) -> Vec<(Vec<u8>, bool, ApiKey, i16, i32)> {
    (0..n)
        .map(|i| {
            let (key, version, acks) = match i % 4 {
                0 => (ApiKey::ApiVersions, 3, 1),
                1 => (ApiKey::Metadata, 12, 1),
                2 => (ApiKey::Produce, 9, 0),
                _ => (ApiKey::Produce, 3, 1),
            };
            let (frame, answered) = request(key, version, 1000 + i, acks);
            (frame, answered, key, version, 1000 + i)
        })
        .collect()
}

/// Answers each request it reads, in order, with its correlation id and `b"ok"`; the
/// response to request number `swap` goes after the next one's (out of order).
async fn broker(swap: Option<usize>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (socket, _) = listener.accept().await.unwrap();
        let (read, mut write) = socket.into_split();
        let mut frames = FrameReader::new(read, DEFAULT_MAX_FRAME_BYTES);
        let mut held: Option<Vec<u8>> = None;
        let mut answered = 0;
        while let Ok(Some(frame)) = frames.read_frame().await {
            let header = parse_request_header(&frame).unwrap();
            if header.api_key == ApiKey::Produce as i16
                && produce_acks(&frame, &header).unwrap() == 0
            {
                continue;
            }
            let mut response = BytesMut::new();
            let mut head = ResponseHeader::default();
            head.correlation_id = header.correlation_id;
            head.encode(&mut response, header.response_header_version())
                .unwrap();
            response.extend_from_slice(b"ok");
            let mut out = (response.len() as u32).to_be_bytes().to_vec();
            out.extend_from_slice(&response);
            if swap == Some(answered) {
                held = Some(out);
            } else {
                write.write_all(&out).await.unwrap();
                if let Some(h) = held.take() {
                    write.write_all(&h).await.unwrap();
                }
            }
            answered += 1;
        }
    });
    addr
}

/// Sends every request at once, then reads the responses; returns their correlation ids
/// (decoded by Kafka's generated codec) and every byte received.
async fn pipeline(
    relay: SocketAddr,
    sent: &[(Vec<u8>, bool, ApiKey, i16, i32)],
) -> (Vec<i32>, Vec<u8>) {
    let mut client = TcpStream::connect(relay).await.unwrap();
    for (frame, ..) in sent {
        client.write_all(frame).await.unwrap();
    }
    client.shutdown().await.unwrap();
    let mut received = Vec::new();
    client.read_to_end(&mut received).await.unwrap();
    let mut ids = Vec::new();
    let mut rest = &received[..];
    for (_, _, key, version, _) in sent.iter().filter(|r| r.1) {
        let size = rest.get_u32() as usize;
        let mut frame = &rest[..size];
        let head =
            ResponseHeader::decode(&mut frame, key.response_header_version(*version)).unwrap();
        assert_eq!(frame, b"ok");
        ids.push(head.correlation_id);
        rest.advance(size);
    }
    assert!(rest.is_empty(), "{} bytes left over", rest.len());
    (ids, received)
}

async fn listen() -> (TcpListener, SocketAddr) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    (listener, addr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_requests_are_answered_in_order_through_both_relays() {
    let sent = requests(200);
    let expected: Vec<i32> = sent.iter().filter(|r| r.1).map(|r| r.4).collect();
    assert_eq!(expected.len(), 150);

    let (listener, addr) = listen().await;
    let upstream = broker(None).await;
    let framed = tokio::spawn(async move {
        let (client, _) = listener.accept().await.unwrap();
        framed_relay(client, upstream, DEFAULT_MAX_FRAME_BYTES).await
    });
    let (ids, through_framed) = pipeline(addr, &sent).await;
    assert_eq!(ids, expected);
    let (up, down) = framed.await.unwrap().unwrap();
    assert_eq!(up, sent.iter().map(|r| r.0.len() as u64).sum::<u64>());
    assert_eq!(down, through_framed.len() as u64);

    let (listener, addr) = listen().await;
    let upstream = broker(None).await;
    let plain = tokio::spawn(async move {
        let (client, _) = listener.accept().await.unwrap();
        plain_relay(client, upstream).await
    });
    let (ids, through_plain) = pipeline(addr, &sent).await;
    assert_eq!(ids, expected);
    assert_eq!(through_plain, through_framed);
    assert_eq!(plain.await.unwrap().unwrap(), (up, down));
}

#[tokio::test]
async fn a_frame_over_the_bound_closes_the_connection() {
    let (listener, addr) = listen().await;
    let upstream = broker(None).await;
    let relay = tokio::spawn(async move {
        let (client, _) = listener.accept().await.unwrap();
        framed_relay(client, upstream, 1024).await
    });
    let mut client = TcpStream::connect(addr).await.unwrap();
    let mut frame = 2048u32.to_be_bytes().to_vec();
    frame.extend_from_slice(&[0u8; 2048]);
    client.write_all(&frame).await.unwrap();
    let err = relay.await.unwrap().unwrap_err();
    assert!(matches!(err, RelayError::Client(_)), "{err:?}");
    assert!(err.to_string().contains("2048 bytes"), "{err}");
    let mut rest = Vec::new();
    assert_eq!(client.read_to_end(&mut rest).await.unwrap_or(0), 0);
}

#[tokio::test]
async fn a_response_out_of_order_is_an_error_naming_both_ids() {
    let (listener, addr) = listen().await;
    let upstream = broker(Some(0)).await;
    let relay = tokio::spawn(async move {
        let (client, _) = listener.accept().await.unwrap();
        framed_relay(client, upstream, DEFAULT_MAX_FRAME_BYTES).await
    });
    let mut client = TcpStream::connect(addr).await.unwrap();
    for i in 0..2 {
        client
            .write_all(&request(ApiKey::ApiVersions, 3, 7 + i, 1).0)
            .await
            .unwrap();
    }
    let err = relay.await.unwrap().unwrap_err();
    assert!(matches!(err, RelayError::Broker(_)), "{err:?}");
    assert!(
        err.to_string().contains("correlation id 8 where 7"),
        "{err}"
    );
}
