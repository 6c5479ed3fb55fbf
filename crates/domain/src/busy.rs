//! A connection refused at a connection cap, shared by `serve` and the fake provider: read what
//! the client sends of its request head (a client answered before it has written its request
//! takes the answer for a broken connection), answer 503 with `Retry-After`, close; each step
//! within `linger`.

use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Answer `stream` 503 with the JSON `body` and close it, reading at most `max_head` bytes of
/// its request head first.
pub async fn refuse(mut stream: TcpStream, linger: Duration, max_head: usize, body: &str) {
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    let _ = tokio::time::timeout(linger, async {
        while head.len() < max_head && !head.windows(4).any(|w| w == b"\r\n\r\n") {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\nRetry-After: 1\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(linger, async {
        stream.write_all(answer.as_bytes()).await?;
        stream.shutdown().await
    })
    .await;
}
