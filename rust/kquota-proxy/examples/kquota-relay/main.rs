//! `kquota-relay LISTEN UPSTREAM [--framed]`: relays every connection accepted on LISTEN
//! (host:port) to UPSTREAM, as bytes (the floor the proxy's benchmarks compare with) or
//! frame by frame with `--framed`. Prints one line once it listens; runs until killed.

use std::net::SocketAddr;
use std::process::ExitCode;

use kquota_proxy::DEFAULT_MAX_FRAME_BYTES;
use relay::{framed_relay, plain_relay};
use tokio::net::TcpListener;

mod relay;
#[cfg(test)]
mod tests;

const USAGE: &str = "usage: kquota-relay LISTEN UPSTREAM [--framed] (addresses as host:port)";

fn address(text: &str, what: &str) -> Result<SocketAddr, String> {
    text.parse().map_err(|_| {
        format!("invalid {what} address {text:?}: expected host:port, e.g. 127.0.0.1:9092")
    })
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (listen, upstream, framed) = match args.as_slice() {
        [l, u] => (l, u, false),
        [l, u, flag] if flag == "--framed" => (l, u, true),
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    let (listen, upstream) = match (address(listen, "LISTEN"), address(upstream, "UPSTREAM")) {
        (Ok(l), Ok(u)) => (l, u),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("kquota-relay: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let result = runtime.block_on(async move {
        let listener = TcpListener::bind(listen).await?;
        let kind = if framed { "frame by frame" } else { "as bytes" };
        println!("kquota-relay: listening on {listen}, relaying to {upstream} {kind}");
        loop {
            let (client, _) = listener.accept().await?;
            if framed {
                tokio::spawn(async move {
                    if let Err(err) = framed_relay(client, upstream, DEFAULT_MAX_FRAME_BYTES).await
                    {
                        eprintln!("kquota-relay: connection closed: {err}");
                    }
                });
            } else {
                tokio::spawn(plain_relay(client, upstream));
            }
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err::<(), std::io::Error>(err) => {
            eprintln!("kquota-relay: {err}");
            ExitCode::FAILURE
        }
    }
}
